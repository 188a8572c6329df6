package coordinator

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/runnerapi"
	"github.com/drover-ci/drover/internal/store"
	"github.com/drover-ci/drover/internal/web"
)

// The web UI's projects' pages and its sign-in with project tokens
// (access.go).

func webMember(t *store.ProjectToken) web.ProjectMember {
	return web.ProjectMember{TokenID: t.ID, Project: t.Project, Name: t.Name, Maintainer: t.Role == store.RoleMaintainer}
}

func (s webSource) ProjectToken(ctx context.Context, tok string) (web.ProjectMember, error) {
	t, err := s.c.projectToken(ctx, tok)
	if errors.Is(err, errTokenInvalid) {
		return web.ProjectMember{}, web.ErrNotFound
	}
	if err != nil {
		return web.ProjectMember{}, err
	}
	return webMember(&t), nil
}

func (s webSource) ProjectTokenByID(ctx context.Context, id int64) (web.ProjectMember, error) {
	t, err := s.c.st.GetProjectToken(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return web.ProjectMember{}, web.ErrNotFound
	}
	if err != nil {
		return web.ProjectMember{}, fmt.Errorf("get project token %d: %w", id, err)
	}
	if t, err = s.c.validToken(ctx, t); errors.Is(err, errTokenInvalid) {
		return web.ProjectMember{}, web.ErrNotFound
	} else if err != nil {
		return web.ProjectMember{}, err
	}
	return webMember(&t), nil
}

// latestPipeline is the newest pipeline of project on ref, nil if none.
func (s webSource) latestPipeline(ctx context.Context, project, ref string) (*web.Pipeline, error) {
	ps, err := s.c.st.ListPipelines(ctx, store.PipelineFilter{Project: project, Ref: ref, Newest: true, Limit: 1})
	if err != nil {
		return nil, fmt.Errorf("latest pipeline of %s: %w", project, err)
	}
	if len(ps) == 0 {
		return nil, nil
	}
	wp := webPipeline(&ps[0])
	return &wp, nil
}

func (s webSource) webProject(ctx context.Context, p *store.Project) (web.Project, error) {
	out := web.Project{
		ID: p.ID, Name: p.Name, RepoURL: p.RepoURL, DefaultBranch: p.DefaultBranch, ConfigPath: p.ConfigPath,
		ForgeKind: p.Forge.Kind, ForgeURL: p.Forge.URL, ForgeRepo: p.Forge.Repo, ForgeTokenSet: p.Forge.SealedToken != "",
		Version: p.Version,
	}
	var err error
	out.Latest, err = s.latestPipeline(ctx, p.Name, p.DefaultBranch)
	return out, err
}

func (s webSource) ListProjects(ctx context.Context) ([]web.Project, error) {
	ps, err := s.c.st.ListProjects(ctx)
	if err != nil {
		return nil, fmt.Errorf("list projects: %w", err)
	}
	var out []web.Project
	for i := range ps {
		if !ps[i].Registered {
			continue
		}
		wp, err := s.webProject(ctx, &ps[i])
		if err != nil {
			return nil, err
		}
		out = append(out, wp)
	}
	return out, nil
}

func (s webSource) Project(ctx context.Context, id int64) (web.Project, error) {
	p, err := s.c.st.GetProjectByID(ctx, id)
	if errors.Is(err, store.ErrNotFound) || err == nil && !p.Registered {
		return web.Project{}, web.ErrNotFound
	}
	if err != nil {
		return web.Project{}, fmt.Errorf("get project %d: %w", id, err)
	}
	out, err := s.webProject(ctx, &p)
	if err != nil {
		return out, err
	}
	// The variables' keys and flags: their values stay here.
	vs, err := s.c.projectVariables(p.SealedVariables, projectVariablesPurpose)
	if err != nil {
		return out, fmt.Errorf("project %s: %w", p.Name, err)
	}
	for _, v := range vs {
		out.Variables = append(out.Variables, web.ProjectVariable{Key: v.Key, Masked: v.Masked, Protected: v.Protected, File: v.File, Raw: v.Raw})
	}
	scs, err := s.c.st.ListSchedules(ctx, p.Name)
	if err != nil {
		return out, fmt.Errorf("schedules of %s: %w", p.Name, err)
	}
	for _, sc := range scs {
		ws := web.Schedule{
			ID: sc.ID, Description: sc.Description, Ref: sc.Ref, Cron: sc.Cron, Timezone: sc.CronTimezone,
			Active: sc.Active, NextRun: sc.NextRunAt,
		}
		if sc.LastPipelineID != 0 {
			lp, err := s.c.st.GetPipeline(ctx, sc.LastPipelineID)
			if err == nil {
				wp := webPipeline(&lp)
				ws.LastPipeline = &wp
			} else if !errors.Is(err, store.ErrNotFound) {
				return out, fmt.Errorf("last pipeline of schedule %d: %w", sc.ID, err)
			}
		}
		out.Schedules = append(out.Schedules, ws)
	}
	return out, nil
}

