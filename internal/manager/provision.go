package manager

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/config"
)

// Two-phase job start, runner side. A job whose payload has
// features.two_phase_job_commit stays the coordinator's until this runner
// accepts it, right before the first script stage; until then it is kept
// alive, and it may be declined (given back) or dropped (taken back):
//
//	received ──► provisioning ── "pending" every ackTimeout/3 ──┐
//	                 │  │  │  ▲                                 │
//	                 │  │  │  └─────────────────────────────────┘
//	                 │  │  └─ Prepare failed / SIGTERM ──► declined (no final update)
//	                 │  └──── 409, 403, Job-Status canceled|failed ──► dropped (silent)
//	                 ▼
//	   build about to run prepare_script: "accepted" ──► accepted ──► the classic job
//	   (404/405 from runner_provisioning: PUT state=running instead)
//
// Every outcome releases the executor capacity (processRunner does it when
// runJob returns). Only an accepted job gets a final update. The job's
// side of it: jobLife.start and jobLife.decline (job.go).

// Outcomes of a two-phase start, the outcome label of
// drover_runner_provisioning_total.
const (
	outcomeAccepted = "accepted"
	outcomeDeclined = "declined"
	outcomeDropped  = "dropped"
)

// Statuses of a runner_provisioning body.
const (
	provPending  = "pending"
	provAccepted = "accepted"
	provDeclined = "declined"
)

// defaultAckTimeout is the acknowledgement timeout assumed when the
// coordinator sends no X-Drover-Ack-Timeout (the coordinator's default).
const defaultAckTimeout = 60 * time.Second

// acceptAttempts bounds the accept call on transport and server errors.
const acceptAttempts = 5

// errDropped means the coordinator no longer gives the job to this
// runner (409, or Job-Status canceled/failed): drop it silently.
var errDropped = errors.New("the coordinator took the job back")

// keepAliveEvery returns the keep-alive period for an acknowledgement
// timeout: a third of it, at least 1 s (the default timeout when 0).
func keepAliveEvery(ack time.Duration) time.Duration {
	if ack <= 0 {
		ack = defaultAckTimeout
	}
	return max(time.Second, ack/3)
}

// provisioner drives the two-phase start of one job: keep-alives while the
// executor prepares, then exactly one outcome.
type provisioner struct {
	m      *Manager
	r      *config.RunnerConfig
	client *api.Client
	job    *api.JobResponse
	info   api.VersionInfo
	log    *slog.Logger
	// onDrop aborts the build; onCanceling cancels it gracefully.
	onDrop      func()
	onCanceling func()
	started     time.Time

	stop     chan struct{}
	stopOnce sync.Once
	done     chan struct{}

	mu      sync.Mutex
	every   time.Duration
	outcome string // "" while provisioning
	// noEndpoint: runner_provisioning answered 404 or 405, so this
	// coordinator takes PUT jobs/:id state=pending|running instead.
	noEndpoint bool
}

// newProvisioner makes the provisioner of job life l, begun (its jobRun
// is what a drop aborts and a cancel cancels); ackTimeout is the
// coordinator's acknowledgement timeout (0: its default).
func newProvisioner(l *jobLife, ackTimeout time.Duration) *provisioner {
	return &provisioner{
		m: l.m, r: l.runner, client: l.client, job: l.job, info: l.info, log: l.log,
		onDrop: l.jr.abortJob, onCanceling: l.jr.cancelGracefully, started: l.started,
		every: keepAliveEvery(ackTimeout),
		stop:  make(chan struct{}), done: make(chan struct{}),
	}
}

// resumedProvisioner is the provisioner of a resumed two-phase job whose
// record was saved before its accept: no keep-alive runs, and accept asks
// the coordinator again.
func resumedProvisioner(l *jobLife) *provisioner {
	p := newProvisioner(l, 0)
	close(p.done) // no keep-alive loop to wait for
	return p
}

// settle records the outcome, once; it reports whether this call did.
func (p *provisioner) settle(outcome string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.outcome != "" {
		return false
	}
	p.outcome = outcome
	p.m.metrics.provisioned(outcome, p.m.clock.Now().Sub(p.started))
	return true
}

func (p *provisioner) is(outcome string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.outcome == outcome
}

