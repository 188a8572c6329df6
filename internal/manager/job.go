package manager

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/config"
	"github.com/drover-ci/drover/internal/executor"
	"github.com/drover-ci/drover/internal/jobrun"
	"github.com/drover-ci/drover/internal/trace"
)

// jobRun is one job being run by this manager.
type jobRun struct {
	id     int64
	runner string // short token
	// runnerName is the [[runners]] name, for gitlab_runner_jobs.
	runnerName string
	// result is the build's state once it ended (while the final update is
	// sent), for gitlab_runner_jobs.
	result    atomic.Pointer[string]
	started   time.Time
	stage     func() executor.Stage
	cancelMu  sync.Mutex
	graceful  chan struct{} // closed on a graceful cancel (Job-Status: canceling)
	gracefulD bool
	abort     context.CancelFunc
	aborted   bool // the coordinator said the job is gone: stop all calls
	// resumable: the job's record is in a job store, from which another
	// run of the manager resumes it.
	resumable atomic.Bool
}

func (j *jobRun) cancelGracefully() {
	j.cancelMu.Lock()
	defer j.cancelMu.Unlock()
	if !j.gracefulD {
		j.gracefulD = true
		close(j.graceful)
	}
}

func (j *jobRun) isCanceling() bool {
	j.cancelMu.Lock()
	defer j.cancelMu.Unlock()
	return j.gracefulD
}

func (j *jobRun) abortJob() {
	j.cancelMu.Lock()
	j.aborted = true
	j.cancelMu.Unlock()
	j.abort()
}

func (j *jobRun) isAborted() bool {
	j.cancelMu.Lock()
	defer j.cancelMu.Unlock()
	return j.aborted
}

// remoteAbort reports whether an answer tells the runner to stop working
// on the job: 403, 404, or Job-Status canceled/failed.
func remoteAbort(r *api.Response) bool {
	if r == nil {
		return false
	}
	return r.StatusCode == http.StatusForbidden || r.StatusCode == http.StatusNotFound ||
		r.StatusCode == http.StatusConflict ||
		r.JobStatus == api.RemoteCanceled || r.JobStatus == api.RemoteFailed
}

// jobStart is what a job is run with: the job, and the runner, the
// coordinator client and the executor capacity it came through.
type jobStart struct {
	runner   *config.RunnerConfig
	provider executor.Provider
	client   *api.Client
	settings executor.Settings
	// data is what provider.Acquire returned for the job; nil for a
	// resumed job.
	data executor.Data
	job  *api.JobResponse
	// info is the version information sent with each call about the job.
	info api.VersionInfo
	// ackTimeout is the coordinator's acknowledgement timeout of a
	// two-phase start (0: its default).
	ackTimeout time.Duration
}

