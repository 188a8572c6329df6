package sqlite

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/drover-ci/drover/internal/store"
	"github.com/drover-ci/drover/internal/store/sqlrow"
)

// inWrite runs fn in a write transaction, in the write turn, and commits
// when it returns nil.
func (s *Store) inWrite(ctx context.Context, fn func(tx txStmts) error) error {
	if err := s.check(); err != nil {
		return err
	}
	done, err := s.enterWrite(ctx)
	if err != nil {
		return err
	}
	defer done()
	s.ws.warm(ctx)
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := fn(txStmts{tx, s.ws}); err != nil {
		return err
	}
	return tx.Commit()
}

// CreateProject implements store.Store.
func (s *Store) CreateProject(ctx context.Context, p store.Project) (store.Project, error) {
	var out store.Project
	err := s.inWrite(ctx, func(tx txStmts) error {
		if _, err := tx.ExecContext(ctx, `INSERT INTO projects (path) VALUES (?) ON CONFLICT (path) DO NOTHING`, p.Name); err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, `UPDATE projects SET registered = 1, repo_url = ?, default_branch = ?, config_path = ?, variables = ?,
				webhook_secret = ?, forge_kind = ?, forge_url = ?, forge_repo = ?, forge_token = ?, created_at = ?, updated_at = ?, version = 1
			WHERE path = ? AND registered = 0`,
			p.RepoURL, p.DefaultBranch, p.ConfigPath, p.SealedVariables, p.SealedWebhookSecret,
			p.Forge.Kind, p.Forge.URL, p.Forge.Repo, p.Forge.SealedToken, store.Nanos(p.CreatedAt), store.Nanos(p.CreatedAt), p.Name)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 0 {
			return fmt.Errorf("project %q: %w", p.Name, store.ErrExists)
		}
		out, err = sqlrow.Project(tx.QueryRowContext(ctx, `SELECT `+sqlrow.ProjectCols+` FROM projects WHERE path = ?`, p.Name))
		return err
	})
	if err != nil {
		return p, fmt.Errorf("create project: %w", err)
	}
	return out, nil
}

// GetProject implements store.Store.
func (s *Store) GetProject(ctx context.Context, name string) (store.Project, error) {
	if err := s.check(); err != nil {
		return store.Project{}, err
	}
	p, err := sqlrow.Project(s.rs.QueryRowContext(ctx, `SELECT `+sqlrow.ProjectCols+` FROM projects WHERE path = ?`, name))
	return p, notFound(err, "project", name)
}

// GetProjectByID implements store.Store.
func (s *Store) GetProjectByID(ctx context.Context, id int64) (store.Project, error) {
	if err := s.check(); err != nil {
		return store.Project{}, err
	}
	p, err := sqlrow.Project(s.rs.QueryRowContext(ctx, `SELECT `+sqlrow.ProjectCols+` FROM projects WHERE id = ?`, id))
	return p, notFound(err, "project", id)
}

// ListProjects implements store.Store.
func (s *Store) ListProjects(ctx context.Context) ([]store.Project, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	out, err := queryAll(ctx, s.rs, sqlrow.Project, `SELECT `+sqlrow.ProjectCols+` FROM projects ORDER BY path`)
	if err != nil {
		return nil, fmt.Errorf("list projects: %w", err)
	}
	return out, nil
}

// UpdateProject implements store.Store.
func (s *Store) UpdateProject(ctx context.Context, p store.Project, ifVersion int64, at time.Time) (store.Project, error) {
	var out store.Project
	var conflict bool
	err := s.inWrite(ctx, func(tx txStmts) error {
		res, err := tx.ExecContext(ctx, `UPDATE projects SET repo_url = ?, default_branch = ?, config_path = ?, variables = ?,
				webhook_secret = ?, forge_kind = ?, forge_url = ?, forge_repo = ?, forge_token = ?, updated_at = ?, version = version + 1
			WHERE id = ? AND registered = 1 AND (? = 0 OR version = ?)`,
			p.RepoURL, p.DefaultBranch, p.ConfigPath, p.SealedVariables, p.SealedWebhookSecret,
			p.Forge.Kind, p.Forge.URL, p.Forge.Repo, p.Forge.SealedToken, store.Nanos(at), p.ID, ifVersion, ifVersion)
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		if err != nil {
			return err
		}
		out, err = sqlrow.Project(tx.QueryRowContext(ctx, `SELECT `+sqlrow.ProjectCols+` FROM projects WHERE id = ?`, p.ID))
		if err != nil {
			return notFound(err, "project", p.ID)
		}
		if !out.Registered {
			return fmt.Errorf("project %d is not registered: %w", p.ID, store.ErrNotFound)
		}
		conflict = n == 0
		return nil
	})
	if err != nil {
		return store.Project{}, fmt.Errorf("update project: %w", err)
	}
	if conflict {
		return out, fmt.Errorf("update project %d: version %d, not %d: %w", p.ID, out.Version, ifVersion, store.ErrConflict)
	}
	return out, nil
}

