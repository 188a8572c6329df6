package web

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Projects are the registered projects, for their pages: /projects and
// /projects/{id}.
type Projects interface {
	// ListProjects returns the registered projects, by name, each with
	// its default branch's latest pipeline (Schedules and Variables may
	// be left out).
	ListProjects(ctx context.Context) ([]Project, error)
	// Project returns registered project id, or ErrNotFound.
	Project(ctx context.Context, id int64) (Project, error)
	// RunPipeline runs the pipeline req asks for (source web) and
	// returns its id. A configuration that does not compile, or a ref
	// that is none, is a *RunError.
	RunPipeline(ctx context.Context, req RunRequest) (int64, error)
}

// ProjectEditor is what the admin's forms on the projects' pages need:
// registering a project and changing its settings and variables. The
// pages offer the forms when Config.Projects is one too (a type
// assertion), and only to the admin's sign-in.
type ProjectEditor interface {
	// CreateProject registers the project s describes (s.Version
	// ignored; an empty DefaultBranch, ConfigPath or WebhookSecret takes
	// its default, a generated secret for the last) and returns its id
	// and its webhook secret. Invalid settings or a registered name are a
	// *FormError.
	CreateProject(ctx context.Context, s ProjectSettings) (id int64, secret string, err error)
	// UpdateProject sets project id's settings to s, from version
	// s.Version (an empty ForgeToken or WebhookSecret leaves it as it
	// is). Invalid settings, or a project changed since s.Version, are a
	// *FormError; a project that is not registered is ErrNotFound.
	UpdateProject(ctx context.Context, id int64, s ProjectSettings) error
	// SetVariable adds variable v to project id, or replaces the one of
	// its key; an invalid one is a *FormError.
	SetVariable(ctx context.Context, id int64, v VariableValue) error
	// DeleteVariable removes project id's variable key; a key the
	// project has not is a *FormError.
	DeleteVariable(ctx context.Context, id int64, key string) error
}

// ProjectSettings are a project's settings as the forms give them.
type ProjectSettings struct {
	Name, RepoURL, DefaultBranch, ConfigPath string
	// ForgeKind is gitea, forgejo, github, gitlab or "" (none).
	ForgeKind, ForgeURL, ForgeRepo string
	// ForgeToken and WebhookSecret are write-only: the forms never show
	// them, and an empty one changes nothing.
	ForgeToken, WebhookSecret string
	// Version is the project's version the form was made from.
	Version int64
}

// VariableValue is a project variable to set, with its value.
type VariableValue struct {
	Key, Value                   string
	Masked, Protected, File, Raw bool
}

// FormError is a form's input refused: Msg says why, Field names the
// form's field at fault (the API's name: "default_branch", "forge.url",
// "version"), Code is the answer's status (400, or 409 for a conflict).
type FormError struct {
	Code       int
	Field, Msg string
}

func (e *FormError) Error() string { return e.Msg }

// RunRequest is a pipeline the run form asks for.
type RunRequest struct {
	Project, Ref string
	// Variables are the pipeline's own, KEY and value.
	Variables [][2]string
	// Who is who runs it: "admin" or the project token's name.
	Who string
	// BaseURL is where the pages are, as the browser reached them.
	BaseURL string
}

// RunError is a pipeline the form could not run: Msg says why, Errors
// are the configuration's errors (file:line first), if that was why.
type RunError struct {
	Msg    string
	Errors []string
}

func (e *RunError) Error() string { return e.Msg }

// Project is what the pages show of a project: its settings, no secret.
type Project struct {
	ID                             int64
	Name, RepoURL, DefaultBranch   string
	ConfigPath                     string
	ForgeKind, ForgeURL, ForgeRepo string
	ForgeTokenSet                  bool
	// Version is the settings' version, which the edit form sends back.
	Version   int64
	Variables []ProjectVariable
	Schedules []Schedule
	// Latest is the default branch's newest pipeline (nil: none).
	Latest *Pipeline
}

// ProjectVariable is a project variable's key and flags (never its
// value).
type ProjectVariable struct {
	Key                          string
	Masked, Protected, File, Raw bool
}

// Schedule is a pipeline schedule of a project.
type Schedule struct {
	ID                     int64
	Description, Ref, Cron string
	Timezone               string
	Active                 bool
	NextRun                time.Time
	// LastPipeline is the pipeline it last created (nil: none).
	LastPipeline *Pipeline
}

// webhookForges are the forges whose webhooks the coordinator takes.
var webhookForges = []string{"gitea", "github", "gitlab", "generic"}

