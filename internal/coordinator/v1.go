package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/pipeline/gitrepo"
	"github.com/drover-ci/drover/internal/runnerapi"
	"github.com/drover-ci/drover/internal/store"
)

// ---- jobs ----

type submitJobRequest struct {
	Name        string         `json:"name"`
	Project     string         `json:"project"`
	Stage       string         `json:"stage"`
	Script      []string       `json:"script"`
	AfterScript []string       `json:"after_script"`
	Variables   []api.Variable `json:"variables"`
	Tags        []string       `json:"tags"`
	Timeout     *int           `json:"timeout"`
	// Image and each of Services are a string (the image name) or an
	// object; see parseImage and parseService.
	Image    json.RawMessage   `json:"image"`
	Services []json.RawMessage `json:"services"`
	// Cache is an object or an array of them; Artifacts an object;
	// Dependencies job names and ids. See v1_artifacts.go.
	Cache        json.RawMessage   `json:"cache"`
	Artifacts    json.RawMessage   `json:"artifacts"`
	Dependencies []json.RawMessage `json:"dependencies"`
	Git          *struct {
		RepoURL string `json:"repo_url"`
		Ref     string `json:"ref"`
		Sha     string `json:"sha"`
		Depth   int    `json:"depth"`
	} `json:"git"`
}

var (
	varKeyRE  = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	projectRE = regexp.MustCompile(`^[A-Za-z0-9_.][A-Za-z0-9_.-]*(/[A-Za-z0-9_.][A-Za-z0-9_.-]*)+$`)
	shaRE     = regexp.MustCompile(`^[0-9a-f]{7,64}$`)
)

// maxJobTimeout bounds timeout (and keeps time arithmetic far from
// overflow): 30 days.
const maxJobTimeout = 30 * 24 * 3600

func (req *submitJobRequest) toJob() (store.Job, *runnerapi.BadRequest) {
	j := store.Job{
		Name: strings.TrimSpace(req.Name), Project: req.Project, Stage: req.Stage,
		Timeout: 3600, Tags: []string{},
	}
	if j.Name == "" {
		return j, runnerapi.Invalid("name", "name is required")
	}
	if len(j.Name) > 255 || runnerapi.HasControl(j.Name) {
		return j, runnerapi.Invalid("name", "name must be at most 255 printable characters")
	}
	if j.Project == "" {
		j.Project = "default/default"
	}
	if len(j.Project) > 255 || !projectRE.MatchString(j.Project) || dotSegment(j.Project) {
		return j, runnerapi.Invalid("project", "project must be a path like group/project (no empty, . or .. segments)")
	}
	if j.Stage == "" {
		j.Stage = "test"
	}
	if len(j.Stage) > 255 || runnerapi.HasControl(j.Stage) {
		return j, runnerapi.Invalid("stage", "stage must be at most 255 printable characters")
	}
	if len(req.Script) == 0 {
		return j, runnerapi.Invalid("script", "script is required and must not be empty")
	}
	if req.Timeout != nil {
		if *req.Timeout <= 0 || *req.Timeout > maxJobTimeout {
			return j, runnerapi.Invalid("timeout", "timeout must be between 1 and %d seconds", maxJobTimeout)
		}
		j.Timeout = *req.Timeout
	}
	for _, t := range req.Tags {
		t = strings.TrimSpace(t)
		if e := runnerapi.ValidTag(t, "tags"); e != nil {
			return j, e
		}
		if !slices.Contains(j.Tags, t) {
			j.Tags = append(j.Tags, t)
		}
	}
	img, e := parseImage(req.Image)
	if e != nil {
		return j, e
	}
	j.Image = img.Name
	services, e := parseServices(req.Services)
	if e != nil {
		return j, e
	}
	for i, v := range req.Variables {
		if !varKeyRE.MatchString(v.Key) {
			return j, runnerapi.Invalid(fmt.Sprintf("variables[%d].key", i), "variable key %q must match %s", v.Key, varKeyRE)
		}
		if v.Masked && len(v.Value) < 8 {
			return j, runnerapi.Invalid(fmt.Sprintf("variables[%d].value", i), "masked variable %s must be at least 8 characters", v.Key)
		}
	}
	j.Spec = store.JobSpec{Script: req.Script, AfterScript: req.AfterScript, Variables: req.Variables, Image: img, Services: services}
	if g := req.Git; g != nil {
		if g.RepoURL == "" && (g.Ref != "" || g.Sha != "") {
			return j, runnerapi.Invalid("git.repo_url", "git.repo_url is required with git.ref or git.sha")
		}
		if g.Sha != "" && !shaRE.MatchString(g.Sha) {
			return j, runnerapi.Invalid("git.sha", "git.sha must be a hex commit id")
		}
		if g.Depth < 0 {
			return j, runnerapi.Invalid("git.depth", "git.depth must not be negative")
		}
		if runnerapi.HasControl(g.RepoURL) || runnerapi.HasControl(g.Ref) {
			return j, runnerapi.Invalid("git", "git fields must be printable")
		}
		j.Spec.Git = store.GitSpec{RepoURL: g.RepoURL, Ref: g.Ref, Sha: g.Sha, Depth: g.Depth}
	}
	if j.Spec.Cache, e = parseCache(req.Cache); e != nil {
		return j, e
	}
	if j.Spec.Artifacts, e = parseArtifacts(req.Artifacts); e != nil {
		return j, e
	}
	if j.Spec.Dependencies, e = parseDependencies(req.Dependencies); e != nil {
		return j, e
	}
	return j, nil
}

