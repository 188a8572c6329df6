package coordinator

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"time"

	"github.com/drover-ci/drover/internal/store"
	"github.com/drover-ci/drover/internal/web"
)

// The web UI (package web) reads jobs and logs through webSource, and the
// pages authenticate with the admin token. Its live logs are woken by
// c.pages, which PATCHed traces and status changes signal here; changes
// through another coordinator on a shared store reach them by the
// pages' periodic check.

func (c *Coordinator) webUI() (*web.UI, error) {
	src := webSource{c}
	ui, err := web.New(c.log.With("component", "web"), web.Config{
		Jobs: src, Logs: src, Notifier: src, AdminToken: c.adminToken, ViewerToken: c.viewerToken,
		Artifacts: http.HandlerFunc(c.handleAdminArtifacts), Clock: c.clock, Runners: src, Pipelines: src,
		PipelineActions: src, ArtifactFiles: src, BaseURL: c.baseURL,
		Unavailable: unavailableCause, ProjectTokens: src, Projects: src,
	})
	if err != nil {
		return nil, fmt.Errorf("coordinator: %w", err)
	}
	return ui, nil
}

// webSource is the coordinator as the web UI's Jobs, Logs and Notifier.
type webSource struct{ c *Coordinator }

var (
	_ web.Jobs      = webSource{}
	_ web.Pipelines = webSource{}
	_ web.Logs      = webSource{}
	_ web.Notifier  = webSource{}

	_ web.PipelineActions  = webSource{}
	_ web.PipelineNotifier = webSource{}
	_ web.ArtifactFiles    = webSource{}
	_ web.ProjectTokens    = webSource{}
	_ web.Projects         = webSource{}
)

func (s webSource) ListJobs(ctx context.Context, q web.Query) ([]web.Job, error) {
	f := store.JobFilter{Project: q.Project, AfterID: q.AfterID, BeforeID: q.BeforeID, Newest: q.Newest, Limit: q.Limit}
	for _, st := range q.Statuses {
		f.Statuses = append(f.Statuses, store.Status(st))
	}
	jobs, err := s.c.st.ListJobs(ctx, f)
	if err != nil {
		return nil, fmt.Errorf("list jobs: %w", err)
	}
	views, err := s.c.jobViews(ctx, jobs)
	if err != nil {
		return nil, err
	}
	out := make([]web.Job, len(jobs))
	for i := range jobs {
		out[i] = webJob(&jobs[i], &views[i])
	}
	return out, nil
}

func (s webSource) Job(ctx context.Context, id int64) (web.Job, error) {
	j, err := s.c.st.GetJob(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return web.Job{}, web.ErrNotFound
	}
	if err != nil {
		return web.Job{}, fmt.Errorf("get job %d: %w", id, err)
	}
	views, err := s.c.jobViews(ctx, []store.Job{j})
	if err != nil {
		return web.Job{}, err
	}
	out := webJob(&j, &views[0])
	out.Variables = s.variableNames(&j)
	return out, nil
}

// variableNames returns the names of job j's own variables; their values
// are opened with them and dropped here.
func (s webSource) variableNames(j *store.Job) []string {
	spec := j.Spec
	if err := openVariables(s.c.box, &spec); err != nil {
		s.c.log.Warn("web: job variables cannot be opened", "job_id", j.ID, "err", err)
		return nil
	}
	names := make([]string, 0, len(spec.Variables))
	for _, v := range spec.Variables {
		names = append(names, v.Key)
	}
	return names
}

func (s webSource) CancelJob(ctx context.Context, id int64) error {
	j, err := s.c.st.GetJob(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return web.ErrNotFound
	}
	if err != nil {
		return fmt.Errorf("get job %d: %w", id, err)
	}
	_, err = s.c.cancelJob(ctx, j)
	var ce *cancelConflict
	if errors.As(err, &ce) {
		return fmt.Errorf("%w: %s", web.ErrConflict, ce.msg)
	}
	return err
}

