package manager

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/config"
	"github.com/drover-ci/drover/internal/executor"
)

// runnerState is the live bookkeeping of one [[runners]] entry.
type runnerState struct {
	mu         sync.Mutex
	jobs       int          // jobs running (limit)
	requests   int          // job requests in flight (request_concurrency)
	slots      map[int]bool // concurrent ids in use
	unhealthy  int          // consecutive unhealthy request results
	skipUntil  time.Time    // unhealthy runners are skipped until then
	fastRepoll int          // consecutive immediate re-polls
}

// reserve takes a limit slot and a request slot, or reports false;
// exceeded says the refusal was request_concurrency's. requests is the
// number of requests in flight after it.
func (rs *runnerState) reserve(r *config.RunnerConfig, now time.Time) (ok, exceeded bool, requests int) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if now.Before(rs.skipUntil) {
		return false, false, rs.requests
	}
	if r.Limit > 0 && rs.jobs+rs.requests >= r.Limit {
		return false, false, rs.requests
	}
	rc := r.RequestConcurrency
	if rc < 1 {
		rc = 1
	}
	if rs.requests >= rc {
		return false, true, rs.requests
	}
	rs.requests++
	return true, false, rs.requests
}

// requestDone ends a request; withJob turns its slot into a running job
// and returns the job's concurrent id. inFlight, when not nil, is told the
// requests left in flight.
func (rs *runnerState) requestDone(withJob bool, inFlight func(int)) int {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	rs.requests--
	if inFlight != nil {
		inFlight(rs.requests)
	}
	if !withJob {
		return -1
	}
	rs.jobs++
	if rs.slots == nil {
		rs.slots = map[int]bool{}
	}
	id := 0
	for rs.slots[id] {
		id++
	}
	rs.slots[id] = true
	return id
}

// resumeSlot takes a job slot for a resumed job, the same concurrent id
// as before when it is free (its builds directory is there), counting it
// against limit even beyond it (the job runs already).
func (rs *runnerState) resumeSlot(want int) int {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	rs.jobs++
	if rs.slots == nil {
		rs.slots = map[int]bool{}
	}
	id := want
	if id < 0 || rs.slots[id] {
		id = 0
		for rs.slots[id] {
			id++
		}
	}
	rs.slots[id] = true
	return id
}

func (rs *runnerState) jobDone(slot int) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	rs.jobs--
	delete(rs.slots, slot)
}

// health records the outcome of a job request; after limit unhealthy
// results in a row the runner is skipped for interval.
func (rs *runnerState) health(ok bool, limit int, interval time.Duration, now time.Time) (tripped bool) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if ok {
		rs.unhealthy = 0
		return false
	}
	rs.unhealthy++
	if limit <= 0 {
		limit = 3
	}
	if rs.unhealthy >= limit {
		if interval <= 0 {
			interval = time.Hour
		}
		rs.skipUntil = now.Add(interval)
		rs.unhealthy = 0
		return true
	}
	return false
}

