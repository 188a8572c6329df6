package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"runtime"
	"strings"
	"sync/atomic"
	"time"

	"github.com/drover-ci/drover/internal/buildinfo"
	"github.com/drover-ci/drover/internal/store"
	"github.com/drover-ci/drover/internal/store/sqlrow"

	_ "modernc.org/sqlite" // registers the "sqlite" driver
)

// Store is the SQLite store. Create it with Open.
type Store struct {
	w      *sql.DB // exactly one connection: all writes
	r      *sql.DB // read pool
	ws, rs *stmts  // prepared statements of w and r
	closed atomic.Bool
	// ck runs the WAL checkpoints (one connection) in the background; the
	// checkpointer goroutine ends when stop is closed.
	ck      *sql.DB
	stop    chan struct{}
	stopped chan struct{}
	// wq admits one write at a time to w, in arrival order. database/sql
	// hands a released connection to a random waiter: under a burst of
	// submissions and claims that gave some writes a long tail of waits.
	// Goroutines blocked sending on a channel are served first come,
	// first served.
	wq chan struct{}
	// projects maps project paths to their ids, for the projects created
	// or seen by CreateJob (projects are never deleted); CreateJob holds
	// the write turn while it reads or fills it.
	projects map[string]int64
}

// maxCachedProjects bounds Store.projects.
const maxCachedProjects = 100_000

