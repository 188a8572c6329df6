package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/drover-ci/drover/internal/store"
	"github.com/drover-ci/drover/internal/store/sqlrow"
)

// CreateProject implements store.Store in one statement: the insert of a
// new row, or the update of an implicit one, whose condition (not
// registered) is checked on the row it locks; of concurrent registrations
// of one name exactly one succeeds.
func (s *Store) CreateProject(ctx context.Context, p store.Project) (store.Project, error) {
	if err := s.check(); err != nil {
		return p, err
	}
	op := fmt.Sprintf("create project %q", p.Name)
	out, err := sqlrow.Project(s.pool.QueryRow(ctx, `INSERT INTO projects AS p (path, registered, repo_url, default_branch, config_path, variables,
			webhook_secret, forge_kind, forge_url, forge_repo, forge_token, created_at, updated_at, version)
		VALUES ($1, TRUE, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $11, 1)
		ON CONFLICT (path) DO UPDATE SET registered = TRUE, repo_url = $2, default_branch = $3, config_path = $4, variables = $5,
			webhook_secret = $6, forge_kind = $7, forge_url = $8, forge_repo = $9, forge_token = $10, created_at = $11, updated_at = $11, version = 1
			WHERE NOT p.registered
		RETURNING `+sqlrow.ProjectCols,
		p.Name, p.RepoURL, p.DefaultBranch, p.ConfigPath, p.SealedVariables, p.SealedWebhookSecret,
		p.Forge.Kind, p.Forge.URL, p.Forge.Repo, p.Forge.SealedToken, store.Nanos(p.CreatedAt)))
	if errors.Is(err, pgx.ErrNoRows) {
		return p, fmt.Errorf("%s: %w", op, store.ErrExists)
	}
	if err != nil {
		return p, s.fail(ctx, op, err)
	}
	return out, nil
}

// GetProject implements store.Store.
func (s *Store) GetProject(ctx context.Context, name string) (store.Project, error) {
	if err := s.check(); err != nil {
		return store.Project{}, err
	}
	p, err := sqlrow.Project(s.pool.QueryRow(ctx, `SELECT `+sqlrow.ProjectCols+` FROM projects WHERE path = $1`, name))
	if err != nil {
		return p, s.fail(ctx, fmt.Sprintf("get project %q", name), err)
	}
	return p, nil
}

// GetProjectByID implements store.Store.
func (s *Store) GetProjectByID(ctx context.Context, id int64) (store.Project, error) {
	if err := s.check(); err != nil {
		return store.Project{}, err
	}
	p, err := sqlrow.Project(s.pool.QueryRow(ctx, `SELECT `+sqlrow.ProjectCols+` FROM projects WHERE id = $1`, id))
	if err != nil {
		return p, s.fail(ctx, fmt.Sprintf("get project %d", id), err)
	}
	return p, nil
}

// ListProjects implements store.Store.
func (s *Store) ListProjects(ctx context.Context) ([]store.Project, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, `SELECT `+sqlrow.ProjectCols+` FROM projects ORDER BY path`)
	return collect(ctx, s, "list projects", rows, err, sqlrow.Project)
}

// UpdateProject implements store.Store, in one statement (see
// UpdatePipeline).
func (s *Store) UpdateProject(ctx context.Context, p store.Project, ifVersion int64, at time.Time) (store.Project, error) {
	if err := s.check(); err != nil {
		return store.Project{}, err
	}
	op := fmt.Sprintf("update project %d", p.ID)
	out, err := sqlrow.Project(s.pool.QueryRow(ctx, `UPDATE projects SET repo_url = $2, default_branch = $3, config_path = $4, variables = $5,
			webhook_secret = $6, forge_kind = $7, forge_url = $8, forge_repo = $9, forge_token = $10, updated_at = $11, version = version + 1
		WHERE id = $1 AND registered AND ($12 = 0 OR version = $12)
		RETURNING `+sqlrow.ProjectCols,
		p.ID, p.RepoURL, p.DefaultBranch, p.ConfigPath, p.SealedVariables, p.SealedWebhookSecret,
		p.Forge.Kind, p.Forge.URL, p.Forge.Repo, p.Forge.SealedToken, store.Nanos(at), ifVersion))
	if errors.Is(err, pgx.ErrNoRows) {
		cur, err := s.GetProjectByID(ctx, p.ID)
		if err != nil {
			return store.Project{}, fmt.Errorf("%s: %w", op, err)
		}
		if !cur.Registered {
			return store.Project{}, fmt.Errorf("%s: not registered: %w", op, store.ErrNotFound)
		}
		return cur, fmt.Errorf("%s: version %d, not %d: %w", op, cur.Version, ifVersion, store.ErrConflict)
	}
	if err != nil {
		return store.Project{}, s.fail(ctx, op, err)
	}
	return out, nil
}