type jobView struct {
	ID            int64  `json:"id"`
	Name          string `json:"name"`
	Project       string `json:"project"`
	Stage         string `json:"stage"`
	Status        string `json:"status"`
	FailureReason string `json:"failure_reason,omitempty"`
	// StuckReason says why no online runner can take the job while it is
	// pending (GitLab marks such jobs stuck).
	StuckReason string `json:"stuck_reason,omitempty"`
	ExitCode    *int   `json:"exit_code,omitempty"`
	Coverage    string `json:"coverage,omitempty"` // the test coverage its log gave (coverage:), a percentage: "78.46"
	RunnerID    int64  `json:"runner_id,omitempty"`
	// RunnerDescription is the description of the runner RunnerID.
	RunnerDescription string   `json:"runner_description,omitempty"`
	RunnerSystemID    string   `json:"runner_system_id,omitempty"`
	Tags              []string `json:"tags"`
	Timeout           int      `json:"timeout"`
	Image             string   `json:"image,omitempty"`
	// Services are the names of the job's services.
	Services   []string `json:"services,omitempty"`
	CreatedAt  *string  `json:"created_at,omitempty"`
	QueuedAt   *string  `json:"queued_at,omitempty"`
	StartedAt  *string  `json:"started_at,omitempty"`
	FinishedAt *string  `json:"finished_at,omitempty"`
	UpdatedAt  *string  `json:"updated_at,omitempty"`
	TraceSize  int64    `json:"trace_size"`

	// Two-phase start. AcceptedAt is when a runner accepted the job
	// (classic runners accept by taking it); AckDeadline is set while it
	// waits for that accept.
	AcceptedAt  *string `json:"accepted_at,omitempty"`
	AckDeadline *string `json:"ack_deadline,omitempty"`
	// Seconds spent pending, in waiting_for_runner_ack (over all
	// attempts) and running; the open interval counts up to now.
	QueuedDuration       float64 `json:"queued_duration"`
	ProvisioningDuration float64 `json:"provisioning_duration"`
	RunningDuration      float64 `json:"running_duration"`
	// ProvisioningAttempts counts hand-outs to two-phase runners.
	ProvisioningAttempts int `json:"provisioning_attempts"`

	// Artifacts are the job's artifacts that have not expired, its
	// archive and its reports, as GitLab's jobs API lists them;
	// ArtifactsExpireAt is when the archive expires (absent: never, or no
	// archive). Filled by listArtifacts: the answer of a submission has
	// none.
	Artifacts         []jobArtifactView `json:"artifacts"`
	ArtifactsExpireAt *string           `json:"artifacts_expire_at,omitempty"`
}

// jobArtifactView is one of a job view's artifacts: GitLab's fields, and
// drover's expire_at (null: never).
type jobArtifactView struct {
	FileType   string  `json:"file_type"`
	Size       int64   `json:"size"`
	Filename   string  `json:"filename"`
	FileFormat string  `json:"file_format"`
	ExpireAt   *string `json:"expire_at"`
}

