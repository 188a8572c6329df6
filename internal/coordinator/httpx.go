package coordinator

import (
	"context"
	"net/http"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/runnerapi"
	"github.com/drover-ci/drover/internal/store"
)

// Header names of the runner API v4.
const (
	hdrRunnerToken    = api.HeaderRunnerToken
	hdrJobToken       = api.HeaderJobToken
	hdrJobStatus      = api.HeaderJobStatus
	hdrUpdateInterval = api.HeaderTraceUpdateInterval
	hdrLastUpdate     = api.HeaderLastUpdate
	// hdrAckTimeout (drover's own) tells a two-phase runner, on the 201 of
	// jobs/request and on keep-alive answers, the ack timeout in seconds.
	hdrAckTimeout = api.HeaderAckTimeout
	// hdrJobWatch (drover's own) says the coordinator serves jobs/watch,
	// holding one at most this many seconds.
	hdrJobWatch = "X-Drover-Job-Watch"
)

// Body limits.
const (
	maxV1Body    = runnerapi.MaxAdminBody
	maxV4Body    = runnerapi.MaxRunnerBody
	maxTracePart = 1 << 20 // one trace PATCH
)

func (c *Coordinator) routes() (http.Handler, error) {
	// Runner tokens and managers (verify, registration, unregister, reset
	// token, the admin runner API) are c.runners'.
	m := runnerapi.NewMux(c.metrics.api, c.adminToken, c.runners)
	m.Jobs(runnerapi.JobHandlers{
		Request: c.handleJobRequest, Update: c.handleUpdateJob, Trace: c.handlePatchTrace,
		Provisioning: c.handleProvisioning, Watch: c.handleWatchJobs,
		UploadArtifacts: c.handleUploadArtifacts, DownloadArtifacts: c.handleDownloadArtifacts,
		// The job answers tell a runner that this coordinator serves
		// jobs/watch (see watch.go).
		Wrap: c.advertiseWatch,
	})

	// Admin API v1: jobs and pipelines (pipelines.go). Besides the admin
	// token, project tokens (access.go) read their project's, and
	// maintainers' act on them; POST /api/v1/jobs (a job of its own) is
	// the admin's.
	read := func(pattern string, fn http.HandlerFunc) {
		m.Handle(pattern, c.projectAuth(store.RoleViewer, fn))
	}
	act := func(pattern string, fn http.HandlerFunc) {
		m.Handle(pattern, c.projectAuth(store.RoleMaintainer, fn))
	}
	m.Admin("POST /api/v1/jobs", c.handleSubmitJob)
	if c.cfg.TestPayloads {
		m.Admin("POST /api/v1/test/payloads", c.handleTestPayload) // testpayloads.go
	}
	read("GET /api/v1/jobs", c.handleListJobs)
	read("GET /api/v1/jobs/{id}", c.handleGetJob)
	read("GET /api/v1/jobs/{id}/trace", c.handleGetTrace)
	act("POST /api/v1/jobs/{id}/cancel", c.handleCancelJob)
	act("POST /api/v1/jobs/{id}/retry", c.handleRetryJob)
	read("GET /api/v1/jobs/{id}/artifacts", c.handleAdminArtifacts)
	act("POST /api/v1/jobs/{id}/play", c.handlePlayJob)

	act("POST /api/v1/pipelines", c.handleCreatePipeline)
	read("GET /api/v1/pipelines", c.handleListPipelines)
	read("GET /api/v1/pipelines/{id}", c.handleGetPipeline)
	act("POST /api/v1/pipelines/{id}/cancel", c.handleCancelPipeline)
	act("POST /api/v1/pipelines/{id}/retry", c.handleRetryPipeline)

	// Admin API v1: projects and their pipeline schedules (projects.go,
	// schedules.go). {project} is a project's id or its path URL-encoded
	// (group%2Fname).
	m.Admin("POST /api/v1/projects", c.handleCreateProject)
	m.Admin("GET /api/v1/projects", c.handleListProjects)
	m.Admin("GET /api/v1/projects/{project}", c.handleGetProject)
	m.Admin("PATCH /api/v1/projects/{project}", c.handleUpdateProject)
	m.Admin("DELETE /api/v1/projects/{project}", c.handleDeleteProject)
	m.Admin("GET /api/v1/projects/{project}/webhook_secret", c.handleProjectWebhookSecret)
	m.Admin("GET /api/v1/projects/{project}/variables", c.handleListProjectVariables)
	m.Admin("PUT /api/v1/projects/{project}/variables/{key}", c.handleSetProjectVariable)
	m.Admin("DELETE /api/v1/projects/{project}/variables/{key}", c.handleDeleteProjectVariable)
	m.Admin("GET /api/v1/projects/{project}/schedules", c.handleListSchedules)
	m.Admin("POST /api/v1/projects/{project}/schedules", c.handleCreateSchedule)
	m.Admin("GET /api/v1/projects/{project}/schedules/{id}", c.handleGetSchedule)
	m.Admin("PATCH /api/v1/projects/{project}/schedules/{id}", c.handleUpdateSchedule)
	m.Admin("DELETE /api/v1/projects/{project}/schedules/{id}", c.handleDeleteSchedule)
	m.Admin("POST /api/v1/projects/{project}/schedules/{id}/play", c.handlePlaySchedule)
	m.Admin("POST /api/v1/projects/{project}/tokens", c.handleCreateProjectToken)
	m.Admin("GET /api/v1/projects/{project}/tokens", c.handleListProjectTokens)
	m.Admin("DELETE /api/v1/projects/{project}/tokens/{id}", c.handleDeleteProjectToken)

	// Webhooks of forges and git servers (hooks.go): the signature is the
	// authentication. Status badges (badge.go): /{project path}/badge.svg
	// is served as /-/badge/{project path} (badgePaths).
	m.Handle("POST /api/v1/hooks/{forge}/{project...}", http.HandlerFunc(c.handleWebhook))
	m.Handle("GET /-/badge/{project...}", http.HandlerFunc(c.handleBadge))

	desc := "store: sqlite"
	if d, ok := c.st.(interface{ Describe() string }); ok {
		desc = "store: " + d.Describe()
	}
	checks := []runnerapi.Check{runnerapi.PingCheck(desc, c.st)}
	if c.shared == nil {
		// The database and the job logs are files in the data directory.
		checks = append(checks, runnerapi.DirCheck(c.cfg.DataDir))
	}
	// Artifacts (and, without a shared store, the database and the job
	// logs) are written in the data directory: under MinFreeDisk this
	// coordinator refuses them, and says so here.
	checks = append(checks, func(context.Context) error { return c.checkDisk() })
	m.Ready(desc+"\n", checks...)

	// The web UI: /, /login, /jobs..., /static/ (webui.go).
	ui, err := c.webUI()
	if err != nil {
		return nil, err
	}
	ui.Mount(m)
	return badgePaths(m), nil
}
