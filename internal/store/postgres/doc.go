// Package postgres is the PostgreSQL backend of package store
// (github.com/jackc/pgx/v5 with its pool). Several coordinators may share
// one database.
//
// # Schema
//
// The schema follows the SQLite backend's: times are BIGINT Unix
// nanoseconds (0 = unset), since the store contract promises nanosecond
// round trips and TIMESTAMPTZ keeps microseconds only; ids are BIGINT
// identities; tags and avoided system ids are TEXT[]; the job spec is kept
// as the TEXT of its JSON document, byte for byte, because JSONB rejects
// the \u0000 escape a variable's value may need.
//
// # Migrations
//
// The schema is a numbered list of migrations recorded in
// schema_migrations. Open applies the missing ones in one transaction that
// first takes a transaction-scoped advisory lock, so coordinators starting
// together apply them once, one after the other. A database whose schema
// is newer than the binary is refused with ErrSchemaTooNew.
//
// # Claims
//
// TransitionJob locks the job's row (SELECT … FOR UPDATE with the from
// statuses and version as conditions) and updates it in the same
// transaction, retiring the replaced token hash there too. A caller that
// waits on the lock sees the winner's committed row, no longer matching:
// exactly one of concurrent callers wins, across processes.
//
// # Pipelines
//
// CreatePipeline bumps the project's pipeline counter (projects.pipeline_iid)
// with an UPDATE in the transaction that inserts the pipeline and its jobs:
// a concurrent creation in the same project, through any coordinator,
// waits for that row's lock and then bumps the committed value, so no IID
// is given twice (pipelines' UNIQUE (project_id, iid) would refuse it
// anyway). A failed creation leaves no pipeline, job or IID used; only
// the project row, created beforehand as CreateJob creates it, stays.
//
// # Errors
//
// Failures to reach the database (refused or broken connections, a server
// shutting down) wrap ErrUnavailable; IsUnavailable tells them apart from
// errors of the query itself. A caller's cancelled or expired context is
// reported as such, not as unavailability.
package postgres
