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
// # Attempts and phase timeouts
//
// get_sources, restore_cache and download_artifacts are tried up to their
// job variables' number of times (GET_SOURCES_ATTEMPTS and the like), and
// a stage whose executor lost its environment is run again in its
// section (EXECUTOR_JOB_SECTION_ATTEMPTS), as GitLab Runner does; the
// attempt is part of each checkpoint. The runner's prepare_timeout bounds
// prepare_executor and prepare_script, its get_sources_timeout
// get_sources with its attempts (RunnerOptions). See settings.go for the
// variables read.
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
