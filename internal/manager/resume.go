package manager

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/config"
	"github.com/drover-ci/drover/internal/executor"
	"github.com/drover-ci/drover/internal/jobrun"
	"github.com/drover-ci/drover/internal/jobstore"
	"github.com/drover-ci/drover/internal/trace"
)

// owner names this manager process in job records: the system id, the
// host and the pid, so that two managers sharing a Redis store differ.
func (m *Manager) owner() string { return m.ownerID }

func ownerID(systemID string) string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s/%s/%d", systemID, host, os.Getpid())
}

// storeVars are the variables [runners.store.file] path may use.
func (m *Manager) storeVars(r *config.RunnerConfig) map[string]string {
	vars := map[string]string{
		"CI_RUNNER_ID":          fmt.Sprint(r.ID),
		"CI_RUNNER_SHORT_TOKEN": api.ShortToken(r.Token),
		"CI_RUNNER_TAGS":        "",
		"CI_RUNNER_VERSION":     m.opts.Version,
		"CI_RUNNER_REVISION":    "main",
	}
	for _, kv := range r.Environment {
		if k, v, ok := strings.Cut(kv, "="); ok {
			vars[k] = v
		}
	}
	return vars
}

// checkStores parses every runner's [runners.store], for errors at start.
func (m *Manager) checkStores(cfg *config.Config) error {
	for i := range cfg.Runners {
		if _, err := jobstore.ParseConfig(m.opts.ConfigPath, &cfg.Runners[i], m.storeVars(&cfg.Runners[i])); err != nil {
			return err
		}
	}
	return nil
}

// openStores opens the job stores the runners configure. A file store
// another manager holds fails the start.
func (m *Manager) openStores(ctx context.Context) error {
	cfg := m.Config()
	for i := range cfg.Runners {
		r := &cfg.Runners[i]
		c, err := jobstore.ParseConfig(m.opts.ConfigPath, r, m.storeVars(r))
		if err != nil {
			return err
		}
		if c == nil {
			continue
		}
		key := storeKey(c)
		m.mu.Lock()
		st, ok := m.stores[key]
		m.mu.Unlock()
		if !ok {
			s, err := jobstore.Open(ctx, c, jobstore.Options{
				Logger: m.logger.With("store", c.Name),
				Clock:  m.clock,
				Owner:  m.owner(),
				OnCorrupt: func(name string, jobID int64, err error) {
					m.logger.Error("job store: corrupt record moved aside; the job cannot be resumed",
						"record", name, "job_id", jobID, "err", err)
					m.metrics.storeOp("corrupt", false)
					if c.Name == jobstore.NameFile {
						m.resuming.Go(func() { m.salvageCorrupt(ctx, name, jobID) })
					}
				},
			})
			if err != nil {
				return fmt.Errorf("runner %s: job store: %w", r.Name, err)
			}
			st = &openStore{Store: s, cfg: c, exclusive: c.Name == jobstore.NameFile}
			m.logger.Info("job store opened", "runner", r.Name, "store", key)
		}
		m.mu.Lock()
		m.stores[key] = st
		m.runnerStores[r.Token] = st
		m.mu.Unlock()
	}
	return nil
}

// storeFor returns the job store of runner r, or nil.
func (m *Manager) storeFor(r *config.RunnerConfig) *openStore {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.runnerStores[r.Token]
}

func (m *Manager) closeStores() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for k, st := range m.stores {
		if err := st.Close(); err != nil {
			m.logger.Warn("job store: close", "store", k, "err", err)
		}
		delete(m.stores, k)
	}
	clear(m.runnerStores)
}

// resumeTask is a claimed record waiting for a worker.
type resumeTask struct {
	store *openStore
	rec   *jobstore.Record
	// rs and slot are the job slot reserveSlot took for it, when it did.
	rs   *runnerState
	slot int
}

// reserveSlot takes the job slot of a claimed record before its resume
// starts, the concurrent id it had when it can: a job request made
// meanwhile must not get that id (a VM executor's slot id names the VM
// the job still runs in). A record that will not run (unknown runner,
// unreadable state, only its final update left) gets none.
func (m *Manager) reserveSlot(t *resumeTask) {
	if t.rec.State == jobstore.StateDelivering {
		return
	}
	r := m.runnerByToken(t.rec.RunnerToken)
	if r == nil {
		return
	}
	var env envelope
	if json.Unmarshal(t.rec.ExecutorState, &env) != nil {
		return
	}
	t.rs = m.runnerState(r)
	t.slot = t.rs.resumeSlot(env.Slot)
}