func (c *Coordinator) jobView(ctx context.Context, j *store.Job) jobView {
	size, _ := c.traces.Size(ctx, j.ID)
	tags := j.Tags
	if tags == nil {
		tags = []string{}
	}
	v := jobView{
		ID: j.ID, Name: j.Name, Project: j.Project, Stage: j.Stage, Status: string(j.Status),
		FailureReason: j.FailureReason, ExitCode: j.ExitCode, Coverage: j.Coverage, RunnerID: j.RunnerID, RunnerSystemID: j.RunnerSystemID,
		Tags: tags, Timeout: j.Timeout, Image: j.Image,
		CreatedAt: runnerapi.RFC3339(j.CreatedAt), QueuedAt: runnerapi.RFC3339(j.QueuedAt), StartedAt: runnerapi.RFC3339(j.StartedAt),
		FinishedAt: runnerapi.RFC3339(j.FinishedAt), UpdatedAt: runnerapi.RFC3339(j.UpdatedAt), TraceSize: size,
		AcceptedAt: runnerapi.RFC3339(j.AcceptedAt), ProvisioningAttempts: j.ProvisioningAttempts,
		Artifacts: []jobArtifactView{},
	}
	for _, s := range j.Spec.Services {
		v.Services = append(v.Services, s.Name)
	}
	now := c.clock.Now()
	queued, prov := time.Duration(j.QueuedNanos), time.Duration(j.ProvisioningNanos)
	switch j.Status {
	case store.StatusCreated, store.StatusPending:
		queued += now.Sub(j.QueuedAt)
	case store.StatusWaitingForRunnerAck:
		prov += now.Sub(j.AssignedAt)
		v.AckDeadline = runnerapi.RFC3339(j.AckDeadline)
	}
	var running time.Duration
	if !j.StartedAt.IsZero() {
		end := j.FinishedAt
		if end.IsZero() {
			end = now
		}
		running = end.Sub(j.StartedAt)
	}
	v.QueuedDuration = max(0, queued.Seconds())
	v.ProvisioningDuration = max(0, prov.Seconds())
	v.RunningDuration = max(0, running.Seconds())
	return v
}

// listArtifacts fills in the artifacts of views, those of a page of jobs
// read with one query (JobArtifacts), not one per job.
func (c *Coordinator) listArtifacts(ctx context.Context, views []jobView) error {
	if len(views) == 0 {
		return nil
	}
	ids := make([]int64, len(views))
	byID := make(map[int64]*jobView, len(views))
	for i := range views {
		ids[i] = views[i].ID
		byID[views[i].ID] = &views[i]
	}
	as, err := c.st.JobArtifacts(ctx, ids)
	if err != nil {
		return fmt.Errorf("list artifacts: %w", err)
	}
	now := c.clock.Now()
	for i := range as {
		a := &as[i]
		v := byID[a.JobID]
		if v == nil || a.Expired(now) {
			continue
		}
		expire := runnerapi.RFC3339(a.ExpireAt)
		v.Artifacts = append(v.Artifacts, jobArtifactView{
			FileType: a.Type, Size: a.Size, Filename: a.Filename, FileFormat: a.Format, ExpireAt: expire,
		})
		if a.Type == artifactTypeArchive {
			v.ArtifactsExpireAt = expire
		}
	}
	return nil
}

// jobViews returns the views of jobs: their runners, stuck reasons and
// artifacts filled in.
func (c *Coordinator) jobViews(ctx context.Context, jobs []store.Job) ([]jobView, error) {
	out := make([]jobView, 0, len(jobs))
	for i := range jobs {
		out = append(out, c.jobView(ctx, &jobs[i]))
	}
	c.markStuck(ctx, out, jobs)
	if err := c.listArtifacts(ctx, out); err != nil {
		return nil, err
	}
	return out, nil
}

// writeJob answers with job j's view.
func (c *Coordinator) writeJob(w http.ResponseWriter, r *http.Request, j *store.Job) {
	views, err := c.jobViews(r.Context(), []store.Job{*j})
	if err != nil {
		c.internalError(r.Context(), w, "job view", err)
		return
	}
	runnerapi.WriteJSON(w, http.StatusOK, views[0])
}

