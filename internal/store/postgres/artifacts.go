package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/drover-ci/drover/internal/store"
	"github.com/drover-ci/drover/internal/store/sqlrow"
)

// JobByTokenHash implements store.Store.
func (s *Store) JobByTokenHash(ctx context.Context, hash string) (store.Job, error) {
	if err := s.check(); err != nil {
		return store.Job{}, err
	}
	if hash == "" {
		return store.Job{}, fmt.Errorf("job by token: %w", store.ErrNotFound)
	}
	j, err := scanJob(s.pool.QueryRow(ctx, `SELECT `+jobCols+jobFrom+` WHERE j.token_hash = $1 LIMIT 1`, hash))
	if err != nil {
		return store.Job{}, s.fail(ctx, "job by token", err)
	}
	return j, nil
}

// PutArtifact implements store.Store. The insert does nothing on the
// primary key's conflict, after waiting for a concurrent insert of the
// same key to commit or roll back: of concurrent uploads exactly one
// inserts, and the others read what it inserted.
func (s *Store) PutArtifact(ctx context.Context, a store.Artifact) (*store.Artifact, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	op := fmt.Sprintf("put artifact %s of job %d", a.Type, a.JobID)
	tag, err := s.pool.Exec(ctx, `INSERT INTO artifacts (`+sqlrow.ArtifactCols+`) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
		ON CONFLICT (job_id, artifact_type) DO NOTHING`,
		a.JobID, a.Type, a.Format, a.Filename, a.File, a.Size, a.SHA256, store.Nanos(a.CreatedAt), store.Nanos(a.ExpireAt))
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "23503" { // foreign_key_violation
		return nil, fmt.Errorf("%s: %w", op, store.ErrNotFound)
	}
	if err != nil {
		return nil, s.fail(ctx, op, err)
	}
	if tag.RowsAffected() == 1 {
		return nil, nil
	}
	old, err := sqlrow.Artifact(s.pool.QueryRow(ctx, `SELECT `+sqlrow.ArtifactCols+` FROM artifacts WHERE job_id = $1 AND artifact_type = $2`, a.JobID, a.Type))
	if err != nil {
		// Only a job deleted in between takes the row away.
		return nil, s.fail(ctx, op, err)
	}
	return &old, fmt.Errorf("%s: %w", op, store.ErrExists)
}

// GetArtifact implements store.Store.
func (s *Store) GetArtifact(ctx context.Context, jobID int64, typ string) (store.Artifact, error) {
	if err := s.check(); err != nil {
		return store.Artifact{}, err
	}
	a, err := sqlrow.Artifact(s.pool.QueryRow(ctx, `SELECT `+sqlrow.ArtifactCols+` FROM artifacts WHERE job_id = $1 AND artifact_type = $2`, jobID, typ))
	if err != nil {
		return store.Artifact{}, s.fail(ctx, fmt.Sprintf("artifact %s of job %d", typ, jobID), err)
	}
	return a, nil
}

// JobArtifacts implements store.Store.
func (s *Store) JobArtifacts(ctx context.Context, jobIDs []int64) ([]store.Artifact, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	if len(jobIDs) == 0 {
		return []store.Artifact{}, nil
	}
	return s.queryArtifacts(ctx, "artifacts of jobs", `SELECT `+sqlrow.ArtifactCols+` FROM artifacts
		WHERE job_id = ANY($1) AND file != '' ORDER BY job_id, artifact_type`, jobIDs)
}

// ExpiredArtifacts implements store.Store.
func (s *Store) ExpiredArtifacts(ctx context.Context, now time.Time, limit int) ([]store.Artifact, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	return s.queryArtifacts(ctx, "expired artifacts", `SELECT `+sqlrow.ArtifactCols+` FROM artifacts WHERE expire_at > 0 AND expire_at <= $1
		ORDER BY expire_at, job_id, artifact_type LIMIT $2`, store.Nanos(now), limit)
}

// queryArtifacts runs q and returns the artifacts it selects (sqlrow.ArtifactCols);
// op names it in errors.
func (s *Store) queryArtifacts(ctx context.Context, op, q string, args ...any) ([]store.Artifact, error) {
	rows, err := s.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, s.fail(ctx, op, err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (store.Artifact, error) { return sqlrow.Artifact(row) })
	if err != nil {
		return nil, s.fail(ctx, op, err)
	}
	return out, nil
}

// RetireArtifact implements store.Store.
func (s *Store) RetireArtifact(ctx context.Context, a store.Artifact) error {
	op := fmt.Sprintf("retire artifact %s of job %d", a.Type, a.JobID)
	if a.File == "" {
		return fmt.Errorf("%s: %w", op, store.ErrNotFound)
	}
	return s.execOne(ctx, op,
		`UPDATE artifacts SET file = '', size = 0, expire_at = $4 WHERE job_id = $1 AND artifact_type = $2 AND file = $3`,
		a.JobID, a.Type, a.File, store.RetiredNanos)
}
