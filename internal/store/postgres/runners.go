package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/drover-ci/drover/internal/store"
	"github.com/drover-ci/drover/internal/store/sqlrow"
)

const runnerCols = `id, token_hash, description, tags, run_untagged, locked, paused, maximum_timeout, created_at, contacted_at`

func scanRunner(row sqlrow.Scanner) (store.Runner, error) {
	var r store.Runner
	var created, contacted int64
	if err := row.Scan(&r.ID, &r.TokenHash, &r.Description, &r.Tags, &r.RunUntagged, &r.Locked, &r.Paused, &r.MaximumTimeout, &created, &contacted); err != nil {
		return store.Runner{}, err
	}
	r.Tags = nonNil(r.Tags)
	r.CreatedAt, r.ContactedAt = store.FromNanos(created), store.FromNanos(contacted)
	return r, nil
}

// CreateRunner implements store.Store.
func (s *Store) CreateRunner(ctx context.Context, r store.Runner) (store.Runner, error) {
	if err := s.check(); err != nil {
		return r, err
	}
	out, err := scanRunner(s.pool.QueryRow(ctx, `INSERT INTO runners (token_hash, description, tags, run_untagged, locked, paused, maximum_timeout, created_at, contacted_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) RETURNING `+runnerCols,
		r.TokenHash, r.Description, nonNil(r.Tags), r.RunUntagged, r.Locked, r.Paused, r.MaximumTimeout, store.Nanos(r.CreatedAt), store.Nanos(r.ContactedAt)))
	if err != nil {
		return r, s.fail(ctx, "create runner", err)
	}
	return out, nil
}

// GetRunner implements store.Store.
func (s *Store) GetRunner(ctx context.Context, id int64) (store.Runner, error) {
	if err := s.check(); err != nil {
		return store.Runner{}, err
	}
	r, err := scanRunner(s.pool.QueryRow(ctx, `SELECT `+runnerCols+` FROM runners WHERE id = $1`, id))
	if err != nil {
		return store.Runner{}, s.fail(ctx, fmt.Sprintf("get runner %d", id), err)
	}
	return r, nil
}

// RunnerByTokenHash implements store.Store.
func (s *Store) RunnerByTokenHash(ctx context.Context, hash string) (store.Runner, error) {
	if err := s.check(); err != nil {
		return store.Runner{}, err
	}
	r, err := scanRunner(s.pool.QueryRow(ctx, `SELECT `+runnerCols+` FROM runners WHERE token_hash = $1`, hash))
	if err != nil {
		return store.Runner{}, s.fail(ctx, "get runner by token", err)
	}
	return r, nil
}

// ListRunners implements store.Store.
func (s *Store) ListRunners(ctx context.Context) ([]store.Runner, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, `SELECT `+runnerCols+` FROM runners ORDER BY id`)
	if err != nil {
		return nil, s.fail(ctx, "list runners", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (store.Runner, error) { return scanRunner(row) })
	if err != nil {
		return nil, s.fail(ctx, "list runners", err)
	}
	return nonNil(out), nil
}

// execOne runs a statement that must change one row; none is ErrNotFound.
func (s *Store) execOne(ctx context.Context, op string, query string, args ...any) error {
	if err := s.check(); err != nil {
		return err
	}
	tag, err := s.pool.Exec(ctx, query, args...)
	if err != nil {
		return s.fail(ctx, op, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("%s: %w", op, store.ErrNotFound)
	}
	return nil
}

// DeleteRunner implements store.Store. Its managers go with it (ON DELETE
// CASCADE).
func (s *Store) DeleteRunner(ctx context.Context, id int64) error {
	return s.execOne(ctx, fmt.Sprintf("delete runner %d", id), `DELETE FROM runners WHERE id = $1`, id)
}

// SetRunnerTokenHash implements store.Store.
func (s *Store) SetRunnerTokenHash(ctx context.Context, id int64, hash string) error {
	return s.execOne(ctx, fmt.Sprintf("set token of runner %d", id), `UPDATE runners SET token_hash = $2 WHERE id = $1`, id, hash)
}

// SetRunnerPaused implements store.Store.
func (s *Store) SetRunnerPaused(ctx context.Context, id int64, paused bool) error {
	return s.execOne(ctx, fmt.Sprintf("pause or resume runner %d", id), `UPDATE runners SET paused = $2 WHERE id = $1`, id, paused)
}

// UpsertRunnerManager implements store.Store. One statement updates the
// runner's contact time and upserts the manager; a missing runner makes
// the update, hence the insert, empty.
func (s *Store) UpsertRunnerManager(ctx context.Context, m store.RunnerManager) error {
	return s.execOne(ctx, fmt.Sprintf("upsert manager %q of runner %d", m.SystemID, m.RunnerID), `
		WITH r AS (UPDATE runners SET contacted_at = $2 WHERE id = $1 RETURNING id)
		INSERT INTO runner_managers (runner_id, system_id, contacted_at, version, executor, platform, arch, fleet_url)
		SELECT r.id, $3::text, $2::bigint, $4::text, $5::text, $6::text, $7::text, $8::text FROM r
		ON CONFLICT (runner_id, system_id) DO UPDATE SET contacted_at = EXCLUDED.contacted_at,
			version = COALESCE(NULLIF(EXCLUDED.version, ''), runner_managers.version),
			executor = COALESCE(NULLIF(EXCLUDED.executor, ''), runner_managers.executor),
			platform = COALESCE(NULLIF(EXCLUDED.platform, ''), runner_managers.platform),
			arch = COALESCE(NULLIF(EXCLUDED.arch, ''), runner_managers.arch),
			fleet_url = EXCLUDED.fleet_url`,
		m.RunnerID, store.Nanos(m.ContactedAt), m.SystemID, m.Version, m.Executor, m.Platform, m.Arch, m.FleetURL)
}

// DeleteRunnerManager implements store.Store.
func (s *Store) DeleteRunnerManager(ctx context.Context, runnerID int64, systemID string) error {
	return s.execOne(ctx, fmt.Sprintf("delete manager %q of runner %d", systemID, runnerID),
		`DELETE FROM runner_managers WHERE runner_id = $1 AND system_id = $2`, runnerID, systemID)
}

// ListRunnerManagers implements store.Store.
func (s *Store) ListRunnerManagers(ctx context.Context, runnerID int64) ([]store.RunnerManager, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	op := fmt.Sprintf("list managers of runner %d", runnerID)
	rows, err := s.pool.Query(ctx, `SELECT runner_id, system_id, contacted_at, version, executor, platform, arch, fleet_url
		FROM runner_managers WHERE runner_id = $1 ORDER BY system_id`, runnerID)
	if err != nil {
		return nil, s.fail(ctx, op, err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (store.RunnerManager, error) {
		var m store.RunnerManager
		var contacted int64
		err := row.Scan(&m.RunnerID, &m.SystemID, &contacted, &m.Version, &m.Executor, &m.Platform, &m.Arch, &m.FleetURL)
		m.ContactedAt = store.FromNanos(contacted)
		return m, err
	})
	if err != nil {
		return nil, s.fail(ctx, op, err)
	}
	return nonNil(out), nil
}
