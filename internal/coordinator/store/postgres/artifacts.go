package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/drover-ci/drover/internal/coordinator/store"
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

const artifactCols = `job_id, artifact_type, format, filename, file, size, sha256, created_at, expire_at`

func scanArtifact(row pgx.Row) (store.Artifact, error) {
	var a store.Artifact
	var created, expire int64
	err := row.Scan(&a.JobID, &a.Type, &a.Format, &a.Filename, &a.File, &a.Size, &a.SHA256, &created, &expire)
	a.CreatedAt, a.ExpireAt = store.FromNanos(created), store.FromNanos(expire)
	return a, err
}

// PutArtifact implements store.Store. The row it replaces is read under
// the row lock of the upsert's transaction, so of two concurrent uploads
// each learns the file it replaced.
func (s *Store) PutArtifact(ctx context.Context, a store.Artifact) (*store.Artifact, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	op := fmt.Sprintf("put artifact of job %d", a.JobID)
	var prev *store.Artifact
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		old, err := scanArtifact(tx.QueryRow(ctx, `SELECT `+artifactCols+` FROM artifacts
			WHERE job_id = $1 AND artifact_type = $2 FOR UPDATE`, a.JobID, a.Type))
		switch {
		case err == nil:
			prev = &old
		case !errors.Is(err, pgx.ErrNoRows):
			return err
		}
		_, err = tx.Exec(ctx, `INSERT INTO artifacts (`+artifactCols+`) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
			ON CONFLICT (job_id, artifact_type) DO UPDATE SET format = excluded.format, filename = excluded.filename,
			file = excluded.file, size = excluded.size, sha256 = excluded.sha256, created_at = excluded.created_at,
			expire_at = excluded.expire_at`,
			a.JobID, a.Type, a.Format, a.Filename, a.File, a.Size, a.SHA256, store.Nanos(a.CreatedAt), store.Nanos(a.ExpireAt))
		return err
	})
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "23503" { // foreign_key_violation
		return nil, fmt.Errorf("%s: %w", op, store.ErrNotFound)
	}
	if err != nil {
		return nil, s.fail(ctx, op, err)
	}
	return prev, nil
}

// GetArtifact implements store.Store.
func (s *Store) GetArtifact(ctx context.Context, jobID int64, typ string) (store.Artifact, error) {
	if err := s.check(); err != nil {
		return store.Artifact{}, err
	}
	a, err := scanArtifact(s.pool.QueryRow(ctx, `SELECT `+artifactCols+` FROM artifacts WHERE job_id = $1 AND artifact_type = $2`, jobID, typ))
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
	return s.queryArtifacts(ctx, "artifacts of jobs", `SELECT `+artifactCols+` FROM artifacts
		WHERE job_id = ANY($1) ORDER BY job_id, artifact_type`, jobIDs)
}

// ExpiredArtifacts implements store.Store.
func (s *Store) ExpiredArtifacts(ctx context.Context, now time.Time, limit int) ([]store.Artifact, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	return s.queryArtifacts(ctx, "expired artifacts", `SELECT `+artifactCols+` FROM artifacts WHERE expire_at > 0 AND expire_at <= $1
		ORDER BY expire_at, job_id, artifact_type LIMIT $2`, store.Nanos(now), limit)
}

// queryArtifacts runs q and returns the artifacts it selects (artifactCols);
// op names it in errors.
func (s *Store) queryArtifacts(ctx context.Context, op, q string, args ...any) ([]store.Artifact, error) {
	rows, err := s.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, s.fail(ctx, op, err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (store.Artifact, error) { return scanArtifact(row) })
	if err != nil {
		return nil, s.fail(ctx, op, err)
	}
	return out, nil
}

// DeleteArtifact implements store.Store.
func (s *Store) DeleteArtifact(ctx context.Context, a store.Artifact) error {
	return s.execOne(ctx, fmt.Sprintf("delete artifact %s of job %d", a.Type, a.JobID),
		`DELETE FROM artifacts WHERE job_id = $1 AND artifact_type = $2 AND file = $3`, a.JobID, a.Type, a.File)
}