// watchStores claims the records of dead managers: at once for a file
// store (its lock proves its previous holder is gone), after
// health_timeout for Redis; then every health_interval, and removes
// finished and stale records every cleanup_interval.
// first is told (Done) once per store when its first claim has been
// tried, the claimed jobs' slots taken: the manager asks for no job
// before.
func (m *Manager) watchStores(ctx, reqCtx context.Context, first *sync.WaitGroup) {
	m.mu.Lock()
	stores := make([]*openStore, 0, len(m.stores))
	for _, st := range m.stores {
		stores = append(stores, st)
	}
	m.mu.Unlock()
	var wg sync.WaitGroup
	for _, st := range stores {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m.watchStore(ctx, reqCtx, st, first.Done)
		}()
	}
	wg.Wait()
}

// Claimed jobs start at once, each in a goroutine of its own: they run
// already, and waiting for a worker (which may be holding a long poll)
// would only delay them. They count against concurrent through the
// running-jobs check before each job request, and against limit through
// their runner's job slots.
func (m *Manager) watchStore(ctx, reqCtx context.Context, st *openStore, firstDone func()) {
	first := true
	firstDone = sync.OnceFunc(firstDone)
	defer firstDone()
	// ours are the jobs of this manager's previous run (same system id
	// and host, another process) on a shared store, which are not stale
	// yet when it starts: job requests wait until they are claimed (their
	// slots taken), at most until they must have gone stale.
	var ours map[int64]bool
	oursUntil := m.clock.Now().Add(st.cfg.HealthTimeout + 2*st.cfg.HealthInterval)
	lastCleanup := m.clock.Now()
	backoff := st.cfg.HealthInterval
	for {
		timeout := st.cfg.HealthTimeout
		if first && st.exclusive {
			timeout = time.Nanosecond // every record: its holder is gone
		}
		recs, err := st.ClaimStale(reqCtx, m.owner(), timeout, m.clock.Now())
		wait := st.cfg.HealthInterval
		if err != nil {
			if reqCtx.Err() != nil {
				return
			}
			m.logger.Warn("job store: claiming stale jobs failed; retrying", "err", err, "retry_in", backoff)
			m.metrics.storeOp("claim", false)
			wait = backoff
			backoff = min(backoff*2, time.Minute)
		} else {
			if first && !st.exclusive {
				ours = m.previousRun(reqCtx, st)
			}
			first = false
			backoff = st.cfg.HealthInterval
			for _, rec := range recs {
				m.logger.Info("job store: resuming a job of a stopped manager", "job_id", rec.JobID, "previous_owner_retries", rec.Retries, "stage", rec.Stage, "state", rec.State)
				t := resumeTask{store: st, rec: rec}
				m.reserveSlot(&t)
				m.resuming.Go(func() { m.resume(ctx, t) })
				delete(ours, rec.JobID)
			}
		}
		if len(ours) == 0 || !m.clock.Now().Before(oursUntil) {
			firstDone()
		}
		if now := m.clock.Now(); now.Sub(lastCleanup) >= st.cfg.CleanupInterval {
			lastCleanup = now
			if n, err := st.Cleanup(reqCtx, st.cfg.StaleTimeout, now); err != nil {
				m.logger.Warn("job store: cleanup failed", "err", err)
			} else if n > 0 {
				m.logger.Info("job store: removed finished or stale records", "count", n)
			}
		}
		select {
		case <-reqCtx.Done():
			return
		case <-m.clock.After(wait):
		}
	}
}

// previousRun returns the running records of st held by an earlier
// process of this manager on this host (its owner's system id and host
// are this one's): that process is gone, but a shared store (Redis)
// shows it only once the records go stale. Unreadable records count as
// none.
func (m *Manager) previousRun(ctx context.Context, st *openStore) map[int64]bool {
	sys, rest, _ := strings.Cut(m.owner(), "/")
	host, _, _ := strings.Cut(rest, "/")
	prefix := sys + "/" + host + "/"
	recs, err := st.List(ctx)
	if err != nil {
		m.logger.Warn("job store: cannot list the records of this manager's previous run", "err", err)
		return nil
	}
	ours := map[int64]bool{}
	for _, r := range recs {
		if r.Owner != m.owner() && strings.HasPrefix(r.Owner, prefix) && (r.State == jobstore.StateRunning || r.State == jobstore.StateDelivering) {
			ours[r.JobID] = true
		}
	}
	if len(ours) > 0 {
		m.logger.Info("job store: waiting for the jobs of this manager's previous run to go stale before asking for jobs", "jobs", len(ours), "health_timeout", st.cfg.HealthTimeout)
	}
	return ours
}

// runnerByToken finds the runner a record belongs to.
func (m *Manager) runnerByToken(token string) *config.RunnerConfig {
	cfg := m.Config()
	for i := range cfg.Runners {
		if cfg.Runners[i].Token == token {
			return &cfg.Runners[i]
		}
	}
	return nil
}

