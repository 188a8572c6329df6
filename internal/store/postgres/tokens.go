package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/drover-ci/drover/internal/store"
	"github.com/drover-ci/drover/internal/store/sqlrow"
)

// CreateProjectToken implements store.Store in one statement: no row is
// inserted unless the project is registered.
func (s *Store) CreateProjectToken(ctx context.Context, t store.ProjectToken) (store.ProjectToken, error) {
	if err := s.check(); err != nil {
		return t, err
	}
	out, err := sqlrow.Token(s.pool.QueryRow(ctx, `WITH t AS (
			INSERT INTO project_tokens (project_id, name, role, token_hash, created_at, last_used_at, expires_at)
			SELECT id, $2, $3, $4, $5, $6, $7 FROM projects WHERE path = $1 AND registered
			RETURNING *)
		SELECT `+sqlrow.TokenCols+` FROM t JOIN projects p ON p.id = t.project_id`,
		t.Project, t.Name, t.Role, t.TokenHash, store.Nanos(t.CreatedAt), store.Nanos(t.LastUsedAt), store.Nanos(t.ExpiresAt)))
	if err != nil {
		return t, s.fail(ctx, fmt.Sprintf("create token of project %q", t.Project), err)
	}
	return out, nil
}

// ListProjectTokens implements store.Store.
func (s *Store) ListProjectTokens(ctx context.Context, project string) ([]store.ProjectToken, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, `SELECT `+sqlrow.TokenCols+sqlrow.TokenFrom+` WHERE p.path = $1 ORDER BY t.id`, project)
	return collect(ctx, s, fmt.Sprintf("list tokens of project %q", project), rows, err, sqlrow.Token)
}

// ProjectTokenByHash implements store.Store.
func (s *Store) ProjectTokenByHash(ctx context.Context, hash string) (store.ProjectToken, error) {
	if err := s.check(); err != nil {
		return store.ProjectToken{}, err
	}
	if hash == "" {
		return store.ProjectToken{}, fmt.Errorf("project token: %w", store.ErrNotFound)
	}
	t, err := sqlrow.Token(s.pool.QueryRow(ctx, `SELECT `+sqlrow.TokenCols+sqlrow.TokenFrom+` WHERE t.token_hash = $1`, hash))
	if err != nil {
		return t, s.fail(ctx, "project token by hash", err)
	}
	return t, nil
}

// GetProjectToken implements store.Store.
func (s *Store) GetProjectToken(ctx context.Context, id int64) (store.ProjectToken, error) {
	if err := s.check(); err != nil {
		return store.ProjectToken{}, err
	}
	t, err := sqlrow.Token(s.pool.QueryRow(ctx, `SELECT `+sqlrow.TokenCols+sqlrow.TokenFrom+` WHERE t.id = $1`, id))
	if err != nil {
		return t, s.fail(ctx, fmt.Sprintf("get project token %d", id), err)
	}
	return t, nil
}

// DeleteProjectToken implements store.Store.
func (s *Store) DeleteProjectToken(ctx context.Context, project string, id int64) error {
	return s.execOne(ctx, fmt.Sprintf("delete token %d of project %q", id, project),
		`DELETE FROM project_tokens WHERE id = $1 AND project_id = (SELECT id FROM projects WHERE path = $2)`, id, project)
}

// TouchProjectToken implements store.Store.
func (s *Store) TouchProjectToken(ctx context.Context, id int64, at time.Time) error {
	return s.execOne(ctx, fmt.Sprintf("touch project token %d", id), `UPDATE project_tokens SET last_used_at = $2 WHERE id = $1`, id, store.Nanos(at))
}
