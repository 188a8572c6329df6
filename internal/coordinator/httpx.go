package coordinator

import (
	"io"
	"net/http"

	"github.com/drover-ci/drover/internal/coordinator/store"
	"github.com/drover-ci/drover/internal/runnerapi"
)

// Header names of the runner API v4.
const (
	hdrRunnerToken    = "RUNNER-TOKEN"
	hdrJobToken       = "JOB-TOKEN"
	hdrJobStatus      = "Job-Status"
	hdrUpdateInterval = "X-GitLab-Trace-Update-Interval"
	hdrLastUpdate     = "X-GitLab-Last-Update"
	// hdrAckTimeout (drover's own) tells a two-phase runner, on the 201 of
	// jobs/request and on keep-alive answers, the ack timeout in seconds.
	hdrAckTimeout = "X-Drover-Ack-Timeout"
	// hdrJobWatch (drover's own) says the coordinator serves jobs/watch,
	// holding one at most this many seconds.
	hdrJobWatch = "X-Drover-Job-Watch"
)

// Body limits.
const (
	maxV1Body    = 4 << 20 // admin API requests
	maxV4Body    = 1 << 20 // runner JSON requests
	maxTracePart = 1 << 20 // one trace PATCH
)

func (c *Coordinator) routes() http.Handler {
	mux := http.NewServeMux()
	h := func(pattern string, fn http.HandlerFunc) {
		mux.Handle(pattern, runnerapi.Instrument(c.metrics.requests, pattern, fn))
	}
	admin := func(pattern string, fn http.HandlerFunc) {
		mux.Handle(pattern, runnerapi.Instrument(c.metrics.requests, pattern, runnerapi.RequireAdmin(c.adminToken, fn)))
	}

	// Runner API v4.
	h("POST /api/v4/runners/verify", c.handleVerify)
	h("POST /api/v4/runners", c.handleRegister)
	h("DELETE /api/v4/runners", c.handleUnregister)
	h("DELETE /api/v4/runners/managers", c.handleUnregisterManager)
	h("POST /api/v4/runners/reset_authentication_token", c.handleResetToken)
	// The job answers tell a runner that this coordinator serves
	// jobs/watch (see watch.go).
	jobs := func(pattern string, fn http.HandlerFunc) {
		h(pattern, c.advertiseWatch(fn))
	}
	jobs("POST /api/v4/jobs/request", c.handleJobRequest)
	jobs("PUT /api/v4/jobs/{id}", c.handleUpdateJob)
	jobs("PATCH /api/v4/jobs/{id}/trace", c.handlePatchTrace)
	jobs("POST /api/v4/jobs/{id}/runner_provisioning", c.handleProvisioning)
	jobs("POST /api/v4/jobs/watch", c.handleWatchJobs)

	// Admin API v1.
	admin("POST /api/v1/runners", c.handleCreateRunner)
	admin("GET /api/v1/runners", c.handleListRunners)
	admin("GET /api/v1/runners/{id}", c.handleGetRunner)
	admin("DELETE /api/v1/runners/{id}", c.handleDeleteRunner)
	admin("POST /api/v1/jobs", c.handleSubmitJob)
	admin("GET /api/v1/jobs", c.handleListJobs)
	admin("GET /api/v1/jobs/{id}", c.handleGetJob)
	admin("GET /api/v1/jobs/{id}/trace", c.handleGetTrace)
	admin("POST /api/v1/jobs/{id}/cancel", c.handleCancelJob)

	mux.Handle("GET /metrics", c.metrics.handler)
	mux.HandleFunc("GET /health/live", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("GET /health/ready", func(w http.ResponseWriter, r *http.Request) {
		desc := "store: sqlite"
		if d, ok := c.st.(interface{ Describe() string }); ok {
			desc = "store: " + d.Describe()
		}
		if err := c.st.Ping(r.Context()); err != nil {
			http.Error(w, desc+": "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		if c.shared == nil {
			// The database and the job logs are files in the data
			// directory: a full disk or a read-only one fails every
			// submission and trace, so the coordinator is not ready.
			if err := store.CheckWritable(c.cfg.DataDir); err != nil {
				http.Error(w, "data directory: "+err.Error(), http.StatusServiceUnavailable)
				return
			}
		}
		io.WriteString(w, "ok\n"+desc+"\n")
	})
	return mux
}