// runJob runs one received job to its end and reports it. ctx is the
// manager's abort context.
func (m *Manager) runJob(ctx context.Context, js *jobStart) {
	r, client, job, info := js.runner, js.client, js.job, js.info
	log := m.logger.With("job_id", job.ID, "runner", js.settings.ShortToken, "project", job.JobInfo.ProjectFullPath)
	log.Info("job received", "name", job.JobInfo.Name)
	m.metrics.jobStarted(r, job)
	started := m.clock.Now()

	buf, err := newJobLog(job, r, 0, 0)
	if err != nil {
		log.Error("cannot create the job log buffer", "err", err)
		m.sendFinal(ctx, log, client, job, info, nil, api.StateFailed, api.RunnerSystemFailure, nil)
		return
	}
	defer buf.Close()

	jobCtx, abort := context.WithCancel(ctx)
	defer abort()
	exec := js.provider.Create()
	jr := &jobRun{id: job.ID, runner: js.settings.ShortToken, runnerName: r.Name, started: started, graceful: make(chan struct{}), abort: abort, stage: exec.CurrentStage}
	m.mu.Lock()
	m.jobs[job.ID] = jr
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		delete(m.jobs, job.ID)
		m.mu.Unlock()
	}()

	var prov *provisioner
	var firstInterval time.Duration
	if job.Features.TwoPhaseJobCommit {
		// Two-phase start: the job stays the coordinator's until we accept
		// it, right before the first script stage; until then keep it alive.
		prov = newProvisioner(m, js, log, started, jr.abortJob, jr.cancelGracefully)
		go prov.keepAlive(jobCtx)
		defer prov.stopKeepAlive()
	} else {
		// Classic start: tell the coordinator at once that the job runs.
		resp, err := client.UpdateJob(ctx, job.ID, api.UpdateJobRequest{Info: info, Token: job.Token, State: api.StateRunning})
		m.metrics.apiRequest(r, "update_job", http.MethodPut, resp)
		if err == nil && remoteAbort(resp) {
			log.Warn("coordinator refused the job start; dropping it", "status", resp.StatusCode, "job_status", resp.JobStatus)
			m.metrics.jobFinished(r, outcomeDropped, m.clock.Now().Sub(started))
			return
		}
		if err != nil {
			log.Warn("could not confirm the job start; running it anyway", "err", err)
		}
		if resp != nil && resp.JobStatus == api.RemoteCanceling {
			jr.cancelGracefully()
		}
		if resp != nil {
			firstInterval = resp.UpdateInterval
		}
	}

	st := &streamer{
		m: m, r: r, client: client, job: job, info: info, buf: buf, log: log,
		interval: 3 * time.Second, lastPatch: m.clock.Now(), contact: m.clock.Now(),
		onCanceling: jr.cancelGracefully, onAbort: jr.abortJob, debug: debugTrace(job, r),
	}
	st.setInterval(firstInterval)
	if prov != nil {
		// Trace patches (the preparation log) go out while provisioning,
		// but no keep-alive PUT: PUT state=running would accept the job.
		st.canPut = prov.isAccepted
		st.onAbort = func() { prov.drop("trace patch refused", nil) }
	}
	streamCtx, stopStream := context.WithCancel(jobCtx)
	var streamWG sync.WaitGroup
	streamWG.Add(1)
	go func() {
		defer streamWG.Done()
		st.watch(streamCtx)
	}()

	if m.prepareDelay > 0 {
		sleep(jobCtx, m.clock, m.prepareDelay)
	}
	var accept func(context.Context) error
	if prov != nil {
		accept = prov.accept
	}
	var pers *persister
	var checkpoint func(jobrun.Checkpoint, bool)
	stopPersist := func() {}
	if store := m.storeFor(r); store != nil {
		if pers, err = newPersister(m, store, log, job, r.Token, buf, exec, js.settings.ConcurrentID, m.clock.Now()); err != nil {
			log.Error("job store: the job will not be resumable", "err", err)
			pers = nil
		}
	}
	if pers != nil {
		jr.resumable.Store(true)
		pers.setStreamer(st)
		checkpoint = pers.checkpoint
		if accept != nil {
			acceptJob := accept
			accept = func(ctx context.Context) error {
				err := acceptJob(ctx)
				if err == nil {
					pers.setAccepted(m.clock.Now())
				}
				return err
			}
		}
		persistCtx, cancel := context.WithCancel(jobCtx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			pers.run(persistCtx, pers.store.cfg.HealthInterval)
		}()
		stopPersist = func() { cancel(); <-done }
	}
	maxSize, maxEntries := js.runner.ArtifactExtractLimits()
	res := jobrun.Run(jobCtx, jr.graceful, jobrun.Options{
		Checkpoint:  checkpoint,
		Accept:      accept,
		Job:         job,
		Provider:    js.provider,
		Executor:    exec,
		Data:        js.data,
		Settings:    js.settings,
		Trace:       buf,
		Logger:      log,
		Clock:       m.opts.Clock,
		Version:     m.opts.Version,
		Helper:      m.opts.HelperCommand,
		ServerURL:   js.runner.URL,
		SharedCache: m.sharedCache(js.runner, job, log),

		ExtractMaxSize: maxSize, ExtractMaxEntries: maxEntries,
		Runner: runnerOptions(js.runner),
	})
	resState := string(res.State)
	jr.result.Store(&resState)
	stopStream()
	streamWG.Wait()
	stopPersist()

	if prov != nil && !prov.isAccepted() {
		prov.stopKeepAlive()
		if prov.isDropped() || jr.isAborted() {
			prov.drop("aborted", nil) // for the outcome, if not settled yet
			m.metrics.jobFinished(r, outcomeDropped, m.clock.Now().Sub(started))
			return
		}
		m.declineJob(ctx, log, js, prov, jr, st, res)
		m.metrics.jobFinished(r, outcomeDeclined, m.clock.Now().Sub(started))
		return
	}
	m.finishJob(ctx, log, js, st, buf, jr, res, started, pers)
}

// runnerOptions are the keys of r that bound or change its builds.
func runnerOptions(r *config.RunnerConfig) jobrun.RunnerOptions {
	return jobrun.RunnerOptions{
		PrepareTimeout: r.PrepareTimeout(), GetSourcesTimeout: r.GetSourcesTimeout(),
		DebugTraceDisabled: r.DebugTraceDisabled,
	}
}