// DeleteProject implements store.Store, in one statement.
func (s *Store) DeleteProject(ctx context.Context, name string) error {
	if err := s.check(); err != nil {
		return err
	}
	var id int64
	err := s.pool.QueryRow(ctx, `WITH p AS (
			UPDATE projects SET registered = FALSE, repo_url = '', default_branch = '', config_path = '', variables = '',
				webhook_secret = '', forge_kind = '', forge_url = '', forge_repo = '', forge_token = '', created_at = 0, updated_at = 0,
				version = version + 1
			WHERE path = $1 AND registered RETURNING id
		), sc AS (
			DELETE FROM pipeline_schedules WHERE project_id IN (SELECT id FROM p)
		), d AS (
			DELETE FROM webhook_deliveries WHERE project_id IN (SELECT id FROM p)
		), tk AS (
			DELETE FROM project_tokens WHERE project_id IN (SELECT id FROM p)
		) SELECT id FROM p`, name).Scan(&id)
	if err != nil {
		return s.fail(ctx, fmt.Sprintf("delete project %q", name), err)
	}
	return nil
}

// ClaimDelivery implements store.Store: of concurrent inserts of one
// (project, delivery) the primary key lets one in; the others find its
// row.
func (s *Store) ClaimDelivery(ctx context.Context, projectID int64, id string, at time.Time) (bool, int64, error) {
	if err := s.check(); err != nil {
		return false, 0, err
	}
	op := fmt.Sprintf("claim delivery %q of project %d", id, projectID)
	for range 3 {
		var one int
		err := s.pool.QueryRow(ctx, `INSERT INTO webhook_deliveries (project_id, delivery_id, created_at) VALUES ($1, $2, $3)
			ON CONFLICT (project_id, delivery_id) DO NOTHING RETURNING 1`, projectID, id, store.Nanos(at)).Scan(&one)
		if err == nil {
			return true, 0, nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return false, 0, s.fail(ctx, op, err)
		}
		var pipeline int64
		err = s.pool.QueryRow(ctx, `SELECT pipeline_id FROM webhook_deliveries WHERE project_id = $1 AND delivery_id = $2`, projectID, id).Scan(&pipeline)
		if err == nil {
			return false, pipeline, nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return false, 0, s.fail(ctx, op, err)
		}
		// Expired in between: claim it again.
	}
	return false, 0, fmt.Errorf("%s: neither recorded nor found", op)
}

// SetDeliveryPipeline implements store.Store.
func (s *Store) SetDeliveryPipeline(ctx context.Context, projectID int64, id string, pipelineID int64) error {
	return s.execOne(ctx, fmt.Sprintf("set pipeline of delivery %q", id),
		`UPDATE webhook_deliveries SET pipeline_id = $3 WHERE project_id = $1 AND delivery_id = $2`, projectID, id, pipelineID)
}

// ReleaseDelivery implements store.Store.
func (s *Store) ReleaseDelivery(ctx context.Context, projectID int64, id string) error {
	if err := s.check(); err != nil {
		return err
	}
	if _, err := s.pool.Exec(ctx, `DELETE FROM webhook_deliveries WHERE project_id = $1 AND delivery_id = $2 AND pipeline_id = 0`, projectID, id); err != nil {
		return s.fail(ctx, fmt.Sprintf("release delivery %q", id), err)
	}
	return nil
}

// ExpireDeliveries implements store.Store.
func (s *Store) ExpireDeliveries(ctx context.Context, before time.Time) (int64, error) {
	if err := s.check(); err != nil {
		return 0, err
	}
	tag, err := s.pool.Exec(ctx, `DELETE FROM webhook_deliveries WHERE created_at < $1`, store.Nanos(before))
	if err != nil {
		return 0, s.fail(ctx, "expire deliveries", err)
	}
	return tag.RowsAffected(), nil
}

// ---- schedules ----

// CreateSchedule implements store.Store.
func (s *Store) CreateSchedule(ctx context.Context, sc store.Schedule) (store.Schedule, error) {
	if err := s.check(); err != nil {
		return sc, err
	}
	op := fmt.Sprintf("create schedule of project %q", sc.Project)
	out, err := sqlrow.Schedule(s.pool.QueryRow(ctx, `WITH sc AS (
			INSERT INTO pipeline_schedules (project_id, description, ref, cron, cron_timezone, variables, active,
				next_run_at, last_pipeline_id, owner, created_at, updated_at, version)
			SELECT id, $2, $3, $4, $5, $6, $7, $8, 0, $9, $10, $10, 1 FROM projects WHERE path = $1 AND registered
			RETURNING *)
		SELECT `+sqlrow.ScheduleCols+` FROM sc JOIN projects p ON p.id = sc.project_id`,
		sc.Project, sc.Description, sc.Ref, sc.Cron, sc.CronTimezone, sc.SealedVariables, sc.Active,
		store.Nanos(sc.NextRunAt), sc.Owner, store.Nanos(sc.CreatedAt)))
	if err != nil {
		return sc, s.fail(ctx, op, err)
	}
	return out, nil
}

