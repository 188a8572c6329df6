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

// jobLife is one job's life in this manager, from its receipt (receive)
// or its resume from a job store (resumedLife) to its final update: who
// the job is and what it runs with, then what each step made of it.
// Manager.runJob walks a received job through the steps, top to bottom:
//
//	receive ─► openLog ─► begin ─► start ─► stream ─► openRecord, persist ─► build ─┬─► finish ─► sendFinal
//	                                 │                                                │     or keepFinal ─► deliverKept
//	                                 └─ refused: dropped                              └─► decline (two-phase, not accepted)
//
// Manager.resume walks a resumed one through the same steps from openLog
// on (no start: the job runs already), and a final update a job store
// kept goes on in deliverRecord, with a life of its own (detached).
//
// The steps run on the job's goroutine, one after the other, and set the
// fields of the second group, in that order. A goroutine a step starts
// captures what it needs, never the life: a field set later must not
// change what it sees.
type jobLife struct {
	m        *Manager
	log      *slog.Logger // the manager's log, narrowed to the job
	runner   *config.RunnerConfig
	client   *api.Client
	job      *api.JobResponse
	info     api.VersionInfo // sent with each call about the job
	provider executor.Provider
	settings executor.Settings
	started  time.Time
	// resumed: the job was resumed from a job store, whose record it has
	// from the start.
	resumed bool

	buf  *trace.Buffer     // openLog: the job's log
	exec executor.Executor // begin
	jr   *jobRun           // begin: the job among the manager's running ones
	prov *provisioner      // start: a two-phase job's; nil for a classic start
	st   *streamer         // newStreamer: sends buf to the coordinator
	pers *persister        // openRecord: keeps the job's record; nil without a job store
	res  jobrun.Result     // build: the build's outcome
}

// runJob runs one received job to its end and reports it. ctx is the
// manager's abort context.
func (m *Manager) runJob(ctx context.Context, js *jobStart) {
	l := m.receive(js)
	if l.openLog(0, 0) != nil {
		l.sendFinal(ctx, api.StateFailed, api.RunnerSystemFailure, nil)
		return
	}
	defer l.buf.Close()
	jobCtx, end := l.begin(ctx)
	defer end()
	interval, ok := l.start(ctx, jobCtx, js.ackTimeout)
	if !ok {
		return
	}
	if l.prov != nil {
		defer l.prov.stopKeepAlive()
	}
	l.st = l.newStreamer()
	l.st.setInterval(interval)
	stopStream := l.stream(jobCtx)
	if m.prepareDelay > 0 {
		sleep(jobCtx, m.clock, m.prepareDelay)
	}
	l.openRecord(m.storeFor(l.runner))
	l.saveReceived(jobCtx)
	stopPersist := l.persist(jobCtx)
	l.build(jobCtx, js.data, nil)
	stopStream()
	stopPersist()
	if l.prov != nil && !l.prov.isAccepted() {
		l.decline(ctx)
		return
	}
	l.finish(ctx)
}

// receive starts the life of a job the coordinator gave this manager.
func (m *Manager) receive(js *jobStart) *jobLife {
	job := js.job
	l := &jobLife{
		m: m, runner: js.runner, client: js.client, job: job, info: js.info, provider: js.provider, settings: js.settings,
		log: m.logger.With("job_id", job.ID, "runner", js.settings.ShortToken, "project", job.JobInfo.ProjectFullPath),
	}
	l.log.Info("job received", "name", job.JobInfo.Name)
	m.metrics.jobStarted(l.runner, job)
	l.started = m.clock.Now()
	return l
}

// resumedLife starts the life of a job resumed from its record (see
// Manager.resume).
func (m *Manager) resumedLife(log *slog.Logger, r *config.RunnerConfig, client *api.Client, job *api.JobResponse,
	p executor.Provider, settings executor.Settings) *jobLife {
	return &jobLife{
		m: m, log: log, runner: r, client: client, job: job, info: m.versionInfo(r, p),
		provider: p, settings: settings, started: m.clock.Now(), resumed: true,
	}
}

// openLog makes the job's log buffer. A resumed job's log continues at
// base, the coordinator's size, and drops the first skip bytes it
// regenerates (see trace.Options). On an error, logged here, the life
// has no log.
func (l *jobLife) openLog(base, skip int64) error {
	buf, err := trace.New(trace.Options{
		Masked:        l.job.Variables.Masked(),
		TokenPrefixes: l.job.Features.TokenMaskPrefixes,
		Limit:         l.runner.OutputLimitBytes(),
		Base:          base,
		Skip:          skip,
	})
	if err != nil {
		l.log.Error("cannot create the job log buffer", "err", err)
		return err
	}
	l.buf = buf
	return nil
}

