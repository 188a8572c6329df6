package sqlite

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/drover-ci/drover/internal/store"
	"github.com/drover-ci/drover/internal/store/sqlrow"
)

// CreatePipeline implements store.Store. The write turn makes the
// project's IID counter safe: one transaction at a time bumps it.
func (s *Store) CreatePipeline(ctx context.Context, p store.Pipeline, jobs []store.Job) (store.Pipeline, []store.Job, error) {
	if err := s.check(); err != nil {
		return p, nil, err
	}
	if err := store.CheckPipelineJobs(p, jobs); err != nil {
		return p, nil, fmt.Errorf("create pipeline: %w", err)
	}
	done, err := s.enterWrite(ctx)
	if err != nil {
		return p, nil, err
	}
	defer done()
	s.ws.warm(ctx)
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return p, nil, err
	}
	defer tx.Rollback()
	pid, known, err := s.projectID(ctx, tx, p.Project)
	if err != nil {
		return p, nil, fmt.Errorf("create pipeline: project %q: %w", p.Project, err)
	}
	var iid int64
	if err := (txStmts{tx, s.ws}).QueryRowContext(ctx, `UPDATE projects SET pipeline_iid = pipeline_iid + 1 WHERE id = ? RETURNING pipeline_iid`, pid).Scan(&iid); err != nil {
		return p, nil, fmt.Errorf("create pipeline: next iid of project %q: %w", p.Project, err)
	}
	var id int64
	if err := (txStmts{tx, s.ws}).QueryRowContext(ctx, `INSERT INTO pipelines (project_id, iid, source, ref, tag, sha, before_sha, status, spec,
			created_at, started_at, finished_at, updated_at, version)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1) RETURNING id`,
		pid, iid, p.Source, p.Ref, b2i(p.Tag), p.SHA, p.BeforeSHA, string(p.Status), jsonText(p.Spec),
		store.Nanos(p.CreatedAt), store.Nanos(p.StartedAt), store.Nanos(p.FinishedAt), store.Nanos(p.UpdatedAt),
	).Scan(&id); err != nil {
		return p, nil, fmt.Errorf("create pipeline: %w", err)
	}
	out := make([]store.Job, 0, len(jobs))
	for i, j := range jobs {
		j.Project, j.PipelineID = p.Project, id
		got, err := s.insertJob(ctx, tx, pid, j)
		if err != nil {
			return p, nil, fmt.Errorf("create pipeline: job %d (%s): %w", i, j.Name, err)
		}
		out = append(out, got)
	}
	created, err := sqlrow.Pipeline((txStmts{tx, s.ws}).QueryRowContext(ctx, `SELECT `+sqlrow.PipelineCols+sqlrow.PipelineFrom+` WHERE pl.id = ?`, id))
	if err != nil {
		return p, nil, fmt.Errorf("create pipeline: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return p, nil, fmt.Errorf("create pipeline: commit: %w", err)
	}
	s.remember(p.Project, pid, known)
	return created, out, nil
}

// GetPipeline implements store.Store.
func (s *Store) GetPipeline(ctx context.Context, id int64) (store.Pipeline, error) {
	if err := s.check(); err != nil {
		return store.Pipeline{}, err
	}
	p, err := sqlrow.Pipeline(s.rs.QueryRowContext(ctx, `SELECT `+sqlrow.PipelineCols+sqlrow.PipelineFrom+` WHERE pl.id = ?`, id))
	return p, notFound(err, "pipeline", id)
}

// ListPipelines implements store.Store.
func (s *Store) ListPipelines(ctx context.Context, f store.PipelineFilter) ([]store.Pipeline, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	l := listing{q: `SELECT ` + sqlrow.PipelineCols + sqlrow.PipelineFrom + ` WHERE pl.id > ?`, args: []any{f.AfterID}}
	l.in("pl.status", strs(f.Statuses))
	l.and(f.Project != "", "p.path = ?", f.Project)
	l.and(f.Ref != "", "pl.ref = ?", f.Ref)
	q, args := l.page("pl.id", f.BeforeID, f.Newest, f.Limit)
	out, err := queryAll(ctx, s.rs, sqlrow.Pipeline, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list pipelines: %w", err)
	}
	return out, nil
}

// UpdatePipeline implements store.Store.
func (s *Store) UpdatePipeline(ctx context.Context, id int64, ch store.PipelineChange) (store.Pipeline, error) {
	if err := s.check(); err != nil {
		return store.Pipeline{}, err
	}
	if ch.At.IsZero() {
		return store.Pipeline{}, fmt.Errorf("update pipeline %d: bad arguments (no time)", id)
	}
	done, err := s.enterWrite(ctx)
	if err != nil {
		return store.Pipeline{}, err
	}
	defer done()
	set := []string{"updated_at = ?", "version = version + 1"}
	args := []any{store.Nanos(ch.At)}
	if ch.Status != "" {
		set = append(set, "status = ?")
		args = append(args, string(ch.Status))
	}
	for _, t := range []struct {
		col string
		t   time.Time
	}{{"started_at", ch.StartedAt}, {"finished_at", ch.FinishedAt}} {
		if !t.t.IsZero() {
			set = append(set, t.col+" = ?")
			args = append(args, store.Nanos(t.t))
		}
	}
	where := ` WHERE id = ?`
	args = append(args, id)
	if ch.IfVersion != 0 {
		where += ` AND version = ?`
		args = append(args, ch.IfVersion)
	}
	s.ws.warm(ctx)
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return store.Pipeline{}, err
	}
	defer tx.Rollback()
	res, err := (txStmts{tx, s.ws}).ExecContext(ctx, `UPDATE pipelines SET `+strings.Join(set, ", ")+where, args...)
	if err != nil {
		return store.Pipeline{}, fmt.Errorf("update pipeline %d: %w", id, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return store.Pipeline{}, fmt.Errorf("update pipeline %d: %w", id, err)
	}
	p, err := sqlrow.Pipeline((txStmts{tx, s.ws}).QueryRowContext(ctx, `SELECT `+sqlrow.PipelineCols+sqlrow.PipelineFrom+` WHERE pl.id = ?`, id))
	if err != nil {
		return p, fmt.Errorf("update pipeline: %w", notFound(err, "pipeline", id))
	}
	if n == 0 {
		return p, fmt.Errorf("update pipeline %d: version %d, not %d: %w", id, p.Version, ch.IfVersion, store.ErrConflict)
	}
	if err := tx.Commit(); err != nil {
		return store.Pipeline{}, fmt.Errorf("update pipeline %d: commit: %w", id, err)
	}
	return p, nil
}