// DeleteProject implements store.Store.
func (s *Store) DeleteProject(ctx context.Context, name string) error {
	err := s.inWrite(ctx, func(tx txStmts) error {
		var id int64
		err := tx.QueryRowContext(ctx, `UPDATE projects SET registered = 0, repo_url = '', default_branch = '', config_path = '', variables = '',
				webhook_secret = '', forge_kind = '', forge_url = '', forge_repo = '', forge_token = '', created_at = 0, updated_at = 0, version = version + 1
			WHERE path = ? AND registered = 1 RETURNING id`, name).Scan(&id)
		if err != nil {
			return notFound(err, "project", name)
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM pipeline_schedules WHERE project_id = ?`, id); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM project_tokens WHERE project_id = ?`, id); err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `DELETE FROM webhook_deliveries WHERE project_id = ?`, id)
		return err
	})
	if err != nil {
		return fmt.Errorf("delete project: %w", err)
	}
	return nil
}

// ClaimDelivery implements store.Store: the primary key (project,
// delivery) lets one insert in.
func (s *Store) ClaimDelivery(ctx context.Context, projectID int64, id string, at time.Time) (bool, int64, error) {
	var isNew bool
	var pipeline int64
	err := s.inWrite(ctx, func(tx txStmts) error {
		res, err := tx.ExecContext(ctx, `INSERT INTO webhook_deliveries (project_id, delivery_id, created_at) VALUES (?, ?, ?)
			ON CONFLICT (project_id, delivery_id) DO NOTHING`, projectID, id, store.Nanos(at))
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		if err != nil {
			return err
		}
		if isNew = n == 1; isNew {
			return nil
		}
		return tx.QueryRowContext(ctx, `SELECT pipeline_id FROM webhook_deliveries WHERE project_id = ? AND delivery_id = ?`, projectID, id).Scan(&pipeline)
	})
	if err != nil {
		return false, 0, fmt.Errorf("claim delivery %q of project %d: %w", id, projectID, err)
	}
	return isNew, pipeline, nil
}

// SetDeliveryPipeline implements store.Store.
func (s *Store) SetDeliveryPipeline(ctx context.Context, projectID int64, id string, pipelineID int64) error {
	return s.execOne(ctx, "set pipeline of delivery", id,
		`UPDATE webhook_deliveries SET pipeline_id = ? WHERE project_id = ? AND delivery_id = ?`, pipelineID, projectID, id)
}

// ReleaseDelivery implements store.Store.
func (s *Store) ReleaseDelivery(ctx context.Context, projectID int64, id string) error {
	err := s.inWrite(ctx, func(tx txStmts) error {
		_, err := tx.ExecContext(ctx, `DELETE FROM webhook_deliveries WHERE project_id = ? AND delivery_id = ? AND pipeline_id = 0`, projectID, id)
		return err
	})
	if err != nil {
		return fmt.Errorf("release delivery %q of project %d: %w", id, projectID, err)
	}
	return nil
}

