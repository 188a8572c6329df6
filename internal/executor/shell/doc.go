// Package shell is the shell executor: it runs each stage script of a job
// in a bash or sh process on the runner's own host, in the job's project
// directory under builds_dir.
//
// # Processes
//
// Every stage runs in a new shell that leads its own process group. When
// the shell exits, whatever it left running in that group is killed, so a
// stage never outlives its script and a background child cannot hold the
// job log open. Cancelling the context given to Run escalates: SIGTERM to
// the group, a grace period (Executor.GracePeriod), then SIGKILL; Run
// returns only once the group is gone.
package shell