func (p *provisioner) isAccepted() bool { return p.is(outcomeAccepted) }
func (p *provisioner) isDropped() bool  { return p.is(outcomeDropped) }

// drop aborts the build because the coordinator took the job back. Before
// acceptance that is the outcome "dropped"; after it, an ordinary abort.
func (p *provisioner) drop(why string, resp *api.Response) {
	if p.settle(outcomeDropped) {
		p.log.Warn("coordinator took the job back before it was accepted; dropping it",
			"why", why, "status", statusOf(resp), "job_status", jobStatusOf(resp))
	}
	p.onDrop()
}

func jobStatusOf(r *api.Response) string {
	if r == nil {
		return ""
	}
	return r.JobStatus
}

// report sends status about the job: POST runner_provisioning, or, on a
// coordinator without that endpoint, its PUT form (pending: PUT
// state=pending; accepted: PUT state=running; declined has none, and
// nothing is sent). viaPut says which answer resp is, for gone.
func (p *provisioner) report(ctx context.Context, status, reason string) (resp *api.Response, viaPut bool, err error) {
	p.mu.Lock()
	noEndpoint := p.noEndpoint
	p.mu.Unlock()
	if !noEndpoint {
		resp, err = p.client.ReportProvisioning(ctx, p.job.ID, p.job.Token, api.ProvisioningRequest{Status: status, Reason: reason})
		p.m.metrics.apiRequest(p.r, "runner_provisioning", http.MethodPost, resp)
		if err != nil || resp.StatusCode != http.StatusNotFound && resp.StatusCode != http.StatusMethodNotAllowed {
			return resp, false, err
		}
		p.log.Info("coordinator has no runner_provisioning endpoint; using PUT jobs/:id instead", "status", resp.StatusCode)
		p.mu.Lock()
		p.noEndpoint = true
		p.mu.Unlock()
	}
	var state api.JobState
	switch status {
	case provPending:
		state = api.StatePending
	case provAccepted:
		state = api.StateRunning
	default:
		return nil, true, errors.New("no PUT form for " + status)
	}
	resp, err = p.client.UpdateJob(ctx, p.job.ID, api.UpdateJobRequest{Info: p.info, Token: p.job.Token, State: state})
	p.m.metrics.apiRequest(p.r, "update_job", http.MethodPut, resp)
	return resp, true, err
}

// gone reports whether an answer says the job is no longer this runner's:
// 409, 403, or Job-Status canceled/failed; and 404 to a PUT (a 404 from
// runner_provisioning means the endpoint is missing, see report).
func gone(r *api.Response, viaPut bool) bool {
	if r == nil {
		return false
	}
	if viaPut {
		return remoteAbort(r)
	}
	return r.StatusCode == http.StatusConflict || r.StatusCode == http.StatusForbidden ||
		r.JobStatus == api.RemoteCanceled || r.JobStatus == api.RemoteFailed
}

func success(r *api.Response) bool { return r != nil && r.StatusCode >= 200 && r.StatusCode < 300 }

// keepAlive sends "pending" every ackTimeout/3 until stopKeepAlive, a drop
// or the end of ctx. A failed keep-alive is retried sooner (1 s, doubling
// up to the period): two lost in a row must not cost the job.
func (p *provisioner) keepAlive(ctx context.Context) {
	defer close(p.done)
	p.mu.Lock()
	wait := p.every
	p.mu.Unlock()
	retry := time.Second
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.stop:
			return
		case <-p.m.clock.After(wait):
		}
		resp, viaPut, err := p.report(ctx, provPending, "")
		p.mu.Lock()
		if err == nil && resp.AckTimeout > 0 && !viaPut {
			p.every = keepAliveEvery(resp.AckTimeout)
		}
		wait = p.every
		p.mu.Unlock()
		switch {
		case err != nil:
			if ctx.Err() != nil {
				return
			}
			p.log.Warn("provisioning keep-alive failed; will retry", "err", err, "in", retry)
			wait, retry = min(retry, wait), min(2*retry, wait)
		case gone(resp, viaPut):
			p.drop("keep-alive refused", resp)
			return
		case !success(resp):
			p.log.Warn("provisioning keep-alive refused; will retry", "status", resp.StatusCode, "in", retry)
			wait, retry = min(retry, wait), min(2*retry, wait)
		default:
			retry = time.Second
		}
	}
}

