package coordinator

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/clock"
	"github.com/drover-ci/drover/internal/httpserver"
	"github.com/drover-ci/drover/internal/runnerapi"
	"github.com/drover-ci/drover/internal/store"
)

// claimPage is how many pending jobs one claim attempt looks at per query.
const claimPage = 100

// fairHeads is how many projects' oldest jobs one claim looks at first.
const fairHeads = 64

// inProgress are the states that count as a project's jobs in progress
// for fair share.
var inProgress = []store.Status{store.StatusWaitingForRunnerAck, store.StatusRunning, store.StatusCanceling}

// handleJobRequest is POST /api/v4/jobs/request.
//
// Answers: 403 for a bad token; 201 with the job payload when a matching
// job was claimed; 204 when there is none (paused runners always get 204).
// Every answer carries X-GitLab-Last-Update. A request whose last_update
// equals the current version is held up to LongPollTimeout, until a job it
// could take is enqueued (or comes back to the queue, or stops passing
// this manager over).
//
// A runner that announces two_phase_job_commit gets the job in
// waiting_for_runner_ack, features.two_phase_job_commit true in the
// payload, and X-Drover-Ack-Timeout (seconds) on the 201.
func (c *Coordinator) handleJobRequest(w http.ResponseWriter, r *http.Request) {
	var req api.JobRequest
	rn, ok := c.runners.DecodeRunnerRequest(w, r, &req, func() (string, string) { return req.Token, req.SystemID })
	if !ok {
		return
	}
	ctx := r.Context()
	c.runners.Touch(ctx, rn, req.SystemID, req.Info, false)
	if req.ManagerStart != nil && req.SystemID != "" {
		c.endLostJobs(ctx, rn, req.SystemID, *req.ManagerStart)
	}
	key := runnerapi.ManagerKey{RunnerID: rn.ID, SystemID: req.SystemID}
	hold := c.versions.Current(key, req.LastUpdate)
	version := c.versions.Get(key)
	if rn.Paused {
		w.Header().Set(hdrLastUpdate, version)
		w.WriteHeader(http.StatusNoContent)
		return
	}

	var wt *waiter
	if hold {
		wt = c.poll.add(rn, req.Info.Features)
		defer c.poll.remove(wt)
	}
	resp, retryAt, err := c.claim(ctx, r, rn, req)
	if err != nil {
		c.internalError(r.Context(), w, "claim job", err)
		return
	}
	if resp == nil && wt != nil {
		timer := c.clock.NewTimer(c.cfg.LongPollTimeout)
		defer timer.Stop()
		// retry fires when a job that passes this manager over (it gave
		// the job back) becomes its to take: nothing else would wake it.
		var retry clock.Timer
		var woke *store.Job
		defer func() {
			if retry != nil {
				retry.Stop()
			}
		}()
	wait:
		for resp == nil {
			var retryC <-chan time.Time
			if !retryAt.IsZero() {
				d := retryAt.Sub(c.clock.Now())
				if retry == nil {
					retry = c.clock.NewTimer(d)
				} else {
					retry.Stop()
					retry.Reset(d)
				}
				retryC = retry.C()
			}
			select {
			case <-ctx.Done():
				return // the runner went away; nobody reads an answer
			case <-timer.C():
				version = c.versions.Bump(key)
				break wait
			case woke = <-wt.ch:
			case <-retryC:
			}
			resp, retryAt, err = c.claim(ctx, r, rn, req)
			if woke != nil && (err != nil || (resp == nil && !retryAt.IsZero()) || (resp != nil && resp.ID != woke.ID)) {
				// The job this request was woken for is not taken by
				// it: wake another for it.
				c.poll.wakeExcept(woke, wt)
			}
			woke = nil
			if err != nil {
				c.internalError(r.Context(), w, "claim job", err)
				return
			}
		}
	}
	w.Header().Set(hdrLastUpdate, version)
	if resp != nil && resp.Features.TwoPhaseJobCommit && ctx.Err() != nil {
		// The runner went away (a manager draining cancels its requests)
		// while its job was claimed: nobody will accept it, so it goes
		// back to the queue now rather than at its ack deadline.
		c.returnUnsent(context.WithoutCancel(ctx), resp.ID)
		return
	}
	// A runner that announced two_phase_job_commit learns from every
	// answer that jobs handed to it here wait for its accept, so it may
	// cancel a held request without losing a job.
	if req.Info.Features.TwoPhaseJobCommit {
		w.Header().Set(hdrAckTimeout, formatSeconds(c.cfg.AckTimeout))
	}
	if resp == nil {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	if resp.Features.TwoPhaseJobCommit {
		w.Header().Set(hdrAckTimeout, formatSeconds(c.cfg.AckTimeout))
	}
	if resp.Raw != nil {
		runnerapi.WriteJSON(w, http.StatusCreated, resp.Raw)
		return
	}
	runnerapi.WriteJSON(w, http.StatusCreated, resp)
}

// claim hands the oldest pending job rn can run to it, or returns nil and,
// if a job was passed over only because this manager gave it back
// recently, the time that ends (else zero).
func (c *Coordinator) claim(ctx context.Context, r *http.Request, rn store.Runner, req api.JobRequest) (_ *api.JobResponse, retryAt time.Time, _ error) {
	now := c.clock.Now()
	// Fair share first: the oldest pending job of each project, projects
	// with the fewest jobs in progress first (as GitLab does for instance
	// runners), so one project's burst does not starve the others.
	heads, err := c.st.QueueHeads(ctx, fromQueue, inProgress, fairHeads)
	if err != nil {
		return nil, time.Time{}, err
	}
	c.byLeastRecentlyServed(heads)
	for i := range heads {
		j := &heads[i]
		if c.passOver(&rn, &req, j, now, &retryAt) {
			continue
		}
		if !c.claims.begin(j.ID, j.Version) {
			continue // being claimed, or already taken: the read was old
		}
		resp, err := c.claimJob(ctx, r, rn, req, j)
		c.claims.end(j.ID, j.Version, err, c.clock.Now())
		if errors.Is(err, store.ErrConflict) {
			continue
		}
		if err == nil {
			c.markServed(j.ProjectID)
		}
		return resp, time.Time{}, err
	}
	// No project's oldest job fits this runner (tags, features): walk the
	// whole queue in order.
	var after int64
	// The first page is small: the oldest pending job usually fits. Pages
	// grow when runners skip many jobs (tags, features).
	page := 8
	for {
		jobs, err := c.st.ListJobs(ctx, store.JobFilter{Statuses: fromQueue, AfterID: after, Limit: page})
		if err != nil {
			return nil, time.Time{}, err
		}
		if len(jobs) > 0 {
			after = jobs[len(jobs)-1].ID
		}
		contended := false
		for i := range jobs {
			j := &jobs[i]
			if c.passOver(&rn, &req, j, now, &retryAt) {
				continue
			}
			if !c.claims.begin(j.ID, j.Version) {
				continue
			}
			resp, err := c.claimJob(ctx, r, rn, req, j)
			c.claims.end(j.ID, j.Version, err, c.clock.Now())
			if errors.Is(err, store.ErrConflict) {
				// Another runner was faster. Many runners claiming at
				// once walk the queue in the same order and keep
				// colliding: after a first collision, try the rest of
				// this page in random order.
				if !contended {
					contended = true
					rest := jobs[i+1:]
					rand.Shuffle(len(rest), func(a, b int) { rest[a], rest[b] = rest[b], rest[a] })
				}
				continue
			}
			return resp, time.Time{}, err
		}
		if len(jobs) < page {
			return nil, retryAt, nil
		}
		page = min(page*2, claimPage)
	}
}

// passOver reports whether claim passes j over for rn: rn cannot run it,
// or this manager gave it back recently (then retryAt becomes the end of
// that wait, if it is the earliest yet).
func (c *Coordinator) passOver(rn *store.Runner, req *api.JobRequest, j *store.Job, now time.Time, retryAt *time.Time) bool {
	if !canRun(rn, req.Info.Features, j) {
		return true
	}
	if until := c.avoidedUntil(j, req.SystemID, now); !until.IsZero() {
		if retryAt.IsZero() || until.Before(*retryAt) {
			*retryAt = until
		}
		return true
	}
	return false
}

func (c *Coordinator) claimJob(ctx context.Context, r *http.Request, rn store.Runner, req api.JobRequest, j *store.Job) (*api.JobResponse, error) {
	// The variables are opened for the payload, and only for it (see
	// secrets.go). Opened before the claim, a job whose variables do not
	// open fails from the queue instead of reaching a runner without them.
	spec := j.Spec
	if err := openVariables(c.box, &spec); err != nil {
		c.failUnopenable(ctx, j, err)
		return nil, fmt.Errorf("job %d left the queue: %w", j.ID, store.ErrConflict)
	}
	now := c.clock.Now()
	// As GitLab's pre-assign check: a job whose dependencies' artifacts
	// expired fails here rather than on a 404 at its runner.
	deps, expired := c.dependencies(ctx, j, now)
	if len(expired) > 0 {
		c.failMissingDependency(ctx, j, expired)
		return nil, fmt.Errorf("job %d left the queue: %w", j.ID, store.ErrConflict)
	}
	token := runnerapi.RandomToken(api.JobTokenPrefix, 18)
	hash := store.HashToken(token)
	timeout := j.Timeout
	if rn.MaximumTimeout > 0 && (timeout <= 0 || rn.MaximumTimeout < timeout) {
		timeout = rn.MaximumTimeout
	}
	if timeout <= 0 {
		timeout = api.DefaultJobTimeout
	}
	sys := req.SystemID
	twoPhase := req.Info.Features.TwoPhaseJobCommit
	queued := j.QueuedNanos + max(0, int64(now.Sub(j.QueuedAt)))
	ch := store.JobChange{
		Status:         claimTarget(twoPhase),
		RunnerID:       &rn.ID,
		RunnerSystemID: &sys,
		TokenHash:      &hash,
		RunTimeout:     &timeout,
		QueuedNanos:    &queued,
		AssignedAt:     now,
		ContactedAt:    now,
		At:             now,
		// j was read without a lock: claim only the state it was read in.
		IfVersion: j.Version,
		// A job another runner is claiming right now is skipped, not
		// waited for: there are other jobs to try.
		SkipLocked: true,
	}
	if twoPhase {
		attempts := j.ProvisioningAttempts + 1
		ch.ProvisioningAttempts = &attempts
		ch.AckDeadline = now.Add(c.cfg.AckTimeout)
	} else {
		ch.StartedAt, ch.AcceptedAt = now, now
	}
	got, err := c.transitionJob(ctx, j.ID, fromQueue, ch)
	if err != nil {
		return nil, err
	}
	wait := now.Sub(got.QueuedAt)
	c.metrics.queueWait.Observe(wait.Seconds())
	c.log.Info("job handed out", "job_id", got.ID, "runner_id", rn.ID, "system_id", sys, "queued", wait,
		"two_phase", twoPhase, "attempt", got.ProvisioningAttempts)
	// Its page and its pipeline's show it running.
	c.pages.changed(got.ID)
	got.Spec = spec // the stored spec, which no transition changes, opened
	resp := c.payload(r, rn, &got, token, wait.Seconds())
	if got.PipelineID != 0 && got.Spec.Pipeline != nil {
		c.pipelinePayload(ctx, r, &got, resp, deps)
	}
	resp.Features.TwoPhaseJobCommit = twoPhase
	for i := range deps {
		// The job's own token, as GitLab sends it: the download is
		// authorized by the job that depends.
		deps[i].Token = token
	}
	resp.Dependencies = deps
	if spec.RawPayload != nil && c.cfg.TestPayloads {
		raw, err := rawPayload(spec.RawPayload, got.ID, token, c.baseURL(r), twoPhase)
		if err != nil {
			return nil, err
		}
		resp.Raw = raw
	}
	return resp, nil
}

// baseURL is PublicURL, or scheme://host of the request: https when it
// came over TLS or from a trusted proxy that says its client's did
// (httpserver.Scheme; X-Forwarded-Proto from anyone else is ignored).
func (c *Coordinator) baseURL(r *http.Request) string {
	if c.cfg.PublicURL != "" {
		return c.cfg.PublicURL
	}
	scheme := httpserver.Scheme(r)
	host := r.Host
	if host == "" {
		host = "localhost"
	}
	return scheme + "://" + host
}

const zeroSHA = "0000000000000000000000000000000000000000"

// payload builds the jobs/request 201 body (facts §2).
func (c *Coordinator) payload(r *http.Request, rn store.Runner, j *store.Job, token string, queued float64) *api.JobResponse {
	base := c.baseURL(r)
	u, _ := url.Parse(base)
	if u == nil {
		u = &url.URL{Scheme: "http", Host: "localhost"}
	}
	host, port := u.Hostname(), u.Port()
	if port == "" {
		port = "80"
		if u.Scheme == "https" {
			port = "443"
		}
	}
	projectURL := base + "/" + j.Project
	jobURL := projectURL + "/-/jobs/" + strconv.FormatInt(j.ID, 10)
	ns, name := path.Split(j.Project)
	ns = strings.TrimSuffix(ns, "/")

	g := j.Spec.Git
	sha := g.Sha
	if sha == "" {
		sha = zeroSHA
	}
	ref := g.Ref
	if ref == "" {
		ref = "main"
	}
	id := strconv.FormatInt(j.ID, 10)
	v := func(k, val string) api.Variable { return api.Variable{Key: k, Value: val, Public: true} }
	vars := api.Variables{
		v("CI", "true"),
		v("GITLAB_CI", "true"),
		v("CI_SERVER", "yes"),
		v("CI_SERVER_URL", base),
		v("CI_SERVER_HOST", host),
		v("CI_SERVER_PORT", port),
		v("CI_SERVER_PROTOCOL", u.Scheme),
		v("CI_SERVER_NAME", "drover"),
		v("CI_JOB_ID", id),
		v("CI_JOB_NAME", j.Name),
		v("CI_JOB_STAGE", j.Stage),
		{Key: "CI_JOB_TOKEN", Value: token, Masked: true},
		v("CI_JOB_URL", jobURL),
		v("CI_JOB_TIMEOUT", strconv.Itoa(j.RunTimeout)),
		v("CI_PIPELINE_ID", id),
		v("CI_PIPELINE_IID", id),
		v("CI_PROJECT_ID", strconv.FormatInt(j.ProjectID, 10)),
		v("CI_PROJECT_NAME", name),
		v("CI_PROJECT_PATH", j.Project),
		v("CI_PROJECT_NAMESPACE", ns),
		v("CI_PROJECT_URL", projectURL),
		v("CI_REPOSITORY_URL", g.RepoURL),
		v("CI_COMMIT_SHA", sha),
		v("CI_COMMIT_SHORT_SHA", sha[:min(8, len(sha))]),
		v("CI_COMMIT_REF_NAME", ref),
		v("CI_COMMIT_BRANCH", ref),
		v("CI_COMMIT_BEFORE_SHA", zeroSHA),
		v("CI_DEFAULT_BRANCH", "main"),
		v("CI_RUNNER_ID", strconv.FormatInt(rn.ID, 10)),
		v("CI_RUNNER_DESCRIPTION", rn.Description),
		v("CI_RUNNER_TAGS", strings.Join(rn.Tags, ", ")),
	}
	if g.RepoURL == "" {
		vars = append(vars, v("GIT_STRATEGY", "none"))
	}
	vars = append(vars, j.Spec.Variables...)

	steps := []api.Step{{Name: api.StepScript, Script: j.Spec.Script, Timeout: j.RunTimeout, When: api.WhenOnSuccess}}
	if len(j.Spec.AfterScript) > 0 {
		steps = append(steps, api.Step{Name: api.StepAfterScript, Script: j.Spec.AfterScript, Timeout: 300, When: api.WhenAlways})
	}
	// Job.Image is the image's name; records from before the spec kept
	// the image have only that.
	img := j.Spec.Image
	img.Name = j.Image
	services := []api.Image{}
	for _, s := range j.Spec.Services {
		services = append(services, payloadImage(s))
	}
	refType := "branch"
	refspecs := []string{}
	if g.RepoURL != "" {
		refspecs = append(refspecs, "+refs/heads/"+ref+":refs/remotes/origin/"+ref)
	}
	return &api.JobResponse{
		ID:            j.ID,
		Token:         token,
		AllowGitFetch: g.RepoURL != "",
		JobInfo: api.JobInfo{
			Name: j.Name, Stage: j.Stage, PipelineID: j.ID, ProjectID: j.ProjectID,
			ProjectName: name, ProjectFullPath: j.Project, TimeInQueueSeconds: queued,
		},
		GitInfo: api.GitInfo{
			RepoURL: g.RepoURL, Ref: ref, Sha: sha, BeforeSha: zeroSHA, RefType: refType,
			Refspecs: refspecs, Depth: g.Depth,
		},
		RunnerInfo:   api.RunnerInfo{Timeout: j.RunTimeout},
		Tags:         j.Tags,
		Variables:    vars,
		Steps:        steps,
		Image:        payloadImage(img),
		Services:     services,
		Artifacts:    payloadArtifacts(j.Spec.Artifacts),
		Cache:        payloadCache(j.Spec.Cache),
		Hooks:        j.Spec.Hooks,
		Credentials:  []api.Credentials{},
		Dependencies: []api.Dependency{},
		Features: api.JobFeatures{
			TraceSections:     true,
			TokenMaskPrefixes: []string{"glpat-", api.JobTokenPrefix, api.RunnerTokenPrefix},
			FailureReasons:    api.AllFailureReasons,
		},
	}
}

// payloadImage is an image or service as the payload carries it (facts
// §2.2): the docker user goes under executor_opts.
func payloadImage(s store.ImageSpec) api.Image {
	img := api.Image{
		Name: s.Name, Alias: s.Alias, Command: s.Command, Entrypoint: s.Entrypoint,
		Variables: api.Variables(s.Variables), PullPolicy: s.PullPolicy,
	}
	if s.DockerUser != "" {
		img.ExecutorOpts = &api.ImageExecutorOpts{Docker: &api.ImageDockerOpts{User: s.DockerUser}}
	}
	return img
}

// byLeastRecentlyServed orders queue heads so that the project whose last
// hand-out is oldest (or that never had one) comes first; the store's order
// (fewest jobs in progress, then oldest job) breaks ties. This is round
// robin across projects.
func (c *Coordinator) byLeastRecentlyServed(heads []store.Job) {
	c.servedMu.Lock()
	defer c.servedMu.Unlock()
	sort.SliceStable(heads, func(a, b int) bool {
		return c.served[heads[a].ProjectID] < c.served[heads[b].ProjectID]
	})
}

func (c *Coordinator) markServed(projectID int64) {
	c.servedMu.Lock()
	defer c.servedMu.Unlock()
	if c.served == nil {
		c.served = map[int64]uint64{}
	}
	c.servedSeq++
	c.served[projectID] = c.servedSeq
}
