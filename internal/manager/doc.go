// Package manager is the runner manager behind `drover run`: it turns a
// config.toml into workers that acquire executor capacity, ask the
// coordinator for jobs (long polling), run them through an executor,
// stream their logs and report their final state with retries.
//
// # Job lifecycle
//
//	requested ──► PUT running ──► build stages ──► final trace flush ──► PUT final ──► released
//	                  │                 ▲   │
//	                  │ Job-Status      │   └─ canceling: stop script, run after_script
//	                  └─ canceled/403 ──┴──► dropped (no further calls)
//
// In the code, a job's life is one jobLife (job.go): its logger, client,
// log, streamer, provisioner, job record and outcome, and a method for
// each step. Manager.runJob takes a received job through them top to
// bottom; a job resumed from a job store (resume.go) takes the same
// steps, and a final update a job store keeps goes on with deliverKept
// and deliverRecord (deliver.go).
//
// # Two-phase job start
//
// The manager announces info.features.two_phase_job_commit. When a payload
// has features.two_phase_job_commit, the job is not started with PUT
// running: it is kept alive (runner_provisioning "pending" every
// X-Drover-Ack-Timeout/3) while the executor prepares, and accepted right
// before prepare_script. A system failure before that, or SIGTERM, declines
// it (no final update); 409 or Job-Status canceled/failed drops it. See
// provision.go.
//
// # Final updates
//
// Without a job store a job's final update is tried
// job_status_final_update_retry_limit times (backoff 1 s → 60 s), then
// given up. With one, the job's record keeps the update from the job's
// end (state delivering) and it is retried beyond that budget, in the
// background and across restarts of the manager, until the coordinator
// takes or refuses it or stale_timeout passes since it last answered about
// the job. See deliver.go.
//
// # Shutdown
//
// Two different stops, never confused: Drain (SIGQUIT) stops asking for
// jobs and waits for the running ones; cancelling the context given to Run
// (SIGTERM/SIGINT) aborts running jobs, which are reported failed with
// runner_interrupted within shutdown_timeout (a two-phase job not yet
// accepted is declined with reason runner_interrupted instead). Neither
// waits for final updates a job store keeps: they stay in it.
package manager