// begin makes the job's executor and counts the job among the manager's
// running ones. It returns the job's context, which aborting the job
// (jobRun.abortJob) cancels, and end, which ends both.
func (l *jobLife) begin(ctx context.Context) (jobCtx context.Context, end func()) {
	m := l.m
	jobCtx, abort := context.WithCancel(ctx)
	l.exec = l.provider.Create()
	l.jr = &jobRun{
		id: l.job.ID, runner: l.settings.ShortToken, runnerName: l.runner.Name, started: l.started,
		graceful: make(chan struct{}), abort: abort, stage: l.exec.CurrentStage,
	}
	if l.resumed {
		l.jr.resumable.Store(true)
	}
	id := l.job.ID
	m.mu.Lock()
	m.jobs[id] = l.jr
	m.mu.Unlock()
	return jobCtx, func() {
		m.mu.Lock()
		delete(m.jobs, id)
		m.mu.Unlock()
		abort()
	}
}

// start tells the coordinator the job is taken. A two-phase job is kept
// alive (l.prov) until it is accepted or declined; a classic one is
// reported running at once, and ok is false when the coordinator refuses
// that (the job is dropped). interval is the coordinator's update
// interval, when it said one.
func (l *jobLife) start(ctx, jobCtx context.Context, ackTimeout time.Duration) (interval time.Duration, ok bool) {
	m := l.m
	if l.job.Features.TwoPhaseJobCommit {
		// Two-phase start: the job stays the coordinator's until we accept
		// it, right before the first script stage; until then keep it alive.
		l.prov = newProvisioner(l, ackTimeout)
		go l.prov.keepAlive(jobCtx)
		return 0, true
	}
	// Classic start: tell the coordinator at once that the job runs.
	resp, err := l.client.UpdateJob(ctx, l.job.ID, api.UpdateJobRequest{Info: l.info, Token: l.job.Token, State: api.StateRunning})
	m.metrics.apiRequest(l.runner, "update_job", http.MethodPut, resp)
	if err == nil && remoteAbort(resp) {
		l.log.Warn("coordinator refused the job start; dropping it", "status", resp.StatusCode, "job_status", resp.JobStatus)
		m.metrics.jobFinished(l.runner, outcomeDropped, m.clock.Now().Sub(l.started))
		return 0, false
	}
	if err != nil {
		l.log.Warn("could not confirm the job start; running it anyway", "err", err)
	}
	if resp != nil && resp.JobStatus == api.RemoteCanceling {
		l.jr.cancelGracefully()
	}
	if resp != nil {
		interval = resp.UpdateInterval
	}
	return interval, true
}

// newStreamer makes the streamer of the job's log. The coordinator's
// cancels reach the running job (l.jr), if there is one; a two-phase job
// not accepted yet gets no keep-alive PUT.
func (l *jobLife) newStreamer() *streamer {
	m := l.m
	st := &streamer{
		m: m, r: l.runner, client: l.client, job: l.job, info: l.info, buf: l.buf, log: l.log,
		interval: 3 * time.Second, lastPatch: m.clock.Now(), contact: m.clock.Now(),
		onCanceling: func() {}, onAbort: func() {}, debug: debugTrace(l.job, l.runner),
	}
	if l.jr != nil {
		st.onCanceling, st.onAbort = l.jr.cancelGracefully, l.jr.abortJob
	}
	if prov := l.prov; prov != nil {
		// Trace patches (the preparation log) go out while provisioning,
		// but no keep-alive PUT: PUT state=running would accept it.
		st.canPut = prov.isAccepted
		st.onAbort = func() { prov.drop("trace patch refused", nil) }
	}
	return st
}

// continuedStreamer makes the streamer of a log that goes on where the
// coordinator's copy ends, at sent (a resumed job, a final update a job
// store kept): it sends the log's first bytes at once. Nil without a log.
func (l *jobLife) continuedStreamer(sent int64) *streamer {
	if l.buf == nil {
		return nil
	}
	st := l.newStreamer()
	st.log = l.m.logger.With("job_id", l.job.ID)
	st.sent, st.firstWait = sent, 50*time.Millisecond
	return st
}

// stream sends the job's log (l.st) while the job runs; stop ends that
// and waits for it.
func (l *jobLife) stream(jobCtx context.Context) (stop func()) {
	st := l.st
	ctx, cancel := context.WithCancel(jobCtx)
	var wg sync.WaitGroup
	wg.Go(func() { st.watch(ctx) })
	return func() {
		cancel()
		wg.Wait()
	}
}

// openRecord makes the persister of the job's record in store, a new
// one; without a store, or when it cannot, the job is not resumable.
func (l *jobLife) openRecord(store *openStore) {
	if store == nil {
		return
	}
	accepted := l.m.clock.Now()
	if l.prov != nil {
		// A two-phase job's record is saved before its accept (jobrun):
		// no acceptance time tells a resume to accept it.
		accepted = time.Time{}
	}
	if err := l.newPersister(store, accepted); err != nil {
		l.log.Error("job store: the job will not be resumable", "err", err)
	}
}

