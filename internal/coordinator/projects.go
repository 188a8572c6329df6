package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/runnerapi"
	"github.com/drover-ci/drover/internal/store"
)

// Projects (admin API v1).
//
// A project's record holds what a pipeline of it needs besides the
// request: its repository, default branch and CI configuration path, its
// CI/CD variables, the secret its webhooks are checked with, and where
// its commit statuses go (a forge, its repository and an API token).
// Variables, the webhook secret and the forge token are sealed at rest as
// job variables are (secrets.go); the API never shows variable values or
// the forge token, and shows the webhook secret only in the answer to the
// creation and to GET .../webhook_secret.
//
// Routes take the project as one path segment, {project}: its numeric id
// or its path URL-encoded (group%2Fname), as GitLab's API does.
//
// DELETE drops a project's settings, schedules and webhook deliveries; its
// pipelines and jobs stay (they are history, and the project's row
// remains as the one its first pipeline created).

// Purposes of the project secrets sealed with the coordinator's key.
const (
	projectVariablesPurpose = "drover project variables"
	webhookSecretPurpose    = "drover project webhook secret"
	forgeTokenPurpose       = "drover project forge token"
)

// Defaults of a project's settings.
const (
	defaultBranch     = "main"
	defaultConfigPath = ".gitlab-ci.yml"
)

// forgeKinds are the forges commit statuses can go to ("" none).
var forgeKinds = []string{"", "gitea", "forgejo", "github", "gitlab"}

// ProjectVariable is one CI/CD variable of a project or schedule, with
// GitLab's flags: Masked values are hidden in job logs; Protected ones
// are given only to pipelines of protected refs (the default branch and
// tags); File ones are written to a file whose path the variable holds;
// Raw ones are not expanded.
type ProjectVariable struct {
	Key       string `json:"key"`
	Value     string `json:"value,omitempty"`
	Masked    bool   `json:"masked"`
	Protected bool   `json:"protected"`
	File      bool   `json:"file"`
	Raw       bool   `json:"raw"`
}

// apiVariable is v as a job variable.
func (v ProjectVariable) apiVariable() api.Variable {
	return api.Variable{Key: v.Key, Value: v.Value, Masked: v.Masked, File: v.File, Raw: v.Raw}
}

// validVariables checks vs (field is their field's name) and returns the
// first problem.
func validVariables(field string, vs []ProjectVariable) *runnerapi.BadRequest {
	seen := map[string]bool{}
	for i, v := range vs {
		f := fmt.Sprintf("%s[%d]", field, i)
		if !varKeyRE.MatchString(v.Key) || len(v.Key) > 255 {
			return runnerapi.Invalid(f+".key", "variable name %q: letters, digits and _ only, at most 255", v.Key)
		}
		if seen[v.Key] {
			return runnerapi.Invalid(f+".key", "variable %s given twice", v.Key)
		}
		seen[v.Key] = true
		if len(v.Value) > 10000 {
			return runnerapi.Invalid(f+".value", "variable %s: value longer than 10000 bytes", v.Key)
		}
		if v.Masked && (len(v.Value) < 8 || strings.ContainsAny(v.Value, "\r\n")) {
			// GitLab's rule: a masked value must be findable in a log.
			return runnerapi.Invalid(f+".value", "variable %s: a masked value is one line of at least 8 characters", v.Key)
		}
	}
	return nil
}

// projectVariables opens the variables sealed in sealed ("" = none).
func (c *Coordinator) projectVariables(sealed, purpose string) ([]ProjectVariable, error) {
	if sealed == "" {
		return nil, nil
	}
	b, err := c.box.Open(sealed, purpose)
	if err != nil {
		return nil, err
	}
	var vs []ProjectVariable
	if err := json.Unmarshal(b, &vs); err != nil {
		return nil, fmt.Errorf("sealed variables: %w", err)
	}
	return vs, nil
}

// sealVariablesList seals vs ("" for none).
func (c *Coordinator) sealVariablesList(vs []ProjectVariable, purpose string) string {
	if len(vs) == 0 {
		return ""
	}
	b, err := json.Marshal(vs)
	if err != nil {
		panic(err) // plain data: cannot happen
	}
	return c.box.Seal(b, purpose)
}

func (c *Coordinator) sealString(s, purpose string) string {
	if s == "" {
		return ""
	}
	return c.box.Seal([]byte(s), purpose)
}

