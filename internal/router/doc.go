// Package router is drover's smart router: a runner manager to its
// upstream (drover's coordinator or GitLab) and a coordinator to its own
// runners, with GitLab's runner API v4 on both sides. Runners point their
// url at the router and change nothing else.
//
// # Pieces
//
// The router serves its runners with package runnerapi, as the
// coordinator does: its own runner tokens and managers (runnerapi.Runners
// over the router's database: verify, unregister, token reset, the admin
// API v1 for runner tokens), decoding, error shapes, metrics, routes,
// health and long-poll versions. What is the router's own:
//
//   - router.go: Config, New, Run, Close, the HTTP routes (runnerapi.Mux
//     with the router's runnerapi.JobHandlers).
//   - downstream.go: jobs/request from the router's own runners, with long
//     polling; waiters and dispatch.
//   - jobs.go: PUT jobs/:id, PATCH trace, runner_provisioning and
//     artifacts from downstream runners: handled locally while the router
//     holds a job, forwarded verbatim to the upstream otherwise.
//   - upstream.go: the one upstream poller, keep-alives of held jobs,
//     declines.
//   - queue.go: the in-memory fair queue (round robin by root namespace,
//     then by project, FIFO within a project).
//   - health.go: placement: runner managers that declined or went silent
//     are tried last.
//
// # Job life at the router
//
//	upstream jobs/request ──► queued ──dispatch──► offered ──accept──► (forgotten: pure forwarding)
//	                            ▲                     │
//	                            └── decline / expiry ─┘
//
// A job pulled from a two-phase upstream stays waiting_for_runner_ack
// there: the router sends runner_provisioning "pending" every upstream
// ack timeout / 3 while the job is queued or offered, and forwards the
// downstream runner's accept (runner_provisioning accepted, or its first
// PUT state=running). A job from a classic upstream is already running
// upstream; the router keeps it alive with PUT state=running.
//
// After acceptance the router keeps no state for a job: every call about
// it is forwarded, so a restarted router keeps serving jobs started by
// its previous instance.
//
// # Limits
//
// The job payload carries no tag list. Job tags are read from a top-level
// "tags" array or a CI_JOB_TAGS variable (comma-separated) when present;
// otherwise the upstream's own tag check against the router's token is
// trusted and any downstream runner may take the job.
//
// A job requeued inside the router keeps its upstream job token, so a
// runner that went silent and comes back after the job was handed to
// another runner cannot be told apart from the new holder.
package router