// handleSubmitJob is POST /api/v1/jobs: 201 with the job, now pending.
func (c *Coordinator) handleSubmitJob(w http.ResponseWriter, r *http.Request) {
	var req submitJobRequest
	if e := runnerapi.DecodeJSON(w, r, &req, maxV1Body, true); e != nil {
		runnerapi.WriteBad(w, e)
		return
	}
	j, e := req.toJob()
	if e != nil {
		runnerapi.WriteBad(w, e)
		return
	}
	if g := &j.Spec.Git; g.RepoURL != "" && g.Sha == "" {
		// GitLab always sends the commit: a runner given none checks
		// out 40 zeros and fails (GitLab Runner does). The ref is resolved
		// now, as GitLab's pipeline does when it is created, or the job
		// is refused.
		sha, err := gitrepo.ResolveRemote(r.Context(), g.RepoURL, g.Ref)
		if err != nil {
			runnerapi.WriteBad(w, runnerapi.Invalid("git.ref", "git.sha not given and %v", err))
			return
		}
		g.Sha = sha
	}
	e, err := c.resolveDependencies(r.Context(), &j)
	if err != nil {
		c.internalError(r.Context(), w, "resolve dependencies", err)
		return
	}
	if e != nil {
		runnerapi.WriteBad(w, e)
		return
	}
	now := c.clock.Now()
	j.Status, j.CreatedAt, j.QueuedAt, j.UpdatedAt = store.StatusPending, now, now, now
	j, err = c.createJob(r.Context(), j)
	if err != nil {
		c.internalError(r.Context(), w, "submit job", err)
		return
	}
	c.metrics.submitted.Inc()
	c.log.Info("job submitted", "job_id", j.ID, "project", j.Project, "tags", j.Tags)
	c.poll.wake(&j)
	views := []jobView{c.jobView(r.Context(), &j)}
	c.markStuck(r.Context(), views, []store.Job{j})
	runnerapi.WriteJSON(w, http.StatusCreated, views[0])
}

// handleListJobs is GET /api/v1/jobs?status=&project=&limit=&after_id=&
// before_id=&order=: a page of job views, with X-Total-Count. Every view
// lists its job's artifacts, as GET /api/v1/jobs/{id} does: those of the
// whole page are read with one query, so a page of 1000 jobs costs one
// more query, not 1000.
func (c *Coordinator) handleListJobs(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f := store.JobFilter{Project: q.Get("project"), Limit: 100}
	if who := principalOf(r); !who.admin {
		// A project token lists its project's jobs only.
		if f.Project != "" && f.Project != who.token.Project {
			runnerapi.WriteJSON(w, http.StatusOK, []jobView{})
			return
		}
		f.Project = who.token.Project
	}
	if s := q.Get("status"); s != "" {
		for st := range strings.SplitSeq(s, ",") {
			if !store.Status(st).Valid() {
				runnerapi.WriteError(w, http.StatusBadRequest, fmt.Sprintf("unknown status %q", st), "status")
				return
			}
			f.Statuses = append(f.Statuses, store.Status(st))
		}
	}
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 1000 {
			runnerapi.WriteError(w, http.StatusBadRequest, "limit must be between 1 and 1000", "limit")
			return
		}
		f.Limit = n
	}
	for _, p := range []struct {
		name string
		to   *int64
	}{{"after_id", &f.AfterID}, {"before_id", &f.BeforeID}} {
		if s := q.Get(p.name); s != "" {
			n, err := strconv.ParseInt(s, 10, 64)
			if err != nil || n < 0 {
				runnerapi.WriteError(w, http.StatusBadRequest, p.name+" must be a non-negative integer", p.name)
				return
			}
			*p.to = n
		}
	}
	switch q.Get("order") {
	case "", "oldest":
	case "newest":
		f.Newest = true
	default:
		runnerapi.WriteError(w, http.StatusBadRequest, "order must be oldest or newest", "order")
		return
	}
	jobs, err := c.st.ListJobs(r.Context(), f)
	if err != nil {
		c.internalError(r.Context(), w, "list jobs", err)
		return
	}
	if f.Project == "" {
		// How many jobs match the status filter in all, paging aside, for
		// "N more".
		counts, err := c.st.CountJobs(r.Context())
		if err != nil {
			c.internalError(r.Context(), w, "count jobs", err)
			return
		}
		var total int64
		for st, n := range counts {
			if len(f.Statuses) == 0 || slices.Contains(f.Statuses, st) {
				total += n
			}
		}
		w.Header().Set("X-Total-Count", strconv.FormatInt(total, 10))
	}
	out, err := c.jobViews(r.Context(), jobs)
	if err != nil {
		c.internalError(r.Context(), w, "list jobs", err)
		return
	}
	runnerapi.WriteJSON(w, http.StatusOK, out)
}