func (c *Coordinator) openString(sealed, purpose string) (string, error) {
	if sealed == "" {
		return "", nil
	}
	b, err := c.box.Open(sealed, purpose)
	return string(b), err
}

// projectView is a project as the admin API shows it.
type projectView struct {
	ID            int64          `json:"id"`
	Name          string         `json:"name"`
	Registered    bool           `json:"registered"`
	RepoURL       string         `json:"repo_url"`
	DefaultBranch string         `json:"default_branch"`
	ConfigPath    string         `json:"config_path"`
	Variables     []variableView `json:"variables"`
	// WebhookSecret is only in the answer to the creation.
	WebhookSecret string    `json:"webhook_secret,omitempty"`
	Forge         forgeView `json:"forge"`
	CreatedAt     *string   `json:"created_at,omitempty"`
	UpdatedAt     *string   `json:"updated_at,omitempty"`
	Version       int64     `json:"version"`
}

// variableView is a variable without its value.
type variableView struct {
	Key       string `json:"key"`
	Masked    bool   `json:"masked"`
	Protected bool   `json:"protected"`
	File      bool   `json:"file"`
	Raw       bool   `json:"raw"`
}

type forgeView struct {
	Kind     string `json:"kind"`
	URL      string `json:"url,omitempty"`
	Repo     string `json:"repo,omitempty"`
	TokenSet bool   `json:"token_set"`
}

func variableViews(vs []ProjectVariable) []variableView {
	out := make([]variableView, len(vs))
	for i, v := range vs {
		out[i] = variableView{Key: v.Key, Masked: v.Masked, Protected: v.Protected, File: v.File, Raw: v.Raw}
	}
	return out
}

func (c *Coordinator) projectView(p *store.Project) (projectView, error) {
	vs, err := c.projectVariables(p.SealedVariables, projectVariablesPurpose)
	if err != nil {
		return projectView{}, fmt.Errorf("project %s: %w", p.Name, err)
	}
	return projectView{
		ID: p.ID, Name: p.Name, Registered: p.Registered, RepoURL: p.RepoURL, DefaultBranch: p.DefaultBranch,
		ConfigPath: p.ConfigPath, Variables: variableViews(vs),
		Forge:     forgeView{Kind: p.Forge.Kind, URL: p.Forge.URL, Repo: p.Forge.Repo, TokenSet: p.Forge.SealedToken != ""},
		CreatedAt: timeString(p.CreatedAt), UpdatedAt: timeString(p.UpdatedAt), Version: p.Version,
	}, nil
}

// forgeRequest is the forge part of a project request; nil fields are
// left as they are.
type forgeRequest struct {
	Kind  *string `json:"kind"`
	URL   *string `json:"url"`
	Repo  *string `json:"repo"`
	Token *string `json:"token"`
}

// projectRequest is the body of POST /api/v1/projects (Name required) and
// of PATCH /api/v1/projects/{project} (no Name); nil fields are left as
// they are (or take their defaults).
type projectRequest struct {
	Name          *string            `json:"name"`
	RepoURL       *string            `json:"repo_url"`
	DefaultBranch *string            `json:"default_branch"`
	ConfigPath    *string            `json:"config_path"`
	Variables     *[]ProjectVariable `json:"variables"`
	WebhookSecret *string            `json:"webhook_secret"`
	Forge         *forgeRequest      `json:"forge"`
	// Version, when set, is the version the change was made from: a
	// project changed since is answered 409.
	Version int64 `json:"version"`
}

// validRef reports whether s can be a branch or tag name.
func validRef(s string) bool {
	return s != "" && len(s) <= 255 && !strings.HasPrefix(s, "-") && !strings.ContainsAny(s, " \t\n~^:?*[\\") && !dotSegment(s)
}

