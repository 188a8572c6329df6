// Package store is the persistence boundary of the coordinator, the router
// and the runner API server they share: one interface, [Store], for
// runners, runner managers and jobs, implemented by backends in
// subpackages: sqlite, and postgres for coordinators sharing a database.
// It sits below all three and imports none of them.
//
// # Contract
//
// Methods are primitives: no matching policy, no validation beyond what the
// schema enforces. A missing row is reported as an error for which
// errors.Is(err, ErrNotFound) is true; a compare-and-set that finds the job
// in another state returns ErrConflict together with the job as it is now.
// Every backend passes storetest.Run.
//
// # Tokens
//
// Tokens are never stored: callers hash them with [HashToken] and the store
// keeps and looks up the hex SHA-256 only.
//
// # Job variables
//
// The coordinator seals a job's variables into JobSpec.Sealed before
// CreateJob; backends keep the spec as an opaque document and never see
// the variables in the clear.
//
// # Time
//
// Times are stored with nanosecond precision as integers (UTC); the zero
// time means "unset".
package store