// stopKeepAlive ends the keep-alive loop and waits for a call in flight.
func (p *provisioner) stopKeepAlive() {
	p.stopOnce.Do(func() { close(p.stop) })
	<-p.done
}

// accept tells the coordinator the job starts now; it is jobrun.Options'
// Accept. Retry policy: up to acceptAttempts calls, 1 s, 2 s, … apart, on
// transport errors and 5xx/408/429 answers; a job runs only once accepted.
// Other 4xx answers stop at once. A drop (409, 403, Job-Status
// canceled/failed) returns errDropped.
func (p *provisioner) accept(ctx context.Context) error {
	p.stopKeepAlive()
	if p.isDropped() {
		return errDropped
	}
	var last error
	for attempt := range acceptAttempts {
		if attempt > 0 {
			sleep(ctx, p.m.clock, time.Duration(attempt)*time.Second)
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		resp, viaPut, err := p.report(ctx, provAccepted, "")
		switch {
		case err != nil:
			last = err
		case gone(resp, viaPut):
			p.drop("accept refused", resp)
			return errDropped
		case success(resp):
			p.settle(outcomeAccepted)
			p.log.Info("job accepted", "provisioning", p.m.clock.Now().Sub(p.started).Round(time.Millisecond), "via_put", viaPut)
			if resp.JobStatus == api.RemoteCanceling {
				p.onCanceling()
			}
			return nil
		case resp.StatusCode >= 500 || resp.StatusCode == http.StatusRequestTimeout || resp.StatusCode == http.StatusTooManyRequests:
			last = fmt.Errorf("accept: status %d", resp.StatusCode)
		default:
			return fmt.Errorf("accept: status %d", resp.StatusCode)
		}
		p.log.Warn("accept failed; retrying", "err", last, "attempt", attempt+1)
	}
	return last
}

// decline gives the job back to the coordinator's queue. It returns the
// coordinator's answer (nil when nothing could be sent): an answer with
// Job-Status running means an accept did land after all.
func (p *provisioner) decline(ctx context.Context, reason string) *api.Response {
	p.stopKeepAlive()
	if !p.settle(outcomeDeclined) {
		return nil // dropped (or accepted): nothing to give back
	}
	resp, _, err := p.report(ctx, provDeclined, reason)
	if err != nil {
		p.log.Warn("could not decline the job; the coordinator's ack deadline will return it", "reason", reason, "err", err)
		return nil
	}
	p.log.Warn("job declined", "reason", reason, "status", resp.StatusCode, "job_status", resp.JobStatus)
	return resp
}

// testPrepareDelay is fault injection for end-to-end tests only: with
// DROVER_TEST_PREPARE_DELAY set (a Go duration, e.g. "5s"), every job
// waits that long before its executor prepares, so a test can kill a
// manager while it provisions. It is read once, by New, and nowhere else.
func testPrepareDelay() time.Duration {
	d, err := time.ParseDuration(os.Getenv("DROVER_TEST_PREPARE_DELAY"))
	if err != nil || d < 0 {
		return 0
	}
	return d
}

// Points of a two-phase start where DROVER_TEST_KILL_AT kills the
// manager (testKillAt).
const (
	killBeforeAccept = "before-accept"
	killAfterAccept  = "after-accept"
)

// testKillAt is fault injection for end-to-end tests only: with
// DROVER_TEST_KILL_AT set to before-accept or after-accept, the manager
// kills itself with SIGKILL at that point of the first two-phase job it
// starts (a resumed job has no such point), so that a test can check
// what the next manager makes of the job. It is read once, by New, and
// nowhere else.
func testKillAt() string {
	switch v := os.Getenv("DROVER_TEST_KILL_AT"); v {
	case killBeforeAccept, killAfterAccept:
		return v
	}
	return ""
}

// killAt kills this process with SIGKILL when point is the one
// DROVER_TEST_KILL_AT names (testKillAt).
func (m *Manager) killAt(point string) {
	if m.testKillAt == "" || m.testKillAt != point {
		return
	}
	m.logger.Warn("DROVER_TEST_KILL_AT: killing the manager", "at", point)
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // the signal is on its way
}