// applyProject validates req and applies it to p, sealing what it
// seals; p's variables are vs (opened), which req.Variables replaces.
func (c *Coordinator) applyProject(req *projectRequest, p *store.Project, vs []ProjectVariable) *runnerapi.BadRequest {
	if req.RepoURL != nil {
		u := strings.TrimSpace(*req.RepoURL)
		if strings.HasPrefix(u, "-") || len(u) > 2048 || runnerapi.HasControl(u) {
			return runnerapi.Invalid("repo_url", "repo_url must be a URL git fetches")
		}
		p.RepoURL = u
	}
	if req.DefaultBranch != nil {
		if !validRef(*req.DefaultBranch) {
			return runnerapi.Invalid("default_branch", "default_branch must be a branch name")
		}
		p.DefaultBranch = *req.DefaultBranch
	}
	if req.ConfigPath != nil {
		if !validConfigPath(*req.ConfigPath) {
			return runnerapi.Invalid("config_path", "config_path must be a path inside the repository")
		}
		p.ConfigPath = *req.ConfigPath
	}
	if req.Variables != nil {
		if e := validVariables("variables", *req.Variables); e != nil {
			return e
		}
		vs = *req.Variables
	}
	p.SealedVariables = c.sealVariablesList(vs, projectVariablesPurpose)
	if req.WebhookSecret != nil {
		if s := *req.WebhookSecret; len(s) < 8 || len(s) > 255 || runnerapi.HasControl(s) {
			return runnerapi.Invalid("webhook_secret", "webhook_secret must be 8 to 255 printable characters")
		}
		p.SealedWebhookSecret = c.sealString(*req.WebhookSecret, webhookSecretPurpose)
	}
	if f := req.Forge; f != nil {
		if f.Kind != nil {
			if !slices.Contains(forgeKinds, *f.Kind) {
				return runnerapi.Invalid("forge.kind", "forge.kind must be one of gitea, forgejo, github, gitlab, or empty for none")
			}
			p.Forge.Kind = *f.Kind
		}
		if f.URL != nil {
			p.Forge.URL = strings.TrimSuffix(strings.TrimSpace(*f.URL), "/")
		}
		if f.Repo != nil {
			p.Forge.Repo = strings.Trim(strings.TrimSpace(*f.Repo), "/")
		}
		if f.Token != nil {
			if runnerapi.HasControl(*f.Token) || len(*f.Token) > 1024 {
				return runnerapi.Invalid("forge.token", "forge.token must be printable, at most 1024 characters")
			}
			p.Forge.SealedToken = c.sealString(*f.Token, forgeTokenPurpose)
		}
	}
	if p.Forge.Kind == "github" && p.Forge.URL == "" {
		p.Forge.URL = "https://api.github.com"
	}
	if p.Forge.URL != "" {
		u, err := url.Parse(p.Forge.URL)
		if err != nil || u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
			return runnerapi.Invalid("forge.url", "forge.url must be an http(s) URL")
		}
	}
	if p.Forge.Kind != "" {
		if p.Forge.URL == "" {
			return runnerapi.Invalid("forge.url", "forge.url is required with forge.kind %s", p.Forge.Kind)
		}
		if p.Forge.Repo == "" || len(p.Forge.Repo) > 255 || runnerapi.HasControl(p.Forge.Repo) ||
			p.Forge.Kind != "gitlab" && strings.Count(p.Forge.Repo, "/") != 1 {
			return runnerapi.Invalid("forge.repo", "forge.repo must be owner/repo (GitLab: the project's id or path)")
		}
	}
	return nil
}

// projectConflict is a change of a project refused for its state (409):
// a name taken, a version not the project's.
type projectConflict struct {
	msg, field string
}

func (e *projectConflict) Error() string { return e.msg }

// writeProjectError answers err of createProject or updateProject: 400
// for an invalid request, 409 for a conflict, 404 for a project that is
// not registered, else 500 (what is for the log).
func (c *Coordinator) writeProjectError(w http.ResponseWriter, r *http.Request, what string, err error) {
	var bad *runnerapi.BadRequest
	var conflict *projectConflict
	switch {
	case errors.As(err, &bad):
		runnerapi.WriteBad(w, bad)
	case errors.As(err, &conflict):
		runnerapi.WriteError(w, http.StatusConflict, conflict.msg, conflict.field)
	case errors.Is(err, store.ErrNotFound):
		runnerapi.WriteError(w, http.StatusNotFound, fmt.Sprintf("project %s not found", r.PathValue("project")), "")
	default:
		c.internalError(r.Context(), w, what, err)
	}
}