// newJobLog makes a job's log buffer. A resumed job's log continues at
// base, the coordinator's size, and drops the first skip bytes it
// regenerates (see trace.Options).
func newJobLog(job *api.JobResponse, r *config.RunnerConfig, base, skip int64) (*trace.Buffer, error) {
	return trace.New(trace.Options{
		Masked:        job.Variables.Masked(),
		TokenPrefixes: job.Features.TokenMaskPrefixes,
		Limit:         r.OutputLimitBytes(),
		Base:          base,
		Skip:          skip,
	})
}

// finishJob reports a build's end: the final update with the whole log.
// With a job store (pers), the job's record keeps the update until the
// coordinator has it (see deliverKept); without, it is sent within the
// retry budget.
func (m *Manager) finishJob(ctx context.Context, log *slog.Logger, js *jobStart, st *streamer, buf *trace.Buffer, jr *jobRun,
	res jobrun.Result, started time.Time, pers *persister) {
	r := js.runner
	if jr.isAborted() {
		log.Warn("job aborted by the coordinator; no final update is sent", "elapsed", m.clock.Now().Sub(started))
		m.metrics.jobFinished(r, "aborted", m.clock.Now().Sub(started))
		if pers != nil {
			pers.remove(context.WithoutCancel(ctx))
		}
		return
	}
	state, reason := res.State, res.FailureReason
	var code *int
	if res.HasExitCode {
		code = &res.ExitCode
	}
	if ctx.Err() != nil {
		// The manager is being stopped forcefully (SIGTERM/SIGINT).
		fmt.Fprintf(buf, "\n\x1b[31;1mERROR: Job failed: the runner manager was stopped (runner_interrupted)\x1b[0;m\n")
		state, reason, code = api.StateFailed, api.RunnerInterrupted, nil
	}
	buf.Finish()
	if res.Err != nil {
		log.Info("build ended with an error", "err", res.Err)
	}
	// The final update must outlive an abort of the manager: it is what
	// tells the coordinator the job is over. Bound it by shutdown_timeout.
	finalCtx := context.WithoutCancel(ctx)
	if ctx.Err() != nil {
		var cancel context.CancelFunc
		finalCtx, cancel = context.WithTimeout(finalCtx, m.Config().ShutdownTimeoutDuration())
		defer cancel()
	}
	if d := m.keepFinal(ctx, log, r, pers, st, state, reason, code); d != nil {
		m.deliverKept(ctx, finalCtx, d, js.client, js.job, js.info, st)
	} else {
		m.sendFinal(finalCtx, log, js.client, js.job, js.info, st, state, reason, code)
		if pers != nil {
			pers.remove(context.WithoutCancel(ctx))
		}
	}
	elapsed := m.clock.Now().Sub(started)
	m.metrics.jobFinished(r, string(state), elapsed)
	if state == api.StateFailed {
		m.metrics.jobFailed(r, string(reason))
	}
	attrs := []any{"state", state, "failure_reason", reason}
	if code != nil {
		attrs = append(attrs, "exit_code", *code)
	}
	log.Info("job finished", append(attrs, "duration", elapsed.Round(time.Millisecond), "log_bytes", buf.Size())...)
}

// declineJob gives back a two-phase job that was not accepted: the build
// failed before its scripts for a system reason, or the manager is being
// stopped (SIGTERM: runner_interrupted). Nothing else is sent, unless the
// answer shows that an accept landed after all (an accept whose answer was
// lost): then the job is ours and gets a final update as failed.
func (m *Manager) declineJob(ctx context.Context, log *slog.Logger, js *jobStart, prov *provisioner, jr *jobRun,
	st *streamer, res jobrun.Result) {
	reason := string(api.RunnerSystemFailure)
	switch {
	case ctx.Err() != nil:
		reason = string(api.RunnerInterrupted)
	case jr.isCanceling():
		reason = string(api.JobCanceled)
	case res.Err != nil:
		reason += ": " + res.Err.Error()
	}
	// The decline must outlive an abort of the manager: it is what returns
	// the job to the queue before the ack deadline does.
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	resp := prov.decline(dctx, reason)
	if resp != nil && resp.StatusCode == http.StatusBadRequest &&
		(resp.JobStatus == api.RemoteRunning || resp.JobStatus == api.RemoteCanceling) {
		log.Warn("the coordinator runs the job: an accept landed after all; failing it")
		failure := api.RunnerSystemFailure
		if ctx.Err() != nil {
			failure = api.RunnerInterrupted
		}
		st.buf.Finish()
		m.sendFinal(dctx, log, js.client, js.job, js.info, st, api.StateFailed, failure, nil)
	}
}

