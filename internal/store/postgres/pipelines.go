package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/drover-ci/drover/internal/store"
	"github.com/drover-ci/drover/internal/store/sqlrow"
)

// CreatePipeline implements store.Store. The project's IID counter is
// bumped by an UPDATE of its row, whose lock a concurrent creation in the
// same project (through any coordinator) waits for: it then bumps the
// committed value. The jobs are inserted in one batch; queued ones are
// announced, delivered only when the transaction commits.
func (s *Store) CreatePipeline(ctx context.Context, p store.Pipeline, jobs []store.Job) (store.Pipeline, []store.Job, error) {
	if err := s.check(); err != nil {
		return p, nil, err
	}
	if err := store.CheckPipelineJobs(p, jobs); err != nil {
		return p, nil, fmt.Errorf("create pipeline: %w", err)
	}
	spec, err := json.Marshal(p.Spec)
	if err != nil {
		return p, nil, fmt.Errorf("create pipeline: spec: %w", err)
	}
	pid, err := s.projectID(ctx, p.Project)
	if err != nil {
		return p, nil, s.fail(ctx, fmt.Sprintf("create pipeline: project %q", p.Project), err)
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return p, nil, s.fail(ctx, "create pipeline: begin", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) // no-op after Commit
	created, err := sqlrow.Pipeline(tx.QueryRow(ctx, `WITH p AS (
			UPDATE projects SET pipeline_iid = pipeline_iid + 1 WHERE id = $1 RETURNING id, path, pipeline_iid
		), pl AS (
			INSERT INTO pipelines (project_id, iid, source, ref, tag, sha, before_sha, status, spec, created_at, started_at, finished_at, updated_at, version)
			SELECT p.id, p.pipeline_iid, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, 1 FROM p
			RETURNING *)
		SELECT `+sqlrow.PipelineCols+` FROM pl JOIN p ON p.id = pl.project_id`,
		pid, p.Source, p.Ref, p.Tag, p.SHA, p.BeforeSHA, string(p.Status), string(spec),
		store.Nanos(p.CreatedAt), store.Nanos(p.StartedAt), store.Nanos(p.FinishedAt), store.Nanos(p.UpdatedAt)))
	if err != nil {
		return p, nil, s.fail(ctx, "create pipeline", err)
	}
	out := make([]store.Job, 0, len(jobs))
	if len(jobs) > 0 {
		var b pgx.Batch
		for i, j := range jobs {
			j.Project, j.PipelineID = p.Project, created.ID
			q, a, err := s.insertJob(pid, j)
			if err != nil {
				return p, nil, fmt.Errorf("create pipeline: job %d (%s): %w", i, j.Name, err)
			}
			b.Queue(q, a...)
		}
		br := tx.SendBatch(ctx, &b)
		for i, j := range jobs {
			got, err := scanJob(br.QueryRow())
			if err != nil {
				br.Close()
				return p, nil, s.fail(ctx, fmt.Sprintf("create pipeline: job %d (%s)", i, j.Name), err)
			}
			out = append(out, got)
		}
		if err := br.Close(); err != nil {
			return p, nil, s.fail(ctx, "create pipeline: jobs", err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return p, nil, s.fail(ctx, "create pipeline: commit", err)
	}
	return created, out, nil
}

// GetPipeline implements store.Store.
func (s *Store) GetPipeline(ctx context.Context, id int64) (store.Pipeline, error) {
	if err := s.check(); err != nil {
		return store.Pipeline{}, err
	}
	return s.getPipeline(ctx, s.pool, id)
}

func (s *Store) getPipeline(ctx context.Context, q querier, id int64) (store.Pipeline, error) {
	p, err := sqlrow.Pipeline(q.QueryRow(ctx, `SELECT `+sqlrow.PipelineCols+sqlrow.PipelineFrom+` WHERE pl.id = $1`, id))
	if err != nil {
		return store.Pipeline{}, s.fail(ctx, fmt.Sprintf("get pipeline %d", id), err)
	}
	return p, nil
}

// ListPipelines implements store.Store.
func (s *Store) ListPipelines(ctx context.Context, f store.PipelineFilter) ([]store.Pipeline, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	var a args
	q := `SELECT ` + sqlrow.PipelineCols + sqlrow.PipelineFrom + ` WHERE pl.id > ` + a.add(f.AfterID)
	if len(f.Statuses) > 0 {
		q += ` AND pl.status = ANY(` + a.add(statusStrings(f.Statuses)) + `)`
	}
	if f.Project != "" {
		q += ` AND p.path = ` + a.add(f.Project)
	}
	if f.Ref != "" {
		q += ` AND pl.ref = ` + a.add(f.Ref)
	}
	q += page(&a, "pl.id", f.BeforeID, f.Newest, f.Limit)
	rows, err := s.pool.Query(ctx, q, a...)
	return collect(ctx, s, "list pipelines", rows, err, sqlrow.Pipeline)
}

// UpdatePipeline implements store.Store, in one statement: the update's
// conditions (id, version) are checked on the row it locks, so of
// concurrent changes from one version exactly one wins.
func (s *Store) UpdatePipeline(ctx context.Context, id int64, ch store.PipelineChange) (store.Pipeline, error) {
	if err := s.check(); err != nil {
		return store.Pipeline{}, err
	}
	if ch.At.IsZero() {
		return store.Pipeline{}, fmt.Errorf("update pipeline %d: bad arguments (no time)", id)
	}
	op := fmt.Sprintf("update pipeline %d", id)
	var a args
	set := []string{"updated_at = " + a.add(store.Nanos(ch.At)), "version = version + 1"}
	if ch.Status != "" {
		set = append(set, "status = "+a.add(string(ch.Status)))
	}
	for _, t := range []struct {
		col string
		t   time.Time
	}{{"started_at", ch.StartedAt}, {"finished_at", ch.FinishedAt}} {
		if !t.t.IsZero() {
			set = append(set, t.col+" = "+a.add(store.Nanos(t.t)))
		}
	}
	where := ` WHERE id = ` + a.add(id)
	if ch.IfVersion != 0 {
		where += ` AND version = ` + a.add(ch.IfVersion)
	}
	p, err := sqlrow.Pipeline(s.pool.QueryRow(ctx, `WITH pl AS (UPDATE pipelines SET `+strings.Join(set, ", ")+where+` RETURNING *)
		SELECT `+sqlrow.PipelineCols+` FROM pl JOIN projects p ON p.id = pl.project_id`, a...))
	if errors.Is(err, pgx.ErrNoRows) {
		cur, err := s.getPipeline(ctx, s.pool, id)
		if err != nil {
			return store.Pipeline{}, fmt.Errorf("%s: %w", op, err)
		}
		return cur, fmt.Errorf("%s: version %d, not %d: %w", op, cur.Version, ch.IfVersion, store.ErrConflict)
	}
	if err != nil {
		return store.Pipeline{}, s.fail(ctx, op, err)
	}
	return p, nil
}
