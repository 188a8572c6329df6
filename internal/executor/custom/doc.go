// Package custom is the custom executor (executor = "custom"): drover
// runs a job through four programs the user configures in
// [runners.custom] (drivers), speaking GitLab Runner's custom executor
// protocol, so that drivers written for GitLab Runner (libvirt, LXD,
// Podman, Firecracker, ...) run unchanged.
//
// # Stages
//
// For each job, in this order:
//
//   - config_exec <config_args...> (optional, config_exec_timeout,
//     default 3600 s): prints one JSON object on stdout (ConfigOutput:
//     builds_dir, cache_dir, builds_dir_is_shared, hostname, driver.name,
//     driver.version, job_env, shell, and drover's "resumable"); its
//     stderr goes to the job log. Output that is not such an object, or
//     has other keys, fails the job with runner_system_failure and the
//     first lines of the output in the log.
//   - prepare_exec <prepare_args...> (optional, prepare_exec_timeout,
//     default 3600 s): stdout and stderr to the job log.
//   - run_exec <run_args...> <script> <stage> (required, bounded by the job
//     timeout), once per stage script, with GitLab Runner's stage names:
//     prepare_script, get_sources, build_script (drover's step_script),
//     step_<name> for other steps, after_script, cleanup_file_variables.
//     The script is a file in the job's TMPDIR, in the shell config_exec
//     or the runner names (bash or sh; default bash). Output to the job
//     log.
//   - cleanup_exec <cleanup_args...> (optional, cleanup_exec_timeout,
//     default 3600 s, and at most the two minutes drover gives any
//     cleanup): always, once config_exec could be called: after a
//     failure, a cancel or a timeout too. Its stdout goes to the manager's
//     log at debug level, its stderr at warning level, and its result
//     never changes the job's.
//
// # Environment
//
// Every call gets drover's own environment, then config_exec's job_env
// (for the calls after it), then every job variable as CUSTOM_ENV_<name>
// (the coordinator's and drover's predefined CI_* ones, the job's, the
// runner's environment setting; CUSTOM_ENV_CI_JOB_SERVICES is the job's
// services as JSON), then:
//
//	BUILD_FAILURE_EXIT_CODE  1
//	SYSTEM_FAILURE_EXIT_CODE 2
//	BUILD_EXIT_CODE_FILE     where a driver may write the script's own exit code
//	JOB_RESPONSE_FILE        the job as the coordinator sent it (JSON)
//	TMPDIR                   a directory of the job's, also every call's working directory
//
// # Exit codes
//
// 0 is success. BUILD_FAILURE_EXIT_CODE is the job's failure
// (script_failure), with the integer in BUILD_EXIT_CODE_FILE as the job's
// exit code when the driver wrote one (so allow_failure: exit_codes
// works); a file holding anything else is a system failure.
// SYSTEM_FAILURE_EXIT_CODE, any other code and death by a signal are
// system failures (runner_system_failure), the code in the log. A system
// failure of config_exec or prepare_exec gives the job back to the
// coordinator, as any executor's failed preparation does in drover.
//
// # Timeouts and cancellation
//
// A call that is out of time (its own timeout, or the job timeout for
// run_exec) or cancelled gets SIGTERM to its process group,
// graceful_kill_timeout (default 600 s) later SIGKILL, and is abandoned
// force_kill_timeout (default 10 s, GitLab Runner's code; its
// documentation says 600 s) after that. Whatever a driver leaves in its
// process group is killed once it exited after SIGTERM; after a normal
// exit it is left alone (a prepare_exec may start a VM in the
// background), and its output is read for at most five seconds more.
//
// # Resumable drivers (drover extension)
//
// With [runners.store], a job survives the manager's death when its
// driver is resumable: config_exec prints "resumable": true and
// [runners.custom] sets resume_exec (and resume_args). Such a driver
// must keep a stage running when run_exec's parent dies (its stdout pipe
// breaks): run_exec starts the stage detached and copies the stage's
// output to stdout, byte for byte, until it ended. After a restart, drover
// calls, instead of run_exec for the stage that was running,
//
//	resume_exec <resume_args...> <script> <stage>
//
// with the environment above (config_exec and prepare_exec do not run
// again; job_env is kept in the job store) plus
//
//	CUSTOM_RESUME_STAGE                  the stage name, as run_exec got it
//	CUSTOM_RESUME_OFFSET                 how many bytes of the stage's output the log has
//	CUSTOM_RESUME_NOT_STARTED_EXIT_CODE  3
//
// resume_exec prints the stage's output from byte CUSTOM_RESUME_OFFSET
// on (so the log has every byte exactly once), waits for the stage to end
// and exits as run_exec would. When the state was saved between stages
// drover does not know whether the next stage started: resume_exec is
// called for it with offset 0 and exits with
// CUSTOM_RESUME_NOT_STARTED_EXIT_CODE when it never started; drover then
// calls run_exec. A run_exec and a resume_exec for the same stage may run
// at once (a dead manager's run_exec may still be starting), so the
// driver must claim a stage atomically before starting it. On SIGTERM,
// run_exec and resume_exec stop the stage; cleanup_exec must stop
// whatever of the job still runs. examples/custom-executor/directory is
// such a driver.
package custom