// enterWrite waits for the turn of a write; done ends it.
func (s *Store) enterWrite(ctx context.Context) (done func(), err error) {
	select {
	case s.wq <- struct{}{}:
		return func() { <-s.wq }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

var _ store.Store = (*Store)(nil)

// Open opens (creating if needed) the database file at path and applies
// pending migrations. The file holds the jobs (their variables sealed by
// the coordinator, the rest in the clear): it is created 0600, and an
// existing one (and its -wal and -shm files) readable by others is made
// 0600.
func Open(ctx context.Context, path string) (*Store, error) {
	if err := private(path); err != nil {
		return nil, err
	}
	q := url.Values{}
	q.Add("_pragma", "busy_timeout(10000)")
	q.Add("_pragma", "journal_mode(WAL)")
	// NORMAL is enough in WAL mode for kill -9 durability; see doc.go.
	q.Add("_pragma", "synchronous(NORMAL)")
	q.Add("_pragma", "foreign_keys(1)")
	// No checkpoint at commit: the commit that crosses the threshold
	// would copy the WAL into the database and fsync it while every other
	// write waits. checkpointLoop does that beside the writer.
	q.Add("_pragma", "wal_autocheckpoint(0)")
	dsn := "file:" + path + "?" + q.Encode()

	w, err := sql.Open("sqlite", dsn+"&_txlock=immediate")
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	w.SetConnMaxLifetime(0)
	w.SetConnMaxIdleTime(0)
	s := &Store{w: w, wq: make(chan struct{}, 1), projects: map[string]int64{}}
	if err := s.migrate(ctx); err != nil {
		w.Close()
		return nil, err
	}
	r, err := sql.Open("sqlite", dsn+"&mode=ro")
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	n := max(4, runtime.GOMAXPROCS(0))
	r.SetMaxOpenConns(n)
	r.SetMaxIdleConns(n)
	s.r = r
	s.ws, s.rs = newStmts(w), newStmts(r)
	if err := r.PingContext(ctx); err != nil {
		s.Close()
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	ck, err := sql.Open("sqlite", dsn)
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	ck.SetMaxOpenConns(1)
	s.ck, s.stop, s.stopped = ck, make(chan struct{}), make(chan struct{})
	go s.checkpointLoop()
	return s, nil
}

// checkpointInterval is how often the WAL is copied into the database.
const checkpointInterval = time.Second

// checkpointLoop checkpoints the WAL every checkpointInterval, PASSIVE:
// writers go on appending while it runs, and what readers still use
// stays. The WAL is reused from its start once a checkpoint caught up.
func (s *Store) checkpointLoop() {
	defer close(s.stopped)
	t := time.NewTicker(checkpointInterval)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		// A checkpoint that fails (a full disk) leaves the WAL as it
		// is; the next one tries again, and /health/ready reports the
		// disk.
		_, _ = s.ck.Exec(`PRAGMA wal_checkpoint(PASSIVE)`)
	}
}

// migrate applies the missing migrations, each in its own transaction,
// and records in schema_migrations which drover applied each (the column
// drover_version, added here rather than by a numbered migration so that
// an older drover, which ignores it, still opens the database).
func (s *Store) migrate(ctx context.Context) error {
	if _, err := s.w.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version INTEGER PRIMARY KEY, applied_at INTEGER NOT NULL)`); err != nil {
		return fmt.Errorf("migrations table: %w", err)
	}
	var hasVersion int
	if err := s.w.QueryRowContext(ctx, `SELECT COUNT(*) FROM pragma_table_info('schema_migrations') WHERE name = 'drover_version'`).Scan(&hasVersion); err != nil {
		return fmt.Errorf("migrations table: %w", err)
	}
	if hasVersion == 0 {
		if _, err := s.w.ExecContext(ctx, `ALTER TABLE schema_migrations ADD COLUMN drover_version TEXT NOT NULL DEFAULT ''`); err != nil {
			return fmt.Errorf("migrations table: add drover_version: %w", err)
		}
	}
	var have int
	if err := s.w.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_migrations`).Scan(&have); err != nil {
		return fmt.Errorf("read schema version: %w", err)
	}
	if have > len(migrations) {
		var by string
		if err := s.w.QueryRowContext(ctx, `SELECT drover_version FROM schema_migrations WHERE version = ?`, have).Scan(&by); err != nil {
			return fmt.Errorf("read schema version: %w", err)
		}
		return store.SchemaTooNew(have, len(migrations), by)
	}
	version := buildinfo.Get().Version
	for v := have + 1; v <= len(migrations); v++ {
		tx, err := s.w.BeginTx(ctx, nil)
		if err != nil {
			return fmt.Errorf("migration %d: %w", v, err)
		}
		if _, err := tx.ExecContext(ctx, migrations[v-1]); err != nil {
			tx.Rollback()
			return fmt.Errorf("migration %d: %w", v, err)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO schema_migrations(version, applied_at, drover_version) VALUES (?, ?, ?)`, v, time.Now().UnixNano(), version); err != nil {
			tx.Rollback()
			return fmt.Errorf("migration %d: %w", v, err)
		}
		if err := tx.Commit(); err != nil {
			return fmt.Errorf("migration %d: %w", v, err)
		}
	}
	return nil
}

// Close closes both pools.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	var errs []error
	if s.ck != nil {
		close(s.stop)
		<-s.stopped
		// Leave the database whole in its file, the WAL empty.
		_, _ = s.ck.Exec(`PRAGMA wal_checkpoint(TRUNCATE)`)
		errs = append(errs, s.ck.Close())
	}
	if s.ws != nil {
		s.ws.close()
		s.rs.close()
	}
	if s.r != nil {
		errs = append(errs, s.r.Close())
	}
	errs = append(errs, s.w.Close())
	return errors.Join(errs...)
}

func (s *Store) check() error {
	if s.closed.Load() {
		return store.ErrClosed
	}
	return nil
}

// Ping checks both pools.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.check(); err != nil {
		return err
	}
	if err := s.r.PingContext(ctx); err != nil {
		return err
	}
	return s.w.PingContext(ctx)
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

func jsonText(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		// Only plain data is marshalled here; this cannot happen.
		panic(err)
	}
	return string(b)
}

func tagsText(tags []string) string {
	if tags == nil {
		tags = []string{}
	}
	return jsonText(tags)
}

func notFound(err error, what string, id any) error {
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("%s %v: %w", what, id, store.ErrNotFound)
	}
	return err
}

// ---- runners ----

const runnerCols = `id, token_hash, description, tags, run_untagged, locked, paused, maximum_timeout, created_at, contacted_at`

type scanner = sqlrow.Scanner

func scanRunner(sc scanner) (store.Runner, error) {
	var r store.Runner
	var tags string
	var created, contacted int64
	if err := sc.Scan(&r.ID, &r.TokenHash, &r.Description, &tags, &r.RunUntagged, &r.Locked, &r.Paused, &r.MaximumTimeout, &created, &contacted); err != nil {
		return r, err
	}
	if err := json.Unmarshal([]byte(tags), &r.Tags); err != nil {
		return r, fmt.Errorf("runner %d tags: %w", r.ID, err)
	}
	r.CreatedAt, r.ContactedAt = store.FromNanos(created), store.FromNanos(contacted)
	return r, nil
}

// CreateRunner implements store.Store.
func (s *Store) CreateRunner(ctx context.Context, r store.Runner) (store.Runner, error) {
	if err := s.check(); err != nil {
		return r, err
	}
	done, err := s.enterWrite(ctx)
	if err != nil {
		return r, err
	}
	defer done()
	row := s.ws.QueryRowContext(ctx, `INSERT INTO runners (token_hash, description, tags, run_untagged, locked, paused, maximum_timeout, created_at, contacted_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING `+runnerCols,
		r.TokenHash, r.Description, tagsText(r.Tags), b2i(r.RunUntagged), b2i(r.Locked), b2i(r.Paused), r.MaximumTimeout, store.Nanos(r.CreatedAt), store.Nanos(r.ContactedAt))
	out, err := scanRunner(row)
	if err != nil {
		return out, fmt.Errorf("create runner: %w", err)
	}
	return out, nil
}

// GetRunner implements store.Store.
func (s *Store) GetRunner(ctx context.Context, id int64) (store.Runner, error) {
	if err := s.check(); err != nil {
		return store.Runner{}, err
	}
	r, err := scanRunner(s.rs.QueryRowContext(ctx, `SELECT `+runnerCols+` FROM runners WHERE id = ?`, id))
	return r, notFound(err, "runner", id)
}

// RunnerByTokenHash implements store.Store.
func (s *Store) RunnerByTokenHash(ctx context.Context, hash string) (store.Runner, error) {
	if err := s.check(); err != nil {
		return store.Runner{}, err
	}
	r, err := scanRunner(s.rs.QueryRowContext(ctx, `SELECT `+runnerCols+` FROM runners WHERE token_hash = ?`, hash))
	return r, notFound(err, "runner with token", "")
}

// ListRunners implements store.Store.
func (s *Store) ListRunners(ctx context.Context) ([]store.Runner, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	return queryAll(ctx, s.rs, scanRunner, `SELECT `+runnerCols+` FROM runners ORDER BY id`)
}

func (s *Store) execOne(ctx context.Context, what string, id any, query string, args ...any) error {
	if err := s.check(); err != nil {
		return err
	}
	done, err := s.enterWrite(ctx)
	if err != nil {
		return err
	}
	defer done()
	res, err := s.ws.ExecContext(ctx, query, args...)
	if err != nil {
		return fmt.Errorf("%s %v: %w", what, id, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return err
	}
	if n == 0 {
		return fmt.Errorf("%s %v: %w", what, id, store.ErrNotFound)
	}
	return nil
}

// DeleteRunner implements store.Store.
func (s *Store) DeleteRunner(ctx context.Context, id int64) error {
	return s.execOne(ctx, "delete runner", id, `DELETE FROM runners WHERE id = ?`, id)
}

// SetRunnerTokenHash implements store.Store.
func (s *Store) SetRunnerTokenHash(ctx context.Context, id int64, hash string) error {
	return s.execOne(ctx, "set token of runner", id, `UPDATE runners SET token_hash = ? WHERE id = ?`, hash, id)
}

// SetRunnerPaused implements store.Store.
func (s *Store) SetRunnerPaused(ctx context.Context, id int64, paused bool) error {
	return s.execOne(ctx, "pause or resume runner", id, `UPDATE runners SET paused = ? WHERE id = ?`, b2i(paused), id)
}

// UpsertRunnerManager implements store.Store.
func (s *Store) UpsertRunnerManager(ctx context.Context, m store.RunnerManager) error {
	return s.inWrite(ctx, func(tx txStmts) error {
		res, err := tx.ExecContext(ctx, `UPDATE runners SET contacted_at = ? WHERE id = ?`, store.Nanos(m.ContactedAt), m.RunnerID)
		if err != nil {
			return fmt.Errorf("upsert manager: %w", err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return fmt.Errorf("upsert manager of runner %d: %w", m.RunnerID, store.ErrNotFound)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO runner_managers (runner_id, system_id, contacted_at, version, executor, platform, arch, fleet_url)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (runner_id, system_id) DO UPDATE SET contacted_at = excluded.contacted_at,
				version = COALESCE(NULLIF(excluded.version, ''), runner_managers.version),
				executor = COALESCE(NULLIF(excluded.executor, ''), runner_managers.executor),
				platform = COALESCE(NULLIF(excluded.platform, ''), runner_managers.platform),
				arch = COALESCE(NULLIF(excluded.arch, ''), runner_managers.arch),
				fleet_url = excluded.fleet_url`,
			m.RunnerID, m.SystemID, store.Nanos(m.ContactedAt), m.Version, m.Executor, m.Platform, m.Arch, m.FleetURL); err != nil {
			return fmt.Errorf("upsert manager: %w", err)
		}
		return nil
	})
}