// loadJob loads job {id} for the admin API, writing 404/500 on failure.
func (c *Coordinator) loadJob(w http.ResponseWriter, r *http.Request) (store.Job, bool) {
	id, ok := runnerapi.PathID(r)
	if !ok {
		runnerapi.WriteError(w, http.StatusNotFound, "job not found", "id")
		return store.Job{}, false
	}
	j, err := c.st.GetJob(r.Context(), id)
	// A job of another project than a project token's is one it cannot
	// tell from none (access.go).
	if errors.Is(err, store.ErrNotFound) || err == nil && !principalOf(r).sees(j.Project) {
		runnerapi.WriteError(w, http.StatusNotFound, "job not found", "id")
		return store.Job{}, false
	}
	if err != nil {
		c.internalError(r.Context(), w, "get job", err)
		return j, false
	}
	return j, true
}

func (c *Coordinator) handleGetJob(w http.ResponseWriter, r *http.Request) {
	if j, ok := c.loadJob(w, r); ok {
		c.writeJob(w, r, &j)
	}
}

// handleGetTrace is GET /api/v1/jobs/{id}/trace?offset=N: the trace from
// byte N, with X-Trace-Size and X-Job-Status.
func (c *Coordinator) handleGetTrace(w http.ResponseWriter, r *http.Request) {
	j, ok := c.loadJob(w, r)
	if !ok {
		return
	}
	var off int64
	if s := r.URL.Query().Get("offset"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 0 {
			runnerapi.WriteError(w, http.StatusBadRequest, "offset must be a non-negative integer", "offset")
			return
		}
		off = n
	}
	size, err := c.traces.Size(r.Context(), j.ID)
	if err != nil {
		c.internalError(r.Context(), w, "trace size", err)
		return
	}
	off = min(off, size)
	rc, err := c.traces.Open(r.Context(), j.ID, off)
	if err != nil {
		c.internalError(r.Context(), w, "open trace", err)
		return
	}
	defer rc.Close()
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Trace-Size", strconv.FormatInt(size, 10))
	w.Header().Set("X-Job-Status", string(j.Status))
	w.Header().Set("Content-Length", strconv.FormatInt(size-off, 10))
	w.WriteHeader(http.StatusOK)
	// Copy exactly size-off bytes: the file may grow while we read.
	io.CopyN(w, rc, size-off)
}

// handleCancelJob is POST /api/v1/jobs/{id}/cancel: the job as
// cancelJob left it (canceled, or canceling until its runner stops it), or
// 409 when it cannot be canceled: {"error": "job 12 already finished:
// success", "status": "success"} for a job whose final state came first.
func (c *Coordinator) handleCancelJob(w http.ResponseWriter, r *http.Request) {
	j, ok := c.loadJob(w, r)
	if !ok {
		return
	}
	got, err := c.cancelJob(r.Context(), j)
	var ce *cancelConflict
	if errors.As(err, &ce) {
		runnerapi.WriteJSON(w, http.StatusConflict, struct {
			runnerapi.APIError
			Status store.Status `json:"status,omitempty"`
		}{runnerapi.APIError{Error: ce.msg}, ce.status})
		return
	}
	if err != nil {
		c.internalError(r.Context(), w, "cancel job", err)
		return
	}
	c.writeJob(w, r, &got)
}

