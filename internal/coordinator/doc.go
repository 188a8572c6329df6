// Package coordinator is drover's job server: it holds the job queue and
// the job state machine, and speaks GitLab's runner API v4 (so real GitLab
// Runners and drover's manager can take jobs from it) plus drover's admin
// API v1 (submit, inspect, cancel jobs; manage runner tokens).
//
// # Pieces
//
// What every server of the runner API does is package runnerapi's, shared
// with the router: runner tokens and runner managers (verify, legacy
// registration, unregister, token reset and the admin runner API, over
// the job store as a runnerapi.Registry), request decoding and error
// shapes, metrics, routes and health, long-poll versions. The coordinator
// plugs in what is its own:
//
//   - HTTP handlers: httpx.go (the routes: runnerapi.Mux with the
//     coordinator's runnerapi.JobHandlers), v4_request.go (jobs/request
//     with long polling and the job payload), v4_jobs.go (PUT state
//     updates and PATCH traces), v1.go and v1_images.go (admin API for
//     jobs), errors.go (503 for a database that cannot be reached).
//   - State machine: states.go.
//   - Long-poll notifier: longpoll.go. A held jobs/request is one goroutine
//     blocked on a channel; enqueueing a job wakes only the waiters whose
//     runner could take it.
//   - Traces: trace.go, plain files DataDir/traces/<id>.log; the file size
//     is the trace size. A trace is capped at Config.MaxTraceSize: the
//     PATCH that would pass it is answered 403 as GitLab answers it and
//     the job fails with trace_size_exceeded (v4_jobs.go).
//   - Disk guard: diskguard.go. Under Config.MinFreeDisk free in the data
//     directory, trace PATCHes (traces kept there) and artifact uploads
//     are answered 507 and /health/ready is 503.
//   - Artifacts: artifacts.go (POST/GET /api/v4/jobs/{id}/artifacts, GET
//     /api/v1/jobs/{id}/artifacts; files in DataDir/artifacts written
//     through a temporary file, fsync and rename; records in the store;
//     expiry by the reaper), orphans.go (the reaper's sweep of files no
//     record names), expirein.go (expire_in as GitLab reads it),
//     v1_artifacts.go (a job spec's cache, artifacts and dependencies, how
//     dependency names resolve, and their payload).
//   - Two-phase job start: provisioning.go (runner_provisioning; accept,
//     keep-alive and give-back shared with PUT and the reaper).
//   - Reaper: reaper.go, run by Run: job timeouts, silent runners, ack
//     deadlines, expired artifacts, orphaned artifact files.
//   - Secrets at rest: secrets.go. Job variables are sealed (package
//     secretbox) before a job is stored and opened only for its payload;
//     the store records the key's id, and a coordinator with another key
//     refuses to start.
//
// Persistence is behind package store; New opens the SQLite backend in
// DataDir.
//
// # Two-phase job start
//
// A runner that announces info.features.two_phase_job_commit in
// jobs/request gets its job in waiting_for_runner_ack: out of the queue,
// bound to that runner manager (system_id), with an ack deadline of
// Config.AckTimeout. The payload says features.two_phase_job_commit: true,
// and the 201 carries
//
//	X-Drover-Ack-Timeout: <seconds>
//
// a drover extension (a decimal number, "60" by default) so the runner can
// pace its keep-alives at a third of it. The same header comes with every
// keep-alive answer. The runner then reports on
//
//	POST /api/v4/jobs/{id}/runner_provisioning   (JOB-TOKEN)
//	{"status": "pending" | "accepted" | "declined", "reason": "..."}
//
// pending is a keep-alive (deadline = now + AckTimeout); accepted starts
// the job (running; started_at and accepted_at are now, and the job timeout
// counts from there); declined puts it back in the queue at once. PUT
// /api/v4/jobs/{id} with state pending / running does the same keep-alive /
// accept (GitLab Runner sends PUT state=running as soon as it has the job:
// that is its accept). Traces may be PATCHed while waiting. A final PUT
// (failed) before the accept is taken too. Answers carry Job-Status, which
// is "pending" while the job waits.
//
// A deadline that passes returns the job to the queue. Declines and
// expiries count together: the job goes back at most
// Config.MaxProvisioningRetries times, and the next one fails it with
// failure_reason runner_provisioning_timeout. The managers that gave a job
// back are passed over for it until it has been back in the queue for
// AckTimeout, so that another manager gets the first chance. A job that
// goes back to the queue wakes held long polls, and its trace so far is
// moved aside (traces/<id>.attempt-<n>.log) so the next runner's trace
// starts at 0.
//
// Job tokens belong to one assignment. Every call (PUT, PATCH,
// runner_provisioning) with the token of an assignment that ended under
// the runner (declined, expired, re-assigned, canceled while waiting or
// after it) is answered 409 Conflict with Job-Status "canceled" ("failed"
// when the job failed): the runner must drop the job and free its
// capacity. GitLab Runner drops a job on Job-Status canceled, not on a bare
// 409. A token that never belonged to the job stays 403.
//
// # Cancels reach silent jobs at once
//
// GitLab's runner learns of a cancel only from the Job-Status of the answers
// to its trace PATCHes and keep-alive PUTs. Drover's coordinator also
// serves (a drover extension, advertised as X-Drover-Job-Watch: <seconds>
// on every job answer of the runner API)
//
//	POST /api/v4/jobs/watch
//	{"token": "<runner token>", "jobs": [{"id": 1, "token": "<job token>", "job_status": "running"}], "timeout": 30}
//
// held until the Job-Status of one of the jobs differs from the one given,
// or until the timeout (at most the long-poll timeout). The runner token
// (body or RUNNER-TOKEN) is required, as in jobs/request; at most
// api.MaxWatchedJobs (1000) jobs a watch. The answer lists each changed
// job with the status code and Job-Status that a PUT with its token would
// get now, so the runner acts on it exactly as on that answer; a job that
// is not the runner's (unknown, another runner's, a token never its) is
// 404 alike:
//
//	{"jobs": [{"id": 1, "status_code": 200, "job_status": "canceling"}]}
//
// A cancel, a finished job and a retired token wake the watches of the job
// (watch.go); a cancel through another coordinator on a shared store is
// announced by the store (store.JobAnnouncer). A manager holds one watch
// per coordinator and runner token for all its jobs there.
//
// # Durability
//
// Everything acknowledged to a client (a 201 for a submitted job, a 200 for
// a final state) is committed before the answer is written. A final state is
// committed only after the trace bytes it covers are in the trace file.
package coordinator