// DeleteRunnerManager implements store.Store.
func (s *Store) DeleteRunnerManager(ctx context.Context, runnerID int64, systemID string) error {
	return s.execOne(ctx, "delete manager", systemID, `DELETE FROM runner_managers WHERE runner_id = ? AND system_id = ?`, runnerID, systemID)
}

// ListRunnerManagers implements store.Store.
func (s *Store) ListRunnerManagers(ctx context.Context, runnerID int64) ([]store.RunnerManager, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	rows, err := s.rs.QueryContext(ctx, `SELECT runner_id, system_id, contacted_at, version, executor, platform, arch, fleet_url
		FROM runner_managers WHERE runner_id = ? ORDER BY system_id`, runnerID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []store.RunnerManager{}
	for rows.Next() {
		var m store.RunnerManager
		var contacted int64
		if err := rows.Scan(&m.RunnerID, &m.SystemID, &contacted, &m.Version, &m.Executor, &m.Platform, &m.Arch, &m.FleetURL); err != nil {
			return nil, err
		}
		m.ContactedAt = store.FromNanos(contacted)
		out = append(out, m)
	}
	return out, rows.Err()
}

// ---- jobs ----

const jobCols = `j.id, j.name, p.path, j.project_id, j.stage, j.status, j.failure_reason, j.exit_code, j.tags, j.timeout, j.run_timeout,
	j.image, j.spec, j.runner_id, j.runner_system_id, j.token_hash, j.created_at, j.queued_at, j.started_at, j.finished_at, j.updated_at, j.contacted_at,
	j.version, j.assigned_at, j.ack_deadline, j.accepted_at, j.provisioning_attempts, j.provisioning_returns, j.queued_ns, j.provisioning_ns, j.avoid_system_ids,
	j.pipeline_id, j.coverage`

const jobFrom = ` FROM jobs j JOIN projects p ON p.id = j.project_id`

func scanJob(sc scanner) (store.Job, error) {
	var j store.Job
	var exit sql.NullInt64
	var tags, spec, avoid string
	var created, queued, started, finished, updated, contacted, assigned, deadline, accepted int64
	if err := sc.Scan(&j.ID, &j.Name, &j.Project, &j.ProjectID, &j.Stage, &j.Status, &j.FailureReason, &exit, &tags, &j.Timeout, &j.RunTimeout,
		&j.Image, &spec, &j.RunnerID, &j.RunnerSystemID, &j.TokenHash, &created, &queued, &started, &finished, &updated, &contacted,
		&j.Version, &assigned, &deadline, &accepted, &j.ProvisioningAttempts, &j.ProvisioningReturns, &j.QueuedNanos, &j.ProvisioningNanos, &avoid,
		&j.PipelineID, &j.Coverage); err != nil {
		return j, err
	}
	if err := json.Unmarshal([]byte(avoid), &j.AvoidSystemIDs); err != nil {
		return j, fmt.Errorf("job %d avoid_system_ids: %w", j.ID, err)
	}
	if len(j.AvoidSystemIDs) == 0 {
		j.AvoidSystemIDs = nil
	}
	j.AssignedAt, j.AckDeadline, j.AcceptedAt = store.FromNanos(assigned), store.FromNanos(deadline), store.FromNanos(accepted)
	if exit.Valid {
		e := int(exit.Int64)
		j.ExitCode = &e
	}
	if err := json.Unmarshal([]byte(tags), &j.Tags); err != nil {
		return j, fmt.Errorf("job %d tags: %w", j.ID, err)
	}
	if err := json.Unmarshal([]byte(spec), &j.Spec); err != nil {
		return j, fmt.Errorf("job %d spec: %w", j.ID, err)
	}
	j.CreatedAt, j.QueuedAt, j.StartedAt = store.FromNanos(created), store.FromNanos(queued), store.FromNanos(started)
	j.FinishedAt, j.UpdatedAt, j.ContactedAt = store.FromNanos(finished), store.FromNanos(updated), store.FromNanos(contacted)
	return j, nil
}

// CreateJob implements store.Store.
func (s *Store) CreateJob(ctx context.Context, j store.Job) (store.Job, error) {
	if err := s.check(); err != nil {
		return j, err
	}
	done, err := s.enterWrite(ctx)
	if err != nil {
		return j, err
	}
	defer done()
	s.ws.warm(ctx)
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return j, err
	}
	defer tx.Rollback()
	pid, known, err := s.projectID(ctx, tx, j.Project)
	if err != nil {
		return j, fmt.Errorf("create job: project: %w", err)
	}
	out, err := s.insertJob(ctx, tx, pid, j)
	if err != nil {
		return j, fmt.Errorf("create job: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return out, err
	}
	s.remember(j.Project, pid, known)
	return out, nil
}

// projectID returns the id of the project at path, creating it in tx if
// needed; known says it came from s.projects. The caller holds the write
// turn.
func (s *Store) projectID(ctx context.Context, tx *sql.Tx, path string) (id int64, known bool, err error) {
	if id, known := s.projects[path]; known {
		return id, true, nil
	}
	if _, err := (txStmts{tx, s.ws}).ExecContext(ctx, `INSERT INTO projects (path) VALUES (?) ON CONFLICT (path) DO NOTHING`, path); err != nil {
		return 0, false, err
	}
	if err := (txStmts{tx, s.ws}).QueryRowContext(ctx, `SELECT id FROM projects WHERE path = ?`, path).Scan(&id); err != nil {
		return 0, false, err
	}
	return id, false, nil
}

// remember caches the id of the project at path once the transaction that
// found or created it has committed (the id is then the project's for
// good). The caller holds the write turn.
func (s *Store) remember(path string, id int64, known bool) {
	if !known && len(s.projects) < maxCachedProjects {
		s.projects[path] = id
	}
}

// insertJob inserts j into project pid in tx and returns it as stored.
func (s *Store) insertJob(ctx context.Context, tx *sql.Tx, pid int64, j store.Job) (store.Job, error) {
	var exit any
	if j.ExitCode != nil {
		exit = *j.ExitCode
	}
	var id int64
	if err := (txStmts{tx, s.ws}).QueryRowContext(ctx, `INSERT INTO jobs (name, project_id, stage, status, failure_reason, exit_code, tags, timeout, run_timeout, image, spec,
			runner_id, runner_system_id, token_hash, created_at, queued_at, started_at, finished_at, updated_at, contacted_at,
			version, assigned_at, ack_deadline, accepted_at, provisioning_attempts, provisioning_returns, queued_ns, provisioning_ns, avoid_system_ids,
			pipeline_id, coverage)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id`,
		j.Name, pid, j.Stage, string(j.Status), j.FailureReason, exit, tagsText(j.Tags), j.Timeout, j.RunTimeout, j.Image, jsonText(j.Spec),
		j.RunnerID, j.RunnerSystemID, j.TokenHash, store.Nanos(j.CreatedAt), store.Nanos(j.QueuedAt), store.Nanos(j.StartedAt), store.Nanos(j.FinishedAt), store.Nanos(j.UpdatedAt), store.Nanos(j.ContactedAt),
		store.Nanos(j.AssignedAt), store.Nanos(j.AckDeadline), store.Nanos(j.AcceptedAt), j.ProvisioningAttempts, j.ProvisioningReturns, j.QueuedNanos, j.ProvisioningNanos, tagsText(j.AvoidSystemIDs),
		j.PipelineID, j.Coverage,
	).Scan(&id); err != nil {
		return j, err
	}
	return scanJob((txStmts{tx, s.ws}).QueryRowContext(ctx, `SELECT `+jobCols+jobFrom+` WHERE j.id = ?`, id))
}

// GetJob implements store.Store.
func (s *Store) GetJob(ctx context.Context, id int64) (store.Job, error) {
	if err := s.check(); err != nil {
		return store.Job{}, err
	}
	j, err := scanJob(s.rs.QueryRowContext(ctx, `SELECT `+jobCols+jobFrom+` WHERE j.id = ?`, id))
	return j, notFound(err, "job", id)
}

func placeholders(n int) string {
	return strings.TrimSuffix(strings.Repeat("?, ", n), ", ")
}

// ListJobs implements store.Store.
func (s *Store) ListJobs(ctx context.Context, f store.JobFilter) ([]store.Job, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	l := listing{q: `SELECT ` + jobCols + jobFrom + ` WHERE j.id > ?`, args: []any{f.AfterID}}
	l.in("j.status", strs(f.Statuses))
	l.and(f.Project != "", "p.path = ?", f.Project)
	l.and(f.Name != "", "j.name = ?", f.Name)
	l.and(f.PipelineID > 0, "j.pipeline_id = ?", f.PipelineID)
	q, args := l.page("j.id", f.BeforeID, f.Newest, f.Limit)
	out, err := queryAll(ctx, s.rs, scanJob, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list jobs: %w", err)
	}
	return out, nil
}

// listing builds the query of a list in id order (ListJobs,
// ListPipelines): conditions, then the page.
type listing struct {
	q    string
	args []any
}

// and adds cond, with v for its placeholder, when ok.
func (l *listing) and(ok bool, cond string, v any) {
	if ok {
		l.q += ` AND ` + cond
		l.args = append(l.args, v)
	}
}

// in adds col IN vs when vs is not empty.
func (l *listing) in(col string, vs []string) {
	if len(vs) > 0 {
		l.q += ` AND ` + col + ` IN (` + placeholders(len(vs)) + `)`
		for _, v := range vs {
			l.args = append(l.args, v)
		}
	}
}

// page ends the query: ids below before (when > 0), in the order of id
// (the highest first when newest), at most limit (when > 0).
func (l *listing) page(id string, before int64, newest bool, limit int) (string, []any) {
	l.and(before > 0, id+` < ?`, before)
	l.q += ` ORDER BY ` + id
	if newest {
		l.q += ` DESC`
	}
	if limit > 0 {
		l.q += ` LIMIT ?`
		l.args = append(l.args, limit)
	}
	return l.q, l.args
}

func strs[S ~string](l []S) []string {
	out := make([]string, len(l))
	for i, v := range l {
		out[i] = string(v)
	}
	return out
}

// queryAll runs q on the read pool and scans every row.
func queryAll[T any](ctx context.Context, st *stmts, scan func(scanner) (T, error), q string, args ...any) ([]T, error) {
	rows, err := st.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []T{}
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// QueueHeads implements store.Store.
func (s *Store) QueueHeads(ctx context.Context, queued, active []store.Status, limit int) ([]store.Job, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	if len(queued) == 0 || len(active) == 0 || limit <= 0 {
		return nil, fmt.Errorf("queue heads: bad arguments")
	}
	q := `SELECT ` + jobCols + jobFrom + ` WHERE j.id IN (SELECT MIN(id) FROM jobs WHERE status IN (` + placeholders(len(queued)) + `) GROUP BY project_id)
		ORDER BY (SELECT COUNT(*) FROM jobs a WHERE a.project_id = j.project_id AND a.status IN (` + placeholders(len(active)) + `)), j.id LIMIT ?`
	var args []any
	for _, st := range queued {
		args = append(args, string(st))
	}
	for _, st := range active {
		args = append(args, string(st))
	}
	args = append(args, limit)
	rows, err := s.rs.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("queue heads: %w", err)
	}
	defer rows.Close()
	out := []store.Job{}
	for rows.Next() {
		j, err := scanJob(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, j)
	}
	return out, rows.Err()
}

// TransitionJob implements store.Store.
func (s *Store) TransitionJob(ctx context.Context, id int64, from []store.Status, ch store.JobChange) (store.Job, error) {
	if err := s.check(); err != nil {
		return store.Job{}, err
	}
	if len(from) == 0 || !ch.Status.Valid() || ch.At.IsZero() {
		return store.Job{}, fmt.Errorf("transition job %d: bad arguments (from %v, to %q)", id, from, ch.Status)
	}
	set := []string{"status = ?", "updated_at = ?", "version = version + 1"}
	args := []any{string(ch.Status), store.Nanos(ch.At)}
	for _, c := range ch.Sets(func(l []string) any { return tagsText(l) }) {
		set = append(set, c.Column+" = ?")
		args = append(args, c.Value)
	}
	// where and its arguments select the row the change applies to; they
	// serve the token retirement and the update alike.
	where := ` WHERE id = ? AND status IN (` + placeholders(len(from)) + `)`
	wargs := []any{id}
	for _, st := range from {
		wargs = append(wargs, string(st))
	}
	if ch.IfVersion != 0 {
		where += ` AND version = ?`
		wargs = append(wargs, ch.IfVersion)
	}
	args = append(args, wargs...)
	var j store.Job
	err := s.inWrite(ctx, func(tx txStmts) error {
		if ch.TokenHash != nil {
			// Retire the token being replaced. Should the update below find the
			// job in another state, the rollback takes this back too.
			rargs := append(append([]any{store.Nanos(ch.At)}, wargs...), *ch.TokenHash)
			if _, err := tx.ExecContext(ctx, `INSERT INTO retired_job_tokens (token_hash, job_id, retired_at)
				SELECT token_hash, id, ? FROM jobs`+where+` AND token_hash != '' AND token_hash != ? ON CONFLICT (token_hash) DO NOTHING`, rargs...); err != nil {
				return fmt.Errorf("transition job %d: retire token: %w", id, err)
			}
		}
		res, err := tx.ExecContext(ctx, `UPDATE jobs SET `+strings.Join(set, ", ")+where, args...)
		if err != nil {
			return fmt.Errorf("transition job %d: %w", id, err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return err
		}
		j, err = scanJob(tx.QueryRowContext(ctx, `SELECT `+jobCols+jobFrom+` WHERE j.id = ?`, id))
		if err != nil {
			return notFound(err, "job", id)
		}
		if n == 0 {
			return fmt.Errorf("job %d is %s: %w", id, j.Status, store.ErrConflict)
		}
		return nil
	})
	return j, err
}

// RetiredJobToken implements store.Store.
func (s *Store) RetiredJobToken(ctx context.Context, hash string) (int64, error) {
	if err := s.check(); err != nil {
		return 0, err
	}
	var id int64
	err := s.rs.QueryRowContext(ctx, `SELECT job_id FROM retired_job_tokens WHERE token_hash = ?`, hash).Scan(&id)
	return id, notFound(err, "retired job token", "")
}

// JobStates implements store.Store.
func (s *Store) JobStates(ctx context.Context, ids []int64) ([]store.JobState, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	out := []store.JobState{}
	if len(ids) == 0 {
		return out, nil
	}
	list, err := json.Marshal(ids)
	if err != nil {
		return nil, fmt.Errorf("job states: %w", err)
	}
	rows, err := s.rs.QueryContext(ctx, `SELECT id, runner_id, status, token_hash FROM jobs
		WHERE id IN (SELECT value FROM json_each(?))`, string(list))
	if err != nil {
		return nil, fmt.Errorf("job states: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var st store.JobState
		var status string
		if err := rows.Scan(&st.ID, &st.RunnerID, &status, &st.TokenHash); err != nil {
			return nil, fmt.Errorf("job states: %w", err)
		}
		st.Status = store.Status(status)
		out = append(out, st)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("job states: %w", err)
	}
	return out, nil
}

// RetiredJobTokens implements store.Store.
func (s *Store) RetiredJobTokens(ctx context.Context, hashes []string) (map[string]int64, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	out := map[string]int64{}
	if len(hashes) == 0 {
		return out, nil
	}
	list, err := json.Marshal(hashes)
	if err != nil {
		return nil, fmt.Errorf("retired job tokens: %w", err)
	}
	rows, err := s.rs.QueryContext(ctx, `SELECT token_hash, job_id FROM retired_job_tokens
		WHERE token_hash IN (SELECT value FROM json_each(?))`, string(list))
	if err != nil {
		return nil, fmt.Errorf("retired job tokens: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var h string
		var id int64
		if err := rows.Scan(&h, &id); err != nil {
			return nil, fmt.Errorf("retired job tokens: %w", err)
		}
		out[h] = id
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("retired job tokens: %w", err)
	}
	return out, nil
}

// TouchJob implements store.Store.
func (s *Store) TouchJob(ctx context.Context, id int64, at time.Time) error {
	return s.execOne(ctx, "touch job", id, `UPDATE jobs SET contacted_at = ? WHERE id = ?`, store.Nanos(at), id)
}

// CountJobs implements store.Store.
func (s *Store) CountJobs(ctx context.Context) (map[store.Status]int64, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	rows, err := s.rs.QueryContext(ctx, `SELECT status, COUNT(*) FROM jobs GROUP BY status`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[store.Status]int64{}
	for rows.Next() {
		var st string
		var n int64
		if err := rows.Scan(&st, &n); err != nil {
			return nil, err
		}
		out[store.Status(st)] = n
	}
	return out, rows.Err()
}

// private creates the database file at path with mode 0600 when it does
// not exist (SQLite creates its -wal and -shm files with the database
// file's mode), and takes group and other access away from the database
// and those files when they have it.
func private(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	switch {
	case err == nil:
		return f.Close()
	case !errors.Is(err, fs.ErrExist):
		return fmt.Errorf("create %s: %w", path, err)
	}
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		fi, err := os.Stat(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("stat %s: %w", p, err)
		}
		if fi.Mode().Perm()&0o077 != 0 {
			if err := os.Chmod(p, fi.Mode().Perm()&0o700); err != nil {
				return fmt.Errorf("make %s private (it holds the jobs): %w", p, err)
			}
		}
	}
	return nil
}