// handleRetryJob is POST /api/v1/jobs/{id}/retry: as GitLab's retry, a
// new pending job with the finished job's name, project, stage, tags,
// timeout, image and spec (its variables still sealed, its dependencies the
// same jobs): 201 with the new job, 409 while the job has not finished.
// A job is retried once, as in GitLab (a retried job is not retryable):
// a retry of a job retried already, or of one being retried right now,
// is 409 naming the retry ({"error": ..., "retried_by": id}); retry that
// one instead.
func (c *Coordinator) handleRetryJob(w http.ResponseWriter, r *http.Request) {
	j, ok := c.loadJob(w, r)
	if !ok {
		return
	}
	n, err := c.retryJob(r.Context(), j)
	var ce *cancelConflict
	var re *retriedError
	switch {
	case errors.As(err, &re):
		runnerapi.WriteJSON(w, http.StatusConflict, retriedAnswer{Error: re.Error(), RetriedBy: re.by})
		return
	case errors.As(err, &ce):
		runnerapi.WriteError(w, http.StatusConflict, ce.msg, "")
		return
	case err != nil:
		c.internalError(r.Context(), w, "retry job", err)
		return
	}
	views := []jobView{c.jobView(r.Context(), &n)}
	c.markStuck(r.Context(), views, []store.Job{n})
	runnerapi.WriteJSON(w, http.StatusCreated, views[0])
}

// retriedAnswer is the 409 of a retry of a job retried already.
type retriedAnswer struct {
	Error     string `json:"error"`
	RetriedBy int64  `json:"retried_by"`
}

// retriedError is a retry refused because the job was retried already,
// by job by.
type retriedError struct{ id, by int64 }

func (e *retriedError) Error() string {
	return fmt.Sprintf("job %d was retried already, as job %d: retry that one", e.id, e.by)
}

// retriedByKey is the store setting that names the retry of job id: a
// small value per retried job, which needs no column of the jobs table.
func retriedByKey(id int64) string { return "job_retried_by:" + strconv.FormatInt(id, 10) }

// retryJob queues a new job made from finished job j; a job not finished
// is a *cancelConflict, a job retried already a *retriedError.
//
// A job is retried once whatever the number of concurrent retries, on one
// coordinator or several sharing the store: under the job's lock (every
// coordinator's), the retry is recorded in the store's settings after the
// new job is created, and a retry finding one recorded makes none. A
// coordinator that dies between the two leaves a job retried without the
// record, which may then be retried once more.
func (c *Coordinator) retryJob(ctx context.Context, j store.Job) (store.Job, error) {
	if !j.Status.Finished() {
		return store.Job{}, &cancelConflict{msg: "job is " + string(j.Status) + ": only a finished job can be retried"}
	}
	unlock, err := c.lockJobEverywhere(ctx, j.ID)
	if err != nil {
		return store.Job{}, fmt.Errorf("retry job %d: lock: %w", j.ID, err)
	}
	defer unlock()
	key := retriedByKey(j.ID)
	if c.settings != nil {
		by, err := c.settings.SettingOrInit(ctx, key, "")
		if err != nil {
			return store.Job{}, fmt.Errorf("retry job %d: %w", j.ID, err)
		}
		if by != "" {
			id, err := strconv.ParseInt(by, 10, 64)
			if err != nil {
				return store.Job{}, fmt.Errorf("retry job %d: setting %s = %q: %w", j.ID, key, by, err)
			}
			return store.Job{}, &retriedError{id: j.ID, by: id}
		}
	}
	now := c.clock.Now()
	n := store.Job{
		Name: j.Name, Project: j.Project, Stage: j.Stage, Tags: slices.Clone(j.Tags), Timeout: j.Timeout,
		Image: j.Image, Spec: j.Spec,
		Status: store.StatusPending, CreatedAt: now, QueuedAt: now, UpdatedAt: now,
	}
	if pj := j.Spec.Pipeline; pj != nil {
		// A pipeline's job is retried in its pipeline: the retry replaces
		// it there, and the pipeline's advance queues it (after what it
		// waits for, which finished already).
		retry := *pj
		retry.Attempt, retry.RetryOf = pj.Attempt+1, j.ID
		n.Spec.Pipeline = &retry
		n.PipelineID = j.PipelineID
		n.Status, n.QueuedAt = store.StatusCreated, time.Time{}
	}
	n, err = c.createJob(ctx, n)
	if err != nil {
		return store.Job{}, err
	}
	if c.settings != nil {
		// Detached: the job exists, so its record must be written even if
		// the client went away meanwhile.
		if ok, err := c.settings.SwapSetting(context.WithoutCancel(ctx), key, "", strconv.FormatInt(n.ID, 10)); err != nil || !ok {
			c.log.Error("retry: record the retry", "job_id", j.ID, "retry", n.ID, "swapped", ok, "err", err)
		}
	}
	c.metrics.submitted.Inc()
	c.log.Info("job retried", "job_id", n.ID, "retry_of", j.ID, "project", n.Project)
	if n.PipelineID != 0 {
		c.pipes.wake(n.PipelineID)
		return n, nil
	}
	c.poll.wake(&n)
	return n, nil
}

