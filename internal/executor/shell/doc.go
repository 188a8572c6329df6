// Package shell is the shell executor: it runs each stage script of a job
// in a bash or sh process on the runner's own host, in the job's project
// directory under builds_dir.
//
// As GitLab Runner's, the shell is a login shell (bash -l, sh -l): it
// reads /etc/profile and the runner user's profile before the script, so
// a job has the environment a login of that user has (and what the
// profile sets, PATH included, replaces what the manager's environment
// had).
//
// # Processes
//
// Every stage runs in a new shell that leads its own process group. When
// the shell exits, whatever it left running in that group is killed, so a
// stage never outlives its script and a background child cannot hold the
// job log open. Cancelling the context given to Run escalates: SIGTERM to
// the group, a grace period (Executor.GracePeriod), then SIGKILL; Run
// returns only once the group is gone.
//
// # Resumable stages
//
// By default a stage is attached to the manager: its shell is the
// manager's child and its output comes through a pipe. When the job is
// prepared with Settings.Resumable (the manager keeps a job store), each
// stage runs detached instead, so that it survives the manager's death and
// a new manager process can resume it (executor.Stateful):
//
//   - a small /bin/sh wrapper leads a new session (setsid; no parent-death
//     signal, no terminal), with stdin from /dev/null and stdout and stderr
//     appended to the stage's output file; the manager holds no pipe to it;
//   - the wrapper claims the stage by creating its pid file exclusively,
//     runs the script shell, then writes the script's exit status to the
//     exit file in one write of a newline-terminated line: the file reads
//     complete only once the stage really ended;
//   - the executor tails the output file into the trace and, as the parent,
//     waits for the wrapper; a restored executor watches the wrapper's pid
//     instead (its start time, checked against the pid file's, guards
//     against a reused pid).
//
// Scripts, pid and exit files live in a per-job directory in /dev/shm when
// the host has it (scripts hold the job's secrets), output files in a
// per-job directory under the temporary directory; both are removed by
// Cleanup. A job's stage outputs stay there until then. Resumable stages
// cost one more process per stage (the wrapper) and the output file; see
// BenchmarkRunTrivial.
//
// # Resuming
//
// State exports the directories, the number of stages started and the
// running stage, if any; Restore (in a new process) takes it back, and
// Resume re-attaches to that stage: its output file is copied to the trace
// from the byte the caller gives, and the result is the exit status from
// the exit file, or executor.ErrStageVanished when the wrapper is gone and
// left none (its processes were killed while no manager watched).
//
// The offset is exact when the caller takes it with OutputCheckpoint: the
// callback runs while no stage output is written to the trace and no stage
// starts or ends, and gets the state, the running stage and the number of
// bytes of that stage's output file already written to the trace. A state
// taken between stages shows none running; Resume then gets the next stage
// and offset 0, and re-attaches to that stage if the dead manager had
// started it after its last checkpoint (the pid-file claim makes sure a
// stage is never started twice), else starts it. Run after Restore does
// the same for every later stage.
package shell