// createProject registers the project req asks for (req.Name required)
// and returns it with its webhook secret, generated when req gives none.
// Errors: *runnerapi.BadRequest for an invalid request, *projectConflict
// for a registered project of that name.
func (c *Coordinator) createProject(ctx context.Context, req projectRequest) (store.Project, string, error) {
	if req.Name == nil || *req.Name == "" {
		return store.Project{}, "", runnerapi.Invalid("name", "name is required: the project's path, group/name")
	}
	name := *req.Name
	if len(name) > 255 || !projectRE.MatchString(name) || dotSegment(name) {
		return store.Project{}, "", runnerapi.Invalid("name", "name must be a path like group/project (no empty, . or .. segments)")
	}
	secret := runnerapi.RandomToken("", 24)
	if req.WebhookSecret != nil {
		secret = *req.WebhookSecret
	} else {
		req.WebhookSecret = &secret
	}
	p := store.Project{Name: name, DefaultBranch: defaultBranch, ConfigPath: defaultConfigPath, CreatedAt: c.clock.Now()}
	if e := c.applyProject(&req, &p, nil); e != nil {
		return store.Project{}, "", e
	}
	p, err := c.st.CreateProject(ctx, p)
	if errors.Is(err, store.ErrExists) {
		return store.Project{}, "", &projectConflict{msg: fmt.Sprintf("project %s exists", name), field: "name"}
	}
	if err != nil {
		return store.Project{}, "", fmt.Errorf("create project %s: %w", name, err)
	}
	c.log.Info("project created", "project", p.Name, "project_id", p.ID)
	return p, secret, nil
}

// handleCreateProject is POST /api/v1/projects: 201 with the project and,
// once, its webhook secret (generated when not given); 409 for a
// registered project of that name.
func (c *Coordinator) handleCreateProject(w http.ResponseWriter, r *http.Request) {
	var req projectRequest
	if e := runnerapi.DecodeJSON(w, r, &req, maxV1Body, true); e != nil {
		runnerapi.WriteBad(w, e)
		return
	}
	p, secret, err := c.createProject(r.Context(), req)
	if err != nil {
		c.writeProjectError(w, r, "create project", err)
		return
	}
	v, err := c.projectView(&p)
	if err != nil {
		c.internalError(r.Context(), w, "project view", err)
		return
	}
	v.WebhookSecret = secret
	runnerapi.WriteJSON(w, http.StatusCreated, v)
}

// handleListProjects is GET /api/v1/projects: the registered projects,
// and with ?all=true the ones only their pipelines or jobs created.
func (c *Coordinator) handleListProjects(w http.ResponseWriter, r *http.Request) {
	all := r.URL.Query().Get("all") == "true"
	ps, err := c.st.ListProjects(r.Context())
	if err != nil {
		c.internalError(r.Context(), w, "list projects", err)
		return
	}
	out := []projectView{}
	for i := range ps {
		if !ps[i].Registered && !all {
			continue
		}
		v, err := c.projectView(&ps[i])
		if err != nil {
			c.internalError(r.Context(), w, "project view", err)
			return
		}
		out = append(out, v)
	}
	runnerapi.WriteJSON(w, http.StatusOK, out)
}

// findProject reads project ref: a numeric id or a path. registered:
// only a registered one is found (else store.ErrNotFound).
func (c *Coordinator) findProject(ctx context.Context, ref string, registered bool) (store.Project, error) {
	var p store.Project
	var err error
	if id, perr := strconv.ParseInt(ref, 10, 64); perr == nil {
		p, err = c.st.GetProjectByID(ctx, id)
	} else {
		p, err = c.st.GetProject(ctx, ref)
	}
	if err == nil && registered && !p.Registered {
		err = store.ErrNotFound
	}
	return p, err
}

// loadProject reads the project of the path's {project}: a numeric id
// or a path (URL-encoded in the URL). registered: only a registered one
// is found.
func (c *Coordinator) loadProject(w http.ResponseWriter, r *http.Request, registered bool) (store.Project, bool) {
	ref := r.PathValue("project")
	p, err := c.findProject(r.Context(), ref, registered)
	if errors.Is(err, store.ErrNotFound) {
		runnerapi.WriteError(w, http.StatusNotFound, fmt.Sprintf("project %s not found", ref), "")
		return p, false
	}
	if err != nil {
		c.internalError(r.Context(), w, "load project", err)
		return p, false
	}
	return p, true
}

