package web

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// Pipelines lists and shows pipelines (a repository's .gitlab-ci.yml run
// for a commit).
type Pipelines interface {
	// ListPipelines returns the newest pipelines (of project, when set),
	// at most limit, without their jobs.
	ListPipelines(ctx context.Context, project string, limit int) ([]Pipeline, error)
	// Pipeline returns pipeline id with its jobs, or ErrNotFound.
	Pipeline(ctx context.Context, id int64) (Pipeline, error)
}

// Pipeline is what the pages show of a pipeline.
type Pipeline struct {
	ID, IID                         int64
	Project, Ref, SHA, Source, Name string
	Status                          string
	Tag                             bool
	CreatedAt, FinishedAt           time.Time
	// Coverage is the average of its jobs' coverage; "" when none has
	// one.
	Coverage string
	// Stages are its stages in order, each with its jobs (the stages
	// without jobs left out).
	Stages []PipelineStage
}

// PipelineStage is one stage of a pipeline and its jobs.
type PipelineStage struct {
	Name string
	Jobs []Job
}

type pipelinesPage struct {
	base
	Pipelines []Pipeline
}

type pipelinePage struct {
	base
	Pipeline Pipeline
}

// handlePipelines is GET /pipelines: the newest pipelines.
func (u *UI) handlePipelines(w http.ResponseWriter, r *http.Request, cr credentials) {
	if u.cfg.Pipelines == nil {
		u.errorPage(w, r, cr, http.StatusNotFound, "This server runs no pipelines.")
		return
	}
	ps, err := u.cfg.Pipelines.ListPipelines(r.Context(), r.URL.Query().Get("project"), u.cfg.PageSize)
	if err != nil {
		u.fail(w, r, "list pipelines", err)
		return
	}
	u.render(w, r, http.StatusOK, "pipelines", pipelinesPage{base: u.base("Pipelines", cr), Pipelines: ps})
}

// handlePipeline is GET /pipelines/{id}: a pipeline's stages and jobs
// (CI_PIPELINE_URL).
func (u *UI) handlePipeline(w http.ResponseWriter, r *http.Request, cr credentials) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id <= 0 || u.cfg.Pipelines == nil {
		u.errorPage(w, r, cr, http.StatusNotFound, "No such pipeline.")
		return
	}
	p, err := u.cfg.Pipelines.Pipeline(r.Context(), id)
	if errors.Is(err, ErrNotFound) {
		u.errorPage(w, r, cr, http.StatusNotFound, fmt.Sprintf("There is no pipeline %d.", id))
		return
	}
	if err != nil {
		u.fail(w, r, "show pipeline", err)
		return
	}
	u.render(w, r, http.StatusOK, "pipeline", pipelinePage{base: u.base(fmt.Sprintf("Pipeline #%d", p.ID), cr), Pipeline: p})
}
