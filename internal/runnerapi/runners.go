package runnerapi

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/clock"
	"github.com/drover-ci/drover/internal/fleetticket"
	"github.com/drover-ci/drover/internal/store"
)

// Registry is where Runners keeps runner tokens and runner managers: the
// coordinator's job database, or the router's own database of the tokens
// it issued. store.Store satisfies it.
type Registry interface {
	CreateRunner(ctx context.Context, r store.Runner) (store.Runner, error)
	GetRunner(ctx context.Context, id int64) (store.Runner, error)
	ListRunners(ctx context.Context) ([]store.Runner, error)
	RunnerByTokenHash(ctx context.Context, hash string) (store.Runner, error)
	SetRunnerTokenHash(ctx context.Context, id int64, hash string) error
	DeleteRunner(ctx context.Context, id int64) error
	UpsertRunnerManager(ctx context.Context, m store.RunnerManager) error
	ListRunnerManagers(ctx context.Context, runnerID int64) ([]store.RunnerManager, error)
	DeleteRunnerManager(ctx context.Context, runnerID int64, systemID string) error
}

// ManagerKey names one runner manager: a runner token's id and the
// system_id of the process using it.
type ManagerKey struct {
	RunnerID int64
	SystemID string
}

// Hooks tell the daemon serving Runners what changed, for the state it
// keeps of its own (the coordinator's list of runners online, the router's
// runner managers). Each may be nil.
type Hooks struct {
	// ManagerContact follows a write of a manager's contact: known is
	// false for a manager new to this process, else last is its previous
	// contact written here.
	ManagerContact func(k ManagerKey, last time.Time, known bool)
	// RunnerDeleted follows the removal of a runner (admin DELETE or the
	// runner's own unregister).
	RunnerDeleted func(id int64)
	// ManagerDeleted follows the removal of one runner manager.
	ManagerDeleted func(k ManagerKey)
}

// Runners serves runner tokens and runner managers, the part of the
// runner API that does not depend on where jobs come from: the admin API
// (POST/GET /api/v1/runners, GET/DELETE /api/v1/runners/{id}) and the
// runner endpoints of API v4 (runners/verify, legacy registration,
// unregister, managers, reset_authentication_token). It also
// authenticates runner tokens (Auth) and records runner managers' contact
// (Touch) for the daemon's job endpoints.
type Runners struct {
	reg   Registry
	clock clock.Clock
	log   *slog.Logger
	hooks Hooks
	// RegistrationToken enables the legacy registration (POST
	// /api/v4/runners) with this token; empty answers it 403.
	regToken string
	// contactStep is how often a manager's contact is written at most.
	contactStep time.Duration
	fail        func(ctx context.Context, w http.ResponseWriter, what string, err error)

	mu      sync.Mutex
	contact map[ManagerKey]time.Time // last contact written per manager
}

// RunnersConfig configures NewRunners.
type RunnersConfig struct {
	Clock clock.Clock // default clock.Real
	Log   *slog.Logger
	Hooks Hooks
	// RegistrationToken enables the legacy registration (POST
	// /api/v4/runners) with this token; empty answers it 403.
	RegistrationToken string
	// ContactStep is how often a manager's contact is written at most
	// (default 5 s); runners/verify always writes it.
	ContactStep time.Duration
	// Fail answers an unexpected error of reg (default InternalError);
	// the coordinator answers an unreachable database 503.
	Fail func(ctx context.Context, w http.ResponseWriter, what string, err error)
}

