package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// PipelineSpec is the body of POST /api/v1/pipelines.
type PipelineSpec struct {
	Project    string     `json:"project,omitempty"`
	RepoURL    string     `json:"repo_url"`
	Ref        string     `json:"ref"`
	SHA        string     `json:"sha,omitempty"`
	BeforeSHA  string     `json:"before_sha,omitempty"`
	Source     string     `json:"source,omitempty"`
	ConfigFile string     `json:"config_file,omitempty"`
	Variables  []Variable `json:"variables,omitempty"`
	// FetchRef is a ref (refs/...) the commit is fetched from when it is
	// not on Ref; Jobs, when set, the only jobs to run, with their needs
	// unless WithoutNeeds.
	FetchRef     string   `json:"fetch_ref,omitempty"`
	Jobs         []string `json:"jobs,omitempty"`
	WithoutNeeds bool     `json:"without_needs,omitempty"`
	// WithoutImages creates the jobs without image: and services:.
	WithoutImages bool `json:"without_images,omitempty"`
}

// Pipeline is a pipeline as the coordinator reports it.
type Pipeline struct {
	ID        int64    `json:"id"`
	IID       int64    `json:"iid"`
	Project   string   `json:"project"`
	Source    string   `json:"source"`
	Ref       string   `json:"ref"`
	Tag       bool     `json:"tag"`
	SHA       string   `json:"sha"`
	BeforeSHA string   `json:"before_sha,omitempty"`
	Status    string   `json:"status"`
	Name      string   `json:"name,omitempty"`
	Stages    []string `json:"stages"`
	Warnings  []string `json:"warnings,omitempty"`
	// Errors say why the configuration did not compile (a push's or a
	// schedule's pipeline that failed at once).
	Errors     []string   `json:"errors,omitempty"`
	CreatedAt  *time.Time `json:"created_at,omitempty"`
	StartedAt  *time.Time `json:"started_at,omitempty"`
	FinishedAt *time.Time `json:"finished_at,omitempty"`
	Coverage   string     `json:"coverage,omitempty"` // the average of its jobs' coverage (given with the jobs)
	Jobs       []Job      `json:"jobs,omitempty"`
	Retried    []Job      `json:"retried,omitempty"`
}

// Finished reports whether the pipeline has nothing left to run by itself.
func (p *Pipeline) Finished() bool {
	switch p.Status {
	case "success", "failed", "canceled", "skipped":
		return true
	}
	return false
}

// CreatePipeline runs a repository's CI configuration for a ref.
func (c *Client) CreatePipeline(ctx context.Context, spec PipelineSpec) (*Pipeline, error) {
	return call[Pipeline](ctx, c, http.MethodPost, "/api/v1/pipelines", spec, http.StatusCreated)
}

// Pipeline returns a pipeline with its jobs.
func (c *Client) Pipeline(ctx context.Context, id int64) (*Pipeline, error) {
	return call[Pipeline](ctx, c, http.MethodGet, "/api/v1/pipelines/"+strconv.FormatInt(id, 10), nil, http.StatusOK)
}

// Pipelines lists the newest pipelines (of project, when set), without
// their jobs.
func (c *Client) Pipelines(ctx context.Context, project string, limit int) ([]Pipeline, error) {
	q := url.Values{}
	if project != "" {
		q.Set("project", project)
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	path := "/api/v1/pipelines"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	return callList[Pipeline](ctx, c, http.MethodGet, path, nil, http.StatusOK)
}

// CancelPipeline cancels every unfinished job of a pipeline.
func (c *Client) CancelPipeline(ctx context.Context, id int64) (*Pipeline, error) {
	return call[Pipeline](ctx, c, http.MethodPost, "/api/v1/pipelines/"+strconv.FormatInt(id, 10)+"/cancel", nil, http.StatusOK)
}

// RetryPipeline retries a pipeline's failed, canceled and skipped jobs.
func (c *Client) RetryPipeline(ctx context.Context, id int64) (*Pipeline, error) {
	return call[Pipeline](ctx, c, http.MethodPost, "/api/v1/pipelines/"+strconv.FormatInt(id, 10)+"/retry", nil, http.StatusCreated)
}

// Play queues a manual job.
func (c *Client) Play(ctx context.Context, id int64) (*Job, error) {
	return call[Job](ctx, c, http.MethodPost, "/api/v1/jobs/"+strconv.FormatInt(id, 10)+"/play", nil, http.StatusOK)
}