// statusForges are the forges commit statuses can go to, for the forms'
// choice ("" is none).
var statusForges = []string{"", "gitea", "forgejo", "github", "gitlab"}

func (u *UI) mountProjects(m Mounter) {
	if u.cfg.Projects == nil {
		return
	}
	for _, r := range []struct {
		pattern string
		h       http.HandlerFunc
	}{
		{"GET /projects", u.page(u.handleProjects)},
		{"GET /projects/{id}", u.page(u.handleProject)},
		{"POST /projects/{id}/pipelines", u.projectAction(u.handleRunPipeline)},
		{"POST /projects", u.adminAction(unscoped(u.handleCreateProject))},
		{"POST /projects/{id}/settings", u.adminAction(unscoped(u.handleUpdateProject))},
		{"POST /projects/{id}/variables", u.adminAction(unscoped(u.handleSetVariable))},
		{"POST /projects/{id}/variables/{key}/delete", u.adminAction(unscoped(u.handleDeleteVariable))},
	} {
		m.Handle(r.pattern, secure(r.h))
	}
}

type projectsPage struct {
	base
	Projects []Project
	// CanCreate shows the registration form (the admin's, with an
	// editor); New holds its values, Form what was wrong with them.
	CanCreate bool
	New       ProjectSettings
	Form      formState
	Forges    []string
}

// formState is what went wrong with a form's input: shown above it, the
// field at fault marked.
type formState struct {
	Error, Field string
}

// editor returns the ProjectEditor of the UI's projects for cr: nil
// when there is none or cr is not the admin's.
func (u *UI) editor(cr credentials) ProjectEditor {
	pe, ok := u.cfg.Projects.(ProjectEditor)
	if !ok || !cr.admin || cr.project != "" {
		return nil
	}
	return pe
}

// formError turns err of a ProjectEditor into the form's state and the
// answer's status; ok is false for an error that is not the input's.
func formError(err error) (formState, int, bool) {
	var fe *FormError
	if !errors.As(err, &fe) {
		return formState{}, 0, false
	}
	code := fe.Code
	if code == 0 {
		code = http.StatusBadRequest
	}
	return formState{Error: fe.Msg, Field: fe.Field}, code, true
}

// handleProjects is GET /projects: the registered projects (a project
// token's: its own).
func (u *UI) handleProjects(w http.ResponseWriter, r *http.Request, cr credentials) {
	ps, err := u.cfg.Projects.ListProjects(r.Context())
	if err != nil {
		u.fail(w, r, "list projects", err)
		return
	}
	p := projectsPage{base: u.base("Projects", cr), CanCreate: u.editor(cr) != nil, Forges: statusForges}
	for _, pr := range ps {
		if cr.sees(pr.Name) {
			p.Projects = append(p.Projects, pr)
		}
	}
	u.render(w, r, http.StatusOK, "projects", p)
}

type webhookURL struct{ Forge, URL string }

type projectPage struct {
	base
	Project  Project
	Webhooks []webhookURL
	Badge    string // the badge's path
	BadgeMD  string // its Markdown snippet
	// CanRun shows the run form; Ref and Variables are its values,
	// RunError and Errors what went wrong with them.
	CanRun    bool
	Ref       string
	Variables string
	RunError  string
	Errors    []string
	// CanEdit shows the admin's forms: the settings (Settings their
	// values, SettingsForm what was wrong), a variable to add
	// (VariableForm), each variable's Remove button.
	CanEdit      bool
	Settings     ProjectSettings
	SettingsForm formState
	VariableForm formState
	NewVariable  VariableValue
	Forges       []string
	// NewSecret is the webhook secret of a project just registered,
	// shown this once.
	NewSecret string
}

// loadProject reads project {id} for cr: 404 for none, and for another
// project than a project token's.
func (u *UI) loadProject(w http.ResponseWriter, r *http.Request, cr credentials) (Project, bool) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id <= 0 {
		u.errorPage(w, r, cr, http.StatusNotFound, "No such project.")
		return Project{}, false
	}
	p, err := u.cfg.Projects.Project(r.Context(), id)
	if errors.Is(err, ErrNotFound) || err == nil && !cr.sees(p.Name) {
		u.errorPage(w, r, cr, http.StatusNotFound, fmt.Sprintf("There is no project %d.", id))
		return Project{}, false
	}
	if err != nil {
		u.fail(w, r, "get project", err)
		return Project{}, false
	}
	return p, true
}

