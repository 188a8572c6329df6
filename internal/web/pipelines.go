package web

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"time"
)

// The pipelines' pages: the list (filtered by project, ref and status,
// paged by id), and a pipeline's page, whose graph (graph.go) follows
// the pipeline's jobs over SSE as a live section (live.go), with the
// pipeline's and its jobs' actions for the admin.

// Pipelines lists and shows pipelines (a repository's .gitlab-ci.yml run
// for a commit).
type Pipelines interface {
	// ListPipelines returns the pipelines q selects, the highest id
	// first, without their jobs.
	ListPipelines(ctx context.Context, q PipelineQuery) ([]Pipeline, error)
	// Pipeline returns pipeline id with its jobs, or ErrNotFound.
	Pipeline(ctx context.Context, id int64) (Pipeline, error)
}

// PipelineActions cancels and retries pipelines and plays manual jobs,
// for the buttons of the pages (only an admin's sign-in sees and may use
// them). Errors as Jobs's: ErrNotFound, and ErrConflict with the reason
// for an action the state does not allow.
type PipelineActions interface {
	// CancelPipeline cancels every job of pipeline id not finished.
	CancelPipeline(ctx context.Context, id int64) error
	// RetryPipeline retries the failed and canceled jobs of pipeline id
	// (and runs again those skipped after them); ErrConflict when there
	// is none.
	RetryPipeline(ctx context.Context, id int64) error
	// PlayJob queues manual job id; ErrConflict when it is not manual.
	PlayJob(ctx context.Context, id int64) error
}

// PipelineNotifier is what a Notifier also implements for a pipeline's
// page to follow its pipeline at once, not only every Config.Poll.
type PipelineNotifier interface {
	// SubscribePipeline returns a channel that receives (never blocking
	// the sender) after pipeline id or one of jobs changes; cancel ends
	// the subscription.
	SubscribePipeline(id int64, jobs []int64) (ch <-chan struct{}, cancel func())
}

// PipelineQuery selects a page of pipelines, as the store's
// PipelineFilter does.
type PipelineQuery struct {
	Project  string   // "" = all
	Ref      string   // "" = all
	Statuses []string // any of; empty = all
	BeforeID int64    // when > 0, only ids below
	Limit    int
}

// Pipeline is what the pages show of a pipeline.
type Pipeline struct {
	ID, IID                         int64
	Project, Ref, SHA, Source, Name string
	Status                          string
	Tag                             bool
	CreatedAt, StartedAt            time.Time
	FinishedAt                      time.Time
	// CommitTitle and CommitAuthor are the commit's first line and its
	// author's name ("" for pipelines from before they were kept);
	// TriggeredBy is who or what ran it, as its request said.
	CommitTitle, CommitAuthor, TriggeredBy string
	// Warnings are the compiler's; Errors, when set, why the
	// configuration could not be compiled.
	Warnings, Errors []string
	// Coverage is the average of its jobs' coverage; "" when none has
	// one.
	Coverage string
	// Stages are its stages in order, each with its jobs (the stages
	// without jobs left out).
	Stages []PipelineStage
}

// Duration is how long p ran (so far, at now): from its start to its
// finish; 0 before it started.
func (p *Pipeline) Duration(now time.Time) time.Duration {
	if p.StartedAt.IsZero() {
		return 0
	}
	end := p.FinishedAt
	if end.IsZero() {
		end = now
	}
	return max(end.Sub(p.StartedAt), 0)
}

// PipelineStage is one stage of a pipeline and its jobs.
type PipelineStage struct {
	Name string
	Jobs []Job
}

// pipelineStatuses are the pipeline statuses, for the filter.
var pipelineStatuses = []string{"created", "pending", "running", "success", "failed", "canceled", "skipped", "manual", "scheduled"}

// pipelineRow is a row of the pipelines list.
type pipelineRow struct {
	Pipeline
	Duration time.Duration
}

type pipelinesPage struct {
	base
	Statuses             []string
	Project, Ref, Status string
	Pipelines            []pipelineRow
	Older, Newest        string // URLs of the older page and the newest
	Filter               string // the filter's query
	Paged                bool   // the page is not the newest
}