// saveReceived saves the record of a classic job before it is prepared:
// the coordinator runs it from the moment it was handed out. A two-phase
// job's first save comes before its accept (jobrun); until then a manager
// that dies leaves it to the coordinator's ack deadline.
func (l *jobLife) saveReceived(ctx context.Context) {
	if l.pers == nil || l.prov != nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	l.pers.received(ctx)
}

// newPersister makes l.pers, the persister of the job's record in store.
func (l *jobLife) newPersister(store *openStore, accepted time.Time) error {
	pers, err := newPersister(l.m, store, l.log, l.job, l.runner.Token, l.buf, l.exec, l.settings.ConcurrentID, accepted)
	if err != nil {
		return err
	}
	l.pers = pers
	return nil
}

// persist keeps the job's record (l.pers) up to date while the job runs;
// stop ends that and waits for it. Without a record it does nothing.
func (l *jobLife) persist(jobCtx context.Context) (stop func()) {
	pers := l.pers
	if pers == nil {
		return func() {}
	}
	l.jr.resumable.Store(true)
	pers.setStreamer(l.st)
	ctx, cancel := context.WithCancel(jobCtx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		pers.run(ctx, pers.store.cfg.HealthInterval)
	}()
	return func() {
		cancel()
		<-done
	}
}

// build runs the job's build to its end and keeps its outcome (l.res).
// data is what the executor capacity was acquired with (nil for a
// resumed job); resume, where a resumed job's build goes on (nil: it
// starts).
func (l *jobLife) build(jobCtx context.Context, data executor.Data, resume *jobrun.Resume) {
	m, r := l.m, l.runner
	var checkpoint func(jobrun.Checkpoint, bool)
	if l.pers != nil {
		checkpoint = l.pers.checkpoint
	}
	maxSize, maxEntries := r.ArtifactExtractLimits()
	l.res = jobrun.Run(jobCtx, l.jr.graceful, jobrun.Options{
		Checkpoint:  checkpoint,
		Accept:      l.accept(),
		Job:         l.job,
		Provider:    l.provider,
		Executor:    l.exec,
		Data:        data,
		Settings:    l.settings,
		Trace:       l.buf,
		Logger:      l.log,
		Clock:       m.opts.Clock,
		Version:     m.opts.Version,
		Helper:      m.opts.HelperCommand,
		ServerURL:   r.URL,
		SharedCache: m.sharedCache(r, l.job, l.log),
		Resume:      resume,

		ExtractMaxSize: maxSize, ExtractMaxEntries: maxEntries,
		Runner: runnerOptions(r),
	})
	state := string(l.res.State)
	l.jr.result.Store(&state)
}

// accept is the build's Accept (jobrun.Options): nil but for a two-phase
// job, whose job record, if it has one, keeps when it was accepted.
func (l *jobLife) accept() func(context.Context) error {
	prov, pers, m := l.prov, l.pers, l.m
	if prov == nil {
		return nil
	}
	return func(ctx context.Context) error {
		m.killAt(killBeforeAccept)
		err := prov.accept(ctx)
		if err == nil {
			m.killAt(killAfterAccept)
			if pers != nil {
				pers.setAccepted(m.clock.Now())
			}
		}
		return err
	}
}

// runnerOptions are the keys of r that bound or change its builds.
func runnerOptions(r *config.RunnerConfig) jobrun.RunnerOptions {
	return jobrun.RunnerOptions{
		PrepareTimeout: r.PrepareTimeout(), GetSourcesTimeout: r.GetSourcesTimeout(),
		DebugTraceDisabled: r.DebugTraceDisabled,
	}
}

