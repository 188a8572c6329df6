package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/drover-ci/drover/internal/store"
	"github.com/drover-ci/drover/internal/store/sqlrow"
)

// jobCols are a job's columns, from jobs (or a CTE of its rows) as j
// joined with projects as p.
const jobCols = `j.id, j.name, p.path, j.project_id, j.stage, j.status, j.failure_reason, j.exit_code, j.tags, j.timeout, j.run_timeout,
	j.image, j.spec, j.runner_id, j.runner_system_id, j.token_hash, j.created_at, j.queued_at, j.started_at, j.finished_at, j.updated_at, j.contacted_at,
	j.version, j.assigned_at, j.ack_deadline, j.accepted_at, j.provisioning_attempts, j.provisioning_returns, j.queued_ns, j.provisioning_ns, j.avoid_system_ids,
	j.pipeline_id, j.coverage`

const jobFrom = ` FROM jobs j JOIN projects p ON p.id = j.project_id`

func scanJob(row sqlrow.Scanner) (store.Job, error) {
	var j store.Job
	var status, spec string
	var created, queued, started, finished, updated, contacted, assigned, deadline, accepted int64
	if err := row.Scan(&j.ID, &j.Name, &j.Project, &j.ProjectID, &j.Stage, &status, &j.FailureReason, &j.ExitCode, &j.Tags, &j.Timeout, &j.RunTimeout,
		&j.Image, &spec, &j.RunnerID, &j.RunnerSystemID, &j.TokenHash, &created, &queued, &started, &finished, &updated, &contacted,
		&j.Version, &assigned, &deadline, &accepted, &j.ProvisioningAttempts, &j.ProvisioningReturns, &j.QueuedNanos, &j.ProvisioningNanos, &j.AvoidSystemIDs,
		&j.PipelineID, &j.Coverage); err != nil {
		return store.Job{}, err
	}
	j.Status = store.Status(status)
	j.Tags = nonNil(j.Tags)
	if len(j.AvoidSystemIDs) == 0 {
		j.AvoidSystemIDs = nil
	}
	// The spec's own decoding reads the older forms too (services as
	// names, no image).
	if err := json.Unmarshal([]byte(spec), &j.Spec); err != nil {
		return store.Job{}, fmt.Errorf("job %d spec: %w", j.ID, err)
	}
	j.CreatedAt, j.QueuedAt, j.StartedAt = store.FromNanos(created), store.FromNanos(queued), store.FromNanos(started)
	j.FinishedAt, j.UpdatedAt, j.ContactedAt = store.FromNanos(finished), store.FromNanos(updated), store.FromNanos(contacted)
	j.AssignedAt, j.AckDeadline, j.AcceptedAt = store.FromNanos(assigned), store.FromNanos(deadline), store.FromNanos(accepted)
	return j, nil
}

func (s *Store) collectJobs(ctx context.Context, op string, rows pgx.Rows, err error) ([]store.Job, error) {
	return collect(ctx, s, op, rows, err, scanJob)
}

