// Package coordinator is drover's job server: it holds the job queue and
// the job state machine, and speaks GitLab's runner API v4 (so real GitLab
// Runners and drover's manager can take jobs from it) plus drover's admin
// API v1 (submit, inspect, cancel jobs; manage runner tokens).
//
// # Pieces
//
//   - HTTP handlers: v4_runners.go (verify, register, unregister, token
//     reset), v4_request.go (jobs/request with long polling and the job
//     payload), v4_jobs.go (PUT state updates and PATCH traces), v1.go
//     (admin API).
//   - State machine: states.go.
//   - Long-poll notifier: longpoll.go. A held jobs/request is one goroutine
//     blocked on a channel; enqueueing a job wakes only the waiters whose
//     runner could take it.
//   - Traces: trace.go, plain files DataDir/traces/<id>.log; the file size
//     is the trace size.
//   - Reaper: reaper.go, run by Run: job timeouts and silent runners.
//
// Persistence is behind package store; New opens the SQLite backend in
// DataDir.
//
// # Durability
//
// Everything acknowledged to a client (a 201 for a submitted job, a 200 for
// a final state) is committed before the answer is written. A final state is
// committed only after the trace bytes it covers are in the trace file.
package coordinator
