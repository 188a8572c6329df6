package coordinator

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/drover-ci/drover/internal/runnerapi"
	"github.com/drover-ci/drover/internal/store"
)

// Project access tokens (GitLab's project access tokens, two roles).
//
// The admin token is the operator's key to everything. A project token
// is a key to one project's pipelines and jobs: RoleViewer reads them
// (the pipelines, jobs, logs and artifacts), RoleMaintainer also acts on
// them (creates a pipeline of the project, cancels, retries, plays). No
// project token reaches a project's settings, its tokens, runners or
// another project: those endpoints take the admin token only.
//
// A pipeline or job of another project is answered as one that does not
// exist (404), so that a token does not learn which ids exist; an action
// of a viewer token is 403 whatever the id. Only the SHA-256 of a token
// is stored; it is shown once, when it is created, and starts with
// projectTokenPrefix so that it is recognized (and found by secret
// scanners).

// projectTokenPrefix starts every project token.
const projectTokenPrefix = "drp_"

// tokenTouchEvery is how stale a token's last_used_at may get before a
// request writes it again: not a write per request.
const tokenTouchEvery = time.Minute

// principal is who a request of the admin API authenticated as: the
// admin, or a project token.
type principal struct {
	admin bool
	token store.ProjectToken // a project token's record, when not admin
}

// sees reports whether p may see project's pipelines and jobs.
func (p principal) sees(project string) bool {
	return p.admin || p.token.Project == project
}

// who is what pipelines p creates record as who triggered them.
func (p principal) who() string {
	if p.admin {
		return "admin"
	}
	return p.token.Name
}

type principalKey struct{}

// principalOf returns who r authenticated as; a request that did not go
// through projectAuth is the admin's (m.Admin checked the admin token).
func principalOf(r *http.Request) principal {
	if p, ok := r.Context().Value(principalKey{}).(principal); ok {
		return p
	}
	return principal{admin: true}
}

// errTokenInvalid is a project token that is unknown, revoked or
// expired.
var errTokenInvalid = errors.New("invalid, revoked or expired token")

// projectToken returns the record of project token tok if it is valid
// now, recording its use; errTokenInvalid otherwise.
func (c *Coordinator) projectToken(ctx context.Context, tok string) (store.ProjectToken, error) {
	if !strings.HasPrefix(tok, projectTokenPrefix) {
		return store.ProjectToken{}, errTokenInvalid
	}
	t, err := c.st.ProjectTokenByHash(ctx, store.HashToken(tok))
	if errors.Is(err, store.ErrNotFound) {
		return t, errTokenInvalid
	}
	if err != nil {
		return t, err
	}
	return c.validToken(ctx, t)
}

// validToken checks that token t has not expired and records its use.
func (c *Coordinator) validToken(ctx context.Context, t store.ProjectToken) (store.ProjectToken, error) {
	now := c.clock.Now()
	if !t.ExpiresAt.IsZero() && !now.Before(t.ExpiresAt) {
		return t, errTokenInvalid
	}
	if now.Sub(t.LastUsedAt) >= tokenTouchEvery {
		if err := c.st.TouchProjectToken(ctx, t.ID, now); err != nil && !errors.Is(err, store.ErrNotFound) {
			c.log.Warn("project token: record its use", "token_id", t.ID, "err", err)
		}
		t.LastUsedAt = now
	}
	return t, nil
}

// projectAuth serves fn to the admin token and to project tokens of role
// at least minRole (RoleViewer: either role); fn checks that what it
// serves is of the token's project (loadJob, loadPipeline, the lists).
// Missing token: 401; wrong, revoked or expired: 403; a viewer token on
// an action: 403.
func (c *Coordinator) projectAuth(minRole string, fn http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		auth := r.Header.Get("Authorization")
		tok, ok := strings.CutPrefix(auth, "Bearer ")
		if auth == "" || !ok || tok == "" {
			w.Header().Set("WWW-Authenticate", `Bearer realm="drover"`)
			runnerapi.WriteError(w, http.StatusUnauthorized, "missing bearer token", "")
			return
		}
		if runnerapi.TokenEqual(tok, c.adminToken) {
			fn(w, r.WithContext(context.WithValue(r.Context(), principalKey{}, principal{admin: true})))
			return
		}
		t, err := c.projectToken(r.Context(), tok)
		if errors.Is(err, errTokenInvalid) {
			runnerapi.WriteError(w, http.StatusForbidden, "invalid admin or project token (unknown, revoked or expired)", "")
			return
		}
		if err != nil {
			c.internalError(r.Context(), w, "check project token", err)
			return
		}
		if minRole == store.RoleMaintainer && t.Role != store.RoleMaintainer {
			runnerapi.WriteError(w, http.StatusForbidden, "this project token is a viewer's: it reads, it does not act", "")
			return
		}
		fn(w, r.WithContext(context.WithValue(r.Context(), principalKey{}, principal{token: t})))
	}
}

// ---- the tokens' admin API ----