// handleGetProject is GET /api/v1/projects/{project}.
func (c *Coordinator) handleGetProject(w http.ResponseWriter, r *http.Request) {
	p, ok := c.loadProject(w, r, false)
	if !ok {
		return
	}
	c.writeProject(w, r, &p)
}

// writeProject answers 200 with the view of p.
func (c *Coordinator) writeProject(w http.ResponseWriter, r *http.Request, p *store.Project) {
	v, err := c.projectView(p)
	if err != nil {
		c.internalError(r.Context(), w, "project view", err)
		return
	}
	runnerapi.WriteJSON(w, http.StatusOK, v)
}

// handleUpdateProject is PATCH /api/v1/projects/{project}: the fields
// given change; 409 when "version" is given and the project changed
// since.
func (c *Coordinator) handleUpdateProject(w http.ResponseWriter, r *http.Request) {
	var req projectRequest
	if e := runnerapi.DecodeJSON(w, r, &req, maxV1Body, true); e != nil {
		runnerapi.WriteBad(w, e)
		return
	}
	if req.Name != nil {
		runnerapi.WriteBad(w, runnerapi.Invalid("name", "a project is not renamed: its pipelines and jobs are of its name"))
		return
	}
	c.changeProject(w, r, req.Version, func(p *store.Project, vs []ProjectVariable) *runnerapi.BadRequest {
		return c.applyProject(&req, p, vs)
	})
}

// projectChange changes a project's record p, whose variables (opened)
// are vs; a *runnerapi.BadRequest refuses the change.
type projectChange func(p *store.Project, vs []ProjectVariable) *runnerapi.BadRequest

// updateProject applies fn to registered project ref (an id or a path)
// from version ifVersion (0: the one read, read again on a concurrent
// change) and returns the project as stored. Errors: fn's
// *runnerapi.BadRequest, *projectConflict when ifVersion is not the
// project's version, store.ErrNotFound.
func (c *Coordinator) updateProject(ctx context.Context, ref string, ifVersion int64, fn projectChange) (store.Project, error) {
	for range 5 {
		p, err := c.findProject(ctx, ref, true)
		if err != nil {
			return p, err
		}
		vs, err := c.projectVariables(p.SealedVariables, projectVariablesPurpose)
		if err != nil {
			return p, fmt.Errorf("project %s variables: %w", p.Name, err)
		}
		from := p.Version
		if ifVersion != 0 {
			from = ifVersion
		}
		if e := fn(&p, vs); e != nil {
			return p, e
		}
		p, err = c.st.UpdateProject(ctx, p, from, c.clock.Now())
		if errors.Is(err, store.ErrConflict) {
			if ifVersion != 0 {
				return p, &projectConflict{msg: fmt.Sprintf("project %s changed: it is at version %d, not %d", p.Name, p.Version, ifVersion), field: "version"}
			}
			continue
		}
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			err = fmt.Errorf("update project %s: %w", p.Name, err)
		}
		return p, err
	}
	return store.Project{}, &projectConflict{msg: "the project keeps changing: try again"}
}

// changeProject applies fn to the project of the request, from version
// ifVersion (updateProject), and answers the project.
func (c *Coordinator) changeProject(w http.ResponseWriter, r *http.Request, ifVersion int64, fn projectChange) {
	p, err := c.updateProject(r.Context(), r.PathValue("project"), ifVersion, fn)
	if err != nil {
		c.writeProjectError(w, r, "update project", err)
		return
	}
	c.writeProject(w, r, &p)
}

// handleDeleteProject is DELETE /api/v1/projects/{project}: its settings,
// schedules and webhook deliveries go; its pipelines and jobs stay.
func (c *Coordinator) handleDeleteProject(w http.ResponseWriter, r *http.Request) {
	p, ok := c.loadProject(w, r, true)
	if !ok {
		return
	}
	err := c.st.DeleteProject(r.Context(), p.Name)
	if errors.Is(err, store.ErrNotFound) {
		runnerapi.WriteError(w, http.StatusNotFound, fmt.Sprintf("project %s not found", p.Name), "")
		return
	}
	if err != nil {
		c.internalError(r.Context(), w, "delete project", err)
		return
	}
	c.log.Info("project deleted", "project", p.Name, "project_id", p.ID)
	w.WriteHeader(http.StatusNoContent)
}

