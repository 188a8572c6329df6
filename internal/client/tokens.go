package client

import (
	"context"
	"net/http"
	"strconv"
	"time"
)

// ProjectToken is a project access token as the coordinator reports it;
// Token is set only in CreateProjectToken's answer (it is shown once).
type ProjectToken struct {
	ID         int64      `json:"id"`
	Project    string     `json:"project"`
	Name       string     `json:"name"`
	Role       string     `json:"role"`
	CreatedAt  *time.Time `json:"created_at,omitempty"`
	LastUsedAt *time.Time `json:"last_used_at,omitempty"`
	ExpiresAt  *time.Time `json:"expires_at,omitempty"`
	Token      string     `json:"token,omitempty"`
}

// ProjectTokenSpec is the body of a token's creation: Role viewer or
// maintainer; ExpiresAt (RFC 3339) optional.
type ProjectTokenSpec struct {
	Name      string `json:"name"`
	Role      string `json:"role"`
	ExpiresAt string `json:"expires_at,omitempty"`
}

// CreateProjectToken adds an access token to a project.
func (c *Client) CreateProjectToken(ctx context.Context, project string, spec ProjectTokenSpec) (*ProjectToken, error) {
	return call[ProjectToken](ctx, c, http.MethodPost, projectPath(project)+"/tokens", spec, http.StatusCreated)
}

// ProjectTokens lists a project's tokens (without the tokens).
func (c *Client) ProjectTokens(ctx context.Context, project string) ([]ProjectToken, error) {
	return callList[ProjectToken](ctx, c, http.MethodGet, projectPath(project)+"/tokens", nil, http.StatusOK)
}

// RevokeProjectToken deletes token id of a project: it stops working.
func (c *Client) RevokeProjectToken(ctx context.Context, project string, id int64) error {
	_, err := c.do(ctx, http.MethodDelete, projectPath(project)+"/tokens/"+strconv.FormatInt(id, 10), nil, nil, http.StatusNoContent)
	return err
}