func (u *UI) projectPage(r *http.Request, cr credentials, p Project) projectPage {
	base := u.baseURL(r)
	pg := projectPage{
		base: u.base(p.Name, cr), Project: p, CanRun: cr.canAct(p.Name), Ref: p.DefaultBranch,
		Badge: "/" + p.Name + "/badge.svg", CanEdit: u.editor(cr) != nil, Forges: statusForges,
		Settings: ProjectSettings{
			Name: p.Name, RepoURL: p.RepoURL, DefaultBranch: p.DefaultBranch, ConfigPath: p.ConfigPath,
			ForgeKind: p.ForgeKind, ForgeURL: p.ForgeURL, ForgeRepo: p.ForgeRepo, Version: p.Version,
		},
	}
	for _, f := range webhookForges {
		pg.Webhooks = append(pg.Webhooks, webhookURL{f, base + "/api/v1/hooks/" + f + "/" + p.Name})
	}
	pg.BadgeMD = fmt.Sprintf("[![pipeline status](%s/%s/badge.svg)](%s/pipelines?project=%s)", base, p.Name, base, p.Name)
	return pg
}

// handleProject is GET /projects/{id}: the project's settings (no
// secret), webhook URLs, badge, schedules and the run form.
func (u *UI) handleProject(w http.ResponseWriter, r *http.Request, cr credentials) {
	p, ok := u.loadProject(w, r, cr)
	if !ok {
		return
	}
	u.render(w, r, http.StatusOK, "project", u.projectPage(r, cr, p))
}

// varKeyRE is a variable's name, as the API takes it.
var varKeyRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// parseVariables reads the form's KEY=VALUE lines (blank lines skipped).
func parseVariables(text string) ([][2]string, error) {
	var out [][2]string
	for i, line := range strings.Split(strings.ReplaceAll(text, "\r\n", "\n"), "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		k = strings.TrimSpace(k)
		if !ok || !varKeyRE.MatchString(k) {
			return nil, fmt.Errorf("line %d of the variables: want KEY=VALUE (a KEY of letters, digits and _)", i+1)
		}
		out = append(out, [2]string{k, v})
	}
	return out, nil
}

// handleRunPipeline is POST /projects/{id}/pipelines (the run form): on
// to the new pipeline's page, or the form again with what went wrong.
func (u *UI) handleRunPipeline(w http.ResponseWriter, r *http.Request, cr credentials) {
	p, ok := u.loadProject(w, r, cr)
	if !ok {
		return
	}
	if !cr.canAct(p.Name) {
		http.Error(w, "read-only sign-in: you cannot run this project's pipelines", http.StatusForbidden)
		return
	}
	ref := strings.TrimSpace(r.PostFormValue("ref"))
	varsText := r.PostFormValue("variables")
	pg := u.projectPage(r, cr, p)
	pg.Ref, pg.Variables = ref, varsText
	vars, err := parseVariables(varsText)
	if err != nil {
		pg.RunError = err.Error()
		u.render(w, r, http.StatusBadRequest, "project", pg)
		return
	}
	if ref == "" {
		ref = p.DefaultBranch
	}
	id, err := u.cfg.Projects.RunPipeline(r.Context(), RunRequest{
		Project: p.Name, Ref: ref, Variables: vars, Who: cr.who, BaseURL: u.baseURL(r),
	})
	var re *RunError
	if errors.As(err, &re) {
		pg.RunError, pg.Errors = re.Msg, re.Errors
		u.render(w, r, http.StatusUnprocessableEntity, "project", pg)
		return
	}
	if err != nil {
		u.fail(w, r, "run pipeline", err)
		return
	}
	u.log.Info("pipeline run in the web UI", "project", p.Name, "pipeline_id", id, "by", cr.who)
	http.Redirect(w, r, fmt.Sprintf("/pipelines/%d", id), http.StatusSeeOther)
}

// settingsForm reads a project settings form of r.
func settingsForm(r *http.Request) ProjectSettings {
	f := func(k string) string { return strings.TrimSpace(r.PostFormValue(k)) }
	v, _ := strconv.ParseInt(f("version"), 10, 64)
	return ProjectSettings{
		Name: f("name"), RepoURL: f("repo_url"), DefaultBranch: f("default_branch"), ConfigPath: f("config_path"),
		ForgeKind: f("forge_kind"), ForgeURL: f("forge_url"), ForgeRepo: f("forge_repo"),
		// Secrets as typed: spaces may be part of them.
		ForgeToken: r.PostFormValue("forge_token"), WebhookSecret: r.PostFormValue("webhook_secret"),
		Version: v,
	}
}