// GetSchedule implements store.Store.
func (s *Store) GetSchedule(ctx context.Context, id int64) (store.Schedule, error) {
	if err := s.check(); err != nil {
		return store.Schedule{}, err
	}
	sc, err := sqlrow.Schedule(s.pool.QueryRow(ctx, `SELECT `+sqlrow.ScheduleCols+sqlrow.ScheduleFrom+` WHERE sc.id = $1`, id))
	if err != nil {
		return sc, s.fail(ctx, fmt.Sprintf("get schedule %d", id), err)
	}
	return sc, nil
}

// ListSchedules implements store.Store.
func (s *Store) ListSchedules(ctx context.Context, project string) ([]store.Schedule, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, `SELECT `+sqlrow.ScheduleCols+sqlrow.ScheduleFrom+` WHERE $1 = '' OR p.path = $1 ORDER BY sc.id`, project)
	return collect(ctx, s, "list schedules", rows, err, sqlrow.Schedule)
}

// UpdateSchedule implements store.Store.
func (s *Store) UpdateSchedule(ctx context.Context, sc store.Schedule, ifVersion int64, at time.Time) (store.Schedule, error) {
	var a args
	set := `description = ` + a.add(sc.Description) + `, ref = ` + a.add(sc.Ref) + `, cron = ` + a.add(sc.Cron) +
		`, cron_timezone = ` + a.add(sc.CronTimezone) + `, variables = ` + a.add(sc.SealedVariables) + `, active = ` + a.add(sc.Active) +
		`, next_run_at = ` + a.add(store.Nanos(sc.NextRunAt)) + `, owner = ` + a.add(sc.Owner) + `, updated_at = ` + a.add(store.Nanos(at)) +
		`, version = version + 1`
	return s.changeSchedule(ctx, "update schedule", sc.ID, ifVersion, set, "", a)
}

// ClaimScheduleRun implements store.Store, in one statement: its
// conditions (version, active) are checked on the row it locks, so of
// coordinators claiming the same run exactly one wins.
func (s *Store) ClaimScheduleRun(ctx context.Context, id, ifVersion int64, next, at time.Time) (store.Schedule, error) {
	if ifVersion == 0 {
		return store.Schedule{}, fmt.Errorf("claim schedule %d: bad arguments (no version)", id)
	}
	var a args
	set := `next_run_at = ` + a.add(store.Nanos(next)) + `, updated_at = ` + a.add(store.Nanos(at)) + `, version = version + 1`
	return s.changeSchedule(ctx, "claim schedule run", id, ifVersion, set, " AND active", a)
}

func (s *Store) changeSchedule(ctx context.Context, op string, id, ifVersion int64, set, cond string, a args) (store.Schedule, error) {
	if err := s.check(); err != nil {
		return store.Schedule{}, err
	}
	op = fmt.Sprintf("%s %d", op, id)
	where := ` WHERE id = ` + a.add(id)
	if ifVersion != 0 {
		where += ` AND version = ` + a.add(ifVersion)
	}
	out, err := sqlrow.Schedule(s.pool.QueryRow(ctx, `WITH sc AS (UPDATE pipeline_schedules SET `+set+where+cond+` RETURNING *)
		SELECT `+sqlrow.ScheduleCols+` FROM sc JOIN projects p ON p.id = sc.project_id`, a...))
	if errors.Is(err, pgx.ErrNoRows) {
		cur, err := s.GetSchedule(ctx, id)
		if err != nil {
			return store.Schedule{}, fmt.Errorf("%s: %w", op, err)
		}
		return cur, fmt.Errorf("%s: version %d (active %v), not %d: %w", op, cur.Version, cur.Active, ifVersion, store.ErrConflict)
	}
	if err != nil {
		return store.Schedule{}, s.fail(ctx, op, err)
	}
	return out, nil
}

// DeleteSchedule implements store.Store.
func (s *Store) DeleteSchedule(ctx context.Context, id int64) error {
	return s.execOne(ctx, fmt.Sprintf("delete schedule %d", id), `DELETE FROM pipeline_schedules WHERE id = $1`, id)
}

// DueSchedules implements store.Store.
func (s *Store) DueSchedules(ctx context.Context, now time.Time, limit int) ([]store.Schedule, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	if limit <= 0 {
		return nil, errors.New("due schedules: bad arguments (no limit)")
	}
	rows, err := s.pool.Query(ctx, `SELECT `+sqlrow.ScheduleCols+sqlrow.ScheduleFrom+`
		WHERE sc.active AND sc.next_run_at > 0 AND sc.next_run_at <= $1 ORDER BY sc.next_run_at, sc.id LIMIT $2`, store.Nanos(now), limit)
	return collect(ctx, s, "due schedules", rows, err, sqlrow.Schedule)
}

// SetScheduleLastPipeline implements store.Store.
func (s *Store) SetScheduleLastPipeline(ctx context.Context, id, pipelineID int64) error {
	return s.execOne(ctx, fmt.Sprintf("set last pipeline of schedule %d", id),
		`UPDATE pipeline_schedules SET last_pipeline_id = $2 WHERE id = $1`, id, pipelineID)
}