// handleProjectWebhookSecret is GET /api/v1/projects/{project}/webhook_secret.
func (c *Coordinator) handleProjectWebhookSecret(w http.ResponseWriter, r *http.Request) {
	p, ok := c.loadProject(w, r, true)
	if !ok {
		return
	}
	s, err := c.openString(p.SealedWebhookSecret, webhookSecretPurpose)
	if err != nil {
		c.internalError(r.Context(), w, "open webhook secret", err)
		return
	}
	runnerapi.WriteJSON(w, http.StatusOK, struct {
		WebhookSecret string `json:"webhook_secret"`
	}{s})
}

// handleListProjectVariables is GET /api/v1/projects/{project}/variables:
// keys and flags, no values.
func (c *Coordinator) handleListProjectVariables(w http.ResponseWriter, r *http.Request) {
	p, ok := c.loadProject(w, r, true)
	if !ok {
		return
	}
	vs, err := c.projectVariables(p.SealedVariables, projectVariablesPurpose)
	if err != nil {
		c.internalError(r.Context(), w, "project variables", err)
		return
	}
	runnerapi.WriteJSON(w, http.StatusOK, variableViews(vs))
}

// handleSetProjectVariable is PUT /api/v1/projects/{project}/variables/{key}
// with {value, masked, protected, file, raw}: the variable is added or
// replaced.
func (c *Coordinator) handleSetProjectVariable(w http.ResponseWriter, r *http.Request) {
	var v ProjectVariable
	if e := runnerapi.DecodeJSON(w, r, &v, maxV1Body, true); e != nil {
		runnerapi.WriteBad(w, e)
		return
	}
	key := r.PathValue("key")
	if v.Key != "" && v.Key != key {
		runnerapi.WriteBad(w, runnerapi.Invalid("key", "key %q differs from the URL's %q", v.Key, key))
		return
	}
	v.Key = key
	c.changeProject(w, r, 0, c.setVariable(v))
}

// setVariable is the change that adds variable v, or replaces the one
// of its key.
func (c *Coordinator) setVariable(v ProjectVariable) projectChange {
	return func(p *store.Project, vs []ProjectVariable) *runnerapi.BadRequest {
		vs = slices.Clone(vs)
		if i := slices.IndexFunc(vs, func(o ProjectVariable) bool { return o.Key == v.Key }); i >= 0 {
			vs[i] = v
		} else {
			vs = append(vs, v)
		}
		return c.applyProject(&projectRequest{Variables: &vs}, p, nil)
	}
}

// handleDeleteProjectVariable is DELETE
// /api/v1/projects/{project}/variables/{key}.
func (c *Coordinator) handleDeleteProjectVariable(w http.ResponseWriter, r *http.Request) {
	c.changeProject(w, r, 0, c.unsetVariable(r.PathValue("key")))
}

// unsetVariable is the change that removes variable key.
func (c *Coordinator) unsetVariable(key string) projectChange {
	return func(p *store.Project, vs []ProjectVariable) *runnerapi.BadRequest {
		i := slices.IndexFunc(vs, func(o ProjectVariable) bool { return o.Key == key })
		if i < 0 {
			return runnerapi.Invalid("key", "project %s has no variable %s", p.Name, key)
		}
		vs = slices.Delete(slices.Clone(vs), i, i+1)
		return c.applyProject(&projectRequest{Variables: &vs}, p, nil)
	}
}

// projectSettings returns the registered project name, or nil.
func (c *Coordinator) projectSettings(ctx context.Context, name string) (*store.Project, error) {
	p, err := c.st.GetProject(ctx, name)
	if errors.Is(err, store.ErrNotFound) || err == nil && !p.Registered {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &p, nil
}

// pipelineProjectVariables are the CI/CD variables of project p a
// pipeline for ref (tag: a tag) gets: the protected ones only on a
// protected ref, which is the default branch or a tag.
func (c *Coordinator) pipelineProjectVariables(p *store.Project, ref string, tag bool) ([]api.Variable, error) {
	vs, err := c.projectVariables(p.SealedVariables, projectVariablesPurpose)
	if err != nil {
		return nil, fmt.Errorf("project %s variables: %w", p.Name, err)
	}
	protected := tag || ref == p.DefaultBranch
	var out []api.Variable
	for _, v := range vs {
		if v.Protected && !protected {
			continue
		}
		out = append(out, v.apiVariable())
	}
	return out, nil
}