// ExpireDeliveries implements store.Store.
func (s *Store) ExpireDeliveries(ctx context.Context, before time.Time) (int64, error) {
	var n int64
	err := s.inWrite(ctx, func(tx txStmts) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM webhook_deliveries WHERE created_at < ?`, store.Nanos(before))
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("expire deliveries: %w", err)
	}
	return n, nil
}

// ---- schedules ----

// CreateSchedule implements store.Store.
func (s *Store) CreateSchedule(ctx context.Context, sc store.Schedule) (store.Schedule, error) {
	var out store.Schedule
	err := s.inWrite(ctx, func(tx txStmts) error {
		var pid int64
		if err := tx.QueryRowContext(ctx, `SELECT id FROM projects WHERE path = ? AND registered = 1`, sc.Project).Scan(&pid); err != nil {
			return notFound(err, "project", sc.Project)
		}
		var id int64
		if err := tx.QueryRowContext(ctx, `INSERT INTO pipeline_schedules (project_id, description, ref, cron, cron_timezone, variables, active,
				next_run_at, last_pipeline_id, owner, created_at, updated_at, version)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, 0, ?, ?, ?, 1) RETURNING id`,
			pid, sc.Description, sc.Ref, sc.Cron, sc.CronTimezone, sc.SealedVariables, b2i(sc.Active),
			store.Nanos(sc.NextRunAt), sc.Owner, store.Nanos(sc.CreatedAt), store.Nanos(sc.CreatedAt)).Scan(&id); err != nil {
			return err
		}
		var err error
		out, err = sqlrow.Schedule(tx.QueryRowContext(ctx, `SELECT `+sqlrow.ScheduleCols+sqlrow.ScheduleFrom+` WHERE sc.id = ?`, id))
		return err
	})
	if err != nil {
		return sc, fmt.Errorf("create schedule: %w", err)
	}
	return out, nil
}

// GetSchedule implements store.Store.
func (s *Store) GetSchedule(ctx context.Context, id int64) (store.Schedule, error) {
	if err := s.check(); err != nil {
		return store.Schedule{}, err
	}
	sc, err := sqlrow.Schedule(s.rs.QueryRowContext(ctx, `SELECT `+sqlrow.ScheduleCols+sqlrow.ScheduleFrom+` WHERE sc.id = ?`, id))
	return sc, notFound(err, "schedule", id)
}

// ListSchedules implements store.Store.
func (s *Store) ListSchedules(ctx context.Context, project string) ([]store.Schedule, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	out, err := queryAll(ctx, s.rs, sqlrow.Schedule, `SELECT `+sqlrow.ScheduleCols+sqlrow.ScheduleFrom+` WHERE ? = '' OR p.path = ? ORDER BY sc.id`, project, project)
	if err != nil {
		return nil, fmt.Errorf("list schedules: %w", err)
	}
	return out, nil
}

// UpdateSchedule implements store.Store.
func (s *Store) UpdateSchedule(ctx context.Context, sc store.Schedule, ifVersion int64, at time.Time) (store.Schedule, error) {
	return s.changeSchedule(ctx, "update schedule", sc.ID, ifVersion, `description = ?, ref = ?, cron = ?, cron_timezone = ?, variables = ?,
		active = ?, next_run_at = ?, owner = ?, updated_at = ?, version = version + 1`, "",
		sc.Description, sc.Ref, sc.Cron, sc.CronTimezone, sc.SealedVariables, b2i(sc.Active), store.Nanos(sc.NextRunAt), sc.Owner, store.Nanos(at))
}

// ClaimScheduleRun implements store.Store: one UPDATE whose condition is
// the version read, which the write turn (and SQLite's lock across
// processes) makes atomic.
func (s *Store) ClaimScheduleRun(ctx context.Context, id, ifVersion int64, next, at time.Time) (store.Schedule, error) {
	if ifVersion == 0 {
		return store.Schedule{}, fmt.Errorf("claim schedule %d: bad arguments (no version)", id)
	}
	return s.changeSchedule(ctx, "claim schedule run", id, ifVersion, `next_run_at = ?, updated_at = ?, version = version + 1`, " AND active = 1",
		store.Nanos(next), store.Nanos(at))
}

// changeSchedule sets set (with args) on schedule id if its version is
// ifVersion (0: any) and cond holds.
func (s *Store) changeSchedule(ctx context.Context, op string, id, ifVersion int64, set, cond string, args ...any) (store.Schedule, error) {
	var out store.Schedule
	var conflict bool
	err := s.inWrite(ctx, func(tx txStmts) error {
		res, err := tx.ExecContext(ctx, `UPDATE pipeline_schedules SET `+set+` WHERE id = ? AND (? = 0 OR version = ?)`+cond,
			append(args, id, ifVersion, ifVersion)...)
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		if err != nil {
			return err
		}
		out, err = sqlrow.Schedule(tx.QueryRowContext(ctx, `SELECT `+sqlrow.ScheduleCols+sqlrow.ScheduleFrom+` WHERE sc.id = ?`, id))
		if err != nil {
			return notFound(err, "schedule", id)
		}
		conflict = n == 0
		return nil
	})
	if err != nil {
		return store.Schedule{}, fmt.Errorf("%s: %w", op, err)
	}
	if conflict {
		return out, fmt.Errorf("%s %d: version %d (active %v), not %d: %w", op, id, out.Version, out.Active, ifVersion, store.ErrConflict)
	}
	return out, nil
}

// DeleteSchedule implements store.Store.
func (s *Store) DeleteSchedule(ctx context.Context, id int64) error {
	return s.execOne(ctx, "delete schedule", id, `DELETE FROM pipeline_schedules WHERE id = ?`, id)
}

// DueSchedules implements store.Store.
func (s *Store) DueSchedules(ctx context.Context, now time.Time, limit int) ([]store.Schedule, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	if limit <= 0 {
		return nil, errors.New("due schedules: bad arguments (no limit)")
	}
	out, err := queryAll(ctx, s.rs, sqlrow.Schedule, `SELECT `+sqlrow.ScheduleCols+sqlrow.ScheduleFrom+`
		WHERE sc.active = 1 AND sc.next_run_at > 0 AND sc.next_run_at <= ? ORDER BY sc.next_run_at, sc.id LIMIT ?`, store.Nanos(now), limit)
	if err != nil {
		return nil, fmt.Errorf("due schedules: %w", err)
	}
	return out, nil
}

// SetScheduleLastPipeline implements store.Store.
func (s *Store) SetScheduleLastPipeline(ctx context.Context, id, pipelineID int64) error {
	return s.execOne(ctx, "set last pipeline of schedule", id, `UPDATE pipeline_schedules SET last_pipeline_id = ? WHERE id = ?`, pipelineID, id)
}
