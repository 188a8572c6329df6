// Package jobrun runs one job through an executor: it prepares the
// executor, generates each stage script with package shell, runs the
// stages in GitLab Runner's order, enforces the job timeout, and turns the
// outcome into a job state and failure reason.
//
// # Stages
//
//	prepare_executor → prepare_script → get_sources → step_<name>… ─┐
//	      │ (error)          (a failure, timeout or graceful cancel │
//	      │                   skips the stages left)                ▼
//	      │                                                   after_script
//	      │                                                        │
//	      ▼                                                        ▼
//	   Finish, Cleanup  ◀──────────────────────────  cleanup_file_variables
//
// after_script runs whenever the executor was prepared and the build was
// not aborted, with its own timeout; cleanup_file_variables, Finish and
// Cleanup always run.
//
// # Two-phase start
//
// With Options.Accept set, Run calls it between prepare_executor and
// prepare_script; no script runs unless it returns nil, and the job timeout
// restarts at that point.
//
// # Cancellation
//
// Cancelling the context of Run aborts hard: the running stage is killed
// and after_script is skipped. Closing the graceful channel stops the
// running stage but still runs after_script. The job timeout behaves like a
// graceful cancel with its own failure reason.
package jobrun