// pipelinesQuery reads the filter and page of /pipelines from q.
func (u *UI) pipelinesQuery(q url.Values) (PipelineQuery, error) {
	f := PipelineQuery{Project: q.Get("project"), Ref: q.Get("ref"), Limit: u.cfg.PageSize}
	if len(f.Project) > 255 || len(f.Ref) > 255 {
		return f, errors.New("project and ref are at most 255 bytes")
	}
	if s := q.Get("status"); s != "" {
		if !slices.Contains(pipelineStatuses, s) {
			return f, fmt.Errorf("unknown status %q", s)
		}
		f.Statuses = []string{s}
	}
	if s := q.Get("before"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n <= 0 {
			return f, errors.New("before must be a pipeline id")
		}
		f.BeforeID = n
	}
	return f, nil
}

// handlePipelines is GET /pipelines?project=&ref=&status=&before=: the
// newest pipelines the filter selects, a page of Config.PageSize.
func (u *UI) handlePipelines(w http.ResponseWriter, r *http.Request, cr credentials) {
	if u.cfg.Pipelines == nil {
		u.errorPage(w, r, cr, http.StatusNotFound, "This server runs no pipelines.")
		return
	}
	f, err := u.pipelinesQuery(r.URL.Query())
	if err != nil {
		u.errorPage(w, r, cr, http.StatusBadRequest, err.Error())
		return
	}
	if cr.project != "" {
		// A project token's list is of its project.
		f.Project = cr.project
	}
	want := f.Limit
	f.Limit++
	ps, err := u.cfg.Pipelines.ListPipelines(r.Context(), f)
	if err != nil {
		u.fail(w, r, "list pipelines", err)
		return
	}
	more := len(ps) > want
	ps = ps[:min(len(ps), want)]
	filter := url.Values{}
	for k, v := range map[string]string{"project": f.Project, "ref": f.Ref} {
		if v != "" {
			filter.Set(k, v)
		}
	}
	if len(f.Statuses) > 0 {
		filter.Set("status", f.Statuses[0])
	}
	p := pipelinesPage{
		base: u.base("Pipelines", cr), Statuses: pipelineStatuses, Project: f.Project, Ref: f.Ref,
		Filter: filter.Encode(), Newest: "/pipelines?" + filter.Encode(), Paged: f.BeforeID > 0,
	}
	if len(f.Statuses) > 0 {
		p.Status = f.Statuses[0]
	}
	now := u.cfg.Clock.Now()
	for i := range ps {
		p.Pipelines = append(p.Pipelines, pipelineRow{Pipeline: ps[i], Duration: ps[i].Duration(now)})
	}
	if more && len(ps) > 0 {
		older := url.Values{}
		for k, v := range filter {
			older[k] = v
		}
		older.Set("before", strconv.FormatInt(ps[len(ps)-1].ID, 10))
		p.Older = "/pipelines?" + older.Encode()
	}
	u.render(w, r, http.StatusOK, "pipelines", p)
}

// pipelinePage is a pipeline's page and its live section.
type pipelinePage struct {
	base
	Pipeline Pipeline
	Duration time.Duration
	Graph    *graph
	// Cancelable and Retryable: the pipeline's buttons (for an admin,
	// when Config.PipelineActions is set).
	Cancelable, Retryable bool
	Actions               bool // the admin may act
	// Manual are its manual jobs (play), Failed its failed and canceled
	// ones (retry).
	Manual, Failed []Job
	// Covered are its jobs that have a coverage.
	Covered []Job
}

// loadPipeline reads pipeline {id} of the path into its page; false when
// the error page was written.
func (u *UI) loadPipeline(w http.ResponseWriter, r *http.Request, cr credentials) (pipelinePage, bool) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id <= 0 || u.cfg.Pipelines == nil {
		u.errorPage(w, r, cr, http.StatusNotFound, "No such pipeline.")
		return pipelinePage{}, false
	}
	p, err := u.pipelinePage(r.Context(), cr, id)
	if errors.Is(err, ErrNotFound) {
		u.errorPage(w, r, cr, http.StatusNotFound, fmt.Sprintf("There is no pipeline %d.", id))
		return p, false
	}
	if err != nil {
		u.fail(w, r, "show pipeline", err)
		return p, false
	}
	return p, true
}

