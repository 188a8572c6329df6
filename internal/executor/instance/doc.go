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
// One SSH connection serves the whole job; each stage is one session. The
// session's command is a small POSIX sh wrapper (the instance needs sh and
// the job's shell, bash or sh) that:
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
