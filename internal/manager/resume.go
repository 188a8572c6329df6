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

// resume continues a job from its record, in a limit slot of its runner:
// the steps of runJob from openLog on (the job was started by the
// manager that stopped), or only its final update's delivery when the
// record is delivering.
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
		m.resumedLife(log, r, client, &job, p, executor.Settings{}).resumeDelivery(t, env)
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
	l := m.resumedLife(log, r, client, &job, p, settings)
	m.metrics.jobStarted(r, nil)
	m.metrics.jobResumed(r)

	size, resp, err := client.TraceSize(ctx, job.ID, job.Token)
	if err != nil && resp != nil && remoteAbort(resp) {
		log.Warn("the coordinator no longer runs this job; stopping what is left of it", "status", resp.StatusCode, "job_status", resp.JobStatus)
		m.stopResumed(ctx, p, settings, &job, env)
		_ = t.store.Remove(ctx, rec.JobID)
		m.metrics.jobFinished(r, outcomeDropped, m.clock.Now().Sub(l.started))
		return
	}
	if err != nil {
		log.Warn("cannot learn the coordinator's log size; resuming from the checkpoint", "err", err)
		size = env.LogOffset
	}
	if env.Checkpoint.Stage == "" {
		// Saved when the job was received (saveReceived): the manager
		// died while it prepared, before any of its scripts ran, and
		// nothing of it can be found again. The sweep at the start does
		// not keep what the preparation left behind.
		if l.openLog(size, 0) == nil {
			defer l.buf.Close()
		}
		l.st = l.continuedStreamer(size)
		l.failResumed(ctx, t, "the runner manager stopped while it prepared the job, before any of the job's scripts ran")
		return
	}
	if rec.Retries > t.store.cfg.MaxRetries {
		m.stopResumed(ctx, p, settings, &job, env)
		if l.openLog(size, 0) == nil {
			defer l.buf.Close()
		}
		l.st = l.continuedStreamer(size)
		l.failResumed(ctx, t, fmt.Sprintf("the job was resumed %d times, more than max_retries = %d", rec.Retries, t.store.cfg.MaxRetries))
		return
	}
	if size < env.LogOffset {
		m.stopResumed(ctx, p, settings, &job, env)
		l.failResumed(ctx, t, fmt.Sprintf("the coordinator has %d log bytes, fewer than the %d of the checkpoint", size, env.LogOffset))
		return
	}
	if _, ok := p.Create().(executor.Stateful); !ok {
		// Nothing would be run again to fill the log from the checkpoint
		// to the coordinator's size, so the reason is written after what
		// the coordinator has, not skipped as already sent.
		if l.openLog(size, 0) == nil {
			defer l.buf.Close()
		}
		l.st = l.continuedStreamer(size)
		l.failResumed(ctx, t, fmt.Sprintf("the %s executor cannot resume a job after the runner manager restarted", r.Executor))
		return
	}
	if l.openLog(size, size-env.LogOffset) != nil {
		return
	}
	defer l.buf.Close()
	log.Info("resuming job", "stage", env.Checkpoint.Stage, "stage_offset", env.Checkpoint.StageOffset, "log_offset", env.LogOffset, "coordinator_log", size, "retries", rec.Retries)

	jobCtx, end := l.begin(ctx)
	defer end()
	if env.Accepted.IsZero() && job.Features.TwoPhaseJobCommit {
		// The record was saved before the job's accept (jobrun), and
		// whether that accept landed is not known: accept it again (a
		// repeated accept is harmless).
		switch err := resumedProvisioner(l).accept(jobCtx); {
		case errors.Is(err, errDropped):
			log.Warn("the job was not accepted before the restart and the coordinator took it back; stopping what is left of it")
			m.stopResumed(ctx, p, settings, &job, env)
			_ = t.store.Remove(ctx, rec.JobID)
			m.metrics.jobFinished(r, outcomeDropped, m.clock.Now().Sub(l.started))
			return
		case err != nil:
			// Its log updates accept it too (PUT state=running), and a
			// refusal there aborts it.
			log.Warn("could not accept the resumed job; resuming it anyway", "err", err)
		default:
			env.Accepted = m.clock.Now()
		}
	}
	l.st = l.continuedStreamer(size)
	if err := l.newPersister(t.store, env.Accepted); err != nil {
		log.Error("job store", "err", err)
		return
	}
	l.pers.continueRecord(rec, env.LogOffset)
	stopStream := l.stream(jobCtx)
	stopPersist := l.persist(jobCtx)
	l.build(jobCtx, nil, &jobrun.Resume{Checkpoint: env.Checkpoint, ExecutorState: env.Executor, Accepted: env.Accepted})
	stopStream()
	stopPersist()
	if errors.Is(l.res.Err, executor.ErrStageVanished) {
		fmt.Fprintf(l.buf, "\n\x1b[31;1mERROR: the job's processes ended while the runner manager was down, without an exit code\x1b[0;m\n")
	}
	l.finish(ctx)
}

// failResumed ends a resumed job that cannot go on: failed with
// runner_system_failure, why written at the end of its log (when it has
// one), and its record removed.
func (l *jobLife) failResumed(ctx context.Context, t resumeTask, why string) {
	m := l.m
	reason := api.RunnerSystemFailure
	l.log.Warn("resumed job failed", "reason", reason, "why", why)
	if l.buf != nil {
		fmt.Fprintf(l.buf, "\n\x1b[31;1mERROR: Job failed (system failure): %s\x1b[0;m\n", why)
		l.buf.Finish()
	}
	l.sendFinal(context.WithoutCancel(ctx), api.StateFailed, reason, nil)
	m.metrics.jobFinished(l.runner, string(api.StateFailed), m.clock.Now().Sub(l.started))
	_ = t.store.Remove(context.WithoutCancel(ctx), t.rec.JobID)
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