// projectTokenView is a project token in the admin API; Token is set
// only in the answer that created it.
type projectTokenView struct {
	ID         int64   `json:"id"`
	Project    string  `json:"project"`
	Name       string  `json:"name"`
	Role       string  `json:"role"`
	CreatedAt  *string `json:"created_at"`
	LastUsedAt *string `json:"last_used_at"`
	ExpiresAt  *string `json:"expires_at"`
	Token      string  `json:"token,omitempty"`
}

func tokenView(t *store.ProjectToken) projectTokenView {
	return projectTokenView{
		ID: t.ID, Project: t.Project, Name: t.Name, Role: t.Role,
		CreatedAt: runnerapi.RFC3339(t.CreatedAt), LastUsedAt: runnerapi.RFC3339(t.LastUsedAt), ExpiresAt: runnerapi.RFC3339(t.ExpiresAt),
	}
}

// projectTokenRequest is the body of POST /api/v1/projects/{project}/tokens.
type projectTokenRequest struct {
	Name string `json:"name"`
	Role string `json:"role"`
	// ExpiresAt (RFC 3339), if set, is when the token stops working.
	ExpiresAt string `json:"expires_at"`
}

// handleCreateProjectToken is POST /api/v1/projects/{project}/tokens: 201
// with the token, shown this once.
func (c *Coordinator) handleCreateProjectToken(w http.ResponseWriter, r *http.Request) {
	var req projectTokenRequest
	if e := runnerapi.DecodeJSON(w, r, &req, maxV1Body, true); e != nil {
		runnerapi.WriteBad(w, e)
		return
	}
	if req.Name == "" || len(req.Name) > 255 || runnerapi.HasControl(req.Name) {
		runnerapi.WriteBad(w, runnerapi.Invalid("name", "name is required: one line of at most 255 bytes saying what the token is for"))
		return
	}
	if req.Role != store.RoleViewer && req.Role != store.RoleMaintainer {
		runnerapi.WriteBad(w, runnerapi.Invalid("role", "role must be viewer or maintainer"))
		return
	}
	now := c.clock.Now()
	var exp time.Time
	if req.ExpiresAt != "" {
		var err error
		if exp, err = time.Parse(time.RFC3339, req.ExpiresAt); err != nil {
			runnerapi.WriteBad(w, runnerapi.Invalid("expires_at", "expires_at must be an RFC 3339 time (2026-12-31T00:00:00Z)"))
			return
		}
		if !exp.After(now) {
			runnerapi.WriteBad(w, runnerapi.Invalid("expires_at", "expires_at must be in the future"))
			return
		}
	}
	p, ok := c.loadProject(w, r, true)
	if !ok {
		return
	}
	tok := runnerapi.RandomToken(projectTokenPrefix, 24)
	t, err := c.st.CreateProjectToken(r.Context(), store.ProjectToken{
		Project: p.Name, Name: req.Name, Role: req.Role, TokenHash: store.HashToken(tok), CreatedAt: now, ExpiresAt: exp,
	})
	if errors.Is(err, store.ErrNotFound) {
		runnerapi.WriteError(w, http.StatusNotFound, fmt.Sprintf("project %s not found", p.Name), "")
		return
	}
	if err != nil {
		c.internalError(r.Context(), w, "create project token", err)
		return
	}
	c.log.Info("project token created", "project", p.Name, "token_id", t.ID, "role", t.Role)
	v := tokenView(&t)
	v.Token = tok
	runnerapi.WriteJSON(w, http.StatusCreated, v)
}

// handleListProjectTokens is GET /api/v1/projects/{project}/tokens.
func (c *Coordinator) handleListProjectTokens(w http.ResponseWriter, r *http.Request) {
	p, ok := c.loadProject(w, r, true)
	if !ok {
		return
	}
	ts, err := c.st.ListProjectTokens(r.Context(), p.Name)
	if err != nil {
		c.internalError(r.Context(), w, "list project tokens", err)
		return
	}
	out := make([]projectTokenView, 0, len(ts))
	for i := range ts {
		out = append(out, tokenView(&ts[i]))
	}
	runnerapi.WriteJSON(w, http.StatusOK, out)
}

// handleDeleteProjectToken is DELETE /api/v1/projects/{project}/tokens/{id}:
// 204; the token stops working at once (the web sessions it signed in
// too).
func (c *Coordinator) handleDeleteProjectToken(w http.ResponseWriter, r *http.Request) {
	p, ok := c.loadProject(w, r, true)
	if !ok {
		return
	}
	id, ok := runnerapi.PathID(r)
	if !ok {
		runnerapi.WriteError(w, http.StatusNotFound, "token not found", "id")
		return
	}
	err := c.st.DeleteProjectToken(r.Context(), p.Name, id)
	if errors.Is(err, store.ErrNotFound) {
		runnerapi.WriteError(w, http.StatusNotFound, fmt.Sprintf("project %s has no token %d", p.Name, id), "")
		return
	}
	if err != nil {
		c.internalError(r.Context(), w, "delete project token", err)
		return
	}
	c.log.Info("project token revoked", "project", p.Name, "token_id", id)
	w.WriteHeader(http.StatusNoContent)
}