// resume continues a job from its record, in a limit slot of its runner.
func (m *Manager) resume(ctx context.Context, t resumeTask) {
	if t.rs != nil {
		defer t.rs.jobDone(t.slot)
	}
	rec := t.rec
	log := m.logger.With("job_id", rec.JobID, "runner", rec.RunnerShort, "resumed", true)
	r := m.runnerByToken(rec.RunnerToken)
	if r == nil {
		log.Error("job store: the record's runner is not in the configuration any more; leaving the record to cleanup")
		return
	}
	var job api.JobResponse
	var env envelope
	if err := json.Unmarshal(rec.Job, &job); err != nil {
		log.Error("job store: the record's job payload is unreadable", "err", err)
		_ = t.store.Remove(ctx, rec.JobID)
		return
	}
	if err := json.Unmarshal(rec.ExecutorState, &env); err != nil {
		log.Error("job store: the record's state is unreadable", "err", err)
		_ = t.store.Remove(ctx, rec.JobID)
		return
	}
	p := m.opts.Providers[r.Executor]
	client, err := m.client(r)
	if err != nil || p == nil {
		log.Error("job store: cannot reach the record's coordinator or executor", "err", err, "executor", r.Executor)
		return
	}
	if rec.State == jobstore.StateDelivering {
		m.resumeDelivery(log, t, r, client, &job, m.versionInfo(r, p), env)
		return
	}
	slot := t.slot
	if t.rs == nil {
		rs := m.runnerState(r)
		slot = rs.resumeSlot(env.Slot)
		defer rs.jobDone(slot)
	}
	settings := m.settings(r, slot)
	settings.ServerTLS = jobTLS(r, log)
	info := m.versionInfo(r, p)
	started := m.clock.Now()
	m.metrics.jobStarted(r, nil)
	m.metrics.jobResumed(r)

	fail := func(buf *trace.Buffer, st *streamer, reason api.FailureReason, msg string) {
		log.Warn("resumed job failed", "reason", reason, "why", msg)
		if buf != nil {
			fmt.Fprintf(buf, "\n\x1b[31;1mERROR: Job failed (system failure): %s\x1b[0;m\n", msg)
			buf.Finish()
		}
		m.sendFinal(context.WithoutCancel(ctx), log, client, &job, info, st, api.StateFailed, reason, nil)
		m.metrics.jobFinished(r, string(api.StateFailed), m.clock.Now().Sub(started))
		_ = t.store.Remove(context.WithoutCancel(ctx), rec.JobID)
	}

	size, resp, err := client.TraceSize(ctx, job.ID, job.Token)
	if err != nil && resp != nil && remoteAbort(resp) {
		log.Warn("the coordinator no longer runs this job; stopping what is left of it", "status", resp.StatusCode, "job_status", resp.JobStatus)
		m.stopResumed(ctx, p, settings, &job, env)
		_ = t.store.Remove(ctx, rec.JobID)
		m.metrics.jobFinished(r, outcomeDropped, m.clock.Now().Sub(started))
		return
	}
	if err != nil {
		log.Warn("cannot learn the coordinator's log size; resuming from the checkpoint", "err", err)
		size = env.LogOffset
	}
	if rec.Retries > t.store.cfg.MaxRetries {
		m.stopResumed(ctx, p, settings, &job, env)
		buf := m.resumeBuffer(&job, r, size, 0, log)
		if buf != nil {
			defer buf.Close()
		}
		fail(buf, m.resumeStreamer(r, client, &job, info, buf, size), api.RunnerSystemFailure,
			fmt.Sprintf("the job was resumed %d times, more than max_retries = %d", rec.Retries, t.store.cfg.MaxRetries))
		return
	}
	if size < env.LogOffset {
		m.stopResumed(ctx, p, settings, &job, env)
		fail(nil, nil, api.RunnerSystemFailure, fmt.Sprintf("the coordinator has %d log bytes, fewer than the %d of the checkpoint", size, env.LogOffset))
		return
	}
	if _, ok := p.Create().(executor.Stateful); !ok {
		// Nothing would be run again to fill the log from the checkpoint
		// to the coordinator's size, so the reason is written after what
		// the coordinator has, not skipped as already sent.
		buf := m.resumeBuffer(&job, r, size, 0, log)
		if buf != nil {
			defer buf.Close()
		}
		fail(buf, m.resumeStreamer(r, client, &job, info, buf, size), api.RunnerSystemFailure,
			fmt.Sprintf("the %s executor cannot resume a job after the runner manager restarted", r.Executor))
		return
	}
	buf := m.resumeBuffer(&job, r, size, size-env.LogOffset, log)
	if buf == nil {
		return
	}
	defer buf.Close()
	log.Info("resuming job", "stage", env.Checkpoint.Stage, "stage_offset", env.Checkpoint.StageOffset, "log_offset", env.LogOffset, "coordinator_log", size, "retries", rec.Retries)

	jobCtx, abort := context.WithCancel(ctx)
	defer abort()
	exec := p.Create()
	jr := &jobRun{id: job.ID, runner: settings.ShortToken, runnerName: r.Name, started: started, graceful: make(chan struct{}), abort: abort, stage: exec.CurrentStage}
	jr.resumable.Store(true)
	m.mu.Lock()
	m.jobs[job.ID] = jr
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		delete(m.jobs, job.ID)
		m.mu.Unlock()
	}()

	st := m.resumeStreamer(r, client, &job, info, buf, size)
	st.onCanceling, st.onAbort = jr.cancelGracefully, jr.abortJob
	pers, err := newPersister(m, t.store, log, &job, r.Token, buf, exec, slot, env.Accepted)
	if err != nil {
		log.Error("job store", "err", err)
		return
	}
	pers.rec.Version = rec.Version
	pers.rec.StartedAt = rec.StartedAt
	pers.rec.Retries = rec.Retries
	pers.live, pers.saved = true, env.LogOffset
	pers.setStreamer(st)
	streamCtx, stopStream := context.WithCancel(jobCtx)
	var wg sync.WaitGroup
	wg.Go(func() { st.watch(streamCtx) })
	wg.Go(func() { pers.run(streamCtx, t.store.cfg.HealthInterval) })

	maxSize, maxEntries := r.ArtifactExtractLimits()
	res := jobrun.Run(jobCtx, jr.graceful, jobrun.Options{
		Job:         &job,
		Provider:    p,
		Executor:    exec,
		Settings:    settings,
		Trace:       buf,
		Logger:      log,
		Clock:       m.opts.Clock,
		Version:     m.opts.Version,
		Helper:      m.opts.HelperCommand,
		ServerURL:   r.URL,
		SharedCache: m.sharedCache(r, &job, log),
		Checkpoint:  pers.checkpoint,
		Resume:      &jobrun.Resume{Checkpoint: env.Checkpoint, ExecutorState: env.Executor, Accepted: env.Accepted},

		ExtractMaxSize: maxSize, ExtractMaxEntries: maxEntries,
		Runner: runnerOptions(r),
	})
	resState := string(res.State)
	jr.result.Store(&resState)
	stopStream()
	wg.Wait()
	if errors.Is(res.Err, executor.ErrStageVanished) {
		fmt.Fprintf(buf, "\n\x1b[31;1mERROR: the job's processes ended while the runner manager was down, without an exit code\x1b[0;m\n")
	}
	js := &jobStart{runner: r, provider: p, client: client, settings: settings, job: &job, info: info}
	m.finishJob(ctx, log, js, st, buf, jr, res, started, pers)
}

