// Package detached runs a job's stages detached in their target (a
// container, a pod, a host or guest reached over SSH) so that they survive
// the runner manager: a stage's output and exit code go to files in the
// target, and a follower copies the output into the job's trace from any
// byte on. A manager that starts again re-attaches to the stage it finds
// in the job's saved state (executor.Stateful), from the byte its last
// checkpoint had in the trace (executor.OutputCheckpointer).
//
// The mechanism is written here once; an executor supplies its Target:
// how to store a file, start a command detached, run a command attached
// and stop a stage there; optionally, how to tell that the place the
// stage runs in stopped (Watcher) and why (Explainer), and how to store
// and start in one round trip (WriteStarter). A Runner holds one job's
// run numbers, running stage and output progress.
//
// # Files
//
// Run n of a job has its files in the job's directory Dir of the target,
// named by FilesOf: Dir/NNN.sh (the script), NNN.log, NNN.exit, NNN.pid,
// NNN.claim and NNN.gone (NNN: n in at least three digits). The wrapper
// that starts a run (a POSIX sh script, the same for every target):
//
//  1. claims the run by creating the directory NNN.claim; when it exists
//     already, another starter has the run and the wrapper exits at once
//     (a follower that found the run not started may have claimed it for
//     the starter it then runs: that one skips this step);
//  2. moves the script into place (each starter stores it under a name of
//     its own first, so a running script is never overwritten);
//  3. writes its own pid to NNN.pid (NNN.pid.tmp, then mv: never seen
//     half-written);
//  4. creates NNN.log and sends everything after this to it: the run has
//     started once NNN.log exists;
//  5. enters the project directory (creating it) and runs the script in
//     the job's shell, stdin from /dev/null;
//  6. writes the shell's exit status to NNN.exit (NNN.exit.tmp, then mv),
//     after the last byte of output; an unusable project directory is
//     status 1, with a line saying so in the output.
//
// NNN.gone is made by the manager, never by the wrapper: when the place
// the stage runs in stopped (a container that exited, a pod deleted), so
// that its follower stops waiting for an exit file that will never come.
//
// # Followers and their status
//
// A follower copies NNN.log from byte From to its stdout, byte for byte,
// until the run ended, then writes one status line to its stderr:
//
//	drover-exit:N        the run ended with exit status N
//	drover-vanished      the run can write no more and left no exit file
//	drover-not-started   (with a claim) no one had started the run; the claim is now the caller's
//	drover-started       (probe) the run has started; nothing was copied
//
// The line is the last of stderr (helper.ParseStatus reads it). A run has
// ended when NNN.exit exists, or NNN.gone, or (where the follower sees
// the stage's processes: Config.PIDGone) the wrapper whose pid NNN.pid
// holds is dead; what NNN.log holds then is copied before the status. Two
// followers say the same: drover's helper (`drover helper follow`, see
// package helper), for targets that have it, and a POSIX sh one (busybox
// sh with wc, tail, head, sleep and kill are enough), for those that
// may not (SSH hosts and guests). Tool makes their commands, and those
// that stop a stage: SIGTERM to every process below the wrapper, SIGKILL
// after the grace period; the wrapper is left to write the exit status.
//
// # Guarantees
//
//   - A run starts at most once: whoever creates NNN.claim starts it, and
//     a starter that finds it made does nothing; a manager that resumes a
//     job whose checkpoint was taken between stages asks a follower to
//     probe the next run with a claim: started (follow it) or claimed (the
//     manager starts it; the dead manager's starter, if it comes late,
//     finds the claim and does nothing). A manager that resumes a stage
//     its checkpoint had running with none of its output in the trace
//     probes it the same way: the dead manager may have died before its
//     wrapper started.
//   - A script cut short is never run: a target that stores and starts
//     in one round trip (StoreStart) starts the wrapper only once the
//     file holds every byte of the script, and leaves the run unclaimed
//     otherwise, for the resuming manager to start.
//   - Output is never lost nor doubled across a resume: the Runner counts
//     the bytes of the running stage's output it has written to the trace,
//     under a lock that Checkpoint holds while the manager takes the
//     state and that offset together; resuming follows NNN.log from
//     exactly that byte. A follower whose stream broke is started again
//     from the byte the trace has (Config.Retries).
//   - A stage ends in one of three ways: its exit status (0: nil, else
//     *executor.BuildError), vanished (an error wrapping
//     executor.ErrStageVanished: the job fails with runner_system_failure),
//     or the caller's context error when it cancelled the stage (the
//     stage is stopped through the Target first).
//
// A run's pid is not guarded against reuse: a wrapper that died without
// an exit file, whose pid another process took before the follower
// looked, is taken for alive (the follower then waits on NNN.gone or its
// context).
package detached
