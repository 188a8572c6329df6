package coordinator

import (
	"context"
	"errors"
	"net/http"
	"strings"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/coordinator/store"
	"github.com/drover-ci/drover/internal/runnerapi"
)

// runnerToken picks the runner token of a request: the body's token, else
// the RUNNER-TOKEN header (runners send both).
func runnerToken(r *http.Request, body string) string {
	if body != "" {
		return body
	}
	return r.Header.Get(hdrRunnerToken)
}

// authRunner finds the runner of token. ok is false (and a 403 or 500 has
// been written) when there is none.
func (c *Coordinator) authRunner(ctx context.Context, w http.ResponseWriter, token string) (store.Runner, bool) {
	if token == "" {
		runnerapi.WriteError(w, http.StatusForbidden, "403 Forbidden: missing runner token", "token")
		return store.Runner{}, false
	}
	rn, err := c.st.RunnerByTokenHash(ctx, store.HashToken(token))
	if errors.Is(err, store.ErrNotFound) {
		runnerapi.WriteError(w, http.StatusForbidden, "403 Forbidden: invalid runner token", "token")
		return rn, false
	}
	if err != nil {
		c.internalError(ctx, w, "look up runner", err)
		return rn, false
	}
	return rn, true
}

// A database that cannot be reached (store.ErrUnavailable) is answered 503
// with Retry-After: nothing was changed, and the same request a moment
// later, to this coordinator or another, may well succeed.
func (c *Coordinator) internalError(ctx context.Context, w http.ResponseWriter, what string, err error) {
	if ctx.Err() == nil && errors.Is(err, store.ErrUnavailable) {
		c.log.Warn(what+": database unavailable", "err", err)
		c.metrics.unavailable.Inc()
		w.Header().Set("Retry-After", retryAfterUnavailable)
		runnerapi.WriteError(w, http.StatusServiceUnavailable, what+": database unavailable, retry later", "")
		return
	}
	runnerapi.InternalError(ctx, w, c.log, what, err)
}

// retryAfterUnavailable is the Retry-After (seconds) of a 503 for a
// database that cannot be reached: a restart of PostgreSQL takes seconds.
const retryAfterUnavailable = "2"

// handleVerify is POST /api/v4/runners/verify: 200 with the runner's id and
// token; it records the runner manager.
func (c *Coordinator) handleVerify(w http.ResponseWriter, r *http.Request) {
	var req api.VerifyRequest
	if e := runnerapi.DecodeJSON(w, r, &req, maxV4Body, false); e != nil {
		runnerapi.WriteBad(w, e)
		return
	}
	if e := validSystemID(req.SystemID); e != nil {
		runnerapi.WriteBad(w, e)
		return
	}
	tok := runnerToken(r, req.Token)
	rn, ok := c.authRunner(r.Context(), w, tok)
	if !ok {
		return
	}
	c.touchManager(r.Context(), rn, req.SystemID, req.Info, true)
	c.log.Info("runner verified", "runner_id", rn.ID, "system_id", req.SystemID)
	runnerapi.WriteJSON(w, http.StatusOK, api.VerifyResponse{ID: rn.ID, Token: tok})
}

// handleRegister is POST /api/v4/runners, the legacy registration with the
// registration token: 201 with a new runner token, 403 for a bad token.
func (c *Coordinator) handleRegister(w http.ResponseWriter, r *http.Request) {
	var req api.RegisterRequest
	if e := runnerapi.DecodeJSON(w, r, &req, maxV4Body, false); e != nil {
		runnerapi.WriteBad(w, e)
		return
	}
	tok := runnerToken(r, req.Token)
	if tok == "" || !runnerapi.TokenEqual(tok, c.regToken) {
		runnerapi.WriteError(w, http.StatusForbidden, "403 Forbidden: invalid registration token", "token")
		return
	}
	if req.MaximumTimeout < 0 {
		runnerapi.WriteError(w, http.StatusBadRequest, "maximum_timeout must not be negative", "maximum_timeout")
		return
	}
	spec := runnerSpec{
		Description: req.Description, Tags: splitTags(req.TagList), RunUntagged: len(splitTags(req.TagList)) == 0, // as GitLab
		MaximumTimeout: req.MaximumTimeout,
	}
	if req.RunUntagged != nil {
		spec.RunUntagged = *req.RunUntagged
	}
	if req.Locked != nil {
		spec.Locked = *req.Locked
	}
	if req.Paused != nil {
		spec.Paused = *req.Paused
	}
	if e := spec.validate(); e != nil {
		runnerapi.WriteBad(w, e)
		return
	}
	rn, token, err := c.createRunner(r.Context(), spec)
	if err != nil {
		c.internalError(r.Context(), w, "register runner", err)
		return
	}
	runnerapi.WriteJSON(w, http.StatusCreated, api.VerifyResponse{ID: rn.ID, Token: token})
}

// handleUnregister is DELETE /api/v4/runners: removes the runner; 204.
func (c *Coordinator) handleUnregister(w http.ResponseWriter, r *http.Request) {
	var req api.UnregisterRequest
	if e := runnerapi.DecodeJSON(w, r, &req, maxV4Body, false); e != nil {
		runnerapi.WriteBad(w, e)
		return
	}
	rn, ok := c.authRunner(r.Context(), w, runnerToken(r, req.Token))
	if !ok {
		return
	}
	err := c.st.DeleteRunner(r.Context(), rn.ID)
	c.online.invalidate()
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		c.internalError(r.Context(), w, "unregister runner", err)
		return
	}
	c.log.Info("runner unregistered", "runner_id", rn.ID)
	w.WriteHeader(http.StatusNoContent)
}