// processRunner is one worker iteration for runner r: reserve slots,
// acquire executor capacity, request a job, run it, release everything.
func (m *Manager) processRunner(ctx, reqCtx context.Context, r *config.RunnerConfig) {
	if m.draining.Load() {
		return
	}
	if m.RunningJobs() >= m.Config().Concurrent {
		return // resumed jobs, which run outside the workers, fill concurrent
	}
	// r may come from before a reload (an offer of the last round, a
	// requeue): ask with the runner's settings in force, and not at all
	// for a runner the reload removed.
	if r = m.liveRunner(r); r == nil {
		return
	}
	p := m.opts.Providers[r.Executor]
	rs := m.runnerState(r)
	log := m.logger.With("runner", api.ShortToken(r.Token), "runner_name", r.Name)
	ok, exceeded, inFlight := rs.reserve(r, m.clock.Now())
	if exceeded {
		m.metrics.requestRefused(r)
	}
	if !ok {
		return
	}
	m.metrics.requests(r, inFlight)
	done := func(withJob bool) int {
		return rs.requestDone(withJob, func(n int) { m.metrics.requests(r, n) })
	}
	settings := m.settings(r, 0)
	data, err := p.Acquire(ctx, settings)
	if err != nil {
		done(false)
		if errors.Is(err, executor.ErrNoFreeExecutor) {
			m.metrics.processingFailed(r, procNoFreeExecutor)
		} else if ctx.Err() == nil {
			m.metrics.processingFailed(r, procOther)
			log.Warn("executor provider could not reserve capacity", "err", err)
		}
		return
	}
	client, err := m.client(r)
	if err != nil {
		done(false)
		m.metrics.processingFailed(r, procOther)
		p.Release(ctx, settings, data)
		log.Error("bad coordinator url", "err", err)
		return
	}
	sent := m.lastUpdates.Get(r.Token)
	req := api.JobRequest{
		Info:       m.versionInfo(r, p),
		Token:      r.Token,
		SystemID:   m.opts.SystemID,
		LastUpdate: sent,
	}
	if m.storeFor(r) == nil {
		// Without a job store this process resumes nothing: the jobs an
		// earlier process with our system_id ran are lost, and drover's
		// coordinator ends them when it hears this.
		m.mu.Lock()
		started := m.started
		m.mu.Unlock()
		req.ManagerStart = &started
	}
	// A drain cancels the request only where no job can be lost by it.
	rctx := ctx
	if _, ok := m.twoPhase.Load(r.URL); ok {
		rctx = reqCtx
	}
	m.busy.Add(1)
	m.requests.Add(1)
	start := m.clock.Now()
	job, resp, err := client.RequestJob(rctx, req)
	m.requests.Add(-1)
	m.busy.Add(-1)
	if resp != nil && resp.AckTimeout > 0 {
		m.twoPhase.Store(r.URL, true)
	}
	m.noteWatch(client.URL(), resp)
	took := m.clock.Now().Sub(start)
	status := 0
	if resp != nil {
		status = resp.StatusCode
		m.lastUpdates.Set(r.Token, resp.LastUpdate)
	}
	m.metrics.apiRequest(r, "request_job", http.MethodPost, resp)
	switch {
	case err != nil && ctx.Err() != nil:
		// abort while a long poll was held
	case err != nil && rctx.Err() != nil && m.draining.Load():
		// a held request ended by the drain
	case err != nil:
		log.Warn("job request failed", "err", err, "status", status)
	case status == http.StatusForbidden:
		if rs.health(false, r.UnhealthyRequestsLimit, r.UnhealthyInterval, m.clock.Now()) {
			log.Error("runner token rejected too often; skipping this runner for a while", "interval", r.UnhealthyInterval)
		} else {
			log.Error("job request forbidden: is the runner token valid?", "status", status)
		}
	case status == http.StatusCreated || status == http.StatusNoContent:
		rs.health(true, 0, 0, time.Time{})
	default:
		log.Warn("job request got an unexpected answer", "status", status)
	}
	if job == nil {
		done(false)
		p.Release(ctx, settings, data)
		// A quick 204 with a new queue version means the coordinator did not
		// hold the request because its queue changed since our last poll: ask
		// again at once so the next request is held (long polling), but only
		// once in a row, so a coordinator without long polling is not hammered.
		if err == nil && status == http.StatusNoContent && resp.LastUpdate != "" && resp.LastUpdate != sent &&
			took < time.Second && !r.StrictCheckInterval {
			rs.mu.Lock()
			again := rs.fastRepoll < 1
			if again {
				rs.fastRepoll++
			}
			rs.mu.Unlock()
			if again {
				m.requeue(reqCtx, r)
			}
		} else {
			rs.mu.Lock()
			rs.fastRepoll = 0
			rs.mu.Unlock()
		}
		return
	}
	rs.mu.Lock()
	rs.fastRepoll = 0
	rs.mu.Unlock()
	slot := done(true)
	if !r.StrictCheckInterval {
		m.requeue(reqCtx, r)
	}
	settings.ConcurrentID = slot
	settings.ServerTLS = jobTLS(r, log)
	// The job runs with the runner's settings in force when it came (a
	// reload during the long poll changed output_limit, say).
	jobRunner := r
	if live := m.liveRunner(r); live != nil && live.Executor == r.Executor {
		jobRunner = live
	}
	m.runJob(ctx, &jobStart{
		runner: jobRunner, provider: p, client: client, settings: settings, data: data,
		job: job, info: req.Info, ackTimeout: resp.AckTimeout,
	})
	rs.jobDone(slot)
	p.Release(context.WithoutCancel(ctx), settings, data)
}