func (s webSource) RetryJob(ctx context.Context, id int64) (int64, error) {
	j, err := s.c.st.GetJob(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return 0, web.ErrNotFound
	}
	if err != nil {
		return 0, fmt.Errorf("get job %d: %w", id, err)
	}
	n, err := s.c.retryJob(ctx, j)
	var re *retriedError
	if errors.As(err, &re) {
		// A second click, or a stale page: show the retry there is.
		return re.by, nil
	}
	var ce *cancelConflict
	if errors.As(err, &ce) {
		return 0, fmt.Errorf("%w: %s", web.ErrConflict, ce.msg)
	}
	return n.ID, err
}

func (s webSource) LogSize(ctx context.Context, id int64) (int64, error) {
	return s.c.traces.Size(ctx, id)
}

func (s webSource) OpenLog(ctx context.Context, id, offset int64) (io.ReadCloser, error) {
	return s.c.traces.Open(ctx, id, offset)
}

func (s webSource) Subscribe(id int64) (<-chan struct{}, func()) {
	return s.c.pages.subscribe([]int64{id})
}

// webJob is job j, whose view is v, as the pages show it.
func webJob(j *store.Job, v *jobView) web.Job {
	secs := func(f float64) time.Duration { return time.Duration(f * float64(time.Second)) }
	out := web.Job{
		ID: j.ID, Name: j.Name, Project: j.Project, Stage: j.Stage, Status: string(j.Status),
		FailureReason: j.FailureReason, StuckReason: v.StuckReason, ExitCode: j.ExitCode, Coverage: j.Coverage,
		RunnerID: j.RunnerID, Runner: v.RunnerDescription, Image: j.Image, Tags: v.Tags,
		CreatedAt: j.CreatedAt, QueuedAt: j.QueuedAt, StartedAt: j.StartedAt, AcceptedAt: j.AcceptedAt, FinishedAt: j.FinishedAt,
		Queued: secs(v.QueuedDuration), Provisioning: secs(v.ProvisioningDuration), Running: secs(v.RunningDuration),
		ProvisioningAttempts: j.ProvisioningAttempts, LogSize: v.TraceSize,
	}
	for _, a := range v.Artifacts {
		out.Artifacts = append(out.Artifacts, web.Artifact{Type: a.FileType, Format: a.FileFormat, Filename: a.Filename, Size: a.Size})
	}
	if pj := j.Spec.Pipeline; pj != nil {
		out.PipelineID, out.HasNeeds, out.When, out.AllowFailure = j.PipelineID, pj.HasNeeds, pj.When, pj.AllowFailure
		for _, n := range pj.Needs {
			out.Needs = append(out.Needs, n.Name)
		}
	}
	return out
}

func webPipeline(p *store.Pipeline) web.Pipeline {
	return web.Pipeline{
		ID: p.ID, IID: p.IID, Project: p.Project, Ref: p.Ref, SHA: p.SHA, Source: p.Source, Name: p.Spec.Name,
		Status: string(p.Status), Tag: p.Tag, CreatedAt: p.CreatedAt, StartedAt: p.StartedAt, FinishedAt: p.FinishedAt,
		CommitTitle: p.Spec.CommitTitle, CommitAuthor: p.Spec.CommitAuthor, TriggeredBy: p.Spec.TriggeredBy,
		Warnings: p.Spec.Warnings, Errors: p.Spec.Errors,
	}
}

func (s webSource) ListPipelines(ctx context.Context, q web.PipelineQuery) ([]web.Pipeline, error) {
	f := store.PipelineFilter{Project: q.Project, Ref: q.Ref, BeforeID: q.BeforeID, Newest: true, Limit: q.Limit}
	for _, st := range q.Statuses {
		f.Statuses = append(f.Statuses, store.PipelineStatus(st))
	}
	ps, err := s.c.st.ListPipelines(ctx, f)
	if err != nil {
		return nil, fmt.Errorf("list pipelines: %w", err)
	}
	out := make([]web.Pipeline, len(ps))
	for i := range ps {
		out[i] = webPipeline(&ps[i])
	}
	return out, nil
}

