package sqlite

import (
	"context"
	"fmt"
	"time"

	"github.com/drover-ci/drover/internal/store"
	"github.com/drover-ci/drover/internal/store/sqlrow"
)

// CreateProjectToken implements store.Store.
func (s *Store) CreateProjectToken(ctx context.Context, t store.ProjectToken) (store.ProjectToken, error) {
	var out store.ProjectToken
	err := s.inWrite(ctx, func(tx txStmts) error {
		var pid int64
		if err := tx.QueryRowContext(ctx, `SELECT id FROM projects WHERE path = ? AND registered = 1`, t.Project).Scan(&pid); err != nil {
			return notFound(err, "project", t.Project)
		}
		var id int64
		if err := tx.QueryRowContext(ctx, `INSERT INTO project_tokens (project_id, name, role, token_hash, created_at, last_used_at, expires_at)
			VALUES (?, ?, ?, ?, ?, ?, ?) RETURNING id`,
			pid, t.Name, t.Role, t.TokenHash, store.Nanos(t.CreatedAt), store.Nanos(t.LastUsedAt), store.Nanos(t.ExpiresAt)).Scan(&id); err != nil {
			return err
		}
		var err error
		out, err = sqlrow.Token(tx.QueryRowContext(ctx, `SELECT `+sqlrow.TokenCols+sqlrow.TokenFrom+` WHERE t.id = ?`, id))
		return err
	})
	if err != nil {
		return t, fmt.Errorf("create token of project %q: %w", t.Project, err)
	}
	return out, nil
}

// ListProjectTokens implements store.Store.
func (s *Store) ListProjectTokens(ctx context.Context, project string) ([]store.ProjectToken, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	out, err := queryAll(ctx, s.rs, sqlrow.Token, `SELECT `+sqlrow.TokenCols+sqlrow.TokenFrom+` WHERE p.path = ? ORDER BY t.id`, project)
	if err != nil {
		return nil, fmt.Errorf("list tokens of project %q: %w", project, err)
	}
	return out, nil
}

// ProjectTokenByHash implements store.Store.
func (s *Store) ProjectTokenByHash(ctx context.Context, hash string) (store.ProjectToken, error) {
	if err := s.check(); err != nil {
		return store.ProjectToken{}, err
	}
	if hash == "" {
		return store.ProjectToken{}, fmt.Errorf("project token: %w", store.ErrNotFound)
	}
	t, err := sqlrow.Token(s.rs.QueryRowContext(ctx, `SELECT `+sqlrow.TokenCols+sqlrow.TokenFrom+` WHERE t.token_hash = ?`, hash))
	return t, notFound(err, "project token", "by hash")
}

// GetProjectToken implements store.Store.
func (s *Store) GetProjectToken(ctx context.Context, id int64) (store.ProjectToken, error) {
	if err := s.check(); err != nil {
		return store.ProjectToken{}, err
	}
	t, err := sqlrow.Token(s.rs.QueryRowContext(ctx, `SELECT `+sqlrow.TokenCols+sqlrow.TokenFrom+` WHERE t.id = ?`, id))
	return t, notFound(err, "project token", id)
}

// DeleteProjectToken implements store.Store.
func (s *Store) DeleteProjectToken(ctx context.Context, project string, id int64) error {
	return s.execOne(ctx, "delete project token", id,
		`DELETE FROM project_tokens WHERE id = ? AND project_id = (SELECT id FROM projects WHERE path = ?)`, id, project)
}

// TouchProjectToken implements store.Store.
func (s *Store) TouchProjectToken(ctx context.Context, id int64, at time.Time) error {
	return s.execOne(ctx, "touch project token", id, `UPDATE project_tokens SET last_used_at = ? WHERE id = ?`, store.Nanos(at), id)
}
