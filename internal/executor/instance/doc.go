// Package instance is the instance executor (executor = "instance"): it
// runs a job's stage scripts on a machine of an autoscaled fleet, over SSH,
// with the shell executor's stages and semantics.
//
// # Capacity
//
// The provider's capacity is the runner's autoscaler pool, seen through
// the small Slots interface. Provider.Acquire reserves a slot before a job
// is requested (no slot: executor.ErrNoFreeExecutor, so no job is asked
// for); Executor.Prepare turns the reservation into a slot on a ready
// instance (waiting for one, within ctx) and connects; Executor.Cleanup
// gives the slot back; Provider.Release drops a reservation that never got
// an instance.
//
// # Stages
//
// One SSH connection serves the whole job; each stage is one session
// (unless the job is resumable: see below). The session's command is a
// small POSIX sh wrapper (the instance needs sh and the job's shell, bash
// or sh) that:
//
//   - stores the stage script, read from the session's stdin, under a
//     private per-job directory (mode 0700, removed by Cleanup), after a
//     one-line header by which the stage's shell writes its pid (so the
//     shell's messages about script lines are one line off);
//   - creates the project directory and enters it;
//   - runs the script with stdin from /dev/null, stdout and stderr merged
//     into the session's stdout, which streams into the job log as it
//     arrives;
//   - runs it under setsid(1), so the stage's shell leads its own process
//     group; the group id goes to a pid file next to the script;
//   - when the shell exits, kills what it left in its group, so a stage
//     never outlives its script (as with the shell executor), and exits
//     with the shell's status, which becomes an *executor.BuildError.
//
// The wrapper's own failures go to the session's stderr and make a system
// failure, never a script failure. Without setsid(1) on the instance
// (util-linux and busybox have it; macOS does not) the stage runs in the
// session's process group: cancelling then signals only the stage's shell,
// and background children are not killed when the stage ends.
//
// The job's environment comes from its variables, which every stage script
// exports; the SSH user's login shell starts each session (so its rc
// files, for bash ~/.bashrc, run before every stage).
//
// # Cancellation
//
// Cancelling Run's context opens a second session that marks the stage as
// stopped and sends SIGTERM to its process group; after the grace period
// (GracePeriod) a third sends SIGKILL. Run returns once the stage's session
// has ended. The stop mark closes the race with a stage that has not yet
// written its pid file: it sees the mark and does not start.
//
// # Resuming after a manager restart
//
// A job the manager keeps in a job store (Settings.Resumable) runs its
// stages detached on the instance, with package detached's mechanism, so
// that they survive the connection and the manager: one session stores
// the stage's script in the job's directory and starts its wrapper under
// setsid(1) with its streams away from the connection (nohup(1) where
// there is no setsid); a second one follows its output file into the
// trace, with the POSIX sh follower, or with drover's helper when the job
// installed it. When the script ends,
// what it left in its process group is killed, as in the attached path. A
// connection that ends while the instance is there is made again, and
// the stage followed on from the byte the trace has.
//
// The executor is then executor.Stateful and executor.OutputCheckpointer.
// Its state holds the instance id and slot, the address and user the
// instance was reached at (never a password or a key: those come from
// the configuration and the pool again), the job's directories, the
// helper's path, the runs and the running stage. Restore claims the slot
// from the runner's pool (Claimer: the autoscaler's pools, the ssh
// executor's host, VM slots) and connects again; Resume follows the stage
// from the checkpoint's byte, or starts the next stage if the dead
// manager had not. A stage whose processes are gone without an exit
// status, or whose job directory is gone from the host (a reboot),
// vanished: the job fails with runner_system_failure. Jobs without a job
// store keep the attached stages (one session each).
//
// # Sweep
//
// A job's directory on its host is named after the manager's system id
// and the job's id (drover-job-<system id>-<job id>-XXXXXXXX in
// $TMPDIR). At the manager's start (executor.Sweeper), the directories of
// its system id whose jobs no job store will resume have their running
// stages stopped (SIGTERM to their process groups, the grace period,
// SIGKILL) and are removed: on the fixed hosts of Options.Hosts (the ssh
// executor's) at once, on an autoscaled instance when this process first
// reaches it, before any of its jobs runs there. The pools are told which
// jobs will be resumed (SetKeepHeld), so the slots of the others are free
// at once; without a job store, an instance on which jobs ran when the
// manager died is replaced instead (runnerpool's RemoveInterrupted).
//
// # Lost instances
//
// When the pool reports the instance lost (Acquired.Lost), or the SSH
// connection ends (network error, keep-alives not answered), the running
// stage and every later one fail with a system error, so the job fails
// with runner_system_failure.
//
// # Directories
//
// builds_dir defaults to /builds and cache_dir to /cache on the instance
// (relative paths are relative to the SSH user's home). The project
// directory is <builds_dir>/<short token>/<slot>/<project path>, slot being
// the instance slot the job holds, so jobs sharing an instance never share
// a checkout. With [runners.instance] use_common_build_dir = true the
// manager's concurrent id is used instead, as on every other executor.
//
// # Connection
//
// An instance that cannot be reached (no TCP connection) is tried three
// times, 1 s and 2 s apart; a failed handshake or authentication is not
// retried. Keep-alive interval and timeout come from
// [runners.autoscaler.connector_config] (sshx defaults: 30 s each).
//
// # Host keys
//
// Instances are trusted on first use: the first host key an instance id
// presents is remembered (sshx.TOFU; drover run keeps it in
// .drover-instance-host-keys next to config.toml, so a restart does not
// forget it) and a different key later is refused. A Runner may bring its
// own check (Runner.HostKey): the ssh executor, stacked on this one with
// one fixed host, checks known_hosts.
package instance