func (s webSource) RunPipeline(ctx context.Context, req web.RunRequest) (int64, error) {
	cr := createPipelineRequest{
		Project: req.Project, Ref: req.Ref, Source: "web", TriggeredBy: req.Who, BaseURL: req.BaseURL,
	}
	for _, v := range req.Variables {
		cr.Variables = append(cr.Variables, api.Variable{Key: v[0], Value: v[1]})
	}
	p, err := s.c.createPipeline(ctx, cr)
	var pe *pipelineError
	if errors.As(err, &pe) {
		return 0, &web.RunError{Msg: pe.msg, Errors: pe.errors}
	}
	if err != nil {
		return 0, err
	}
	return p.ID, nil
}

var _ web.ProjectEditor = webSource{}

// webFormError is err of createProject or updateProject as the web
// forms take it: the request's fault a *web.FormError, a project that is
// not registered web.ErrNotFound, anything else as it is.
func webFormError(err error) error {
	var bad *runnerapi.BadRequest
	var conflict *projectConflict
	switch {
	case errors.As(err, &bad):
		return &web.FormError{Code: bad.Code(), Field: bad.Field(), Msg: bad.Error()}
	case errors.As(err, &conflict):
		return &web.FormError{Code: http.StatusConflict, Field: conflict.field, Msg: conflict.msg}
	case errors.Is(err, store.ErrNotFound):
		return web.ErrNotFound
	}
	return err
}

// nonEmpty is &s, or nil for "" (the request leaves the field as it is,
// or to its default).
func nonEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func (s webSource) CreateProject(ctx context.Context, ps web.ProjectSettings) (int64, string, error) {
	req := projectRequest{
		Name: &ps.Name, RepoURL: nonEmpty(ps.RepoURL), DefaultBranch: nonEmpty(ps.DefaultBranch),
		ConfigPath: nonEmpty(ps.ConfigPath), WebhookSecret: nonEmpty(ps.WebhookSecret),
	}
	if ps.ForgeKind != "" || ps.ForgeURL != "" || ps.ForgeRepo != "" || ps.ForgeToken != "" {
		req.Forge = &forgeRequest{Kind: &ps.ForgeKind, URL: &ps.ForgeURL, Repo: &ps.ForgeRepo, Token: nonEmpty(ps.ForgeToken)}
	}
	p, secret, err := s.c.createProject(ctx, req)
	if err != nil {
		return 0, "", webFormError(err)
	}
	return p.ID, secret, nil
}

func (s webSource) UpdateProject(ctx context.Context, id int64, ps web.ProjectSettings) error {
	if ps.Version == 0 {
		// The form always sends its version: without one, a change
		// would overwrite whatever another made meanwhile.
		return &web.FormError{Code: http.StatusBadRequest, Field: "version", Msg: "the form has no version: reload the page"}
	}
	req := projectRequest{
		RepoURL: &ps.RepoURL, DefaultBranch: &ps.DefaultBranch, ConfigPath: &ps.ConfigPath,
		WebhookSecret: nonEmpty(ps.WebhookSecret),
		Forge:         &forgeRequest{Kind: &ps.ForgeKind, URL: &ps.ForgeURL, Repo: &ps.ForgeRepo, Token: nonEmpty(ps.ForgeToken)},
	}
	_, err := s.c.updateProject(ctx, strconv.FormatInt(id, 10), ps.Version, func(p *store.Project, vs []ProjectVariable) *runnerapi.BadRequest {
		return s.c.applyProject(&req, p, vs)
	})
	return webFormError(err)
}

func (s webSource) SetVariable(ctx context.Context, id int64, v web.VariableValue) error {
	pv := ProjectVariable{Key: v.Key, Value: v.Value, Masked: v.Masked, Protected: v.Protected, File: v.File, Raw: v.Raw}
	_, err := s.c.updateProject(ctx, strconv.FormatInt(id, 10), 0, s.c.setVariable(pv))
	return webFormError(err)
}

func (s webSource) DeleteVariable(ctx context.Context, id int64, key string) error {
	_, err := s.c.updateProject(ctx, strconv.FormatInt(id, 10), 0, s.c.unsetVariable(key))
	return webFormError(err)
}