func statusOf(r *api.Response) int {
	if r == nil {
		return 0
	}
	return r.StatusCode
}

// mapFailureReason keeps reason when the coordinator lists it (or it is one
// of the three always supported), else follows GitLab Runner's
// compatibility map, else unknown_failure.
func mapFailureReason(reason api.FailureReason, supported []api.FailureReason) api.FailureReason {
	always := map[api.FailureReason]bool{api.ScriptFailure: true, api.RunnerSystemFailure: true, api.JobExecutionTimeout: true}
	compat := map[api.FailureReason]api.FailureReason{
		api.ImagePullFailure:                api.RunnerSystemFailure,
		api.RunnerConfigurationError:        api.ScriptFailure,
		api.RunnerExternalDependencyFailure: api.RunnerSystemFailure,
		api.RunnerInterrupted:               api.UnknownFailure,
		api.JobCanceled:                     api.UnknownFailure,
	}
	if reason == "" {
		return api.ScriptFailure
	}
	for range 10 {
		if always[reason] {
			return reason
		}
		for _, s := range supported {
			if s == reason {
				return reason
			}
		}
		next, ok := compat[reason]
		if !ok {
			break
		}
		reason = next
	}
	return api.UnknownFailure
}

// finalOutcome is how an attempt to deliver a final update ended.
type finalOutcome int

const (
	// finalDelivered: the coordinator has the job's end.
	finalDelivered finalOutcome = iota
	// finalRefused: it takes no more updates for the job (403, 404, 409,
	// Job-Status canceled or failed).
	finalRefused
	// finalExhausted: the retry budget is used up.
	finalExhausted
	// finalStopped: the manager stops (or lost the job's record) first.
	finalStopped
	// finalExpired: stale_timeout passed since the coordinator last
	// answered about the job.
	finalExpired
)

// finalUpdate is one job's final update and how it is retried.
type finalUpdate struct {
	client *api.Client
	job    *api.JobResponse
	st     *streamer // the job's log; nil: there is none to send
	req    api.UpdateJobRequest
	log    *slog.Logger
	// limit is the number of failed rounds before giving up; 0: none.
	limit int
	// hold, when done, stops the retries between rounds (the manager
	// stops while a job store keeps the update); nil: the ctx given to
	// deliverFinal does.
	hold context.Context
	// expired reports that retrying is pointless now; nil: never.
	expired func() bool
	// backoff is the wait after the next failed round.
	backoff time.Duration
	// noLog: the log cannot be sent any more (see resendLog).
	noLog bool
	// err is why the last round failed.
	err error
}

// newFinalUpdate prepares the final update of a job whose log st holds
// (Finish was called: its size and checksum do not change any more).
func (m *Manager) newFinalUpdate(log *slog.Logger, client *api.Client, job *api.JobResponse, info api.VersionInfo, st *streamer,
	state api.JobState, reason api.FailureReason, code *int) *finalUpdate {
	req := api.UpdateJobRequest{Info: info, Token: job.Token, State: state, ExitCode: code}
	if state == api.StateFailed {
		req.FailureReason = mapFailureReason(reason, job.Features.FailureReasons)
	}
	limit := config.DefaultJobStatusFinalUpdateRetryLimit
	if st != nil {
		req.Output = api.JobOutput{Checksum: st.buf.Checksum(), Bytesize: st.buf.Size()}
		req.Checksum = req.Output.Checksum
		if st.r.JobStatusFinalUpdateRetryLimit > 0 {
			limit = st.r.JobStatusFinalUpdateRetryLimit
		}
	}
	backoff := m.opts.RetryBackoff
	if backoff <= 0 {
		backoff = time.Second
	}
	return &finalUpdate{client: client, job: job, st: st, req: req, log: log, limit: limit, backoff: backoff}
}