// resumeBuffer makes the log buffer of a resumed job (newJobLog), or logs
// why it cannot and returns nil.
func (m *Manager) resumeBuffer(job *api.JobResponse, r *config.RunnerConfig, base, skip int64, log interface{ Error(string, ...any) }) *trace.Buffer {
	buf, err := newJobLog(job, r, base, skip)
	if err != nil {
		log.Error("cannot create the job log buffer", "err", err)
		return nil
	}
	return buf
}

func (m *Manager) resumeStreamer(r *config.RunnerConfig, client *api.Client, job *api.JobResponse, info api.VersionInfo, buf *trace.Buffer, sent int64) *streamer {
	if buf == nil {
		return nil
	}
	st := &streamer{
		m: m, r: r, client: client, job: job, info: info, buf: buf, log: m.logger.With("job_id", job.ID),
		interval: 3 * time.Second, lastPatch: m.clock.Now(), contact: m.clock.Now(), sent: sent, firstWait: 50 * time.Millisecond,
		onCanceling: func() {}, onAbort: func() {}, debug: debugTrace(job, r),
	}
	return st
}

// stopResumed kills what is left of a job that will not be resumed: its
// stage's processes and its files.
func (m *Manager) stopResumed(ctx context.Context, p executor.Provider, settings executor.Settings, job *api.JobResponse, env envelope) {
	exec := p.Create()
	sf, ok := exec.(executor.Stateful)
	if !ok {
		return
	}
	opts := executor.PrepareOptions{Job: job, Settings: settings, Trace: io.Discard, Logger: m.logger}
	if err := sf.Restore(ctx, opts, env.Executor); err != nil {
		m.logger.Warn("job store: cannot restore the executor to stop the job", "job_id", job.ID, "err", err)
		return
	}
	killed, cancel := context.WithCancel(ctx)
	cancel()
	_ = sf.Resume(killed, executor.Command{Stage: env.Checkpoint.Stage}, 0)
	cctx, cancel2 := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel2()
	exec.Cleanup(cctx)
}
