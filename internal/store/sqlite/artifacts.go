package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

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
	j, err := scanJob(s.rs.QueryRowContext(ctx, `SELECT `+jobCols+jobFrom+` WHERE j.token_hash = ? LIMIT 1`, hash))
	return j, notFound(err, "job with token", "")
}

// PutArtifact implements store.Store. Writes are serialised (one
// writer), so the check and the insert need no more than the transaction.
func (s *Store) PutArtifact(ctx context.Context, a store.Artifact) (*store.Artifact, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	done, err := s.enterWrite(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("put artifact of job %d: %w", a.JobID, err)
	}
	defer tx.Rollback()
	old, err := sqlrow.Artifact(tx.QueryRowContext(ctx, `SELECT `+sqlrow.ArtifactCols+` FROM artifacts WHERE job_id = ? AND artifact_type = ?`, a.JobID, a.Type))
	switch {
	case err == nil:
		return &old, fmt.Errorf("put artifact %s of job %d: %w", a.Type, a.JobID, store.ErrExists)
	case !errors.Is(err, sql.ErrNoRows):
		return nil, fmt.Errorf("put artifact of job %d: %w", a.JobID, err)
	}
	_, err = tx.ExecContext(ctx, `INSERT INTO artifacts (`+sqlrow.ArtifactCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		a.JobID, a.Type, a.Format, a.Filename, a.File, a.Size, a.SHA256, store.Nanos(a.CreatedAt), store.Nanos(a.ExpireAt))
	if err != nil {
		if isForeignKey(err) {
			return nil, fmt.Errorf("put artifact: job %d: %w", a.JobID, store.ErrNotFound)
		}
		return nil, fmt.Errorf("put artifact of job %d: %w", a.JobID, err)
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("put artifact of job %d: %w", a.JobID, err)
	}
	return nil, nil
}

// isForeignKey reports whether err is SQLite's foreign key violation.
func isForeignKey(err error) bool {
	return err != nil && strings.Contains(err.Error(), "FOREIGN KEY constraint failed")
}

// GetArtifact implements store.Store.
func (s *Store) GetArtifact(ctx context.Context, jobID int64, typ string) (store.Artifact, error) {
	if err := s.check(); err != nil {
		return store.Artifact{}, err
	}
	a, err := sqlrow.Artifact(s.rs.QueryRowContext(ctx, `SELECT `+sqlrow.ArtifactCols+` FROM artifacts WHERE job_id = ? AND artifact_type = ?`, jobID, typ))
	return a, notFound(err, "artifact of job", jobID)
}

// JobArtifacts implements store.Store. The ids go in as one JSON array,
// so that a page of jobs is one statement of one shape (and one cached
// prepared statement), whatever its length.
func (s *Store) JobArtifacts(ctx context.Context, jobIDs []int64) ([]store.Artifact, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	if len(jobIDs) == 0 {
		return []store.Artifact{}, nil
	}
	ids, err := json.Marshal(jobIDs)
	if err != nil {
		return nil, fmt.Errorf("artifacts of jobs: %w", err)
	}
	return s.queryArtifacts(ctx, "artifacts of jobs", `SELECT `+sqlrow.ArtifactCols+` FROM artifacts
		WHERE job_id IN (SELECT value FROM json_each(?)) AND file != '' ORDER BY job_id, artifact_type`, string(ids))
}

// ExpiredArtifacts implements store.Store.
func (s *Store) ExpiredArtifacts(ctx context.Context, now time.Time, limit int) ([]store.Artifact, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	return s.queryArtifacts(ctx, "expired artifacts", `SELECT `+sqlrow.ArtifactCols+` FROM artifacts WHERE expire_at > 0 AND expire_at <= ?
		ORDER BY expire_at, job_id, artifact_type LIMIT ?`, store.Nanos(now), limit)
}

// queryArtifacts runs q and returns the artifacts it selects (sqlrow.ArtifactCols);
// op names it in errors.
func (s *Store) queryArtifacts(ctx context.Context, op, q string, args ...any) ([]store.Artifact, error) {
	out, err := queryAll(ctx, s.rs, sqlrow.Artifact, q, args...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	return out, nil
}

// RetireArtifact implements store.Store.
func (s *Store) RetireArtifact(ctx context.Context, a store.Artifact) error {
	if a.File == "" {
		return fmt.Errorf("retire artifact of job %d: %w", a.JobID, store.ErrNotFound)
	}
	return s.execOne(ctx, "retire artifact of job", a.JobID,
		`UPDATE artifacts SET file = '', size = 0, expire_at = ? WHERE job_id = ? AND artifact_type = ? AND file = ?`,
		store.RetiredNanos, a.JobID, a.Type, a.File)
}