// sendFinal flushes the log and reports the final state, within the
// retry budget: what happens without a job store, or when the store
// cannot keep the update (see deliverFinal for the policy).
func (m *Manager) sendFinal(ctx context.Context, log *slog.Logger, client *api.Client, job *api.JobResponse, info api.VersionInfo, st *streamer,
	state api.JobState, reason api.FailureReason, code *int) finalOutcome {
	fu := m.newFinalUpdate(log, client, job, info, st, state, reason, code)
	out := m.deliverFinal(ctx, fu)
	switch out {
	case finalExhausted:
		// Counted before it is logged, so that whoever reads the log line
		// (an operator, a test) finds the metric already counting it.
		m.metrics.finalAbandoned(abandonedRetryLimit)
		log.Error("final update failed; giving up: the coordinator keeps the job running until its stale timeout", "rounds", fu.limit, "err", fu.err)
	case finalStopped:
		log.Error("final update abandoned", "err", ctx.Err())
	}
	return out
}

// deliverFinal sends a final update until it is delivered, refused, or
// the policy of fu ends it.
//
// Retry policy: rounds of {flush the whole remaining log; PUT the final
// state}, at most fu.limit failed ones when it is set
// (job_status_final_update_retry_limit, default 10), with exponential
// backoff 1 s → 60 s between failed rounds. A 202 answer (the coordinator
// is still finishing the log) waits the update interval and sends again; a
// 412 (checksum mismatch) resends the whole log from offset 0. 403, 404,
// 409 or Job-Status canceled stop at once. Neither 202 nor 412 counts as a
// failed round, but both are bounded by 100 answers.
func (m *Manager) deliverFinal(ctx context.Context, fu *finalUpdate) finalOutcome {
	hold := fu.hold
	if hold == nil {
		hold = ctx
	}
	soft := 0
	for round := 0; fu.limit == 0 || round < fu.limit; {
		switch {
		case ctx.Err() != nil:
			return finalStopped
		case fu.expired != nil && fu.expired():
			return finalExpired
		}
		var failed error
		if fu.st != nil && !fu.noLog {
			if err := fu.st.flushAll(ctx); errors.Is(err, errAborted) {
				return finalRefused
			} else if err != nil {
				failed = err
			}
		}
		if failed == nil {
			resp, err := fu.client.UpdateJob(ctx, fu.job.ID, fu.req)
			m.metrics.apiRequest(nil, "update_job", http.MethodPut, resp)
			if fu.st != nil {
				fu.st.noteAnswer(resp)
			}
			switch {
			case err != nil:
				failed = err
			case resp.StatusCode == http.StatusOK:
				return finalDelivered
			case remoteAbort(resp):
				fu.log.Warn("coordinator no longer accepts updates for this job", "status", resp.StatusCode, "job_status", resp.JobStatus)
				return finalRefused
			case resp.StatusCode == http.StatusAccepted && soft < 100:
				soft++
				wait := time.Second
				if fu.st != nil {
					wait = fu.st.currentInterval()
				}
				sleep(hold, m.clock, min(wait, 3*time.Second))
				if hold.Err() != nil {
					return finalStopped
				}
				continue
			case resp.StatusCode == http.StatusPreconditionFailed && fu.st != nil && soft < 100:
				soft++
				fu.resendLog()
				continue
			default:
				failed = fmt.Errorf("final update: status %d", resp.StatusCode)
			}
		}
		round++
		fu.err = failed
		if fu.limit > 0 && round >= fu.limit {
			break
		}
		if hold.Err() == nil {
			attrs := []any{"err", failed, "round", round, "backoff", fu.backoff}
			if fu.limit > 0 {
				attrs = append(attrs, "limit", fu.limit)
			}
			fu.log.Warn("final update failed; retrying", attrs...)
			sleep(hold, m.clock, fu.backoff)
			fu.backoff = min(fu.backoff*2, time.Minute)
		}
		if hold.Err() != nil {
			return finalStopped
		}
	}
	return finalExhausted
}

// resendLog answers a 412: the coordinator dropped its copy of the log and
// wants all of it. When this manager holds only the end of the log (a
// resumed job, or a final update kept in a job store), the rest cannot be
// sent again: the final state goes without a checksum, so that at least
// the job's outcome is right.
func (fu *finalUpdate) resendLog() {
	if base := fu.st.buf.Base(); base > 0 {
		fu.log.Error("the coordinator lost the job's log and this manager holds only its end; sending the final state without the log", "held_from", base)
		fu.req.Output.Checksum, fu.req.Checksum = "", ""
		fu.noLog = true
		return
	}
	fu.log.Warn("coordinator's copy of the log differs; resending the whole log")
	fu.st.resetOffset(0)
}

func sleep(ctx context.Context, c interface {
	After(time.Duration) <-chan time.Time
}, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-c.After(d):
	}
}