func (u *UI) pipelinePage(ctx context.Context, cr credentials, id int64) (pipelinePage, error) {
	p, err := u.cfg.Pipelines.Pipeline(ctx, id)
	if err != nil {
		return pipelinePage{}, err
	}
	if !cr.sees(p.Project) {
		// Another project's pipeline is none to a project token.
		return pipelinePage{}, ErrNotFound
	}
	pg := pipelinePage{
		base: u.base(fmt.Sprintf("Pipeline #%d", p.ID), cr), Pipeline: p, Duration: p.Duration(u.cfg.Clock.Now()),
		Graph: layoutGraph(p.Stages), Actions: cr.canAct(p.Project) && u.cfg.PipelineActions != nil,
	}
	for _, s := range p.Stages {
		for _, j := range s.Jobs {
			if j.Coverage != "" {
				pg.Covered = append(pg.Covered, j)
			}
			switch j.Status {
			case "manual":
				pg.Manual = append(pg.Manual, j)
			case "failed", "canceled":
				pg.Failed = append(pg.Failed, j)
				pg.Retryable = true
			case "success", "skipped", "canceling":
			default:
				pg.Cancelable = true
			}
		}
	}
	return pg, nil
}

// handlePipeline is GET /pipelines/{id}: a pipeline's facts, its
// compile errors and warnings, and the graph of its jobs
// (CI_PIPELINE_URL), which live.js follows.
func (u *UI) handlePipeline(w http.ResponseWriter, r *http.Request, cr credentials) {
	p, ok := u.loadPipeline(w, r, cr)
	if !ok {
		return
	}
	u.render(w, r, http.StatusOK, "pipeline", p)
}

// handlePipelineEvents is GET /pipelines/{id}/events: the pipeline's
// live section whenever it changes.
func (u *UI) handlePipelineEvents(w http.ResponseWriter, r *http.Request, cr credentials) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id <= 0 || u.cfg.Pipelines == nil {
		http.NotFound(w, r)
		return
	}
	if p, err := u.cfg.Pipelines.Pipeline(r.Context(), id); err != nil || !cr.sees(p.Project) {
		http.Error(w, "no such pipeline", http.StatusNotFound)
		return
	}
	pn, _ := u.cfg.Notifier.(PipelineNotifier)
	var (
		changed <-chan struct{}
		cancel  = func() {}
		ids     []int64
	)
	defer func() { cancel() }()
	render := func(ctx context.Context) (string, error) {
		p, err := u.pipelinePage(ctx, cr, id)
		if err != nil {
			return "", fmt.Errorf("pipeline %d: %w", id, err)
		}
		if pn != nil {
			if now := jobIDs(&p.Pipeline); ids == nil || !slices.Equal(now, ids) {
				// Subscribed to the jobs there are now, then read again:
				// a change in between is on the page.
				cancel()
				changed, cancel = pn.SubscribePipeline(id, now)
				ids = now
				if p, err = u.pipelinePage(ctx, cr, id); err != nil {
					return "", fmt.Errorf("pipeline %d: %w", id, err)
				}
			}
		}
		var buf bytes.Buffer
		if err := u.tmpl.ExecuteTemplate(&buf, "pipeline-live", p); err != nil {
			return "", fmt.Errorf("render pipeline-live: %w", err)
		}
		return buf.String(), nil
	}
	streamHTML(r.Context(), w, u.log, func(ctx context.Context) bool { return u.wait(ctx, changed) }, render)
}

// jobIDs are the ids of p's jobs, in order.
func jobIDs(p *Pipeline) []int64 {
	ids := []int64{}
	for _, s := range p.Stages {
		for _, j := range s.Jobs {
			ids = append(ids, j.ID)
		}
	}
	slices.Sort(ids)
	return ids
}

