// Package sqlite is the SQLite backend of package store
// (modernc.org/sqlite, no cgo).
//
// # Layout
//
// One database file in WAL mode. Writes go through a pool of exactly one
// connection, so they are serialized in Go instead of fighting over the
// SQLite write lock; reads use a separate pool that WAL lets run beside the
// writer. busy_timeout covers other processes (a CLI reading the file).
//
// # Durability
//
// synchronous=NORMAL: in WAL mode a commit is durable across a process
// crash (kill -9), because the WAL pages are in the OS page cache the moment
// the write returns; only a power loss or kernel crash can lose the last
// transactions. That is the failure the coordinator is built to survive.
//
// # Checkpoints
//
// Commits never checkpoint (wal_autocheckpoint 0): the commit that crossed
// the threshold would copy the WAL into the database and fsync it while
// every other write waited, the long tail of submission times under a
// burst. A goroutine of the store checkpoints PASSIVE once a second on a
// connection of its own, beside the writer; Close checkpoints TRUNCATE.
//
// # Migrations
//
// The schema is a numbered list of migrations recorded in the
// schema_migrations table; Open applies the missing ones in one transaction
// each. Statements stick to SQL that PostgreSQL also accepts (RETURNING,
// ON CONFLICT, integer times) so a postgres driver can share them.
package sqlite