// finish reports a build's end (l.res): the final update with the whole
// log. With a job record (l.pers), it keeps the update until the
// coordinator has it (see deliverKept); without, it is sent within the
// retry budget.
func (l *jobLife) finish(ctx context.Context) {
	m, r, log, res := l.m, l.runner, l.log, l.res
	if l.jr.isAborted() {
		log.Warn("job aborted by the coordinator; no final update is sent", "elapsed", m.clock.Now().Sub(l.started))
		m.metrics.jobFinished(r, "aborted", m.clock.Now().Sub(l.started))
		if l.pers != nil {
			l.pers.remove(context.WithoutCancel(ctx))
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
		fmt.Fprintf(l.buf, "\n\x1b[31;1mERROR: Job failed: the runner manager was stopped (runner_interrupted)\x1b[0;m\n")
		state, reason, code = api.StateFailed, api.RunnerInterrupted, nil
	}
	l.buf.Finish()
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
	if d := l.keepFinal(ctx, state, reason, code); d != nil {
		l.deliverKept(ctx, finalCtx, d)
	} else {
		l.sendFinal(finalCtx, state, reason, code)
		if l.pers != nil {
			l.pers.remove(context.WithoutCancel(ctx))
		}
	}
	elapsed := m.clock.Now().Sub(l.started)
	m.metrics.jobFinished(r, string(state), elapsed)
	if state == api.StateFailed {
		m.metrics.jobFailed(r, string(reason))
	}
	attrs := []any{"state", state, "failure_reason", reason}
	if code != nil {
		attrs = append(attrs, "exit_code", *code)
	}
	log.Info("job finished", append(attrs, "duration", elapsed.Round(time.Millisecond), "log_bytes", l.buf.Size())...)
}

// decline ends a two-phase job that was not accepted. When the
// coordinator took it back, or aborted it, it is dropped. Else it is given
// back: the build failed before its scripts for a system reason, or the
// manager is being stopped (SIGTERM: runner_interrupted). Nothing else is
// sent, unless the answer shows that an accept landed after all (an
// accept whose answer was lost): then the job is ours and gets a final
// update as failed.
func (l *jobLife) decline(ctx context.Context) {
	m, prov := l.m, l.prov
	prov.stopKeepAlive()
	if l.pers != nil {
		// Saved before the accept that did not happen (or was refused).
		defer l.pers.remove(context.WithoutCancel(ctx))
	}
	if prov.isDropped() || l.jr.isAborted() {
		prov.drop("aborted", nil) // for the outcome, if not settled yet
		m.metrics.jobFinished(l.runner, outcomeDropped, m.clock.Now().Sub(l.started))
		return
	}
	reason := string(api.RunnerSystemFailure)
	switch {
	case ctx.Err() != nil:
		reason = string(api.RunnerInterrupted)
	case l.jr.isCanceling():
		reason = string(api.JobCanceled)
	case l.res.Err != nil:
		reason += ": " + l.res.Err.Error()
	}
	// The decline must outlive an abort of the manager: it is what returns
	// the job to the queue before the ack deadline does.
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	resp := prov.decline(dctx, reason)
	if resp != nil && resp.StatusCode == http.StatusBadRequest &&
		(resp.JobStatus == api.RemoteRunning || resp.JobStatus == api.RemoteCanceling) {
		l.log.Warn("the coordinator runs the job: an accept landed after all; failing it")
		failure := api.RunnerSystemFailure
		if ctx.Err() != nil {
			failure = api.RunnerInterrupted
		}
		l.buf.Finish()
		l.sendFinal(dctx, api.StateFailed, failure, nil)
	}
	m.metrics.jobFinished(l.runner, outcomeDeclined, m.clock.Now().Sub(l.started))
}

// sendFinal flushes the log (l.st, if any) and reports the final state,
// within the retry budget: what happens without a job store, or when the
// store cannot keep the update (see deliverFinal for the policy).
func (l *jobLife) sendFinal(ctx context.Context, state api.JobState, reason api.FailureReason, code *int) finalOutcome {
	m := l.m
	fu := l.newFinalUpdate(state, reason, code)
	out := m.deliverFinal(ctx, fu)
	switch out {
	case finalExhausted:
		// Counted before it is logged, so that whoever reads the log line
		// (an operator, a test) finds the metric already counting it.
		m.metrics.finalAbandoned(abandonedRetryLimit)
		l.log.Error("final update failed; giving up: the coordinator keeps the job running until its stale timeout", "rounds", fu.limit, "err", fu.err)
	case finalStopped:
		l.log.Error("final update abandoned", "err", ctx.Err())
	}
	return out
}

// newFinalUpdate prepares the job's final update, with the log l.st holds
// (Finish was called: its size and checksum do not change any more), or
// none when l.st is nil.
func (l *jobLife) newFinalUpdate(state api.JobState, reason api.FailureReason, code *int) *finalUpdate {
	job := l.job
	req := api.UpdateJobRequest{Info: l.info, Token: job.Token, State: state, ExitCode: code}
	if state == api.StateFailed {
		req.FailureReason = mapFailureReason(reason, job.Features.FailureReasons)
	}
	limit := config.DefaultJobStatusFinalUpdateRetryLimit
	if st := l.st; st != nil {
		req.Output = api.JobOutput{Checksum: st.buf.Checksum(), Bytesize: st.buf.Size()}
		req.Checksum = req.Output.Checksum
		if st.r.JobStatusFinalUpdateRetryLimit > 0 {
			limit = st.r.JobStatusFinalUpdateRetryLimit
		}
	}
	backoff := l.m.opts.RetryBackoff
	if backoff <= 0 {
		backoff = time.Second
	}
	return &finalUpdate{client: l.client, job: job, st: l.st, req: req, log: l.log, limit: limit, backoff: backoff}
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