// NewRunners returns the runner registry server over reg.
func NewRunners(reg Registry, cfg RunnersConfig) *Runners {
	s := &Runners{
		reg: reg, clock: cfg.Clock, log: cfg.Log, hooks: cfg.Hooks,
		regToken: cfg.RegistrationToken, contactStep: cfg.ContactStep, fail: cfg.Fail,
		contact: map[ManagerKey]time.Time{},
	}
	if s.clock == nil {
		s.clock = clock.Real{}
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.contactStep <= 0 {
		s.contactStep = 5 * time.Second
	}
	if s.fail == nil {
		s.fail = func(ctx context.Context, w http.ResponseWriter, what string, err error) {
			InternalError(ctx, w, s.log, what, err)
		}
	}
	return s
}

// Mount registers the runner and admin endpoints of s on m.
func (s *Runners) Mount(m *Mux) {
	m.Runner("POST /api/v4/runners/verify", s.Verify)
	m.Runner("POST /api/v4/runners", s.Register)
	m.Runner("DELETE /api/v4/runners", s.Unregister)
	m.Runner("DELETE /api/v4/runners/managers", s.UnregisterManager)
	m.Runner("POST /api/v4/runners/reset_authentication_token", s.ResetToken)

	m.Admin("POST /api/v1/runners", s.Create)
	m.Admin("GET /api/v1/runners", s.List)
	m.Admin("GET /api/v1/runners/{id}", s.Get)
	m.Admin("DELETE /api/v1/runners/{id}", s.Delete)
}

// Body limits of the runner API.
const (
	MaxAdminBody  = 4 << 20 // admin API requests
	MaxRunnerBody = 1 << 20 // runner JSON requests
)

// RunnerToken picks the runner token of a request: the body's token, else
// the RUNNER-TOKEN header (runners send both).
func RunnerToken(r *http.Request, body string) string {
	if body != "" {
		return body
	}
	return r.Header.Get(api.HeaderRunnerToken)
}

// JobToken picks the job token of a request: the body's token, else the
// JOB-TOKEN header.
func JobToken(r *http.Request, body string) string {
	if body != "" {
		return body
	}
	return r.Header.Get(api.HeaderJobToken)
}

// Auth finds the runner of token. ok is false (and a 403, or the answer
// to a registry failure, has been written) when there is none.
func (s *Runners) Auth(ctx context.Context, w http.ResponseWriter, token string) (store.Runner, bool) {
	if token == "" {
		WriteError(w, http.StatusForbidden, "403 Forbidden: missing runner token", "token")
		return store.Runner{}, false
	}
	rn, err := s.reg.RunnerByTokenHash(ctx, store.HashToken(token))
	if errors.Is(err, store.ErrNotFound) {
		WriteError(w, http.StatusForbidden, "403 Forbidden: invalid runner token", "token")
		return rn, false
	}
	if err != nil {
		s.fail(ctx, w, "look up runner", err)
		return rn, false
	}
	return rn, true
}

// DecodeRunnerRequest decodes a runner's JSON request into v, checks its
// system_id and its info (ValidInfo, for the requests that carry one) and
// authenticates its token (the body's, else the header's). ok is false
// when the answer has been written.
func (s *Runners) DecodeRunnerRequest(w http.ResponseWriter, r *http.Request, v any, token func() (tok, systemID string)) (store.Runner, bool) {
	if e := DecodeJSON(w, r, v, MaxRunnerBody, false); e != nil {
		WriteBad(w, e)
		return store.Runner{}, false
	}
	tok, sys := token()
	if e := ValidSystemID(sys); e != nil {
		WriteBad(w, e)
		return store.Runner{}, false
	}
	if info := infoOf(v); info != nil {
		if e := ValidInfo(info); e != nil {
			WriteBad(w, e)
			return store.Runner{}, false
		}
	}
	return s.Auth(r.Context(), w, RunnerToken(r, tok))
}

// Touch records a runner manager's contact, at most every ContactStep
// unless force is set (runners/verify always records).
func (s *Runners) Touch(ctx context.Context, rn store.Runner, systemID string, info api.VersionInfo, force bool) {
	now := s.clock.Now()
	k := ManagerKey{rn.ID, systemID}
	s.mu.Lock()
	last, known := s.contact[k]
	if !force && known && now.Sub(last) < s.contactStep {
		s.mu.Unlock()
		return
	}
	s.contact[k] = now
	s.mu.Unlock()
	m := store.RunnerManager{
		RunnerID: rn.ID, SystemID: systemID, ContactedAt: now,
		Version: info.Version, Executor: info.Executor, Platform: info.Platform, Arch: info.Architecture,
		FleetURL: info.FleetURL,
	}
	if err := s.reg.UpsertRunnerManager(ctx, m); err != nil && !errors.Is(err, store.ErrNotFound) {
		s.log.Warn("record runner manager", "runner_id", rn.ID, "system_id", systemID, "err", err)
	}
	if s.hooks.ManagerContact != nil {
		s.hooks.ManagerContact(k, last, known)
	}
}

// forgetRunner drops what s remembers of runner id's managers and tells
// the daemon.
func (s *Runners) forgetRunner(id int64) {
	s.mu.Lock()
	for k := range s.contact {
		if k.RunnerID == id {
			delete(s.contact, k)
		}
	}
	s.mu.Unlock()
	if s.hooks.RunnerDeleted != nil {
		s.hooks.RunnerDeleted(id)
	}
}

// Verify is POST /api/v4/runners/verify: 200 with the runner's id and
// token, 403 for an unknown token; it records the runner manager.
func (s *Runners) Verify(w http.ResponseWriter, r *http.Request) {
	var req api.VerifyRequest
	rn, ok := s.DecodeRunnerRequest(w, r, &req, func() (string, string) { return req.Token, req.SystemID })
	if !ok {
		return
	}
	s.Touch(r.Context(), rn, req.SystemID, req.Info, true)
	s.log.Info("runner verified", "runner_id", rn.ID, "system_id", req.SystemID)
	WriteJSON(w, http.StatusOK, api.VerifyResponse{ID: rn.ID, Token: RunnerToken(r, req.Token)})
}

// Register is POST /api/v4/runners, the legacy registration with the
// registration token: 201 with a new runner token, 403 for a bad token
// (always, when the daemon has no registration token).
func (s *Runners) Register(w http.ResponseWriter, r *http.Request) {
	var req api.RegisterRequest
	if e := DecodeJSON(w, r, &req, MaxRunnerBody, false); e != nil {
		WriteBad(w, e)
		return
	}
	tok := RunnerToken(r, req.Token)
	if tok == "" || s.regToken == "" || !TokenEqual(tok, s.regToken) {
		WriteError(w, http.StatusForbidden, "403 Forbidden: invalid registration token", "token")
		return
	}
	tags := SplitTags(req.TagList)
	spec := RunnerSpec{
		Description: req.Description, Tags: tags, RunUntagged: len(tags) == 0, // as GitLab
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
	if rn, tok, ok := s.createFrom(w, r, spec, "register runner"); ok {
		WriteJSON(w, http.StatusCreated, api.VerifyResponse{ID: rn.ID, Token: tok})
	}
}

// Unregister is DELETE /api/v4/runners: removes the runner of the token;
// 204.
func (s *Runners) Unregister(w http.ResponseWriter, r *http.Request) {
	var req api.UnregisterRequest
	rn, ok := s.DecodeRunnerRequest(w, r, &req, func() (string, string) { return req.Token, req.SystemID })
	if !ok {
		return
	}
	if err := s.reg.DeleteRunner(r.Context(), rn.ID); err != nil && !errors.Is(err, store.ErrNotFound) {
		s.fail(r.Context(), w, "unregister runner", err)
		return
	}
	s.forgetRunner(rn.ID)
	s.log.Info("runner unregistered", "runner_id", rn.ID)
	w.WriteHeader(http.StatusNoContent)
}

// UnregisterManager is DELETE /api/v4/runners/managers: removes one
// runner manager (system_id) of a runner; 204, also when it was not known.
func (s *Runners) UnregisterManager(w http.ResponseWriter, r *http.Request) {
	var req api.UnregisterRequest
	rn, ok := s.DecodeRunnerRequest(w, r, &req, func() (string, string) { return req.Token, req.SystemID })
	if !ok {
		return
	}
	if req.SystemID == "" {
		WriteError(w, http.StatusBadRequest, "system_id is required", "system_id")
		return
	}
	if err := s.reg.DeleteRunnerManager(r.Context(), rn.ID, req.SystemID); err != nil && !errors.Is(err, store.ErrNotFound) {
		s.fail(r.Context(), w, "unregister runner manager", err)
		return
	}
	k := ManagerKey{rn.ID, req.SystemID}
	s.mu.Lock()
	delete(s.contact, k)
	s.mu.Unlock()
	if s.hooks.ManagerDeleted != nil {
		s.hooks.ManagerDeleted(k)
	}
	w.WriteHeader(http.StatusNoContent)
}

// ResetToken is POST /api/v4/runners/reset_authentication_token: 201 with
// a new token; the old one stops working.
func (s *Runners) ResetToken(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Token string `json:"token"`
	}
	rn, ok := s.DecodeRunnerRequest(w, r, &req, func() (string, string) { return req.Token, "" })
	if !ok {
		return
	}
	tok := NewRunnerToken()
	if err := s.reg.SetRunnerTokenHash(r.Context(), rn.ID, store.HashToken(tok)); err != nil {
		s.fail(r.Context(), w, "reset runner token", err)
		return
	}
	s.log.Info("runner token reset", "runner_id", rn.ID)
	WriteJSON(w, http.StatusCreated, struct {
		Token          string `json:"token"`
		TokenExpiresAt string `json:"token_expires_at,omitempty"`
	}{Token: tok})
}

// ---- admin API v1 ----

// TagList accepts a JSON array of strings or a comma-separated string.
type TagList []string

// UnmarshalJSON implements json.Unmarshaler.
func (t *TagList) UnmarshalJSON(b []byte) error {
	ss, ok := api.StringOrList(b, SplitTags)
	if !ok {
		return NewFieldError("tag_list", "want an array of strings or a comma-separated string")
	}
	*t = ss
	return nil
}

type createRunnerRequest struct {
	Description    string  `json:"description"`
	TagList        TagList `json:"tag_list"`
	RunUntagged    *bool   `json:"run_untagged"`
	Locked         bool    `json:"locked"`
	Paused         bool    `json:"paused"`
	MaximumTimeout int     `json:"maximum_timeout"`
}

type ManagerView struct {
	SystemID    string  `json:"system_id"`
	ContactedAt *string `json:"contacted_at"`
	Version     string  `json:"version"`
	Executor    string  `json:"executor"`
}

type RunnerView struct {
	ID             int64         `json:"id"`
	Description    string        `json:"description"`
	TagList        []string      `json:"tag_list"`
	RunUntagged    bool          `json:"run_untagged"`
	Locked         bool          `json:"locked"`
	Paused         bool          `json:"paused"`
	MaximumTimeout int           `json:"maximum_timeout"`
	ContactedAt    *string       `json:"contacted_at"`
	Managers       []ManagerView `json:"managers"`
}

func (s *Runners) view(ctx context.Context, rn store.Runner) (RunnerView, error) {
	ms, err := s.reg.ListRunnerManagers(ctx, rn.ID)
	if err != nil {
		return RunnerView{}, err
	}
	v := RunnerView{
		ID: rn.ID, Description: rn.Description, TagList: rn.Tags, RunUntagged: rn.RunUntagged,
		Locked: rn.Locked, Paused: rn.Paused, MaximumTimeout: rn.MaximumTimeout,
		ContactedAt: RFC3339(rn.ContactedAt), Managers: []ManagerView{},
	}
	if v.TagList == nil {
		v.TagList = []string{}
	}
	for _, m := range ms {
		v.Managers = append(v.Managers, ManagerView{SystemID: m.SystemID, ContactedAt: RFC3339(m.ContactedAt), Version: m.Version, Executor: m.Executor})
	}
	return v, nil
}

// Create is POST /api/v1/runners: 201 with the new runner's id and token.
// As GitLab, a runner with tags runs untagged jobs only when asked
// (run_untagged).
func (s *Runners) Create(w http.ResponseWriter, r *http.Request) {
	var req createRunnerRequest
	if e := DecodeJSON(w, r, &req, MaxAdminBody, true); e != nil {
		WriteBad(w, e)
		return
	}
	spec := RunnerSpec{
		Description: req.Description, Tags: req.TagList, RunUntagged: len(req.TagList) == 0,
		Locked: req.Locked, Paused: req.Paused, MaximumTimeout: req.MaximumTimeout,
	}
	if req.RunUntagged != nil {
		spec.RunUntagged = *req.RunUntagged
	}
	if rn, tok, ok := s.createFrom(w, r, spec, "create runner"); ok {
		WriteJSON(w, http.StatusCreated, struct {
			ID    int64  `json:"id"`
			Token string `json:"token"`
		}{rn.ID, tok})
	}
}

// createFrom validates spec and creates its runner; ok is false when the
// answer (400, or a failure of what) has been written.
func (s *Runners) createFrom(w http.ResponseWriter, r *http.Request, spec RunnerSpec, what string) (store.Runner, string, bool) {
	if e := spec.Validate(); e != nil {
		WriteBad(w, e)
		return store.Runner{}, "", false
	}
	rn, tok, err := s.CreateRunner(r.Context(), spec)
	if err != nil {
		s.fail(r.Context(), w, what, err)
		return store.Runner{}, "", false
	}
	return rn, tok, true
}

// List is GET /api/v1/runners.
func (s *Runners) List(w http.ResponseWriter, r *http.Request) {
	rs, err := s.reg.ListRunners(r.Context())
	if err != nil {
		s.fail(r.Context(), w, "list runners", err)
		return
	}
	out := []RunnerView{}
	for _, rn := range rs {
		v, err := s.view(r.Context(), rn)
		if err != nil {
			s.fail(r.Context(), w, "list runners", err)
			return
		}
		out = append(out, v)
	}
	WriteJSON(w, http.StatusOK, out)
}

// runnerOf loads runner {id}; ok is false when the answer (404 or a
// failure) has been written.
func (s *Runners) runnerOf(w http.ResponseWriter, r *http.Request) (store.Runner, bool) {
	id, ok := PathID(r)
	if !ok {
		WriteError(w, http.StatusNotFound, "runner not found", "id")
		return store.Runner{}, false
	}
	rn, err := s.reg.GetRunner(r.Context(), id)
	if errors.Is(err, store.ErrNotFound) {
		WriteError(w, http.StatusNotFound, "runner not found", "id")
		return rn, false
	}
	if err != nil {
		s.fail(r.Context(), w, "get runner", err)
		return rn, false
	}
	return rn, true
}

// Get is GET /api/v1/runners/{id}.
func (s *Runners) Get(w http.ResponseWriter, r *http.Request) {
	rn, ok := s.runnerOf(w, r)
	if !ok {
		return
	}
	v, err := s.view(r.Context(), rn)
	if err != nil {
		s.fail(r.Context(), w, "get runner", err)
		return
	}
	WriteJSON(w, http.StatusOK, v)
}

// Delete is DELETE /api/v1/runners/{id}: 204; its managers go with it.
func (s *Runners) Delete(w http.ResponseWriter, r *http.Request) {
	id, ok := PathID(r)
	if !ok {
		WriteError(w, http.StatusNotFound, "runner not found", "id")
		return
	}
	err := s.DeleteRunner(r.Context(), id)
	if errors.Is(err, store.ErrNotFound) {
		WriteError(w, http.StatusNotFound, "runner not found", "id")
		return
	}
	if err != nil {
		s.fail(r.Context(), w, "delete runner", err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// DeleteRunner removes runner id and its managers, as DELETE
// /api/v1/runners/{id} does; store.ErrNotFound (wrapped) when there is
// none.
func (s *Runners) DeleteRunner(ctx context.Context, id int64) error {
	if err := s.reg.DeleteRunner(ctx, id); err != nil {
		return err
	}
	s.forgetRunner(id)
	s.log.Info("runner deleted", "runner_id", id)
	return nil
}

// ---- runner specs ----

// RunnerSpec is what an admin (or a legacy registration) sets on a runner.
type RunnerSpec struct {
	Description    string
	Tags           []string
	RunUntagged    bool
	Locked         bool
	Paused         bool
	MaximumTimeout int
}

// Validate checks s and trims and de-duplicates its tags.
func (s *RunnerSpec) Validate() *BadRequest {
	if s.MaximumTimeout < 0 {
		return Invalid("maximum_timeout", "maximum_timeout must not be negative")
	}
	if len(s.Description) > 1024 || HasControl(s.Description) {
		return Invalid("description", "description must be at most 1024 printable characters")
	}
	tags := make([]string, 0, len(s.Tags))
	for _, t := range s.Tags {
		t = strings.TrimSpace(t)
		if e := ValidTag(t, "tag_list"); e != nil {
			return e
		}
		if !slices.Contains(tags, t) {
			tags = append(tags, t)
		}
	}
	s.Tags = tags
	return nil
}

// CreateRunner stores a runner of spec (validated) with a new token, and
// returns it with the token.
func (s *Runners) CreateRunner(ctx context.Context, spec RunnerSpec) (store.Runner, string, error) {
	tok := NewRunnerToken()
	rn, err := s.reg.CreateRunner(ctx, store.Runner{
		TokenHash: store.HashToken(tok), Description: spec.Description, Tags: spec.Tags,
		RunUntagged: spec.RunUntagged, Locked: spec.Locked, Paused: spec.Paused, MaximumTimeout: spec.MaximumTimeout,
		CreatedAt: s.clock.Now(),
	})
	if err != nil {
		return rn, "", err
	}
	s.log.Info("runner created", "runner_id", rn.ID, "tags", rn.Tags)
	return rn, tok, nil
}

// NewRunnerToken returns a new runner authentication token (glrt-…).
func NewRunnerToken() string { return RandomToken(api.RunnerTokenPrefix, 18) }

// SplitTags splits a comma-separated tag list, dropping empty entries.
func SplitTags(s string) []string {
	out := []string{}
	for t := range strings.SplitSeq(s, ",") {
		if t = strings.TrimSpace(t); t != "" {
			out = append(out, t)
		}
	}
	return out
}

// ValidTag checks one tag of field: 1-255 printable characters without
// commas.
func ValidTag(t, field string) *BadRequest {
	if t == "" || len(t) > 255 || strings.Contains(t, ",") || HasControl(t) {
		return Invalid(field, "invalid tag %q: want 1-255 printable characters without commas", t)
	}
	return nil
}

// HasControl reports whether s holds a control character or an invalid
// UTF-8 sequence.
func HasControl(s string) bool {
	for _, r := range s {
		if r < 0x20 || r == 0x7f || r == 0xfffd {
			return true
		}
	}
	return false
}

// infoOf is the info of a runner request v, nil for one without.
func infoOf(v any) *api.VersionInfo {
	switch v := v.(type) {
	case *api.JobRequest:
		return &v.Info
	case *api.VerifyRequest:
		return &v.Info
	case *api.RegisterRequest:
		return &v.Info
	case *api.UpdateJobRequest:
		return &v.Info
	}
	return nil
}

// Longest fields of a runner manager's info, in characters: GitLab's
// (Ci::RunnerManager validates version at 2048, revision, platform and
// architecture at 255); the rest, which GitLab does not keep, at 255.
const (
	maxInfoVersion = 2048
	maxInfoField   = 255
)

// ValidInfo checks the info a runner manager sends with its requests (its
// name, version, revision, platform, architecture, executor and shell):
// they are stored, logged and shown, so each is at most its length and
// printable (no control, format or invalid UTF-8 character). The answer
// names the first field that is not, as info.version and the like.
// features, config and labels are neither stored nor shown, and are not
// checked. drover_fleet_url, linked from the runners page, is empty or an
// http(s) URL as fleetticket.CheckURL takes it.
func ValidInfo(info *api.VersionInfo) *BadRequest {
	for _, f := range []struct {
		name, value string
		max         int
	}{
		{"name", info.Name, maxInfoField},
		{"version", info.Version, maxInfoVersion},
		{"revision", info.Revision, maxInfoField},
		{"platform", info.Platform, maxInfoField},
		{"architecture", info.Architecture, maxInfoField},
		{"executor", info.Executor, maxInfoField},
		{"shell", info.Shell, maxInfoField},
	} {
		if utf8.RuneCountInString(f.value) > f.max || !Printable(f.value) {
			return Invalid("info."+f.name, "info.%s must be at most %d printable characters", f.name, f.max)
		}
	}
	if info.FleetURL != "" {
		if err := fleetticket.CheckURL(info.FleetURL); err != nil {
			return Invalid("info.drover_fleet_url", "info.drover_fleet_url must be an http or https URL without user, query or fragment: %v", err)
		}
	}
	return nil
}

// Printable reports whether every character of s is a printable one
// (letters, marks, numbers, punctuation, symbols and the ASCII space): no
// control character, no format character such as a bidirectional
// override that would reorder what a page shows, no invalid UTF-8.
func Printable(s string) bool {
	for _, r := range s {
		if r == utf8.RuneError || !unicode.IsPrint(r) {
			return false
		}
	}
	return true
}

// maxSystemID is the longest system_id taken, as GitLab's.
const maxSystemID = 64

// ValidSystemID checks a runner manager's system_id: it is stored, logged
// and shown, so it is short and printable.
func ValidSystemID(id string) *BadRequest {
	if len(id) > maxSystemID || HasControl(id) {
		return Invalid("system_id", "system_id must be at most %d printable characters", maxSystemID)
	}
	return nil
}