func (s webSource) Pipeline(ctx context.Context, id int64) (web.Pipeline, error) {
	p, err := s.c.st.GetPipeline(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return web.Pipeline{}, web.ErrNotFound
	}
	if err != nil {
		return web.Pipeline{}, fmt.Errorf("get pipeline %d: %w", id, err)
	}
	all, err := s.c.st.ListJobs(ctx, store.JobFilter{PipelineID: id})
	if err != nil {
		return web.Pipeline{}, fmt.Errorf("list the jobs of pipeline %d: %w", id, err)
	}
	jobs := effectiveJobs(all)
	views, err := s.c.jobViews(ctx, jobs)
	if err != nil {
		return web.Pipeline{}, err
	}
	out := webPipeline(&p)
	out.Coverage = pipelineCoverage(jobs)
	for _, stage := range p.Spec.Stages {
		st := web.PipelineStage{Name: stage}
		for i := range jobs {
			if jobs[i].Stage == stage {
				st.Jobs = append(st.Jobs, webJob(&jobs[i], &views[i]))
			}
		}
		if len(st.Jobs) > 0 {
			out.Stages = append(out.Stages, st)
		}
	}
	return out, nil
}

// pipelinePageKey is pipeline id's key in c.pages: job ids are positive,
// pipelines' keys negative.
func pipelinePageKey(id int64) int64 { return -id }

func (s webSource) SubscribePipeline(id int64, jobs []int64) (<-chan struct{}, func()) {
	return s.c.pages.subscribe(append([]int64{pipelinePageKey(id)}, jobs...))
}

// webError is err as the pages tell it: ErrNotFound, or ErrConflict with
// the reason of a *cancelConflict.
func webError(err error) error {
	var ce *cancelConflict
	switch {
	case errors.Is(err, store.ErrNotFound):
		return web.ErrNotFound
	case errors.As(err, &ce):
		return fmt.Errorf("%w: %s", web.ErrConflict, ce.msg)
	case errors.Is(err, errNothingToRetry):
		return fmt.Errorf("%w: %s", web.ErrConflict, err.Error())
	}
	return err
}

func (s webSource) CancelPipeline(ctx context.Context, id int64) error {
	if _, err := s.c.st.GetPipeline(ctx, id); err != nil {
		return webError(err)
	}
	return webError(s.c.cancelPipeline(ctx, id))
}

func (s webSource) RetryPipeline(ctx context.Context, id int64) error {
	if _, err := s.c.st.GetPipeline(ctx, id); err != nil {
		return webError(err)
	}
	return webError(s.c.retryPipeline(ctx, id))
}

func (s webSource) PlayJob(ctx context.Context, id int64) error {
	j, err := s.c.st.GetJob(ctx, id)
	if err != nil {
		return webError(err)
	}
	_, err = s.c.playJob(ctx, j)
	return webError(err)
}

// OpenArtifact opens job id's artifact of type typ on this coordinator's
// disk.
func (s webSource) OpenArtifact(ctx context.Context, id int64, typ string) (web.Artifact, web.ArtifactReader, error) {
	a, err := s.c.st.GetArtifact(ctx, id, typ)
	if errors.Is(err, store.ErrNotFound) || err == nil && (a.Retired() || a.Expired(s.c.clock.Now())) {
		return web.Artifact{}, nil, web.ErrNotFound
	}
	if err != nil {
		return web.Artifact{}, nil, fmt.Errorf("get the %s artifact of job %d: %w", typ, id, err)
	}
	f, err := os.Open(s.c.artifacts.path(a.File))
	if errors.Is(err, fs.ErrNotExist) {
		// A shared store without a shared artifacts directory.
		return web.Artifact{}, nil, web.ErrNotFound
	}
	if err != nil {
		return web.Artifact{}, nil, fmt.Errorf("open the %s artifact of job %d: %w", typ, id, err)
	}
	return web.Artifact{Type: a.Type, Format: a.Format, Filename: a.Filename, Size: a.Size}, f, nil
}