// pipelineAction runs act on pipeline {id} of the path and goes back to
// its page, or answers act's error.
func (u *UI) pipelineAction(w http.ResponseWriter, r *http.Request, cr credentials, name string, act func(ctx context.Context, id int64) error) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id <= 0 || u.cfg.PipelineActions == nil {
		u.errorPage(w, r, cr, http.StatusNotFound, "No such pipeline.")
		return
	}
	if !cr.admin {
		// A maintainer's token acts on its project's pipelines only.
		p, err := u.cfg.Pipelines.Pipeline(r.Context(), id)
		if err == nil && !cr.canAct(p.Project) {
			err = ErrNotFound
		}
		if !u.actionDone(w, r, cr, "get pipeline", fmt.Sprintf("There is no pipeline %d.", id), err) {
			return
		}
	}
	if !u.actionDone(w, r, cr, name+" pipeline", fmt.Sprintf("There is no pipeline %d.", id), act(r.Context(), id)) {
		return
	}
	u.log.Info("pipeline action in the web UI", "action", name, "pipeline_id", id)
	http.Redirect(w, r, fmt.Sprintf("/pipelines/%d", id), http.StatusSeeOther)
}

// actionDone answers the error of an action, if any: false when it did.
func (u *UI) actionDone(w http.ResponseWriter, r *http.Request, cr credentials, what, notFound string, err error) bool {
	switch {
	case errors.Is(err, ErrNotFound):
		u.errorPage(w, r, cr, http.StatusNotFound, notFound)
	case errors.Is(err, ErrConflict):
		u.errorPage(w, r, cr, http.StatusConflict, conflictMessage(err))
	case err != nil:
		u.fail(w, r, what, err)
	default:
		return true
	}
	return false
}

// handleCancelPipeline is POST /pipelines/{id}/cancel.
func (u *UI) handleCancelPipeline(w http.ResponseWriter, r *http.Request, cr credentials) {
	u.pipelineAction(w, r, cr, "cancel", func(ctx context.Context, id int64) error {
		return u.cfg.PipelineActions.CancelPipeline(ctx, id)
	})
}

// handleRetryPipeline is POST /pipelines/{id}/retry.
func (u *UI) handleRetryPipeline(w http.ResponseWriter, r *http.Request, cr credentials) {
	u.pipelineAction(w, r, cr, "retry", func(ctx context.Context, id int64) error {
		return u.cfg.PipelineActions.RetryPipeline(ctx, id)
	})
}

// pipelineJobAction is POST /pipelines/{id}/jobs/{job}/{play,retry}: act
// on a job of the pipeline, then back to the pipeline's page.
func (u *UI) pipelineJobAction(name string) authedHandler {
	return func(w http.ResponseWriter, r *http.Request, cr credentials) {
		u.pipelineAction(w, r, cr, name+" job", func(ctx context.Context, id int64) error {
			jid, err := strconv.ParseInt(r.PathValue("job"), 10, 64)
			if err != nil || jid <= 0 {
				return ErrNotFound
			}
			j, err := u.cfg.Jobs.Job(ctx, jid)
			if err != nil {
				return err
			}
			if j.PipelineID != id {
				return ErrNotFound
			}
			if name == "play" {
				return u.cfg.PipelineActions.PlayJob(ctx, jid)
			}
			_, err = u.cfg.Jobs.RetryJob(ctx, jid)
			return err
		})
	}
}

// handlePlay is POST /jobs/{id}/play: a manual job is queued; back to
// its page.
func (u *UI) handlePlay(w http.ResponseWriter, r *http.Request, cr credentials) {
	if u.cfg.PipelineActions == nil {
		u.errorPage(w, r, cr, http.StatusNotFound, "No such job.")
		return
	}
	u.jobAction(w, r, cr, "play", func(ctx context.Context, id int64) (int64, error) {
		return id, u.cfg.PipelineActions.PlayJob(ctx, id)
	})
}
