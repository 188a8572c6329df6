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
	Variables                      []ProjectVariable
	Schedules                      []Schedule
	// Latest is the default branch's newest pipeline (nil: none).
	Latest *Pipeline
}

// ProjectVariable is a project variable's key and flags (never its
// value).
type ProjectVariable struct {
	Key               string
	Masked, Protected bool
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
	} {
		m.Handle(r.pattern, secure(r.h))
	}
}

type projectsPage struct {
	base
	Projects []Project
}

// handleProjects is GET /projects: the registered projects (a project
// token's: its own).
func (u *UI) handleProjects(w http.ResponseWriter, r *http.Request, cr credentials) {
	ps, err := u.cfg.Projects.ListProjects(r.Context())
	if err != nil {
		u.fail(w, r, "list projects", err)
		return
	}
	p := projectsPage{base: u.base("Projects", cr)}
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
		Badge: "/" + p.Name + "/badge.svg",
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