// handleUnregisterManager is DELETE /api/v4/runners/managers: removes one
// runner manager (system_id) of a runner; 204, also when it was not known.
func (c *Coordinator) handleUnregisterManager(w http.ResponseWriter, r *http.Request) {
	var req api.UnregisterRequest
	if e := runnerapi.DecodeJSON(w, r, &req, maxV4Body, false); e != nil {
		runnerapi.WriteBad(w, e)
		return
	}
	if e := validSystemID(req.SystemID); e != nil {
		runnerapi.WriteBad(w, e)
		return
	}
	rn, ok := c.authRunner(r.Context(), w, runnerToken(r, req.Token))
	if !ok {
		return
	}
	if req.SystemID == "" {
		runnerapi.WriteError(w, http.StatusBadRequest, "system_id is required", "system_id")
		return
	}
	err := c.st.DeleteRunnerManager(r.Context(), rn.ID, req.SystemID)
	c.online.invalidate()
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		c.internalError(r.Context(), w, "unregister runner manager", err)
		return
	}
	c.contactMu.Lock()
	delete(c.mgrContact, mgrKey{rn.ID, req.SystemID})
	c.contactMu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

// handleResetToken is POST /api/v4/runners/reset_authentication_token: 201
// with a new token; the old one stops working.
func (c *Coordinator) handleResetToken(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Token string `json:"token"`
	}
	if e := runnerapi.DecodeJSON(w, r, &req, maxV4Body, false); e != nil {
		runnerapi.WriteBad(w, e)
		return
	}
	rn, ok := c.authRunner(r.Context(), w, runnerToken(r, req.Token))
	if !ok {
		return
	}
	tok := newRunnerToken()
	if err := c.st.SetRunnerTokenHash(r.Context(), rn.ID, store.HashToken(tok)); err != nil {
		c.internalError(r.Context(), w, "reset runner token", err)
		return
	}
	c.log.Info("runner token reset", "runner_id", rn.ID)
	runnerapi.WriteJSON(w, http.StatusCreated, struct {
		Token          string `json:"token"`
		TokenExpiresAt string `json:"token_expires_at,omitempty"`
	}{Token: tok})
}

func newRunnerToken() string { return randomToken(api.RunnerTokenPrefix, 18) }

// splitTags splits a comma-separated tag list, dropping empty entries.
func splitTags(s string) []string {
	out := []string{}
	for t := range strings.SplitSeq(s, ",") {
		if t = strings.TrimSpace(t); t != "" {
			out = append(out, t)
		}
	}
	return out
}

// runnerSpec is what an admin (or a legacy registration) sets on a runner.
type runnerSpec struct {
	Description    string
	Tags           []string
	RunUntagged    bool
	Locked         bool
	Paused         bool
	MaximumTimeout int
}

func (s *runnerSpec) validate() *runnerapi.BadRequest {
	if s.MaximumTimeout < 0 {
		return runnerapi.Invalid("maximum_timeout", "maximum_timeout must not be negative")
	}
	if len(s.Description) > 1024 || hasControl(s.Description) {
		return runnerapi.Invalid("description", "description must be at most 1024 printable characters")
	}
	tags := make([]string, 0, len(s.Tags))
	for _, t := range s.Tags {
		t = strings.TrimSpace(t)
		if e := validTag(t, "tag_list"); e != nil {
			return e
		}
		if !containsStr(tags, t) {
			tags = append(tags, t)
		}
	}
	s.Tags = tags
	return nil
}

func validTag(t, field string) *runnerapi.BadRequest {
	if t == "" || len(t) > 255 || strings.Contains(t, ",") || hasControl(t) {
		return runnerapi.Invalid(field, "invalid tag %q: want 1-255 printable characters without commas", t)
	}
	return nil
}

func containsStr(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

func hasControl(s string) bool {
	for _, r := range s {
		if r < 0x20 || r == 0x7f || r == 0xfffd {
			return true
		}
	}
	return false
}

func (c *Coordinator) createRunner(ctx context.Context, s runnerSpec) (store.Runner, string, error) {
	tok := newRunnerToken()
	rn, err := c.st.CreateRunner(ctx, store.Runner{
		TokenHash: store.HashToken(tok), Description: s.Description, Tags: s.Tags,
		RunUntagged: s.RunUntagged, Locked: s.Locked, Paused: s.Paused, MaximumTimeout: s.MaximumTimeout,
		CreatedAt: c.clock.Now(),
	})
	if err != nil {
		return rn, "", err
	}
	c.log.Info("runner created", "runner_id", rn.ID, "tags", rn.Tags)
	return rn, tok, nil
}

// maxSystemID is the longest system_id taken, as GitLab's.
const maxSystemID = 64

// validSystemID checks a runner manager's system_id: it is stored, logged
// and shown, so it is short and printable.
func validSystemID(id string) *runnerapi.BadRequest {
	if len(id) > maxSystemID || hasControl(id) {
		return runnerapi.Invalid("system_id", "system_id must be at most %d printable characters", maxSystemID)
	}
	return nil
}
