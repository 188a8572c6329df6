// Package jobstore persists what a runner manager needs to resume its
// running jobs after it dies: the job payload, the executor's exported
// state, the stage reached, the trace offset the coordinator acknowledged,
// the retry count and the health time of every job. It is configured by
// a runner's [runners.store] table (see ParseConfig).
//
// # Backends
//
// Two backends sit behind the one Store interface; both pass the
// conformance suite in package storetest.
//
//   - file: one JSON file per job (job-<id>.json) in a directory, written
//     atomically (temporary file, fsync, rename, fsync of the directory),
//     files 0600 and the directory 0700 because records hold the runner
//     and job tokens. Only one manager may use a directory: Open takes an
//     exclusive flock on a lock file holding the holder's pid and host, and
//     a second Open fails with ErrLocked naming them. The kernel releases
//     the lock when the holder dies, however it dies.
//   - redis: one hash per job under a key prefix, a set of all job ids and
//     a sorted set of running and delivering jobs by health time. Save,
//     Heartbeat and the claim of a stale job are Lua scripts that compare
//     and set the owner and health time atomically, so several managers
//     can share one store and every stale job is claimed by exactly one of
//     them.
//
// # States
//
// A record is running (StateRunning) while its job runs: it holds what
// resuming the job needs. Once the job ended, a record whose final update
// has not reached the coordinator yet is delivering (StateDelivering): it
// holds the job's outcome and the log the coordinator lacks, and the
// manager keeps its health while it retries the delivery; it is claimed
// like a running one, but never run again. A finished record
// (StateFinished) is only waiting for Cleanup.
//
// # Ownership
//
// Every record names the manager holding it (Record.Owner). Save and
// Heartbeat fail with ErrNotOwner when another manager holds the record;
// that manager took it over through ClaimStale after this one stopped
// reporting health for longer than the health timeout, and this one must
// let the job go. Version is bumped on every Save and every claim; a Save
// carrying a non-zero Version that is not the stored one fails with
// ErrConflict.
//
// # Errors
//
// Errors name the backend, the operation and the job, and wrap one of the
// sentinel errors (ErrNotFound, ErrNotOwner, ErrConflict, ErrLocked,
// ErrCorrupt, ErrClosed) where one applies. Any other error, such as an
// unreachable Redis, is transient: IsRetryable reports it and Retry runs
// an operation with capped exponential backoff. The backends themselves
// never retry.
//
// # Metrics
//
// With Options.Registerer set, the store exports
// drover_jobstore_operations_total{backend,op,result},
// drover_jobstore_operation_duration_seconds{backend,op} and
// drover_jobstore_corrupt_records_total{backend}; the stores of several
// runners share them.
//
// # Corrupt records
//
// A record that cannot be decoded is moved aside (file: renamed to
// <name>.corrupt; redis: renamed to <key>:corrupt) and reported through
// Options.OnCorrupt, with the job id when the file or key name carries
// it, so the manager can fail that job upstream; List and ClaimStale go
// on with the other records.
package jobstore