// cancelConflict is a cancel refused (the job is finished, or kept
// changing under the cancel) or a retry refused (not finished yet).
// status, when set, is the final state that made the cancel too late.
type cancelConflict struct {
	msg    string
	status store.Status
}

func (e *cancelConflict) Error() string { return e.msg }

// cancelJob cancels job j (as read): pending → canceled at once;
// waiting_for_runner_ack → canceled at once, the job token retired (the
// runner's next call gets 409, Job-Status canceled); running → canceling
// (the runner learns it from Job-Status on its next PUT/PATCH, or at once
// from its watch); canceling stays; finished → a *cancelConflict. It
// returns the job as it left it.
//
// A cancel and the runner's final PUT race with one rule, as in GitLab:
// the first to change the job wins. Each is a compare-and-set from the
// state it read (TransitionJob), so a cancel that finds the job finished
// by the PUT is refused with the job's state, and a PUT that finds the job
// canceling ends it canceled (handleUpdateJob); a cancel answered
// "canceling" never sees the job end success.
func (c *Coordinator) cancelJob(ctx context.Context, j store.Job) (store.Job, error) {
	now := c.clock.Now()
	for range 3 { // retry when the job moved between our read and our write
		var got store.Job
		var err error
		switch {
		case j.Status.Finished():
			return j, &cancelConflict{msg: fmt.Sprintf("job %d already finished: %s", j.ID, j.Status), status: j.Status}
		case j.Status == store.StatusCanceling:
			return j, nil
		case isActive(j.Status):
			got, err = c.transitionJob(ctx, j.ID, []store.Status{j.Status}, store.JobChange{Status: store.StatusCanceling, At: now})
		case j.Status == store.StatusWaitingForRunnerAck:
			prov := j.ProvisioningNanos + max(0, int64(now.Sub(j.AssignedAt)))
			none := ""
			got, err = c.transitionJob(ctx, j.ID, fromWaiting, store.JobChange{
				Status: store.StatusCanceled, TokenHash: &none, ProvisioningNanos: &prov,
				FinishedAt: now, At: now, IfVersion: j.Version,
			})
		default: // created, pending, a pipeline's manual or scheduled job
			queued := j.QueuedNanos
			if j.Status == store.StatusPending {
				queued += max(0, int64(now.Sub(j.QueuedAt)))
			}
			got, err = c.transitionJob(ctx, j.ID, []store.Status{j.Status}, store.JobChange{
				Status: store.StatusCanceled, QueuedNanos: &queued, FinishedAt: now, At: now, IfVersion: j.Version,
			})
		}
		if errors.Is(err, store.ErrConflict) {
			j = got
			continue
		}
		if err != nil {
			return j, fmt.Errorf("cancel job %d: %w", j.ID, err)
		}
		if got.Status.Finished() {
			c.finished(&got)
		}
		// The runner of a running job hears of it at once if it watches.
		c.jobChanged(ctx, got.ID, true)
		c.log.Info("job cancel requested", "job_id", got.ID, "runner_id", j.RunnerID, "system_id", j.RunnerSystemID, "from", j.Status, "status", got.Status)
		return got, nil
	}
	return j, &cancelConflict{msg: fmt.Sprintf("job %d changed state during the cancel (now %s), try again", j.ID, j.Status)}
}

// dotSegment reports whether path has a "." or ".." segment: the project
// path becomes CI_PROJECT_PATH and part of the build directory.
func dotSegment(path string) bool {
	for seg := range strings.SplitSeq(path, "/") {
		if seg == "." || seg == ".." {
			return true
		}
	}
	return false
}