// collect scans every row of a query (rows and err are its result).
func collect[T any](ctx context.Context, s *Store, op string, rows pgx.Rows, err error, scan func(sqlrow.Scanner) (T, error)) ([]T, error) {
	if err != nil {
		return nil, s.fail(ctx, op, err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (T, error) { return scan(row) })
	if err != nil {
		return nil, s.fail(ctx, op, err)
	}
	return nonNil(out), nil
}

// projectID returns the id of the project at path, creating it if needed.
func (s *Store) projectID(ctx context.Context, path string) (int64, error) {
	var id int64
	// Projects are never deleted. Looking first, rather than inserting
	// with ON CONFLICT every time, spares an identity value per job. An
	// insert that finds the path taken by a concurrent one returns no row;
	// the next look, a new statement, sees it.
	for range 3 {
		err := s.pool.QueryRow(ctx, `SELECT id FROM projects WHERE path = $1`, path).Scan(&id)
		if !errors.Is(err, pgx.ErrNoRows) {
			return id, err
		}
		err = s.pool.QueryRow(ctx, `INSERT INTO projects (path) VALUES ($1) ON CONFLICT (path) DO NOTHING RETURNING id`, path).Scan(&id)
		if !errors.Is(err, pgx.ErrNoRows) {
			return id, err
		}
	}
	return 0, fmt.Errorf("project %q neither found nor created", path)
}

// CreateJob implements store.Store.
func (s *Store) CreateJob(ctx context.Context, j store.Job) (store.Job, error) {
	if err := s.check(); err != nil {
		return j, err
	}
	pid, err := s.projectID(ctx, j.Project)
	if err != nil {
		return j, s.fail(ctx, fmt.Sprintf("create job: project %q", j.Project), err)
	}
	q, a, err := s.insertJob(pid, j)
	if err != nil {
		return j, fmt.Errorf("create job: %w", err)
	}
	out, err := scanJob(s.pool.QueryRow(ctx, q, a...))
	if err != nil {
		return j, s.fail(ctx, "create job", err)
	}
	return out, nil
}

// insertJob returns the statement, and its arguments, that inserts j into
// project pid and returns it as jobCols. A queued job is announced in the
// same statement (see ListenQueue).
func (s *Store) insertJob(pid int64, j store.Job) (string, []any, error) {
	spec, err := json.Marshal(j.Spec)
	if err != nil {
		return "", nil, fmt.Errorf("spec: %w", err)
	}
	notify, extra := "", []any{}
	if j.Status == store.StatusPending {
		notify = ` CROSS JOIN LATERAL (SELECT ` + notifyJobSQL("$31", "$32") + `) n`
		extra = []any{s.origin, len(j.Spec.Services) > 0}
	}
	q := `WITH j AS (
		INSERT INTO jobs (name, project_id, stage, status, failure_reason, exit_code, tags, timeout, run_timeout, image, spec,
			runner_id, runner_system_id, token_hash, created_at, queued_at, started_at, finished_at, updated_at, contacted_at,
			version, assigned_at, ack_deadline, accepted_at, provisioning_attempts, provisioning_returns, queued_ns, provisioning_ns, avoid_system_ids,
			pipeline_id, coverage)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20,
			1, $21, $22, $23, $24, $25, $26, $27, $28, $29, $30)
		RETURNING *)
		SELECT ` + jobCols + ` FROM j JOIN projects p ON p.id = j.project_id` + notify
	return q, append([]any{
		j.Name, pid, j.Stage, string(j.Status), j.FailureReason, j.ExitCode, nonNil(j.Tags), j.Timeout, j.RunTimeout, j.Image, string(spec),
		j.RunnerID, j.RunnerSystemID, j.TokenHash, store.Nanos(j.CreatedAt), store.Nanos(j.QueuedAt), store.Nanos(j.StartedAt), store.Nanos(j.FinishedAt), store.Nanos(j.UpdatedAt), store.Nanos(j.ContactedAt),
		store.Nanos(j.AssignedAt), store.Nanos(j.AckDeadline), store.Nanos(j.AcceptedAt), j.ProvisioningAttempts, j.ProvisioningReturns, j.QueuedNanos, j.ProvisioningNanos, nonNil(j.AvoidSystemIDs),
		j.PipelineID, j.Coverage},
		extra...), nil
}

// GetJob implements store.Store.
func (s *Store) GetJob(ctx context.Context, id int64) (store.Job, error) {
	if err := s.check(); err != nil {
		return store.Job{}, err
	}
	return s.getJob(ctx, s.pool, id)
}

// querier is a pool or a transaction.
type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

func (s *Store) getJob(ctx context.Context, q querier, id int64) (store.Job, error) {
	j, err := scanJob(q.QueryRow(ctx, `SELECT `+jobCols+jobFrom+` WHERE j.id = $1`, id))
	if err != nil {
		return store.Job{}, s.fail(ctx, fmt.Sprintf("get job %d", id), err)
	}
	return j, nil
}

// ListJobs implements store.Store.
func (s *Store) ListJobs(ctx context.Context, f store.JobFilter) ([]store.Job, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	var a args
	q := `SELECT ` + jobCols + jobFrom + ` WHERE j.id > ` + a.add(f.AfterID)
	if len(f.Statuses) > 0 {
		q += ` AND j.status = ANY(` + a.add(statusStrings(f.Statuses)) + `)`
	}
	if f.Project != "" {
		q += ` AND p.path = ` + a.add(f.Project)
	}
	if f.Name != "" {
		q += ` AND j.name = ` + a.add(f.Name)
	}
	if f.PipelineID > 0 {
		q += ` AND j.pipeline_id = ` + a.add(f.PipelineID)
	}
	q += page(&a, "j.id", f.BeforeID, f.Newest, f.Limit)
	rows, err := s.pool.Query(ctx, q, a...)
	return s.collectJobs(ctx, "list jobs", rows, err)
}

// page ends a listing query in id order (ListJobs, ListPipelines): ids
// below before (when > 0), the highest first when newest, at most limit
// (when > 0).
func page(a *args, id string, before int64, newest bool, limit int) string {
	q := ""
	if before > 0 {
		q += ` AND ` + id + ` < ` + a.add(before)
	}
	q += ` ORDER BY ` + id
	if newest {
		q += ` DESC`
	}
	if limit > 0 {
		q += ` LIMIT ` + a.add(limit)
	}
	return q
}

// QueueHeads implements store.Store.
//
// The heads are found by skipping through the index on (status,
// project_id, id): for each queued status, a recursive query jumps from
// one project's first job to the next project's, one index probe per
// project with queued jobs, however many jobs each has queued (a
// DISTINCT ON would read all of them). Each head's project's active jobs
// are then counted from the same index.
func (s *Store) QueueHeads(ctx context.Context, queued, active []store.Status, limit int) ([]store.Job, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	if len(queued) == 0 || len(active) == 0 || limit <= 0 {
		return nil, fmt.Errorf("queue heads: bad arguments (queued %v, active %v, limit %d)", queued, active, limit)
	}
	rows, err := s.pool.Query(ctx, `WITH heads AS (
			SELECT f.project_id, MIN(f.id) AS id
			FROM unnest($1::text[]) q(status) CROSS JOIN LATERAL (
				WITH RECURSIVE firsts AS (
					(SELECT project_id, id FROM jobs WHERE status = q.status ORDER BY project_id, id LIMIT 1)
					UNION ALL
					SELECT n.project_id, n.id FROM firsts CROSS JOIN LATERAL (
						SELECT project_id, id FROM jobs
						WHERE status = q.status AND project_id > firsts.project_id
						ORDER BY project_id, id LIMIT 1) n
				)
				SELECT project_id, id FROM firsts) f
			GROUP BY f.project_id
		), load AS (
			SELECT a.project_id, COUNT(*) AS n FROM jobs a
			WHERE a.status = ANY($2) AND a.project_id IN (SELECT project_id FROM heads)
			GROUP BY a.project_id
		)
		SELECT `+jobCols+` FROM heads h
		JOIN jobs j ON j.id = h.id
		JOIN projects p ON p.id = j.project_id
		LEFT JOIN load l ON l.project_id = h.project_id
		ORDER BY COALESCE(l.n, 0), j.id
		LIMIT $3`, statusStrings(queued), statusStrings(active), limit)
	return s.collectJobs(ctx, "queue heads", rows, err)
}

// TransitionJob implements store.Store. The row is locked with the
// change's conditions (from statuses, version); a concurrent caller waits
// for the lock and then finds the row no longer matching, so exactly one
// wins. The replaced token hash is retired and the row updated in the same
// transaction.
func (s *Store) TransitionJob(ctx context.Context, id int64, from []store.Status, ch store.JobChange) (store.Job, error) {
	if err := s.check(); err != nil {
		return store.Job{}, err
	}
	if len(from) == 0 || !ch.Status.Valid() || ch.At.IsZero() {
		return store.Job{}, fmt.Errorf("transition job %d: bad arguments (from %v, to %q)", id, from, ch.Status)
	}
	op := fmt.Sprintf("transition job %d to %s", id, ch.Status)

	var lock args
	lockQ := `SELECT token_hash FROM jobs WHERE id = ` + lock.add(id) + ` AND status = ANY(` + lock.add(statusStrings(from)) + `)`
	if ch.IfVersion != 0 {
		lockQ += ` AND version = ` + lock.add(ch.IfVersion)
	}
	lockQ += ` FOR UPDATE`
	if ch.SkipLocked {
		lockQ += ` SKIP LOCKED`
	}

	var upd args
	set := []string{
		"status = " + upd.add(string(ch.Status)),
		"updated_at = " + upd.add(store.Nanos(ch.At)),
		"version = version + 1",
	}
	for _, c := range ch.Sets(func(l []string) any { return nonNil(l) }) {
		set = append(set, c.Column+" = "+upd.add(c.Value))
	}
	if ch.Status != store.StatusPending {
		return s.transitionOne(ctx, id, op, lockQ, lock, set, upd, ch)
	}

	// To the queue: the notification goes out in the same transaction.
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return store.Job{}, s.fail(ctx, op, err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) // no-op after Commit
	var oldHash string
	err = tx.QueryRow(ctx, lockQ, lock...).Scan(&oldHash)
	if errors.Is(err, pgx.ErrNoRows) {
		return s.conflict(ctx, tx, id, op, ch)
	}
	if err != nil {
		return store.Job{}, s.fail(ctx, op+": lock", err)
	}
	if ch.TokenHash != nil && oldHash != "" && oldHash != *ch.TokenHash {
		if _, err := tx.Exec(ctx, `INSERT INTO retired_job_tokens (token_hash, job_id, retired_at) VALUES ($1, $2, $3)
			ON CONFLICT (token_hash) DO NOTHING`, oldHash, id, store.Nanos(ch.At)); err != nil {
			return store.Job{}, s.fail(ctx, op+": retire token", err)
		}
	}
	updQ := `WITH j AS (UPDATE jobs SET ` + strings.Join(set, ", ") + ` WHERE id = ` + upd.add(id) + ` RETURNING *)
		SELECT ` + jobCols + ` FROM j JOIN projects p ON p.id = j.project_id`
	j, err := scanJob(tx.QueryRow(ctx, updQ, upd...))
	if err != nil {
		return store.Job{}, s.fail(ctx, op, err)
	}
	if err := s.notifyQueued(ctx, tx, &j); err != nil {
		return store.Job{}, s.fail(ctx, op+": notify", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return store.Job{}, s.fail(ctx, op+": commit", err)
	}
	return j, nil
}

// transitionOne is TransitionJob in one statement (one round trip, its
// own transaction): the row is locked with the change's conditions, the
// replaced token hash retired and the row updated, in CTEs of one query.
func (s *Store) transitionOne(ctx context.Context, id int64, op, lockQ string, lock args, set []string, upd args, ch store.JobChange) (store.Job, error) {
	// The update's placeholders follow the lock query's.
	a := append(args{}, lock...)
	for i := range set {
		set[i] = renumber(set[i], len(lock))
	}
	a = append(a, upd...)
	q := `WITH old AS (` + lockQ + `)`
	if ch.TokenHash != nil {
		q += `, retired AS (INSERT INTO retired_job_tokens (token_hash, job_id, retired_at)
			SELECT old.token_hash, ` + a.add(id) + `::bigint, ` + a.add(store.Nanos(ch.At)) + `::bigint FROM old
			WHERE old.token_hash <> '' AND old.token_hash <> ` + a.add(*ch.TokenHash) + `
			ON CONFLICT (token_hash) DO NOTHING)`
	}
	q += `, j AS (UPDATE jobs SET ` + strings.Join(set, ", ") + ` FROM old WHERE jobs.id = ` + a.add(id) + ` RETURNING jobs.*)
		SELECT ` + jobCols + ` FROM j JOIN projects p ON p.id = j.project_id`
	j, err := scanJob(s.pool.QueryRow(ctx, q, a...))
	if errors.Is(err, pgx.ErrNoRows) {
		return s.conflict(ctx, s.pool, id, op, ch)
	}
	if err != nil {
		return store.Job{}, s.fail(ctx, op, err)
	}
	return j, nil
}

// renumber shifts the placeholders $n in sql by k.
func renumber(sql string, k int) string {
	var b strings.Builder
	for i := 0; i < len(sql); i++ {
		if sql[i] != '$' {
			b.WriteByte(sql[i])
			continue
		}
		j := i + 1
		for j < len(sql) && sql[j] >= '0' && sql[j] <= '9' {
			j++
		}
		n, err := strconv.Atoi(sql[i+1 : j])
		if err != nil {
			b.WriteByte('$')
			continue
		}
		b.WriteString("$" + strconv.Itoa(n+k))
		i = j - 1
	}
	return b.String()
}

// conflict answers a transition whose conditions did not hold: the job as
// it is now and ErrConflict, or ErrNotFound. A SkipLocked change gets no
// job back (ErrConflict alone): it does not wait for, or read, a row
// another transaction holds.
func (s *Store) conflict(ctx context.Context, q querier, id int64, op string, ch store.JobChange) (store.Job, error) {
	if ch.SkipLocked {
		return store.Job{}, fmt.Errorf("%s: job is taken or changed: %w", op, store.ErrConflict)
	}
	cur, err := s.getJob(ctx, q, id)
	if err != nil {
		return store.Job{}, fmt.Errorf("%s: %w", op, err)
	}
	return cur, fmt.Errorf("%s: job is %s (version %d): %w", op, cur.Status, cur.Version, store.ErrConflict)
}

// RetiredJobToken implements store.Store.
func (s *Store) RetiredJobToken(ctx context.Context, hash string) (int64, error) {
	if err := s.check(); err != nil {
		return 0, err
	}
	var id int64
	if err := s.pool.QueryRow(ctx, `SELECT job_id FROM retired_job_tokens WHERE token_hash = $1`, hash).Scan(&id); err != nil {
		return 0, s.fail(ctx, "retired job token", err)
	}
	return id, nil
}

// JobStates implements store.Store.
func (s *Store) JobStates(ctx context.Context, ids []int64) ([]store.JobState, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	if len(ids) == 0 {
		return []store.JobState{}, nil
	}
	rows, err := s.pool.Query(ctx, `SELECT id, runner_id, status, token_hash FROM jobs WHERE id = ANY($1)`, ids)
	if err != nil {
		return nil, s.fail(ctx, "job states", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (store.JobState, error) {
		var st store.JobState
		var status string
		err := row.Scan(&st.ID, &st.RunnerID, &status, &st.TokenHash)
		st.Status = store.Status(status)
		return st, err
	})
	if err != nil {
		return nil, s.fail(ctx, "job states", err)
	}
	if out == nil {
		out = []store.JobState{}
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
	rows, err := s.pool.Query(ctx, `SELECT token_hash, job_id FROM retired_job_tokens WHERE token_hash = ANY($1)`, hashes)
	if err != nil {
		return nil, s.fail(ctx, "retired job tokens", err)
	}
	var h string
	var id int64
	if _, err := pgx.ForEachRow(rows, []any{&h, &id}, func() error {
		out[h] = id
		return nil
	}); err != nil {
		return nil, s.fail(ctx, "retired job tokens", err)
	}
	return out, nil
}

// TouchJob implements store.Store.
func (s *Store) TouchJob(ctx context.Context, id int64, at time.Time) error {
	return s.execOne(ctx, fmt.Sprintf("touch job %d", id), `UPDATE jobs SET contacted_at = $2 WHERE id = $1`, id, store.Nanos(at))
}

// CountJobs implements store.Store.
func (s *Store) CountJobs(ctx context.Context) (map[store.Status]int64, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, `SELECT status, COUNT(*) FROM jobs GROUP BY status`)
	if err != nil {
		return nil, s.fail(ctx, "count jobs", err)
	}
	out := map[store.Status]int64{}
	var st string
	var n int64
	if _, err := pgx.ForEachRow(rows, []any{&st, &n}, func() error {
		out[store.Status(st)] = n
		return nil
	}); err != nil {
		return nil, s.fail(ctx, "count jobs", err)
	}
	return out, nil
}
