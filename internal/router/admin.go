package router

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/coordinator/store"
	"github.com/drover-ci/drover/internal/runnerapi"
)

// The admin API v1 for the router's own runner tokens, the same shapes as
// the coordinator's: POST/GET /api/v1/runners, GET/DELETE /api/v1/runners/{id}.

// tagList accepts a JSON array of strings or a comma-separated string.
type tagList []string

func (t *tagList) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		*t = parseTags(s)
		return nil
	}
	var ss []string
	if err := json.Unmarshal(b, &ss); err != nil {
		return runnerapi.NewFieldError("tag_list", "want an array of strings or a comma-separated string")
	}
	*t = ss
	return nil
}

type createRunnerRequest struct {
	Description    string  `json:"description"`
	TagList        tagList `json:"tag_list"`
	RunUntagged    *bool   `json:"run_untagged"`
	Locked         bool    `json:"locked"`
	Paused         bool    `json:"paused"`
	MaximumTimeout int     `json:"maximum_timeout"`
}

type managerView struct {
	SystemID    string  `json:"system_id"`
	ContactedAt *string `json:"contacted_at"`
	Version     string  `json:"version"`
	Executor    string  `json:"executor"`
}

type runnerView struct {
	ID             int64         `json:"id"`
	Description    string        `json:"description"`
	TagList        []string      `json:"tag_list"`
	RunUntagged    bool          `json:"run_untagged"`
	Locked         bool          `json:"locked"`
	Paused         bool          `json:"paused"`
	MaximumTimeout int           `json:"maximum_timeout"`
	ContactedAt    *string       `json:"contacted_at"`
	Managers       []managerView `json:"managers"`
}

func (r *Router) runnerView(req *http.Request, rn store.Runner) (runnerView, error) {
	ms, err := r.st.ListRunnerManagers(req.Context(), rn.ID)
	if err != nil {
		return runnerView{}, err
	}
	v := runnerView{
		ID: rn.ID, Description: rn.Description, TagList: rn.Tags, RunUntagged: rn.RunUntagged,
		Locked: rn.Locked, Paused: rn.Paused, MaximumTimeout: rn.MaximumTimeout,
		ContactedAt: runnerapi.RFC3339(rn.ContactedAt), Managers: []managerView{},
	}
	if v.TagList == nil {
		v.TagList = []string{}
	}
	for _, m := range ms {
		v.Managers = append(v.Managers, managerView{SystemID: m.SystemID, ContactedAt: runnerapi.RFC3339(m.ContactedAt), Version: m.Version, Executor: m.Executor})
	}
	return v, nil
}

func validTag(t string) bool {
	return t != "" && len(t) <= 255 && !strings.Contains(t, ",") && !hasControl(t)
}

func hasControl(s string) bool {
	for _, c := range s {
		if c < 0x20 || c == 0x7f || c == 0xfffd {
			return true
		}
	}
	return false
}

func (r *Router) handleCreateRunner(w http.ResponseWriter, req *http.Request) {
	var body createRunnerRequest
	if e := runnerapi.DecodeJSON(w, req, &body, maxV1Body, true); e != nil {
		runnerapi.WriteBad(w, e)
		return
	}
	if body.MaximumTimeout < 0 {
		runnerapi.WriteBad(w, runnerapi.Invalid("maximum_timeout", "maximum_timeout must not be negative"))
		return
	}
	if len(body.Description) > 1024 || hasControl(body.Description) {
		runnerapi.WriteBad(w, runnerapi.Invalid("description", "description must be at most 1024 printable characters"))
		return
	}
	tags := []string{}
	for _, t := range body.TagList {
		t = strings.TrimSpace(t)
		if !validTag(t) {
			runnerapi.WriteBad(w, runnerapi.Invalid("tag_list", "invalid tag %q: want 1-255 printable characters without commas", t))
			return
		}
		if !slices.Contains(tags, t) {
			tags = append(tags, t)
		}
	}
	runUntagged := true
	if body.RunUntagged != nil {
		runUntagged = *body.RunUntagged
	}
	tok := randomToken(api.RunnerTokenPrefix, 18)
	rn, err := r.st.CreateRunner(req.Context(), store.Runner{
		TokenHash: store.HashToken(tok), Description: body.Description, Tags: tags,
		RunUntagged: runUntagged, Locked: body.Locked, Paused: body.Paused, MaximumTimeout: body.MaximumTimeout,
		CreatedAt: r.clock.Now(),
	})
	if err != nil {
		r.internalError(req.Context(), w, "create runner", err)
		return
	}
	r.log.Info("runner created", "runner_id", rn.ID, "tags", rn.Tags)
	runnerapi.WriteJSON(w, http.StatusCreated, struct {
		ID    int64  `json:"id"`
		Token string `json:"token"`
	}{rn.ID, tok})
}

func (r *Router) handleListRunners(w http.ResponseWriter, req *http.Request) {
	rs, err := r.st.ListRunners(req.Context())
	if err != nil {
		r.internalError(req.Context(), w, "list runners", err)
		return
	}
	out := []runnerView{}
	for _, rn := range rs {
		v, err := r.runnerView(req, rn)
		if err != nil {
			r.internalError(req.Context(), w, "list runners", err)
			return
		}
		out = append(out, v)
	}
	runnerapi.WriteJSON(w, http.StatusOK, out)
}

func (r *Router) handleGetRunner(w http.ResponseWriter, req *http.Request) {
	id, ok := runnerapi.PathID(req)
	if !ok {
		runnerapi.WriteError(w, http.StatusNotFound, "runner not found", "id")
		return
	}
	rn, err := r.st.GetRunner(req.Context(), id)
	if errors.Is(err, store.ErrNotFound) {
		runnerapi.WriteError(w, http.StatusNotFound, "runner not found", "id")
		return
	}
	if err != nil {
		r.internalError(req.Context(), w, "get runner", err)
		return
	}
	v, err := r.runnerView(req, rn)
	if err != nil {
		r.internalError(req.Context(), w, "get runner", err)
		return
	}
	runnerapi.WriteJSON(w, http.StatusOK, v)
}

func (r *Router) handleDeleteRunner(w http.ResponseWriter, req *http.Request) {
	id, ok := runnerapi.PathID(req)
	if !ok {
		runnerapi.WriteError(w, http.StatusNotFound, "runner not found", "id")
		return
	}
	err := r.st.DeleteRunner(req.Context(), id)
	if errors.Is(err, store.ErrNotFound) {
		runnerapi.WriteError(w, http.StatusNotFound, "runner not found", "id")
		return
	}
	if err != nil {
		r.internalError(req.Context(), w, "delete runner", err)
		return
	}
	r.mu.Lock()
	for k := range r.managers {
		if k.runnerID == id {
			delete(r.managers, k)
		}
	}
	r.mu.Unlock()
	r.log.Info("runner deleted", "runner_id", id)
	w.WriteHeader(http.StatusNoContent)
}