// handleCreateProject is POST /projects (the admin's registration form
// on /projects): the new project's page, with its webhook secret shown
// this once, or the form again with what went wrong.
func (u *UI) handleCreateProject(w http.ResponseWriter, r *http.Request, cr credentials) {
	pe := u.editor(cr)
	if pe == nil {
		http.NotFound(w, r)
		return
	}
	s := settingsForm(r)
	id, secret, err := pe.CreateProject(r.Context(), s)
	if fs, code, ok := formError(err); ok {
		s.ForgeToken, s.WebhookSecret = "", ""
		pg := projectsPage{base: u.base("Projects", cr), CanCreate: true, New: s, Form: fs, Forges: statusForges}
		if pg.Projects, err = u.cfg.Projects.ListProjects(r.Context()); err != nil {
			u.fail(w, r, "list projects", err)
			return
		}
		u.render(w, r, code, "projects", pg)
		return
	}
	if err != nil {
		u.fail(w, r, "create project", err)
		return
	}
	p, err := u.cfg.Projects.Project(r.Context(), id)
	if err != nil {
		u.fail(w, r, "get project", err)
		return
	}
	u.log.Info("project registered in the web UI", "project", p.Name, "project_id", id)
	pg := u.projectPage(r, cr, p)
	pg.NewSecret = secret
	u.render(w, r, http.StatusCreated, "project", pg)
}

// editProject serves a POST of the admin's forms on /projects/{id}:
// change applies the form; on success the browser goes back to the
// project's page (at anchor), else the page shows what went wrong
// (mark puts the error on the page).
func (u *UI) editProject(w http.ResponseWriter, r *http.Request, cr credentials, what, anchor string,
	change func(ProjectEditor, Project) error, mark func(*projectPage, formState)) {
	pe := u.editor(cr)
	if pe == nil {
		http.NotFound(w, r)
		return
	}
	p, ok := u.loadProject(w, r, cr)
	if !ok {
		return
	}
	err := change(pe, p)
	if errors.Is(err, ErrNotFound) {
		u.errorPage(w, r, cr, http.StatusNotFound, fmt.Sprintf("There is no project %d.", p.ID))
		return
	}
	if fs, code, ok := formError(err); ok {
		pg := u.projectPage(r, cr, p)
		mark(&pg, fs)
		u.render(w, r, code, "project", pg)
		return
	}
	if err != nil {
		u.fail(w, r, what, err)
		return
	}
	u.log.Info("project changed in the web UI", "project", p.Name, "change", what)
	http.Redirect(w, r, fmt.Sprintf("/projects/%d#%s", p.ID, anchor), http.StatusSeeOther)
}

// handleUpdateProject is POST /projects/{id}/settings (the admin's
// settings form).
func (u *UI) handleUpdateProject(w http.ResponseWriter, r *http.Request, cr credentials) {
	s := settingsForm(r)
	u.editProject(w, r, cr, "update project", "settings",
		func(pe ProjectEditor, p Project) error { return pe.UpdateProject(r.Context(), p.ID, s) },
		func(pg *projectPage, fs formState) {
			s.Name, s.ForgeToken, s.WebhookSecret = pg.Project.Name, "", ""
			pg.Settings, pg.SettingsForm = s, fs
		})
}

// handleSetVariable is POST /projects/{id}/variables (the admin's form
// that adds or replaces a variable).
func (u *UI) handleSetVariable(w http.ResponseWriter, r *http.Request, cr credentials) {
	on := func(k string) bool { return r.PostFormValue(k) == "on" }
	v := VariableValue{
		Key: strings.TrimSpace(r.PostFormValue("key")), Value: r.PostFormValue("value"),
		Masked: on("masked"), Protected: on("protected"), File: on("file"), Raw: on("raw"),
	}
	u.editProject(w, r, cr, "set variable", "variables",
		func(pe ProjectEditor, p Project) error {
			if !varKeyRE.MatchString(v.Key) {
				return &FormError{Field: "key", Msg: "a variable's key is letters, digits and _, not starting with a digit"}
			}
			return pe.SetVariable(r.Context(), p.ID, v)
		},
		func(pg *projectPage, fs formState) {
			// The value is not shown again: it may be a secret.
			pg.NewVariable, pg.VariableForm = VariableValue{Key: v.Key, Masked: v.Masked, Protected: v.Protected, File: v.File, Raw: v.Raw}, fs
		})
}

// handleDeleteVariable is POST /projects/{id}/variables/{key}/delete
// (a variable's Remove button).
func (u *UI) handleDeleteVariable(w http.ResponseWriter, r *http.Request, cr credentials) {
	u.editProject(w, r, cr, "delete variable", "variables",
		func(pe ProjectEditor, p Project) error {
			return pe.DeleteVariable(r.Context(), p.ID, r.PathValue("key"))
		},
		func(pg *projectPage, fs formState) { pg.VariableForm = fs })
}
