package manager

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/config"
)

// errDropped means the coordinator no longer gives the job to this
// runner (409, or Job-Status canceled/failed): drop it silently.
var errDropped = errors.New("the coordinator took the job back")

// provisioner drives the two-phase job start of one job: keep-alives while
// the executor prepares, then exactly one accept (or decline).
//
//	received ──keep-alive every ack/3──► accepted ──► build scripts
//	    │                                   ▲
//	    ├── Prepare failed ──► declined     │ 404/405: PUT running instead
//	    └── 409 / canceled ──► dropped ─────┘ (no further calls)
type provisioner struct {
	m      *Manager
	r      *config.RunnerConfig
	client *api.Client
	job    *api.JobResponse
	info   api.VersionInfo
	log    *slog.Logger
	every  time.Duration
	onDrop func()

	mu       sync.Mutex
	accepted bool
	dropped  bool
	stop     chan struct{}
	stopOnce sync.Once
	done     chan struct{}
	started  time.Time
}

// keepAliveEvery returns the keep-alive period for an acknowledgement
// timeout: a third of it, at least 1 s; 20 s when the coordinator gave none.
func keepAliveEvery(ack time.Duration) time.Duration {
	if ack <= 0 {
		return 20 * time.Second
	}
	return max(time.Second, ack/3)
}

func (p *provisioner) isAccepted() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.accepted
}

func (p *provisioner) isDropped() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.dropped
}

func (p *provisioner) drop(why string, resp *api.Response) {
	p.mu.Lock()
	already := p.dropped
	p.dropped = true
	p.mu.Unlock()
	if !already {
		p.log.Warn("coordinator took the job back before it was accepted; dropping it", "why", why, "status", statusOf(resp), "job_status", jobStatusOf(resp))
		p.m.metrics.provisioned("dropped", p.m.clock.Now().Sub(p.started))
		p.onDrop()
	}
}

func jobStatusOf(r *api.Response) string {
	if r == nil {
		return ""
	}
	return r.JobStatus
}

// gone reports whether an answer says the job is no longer this runner's.
func gone(r *api.Response) bool {
	return r != nil && (r.StatusCode == http.StatusConflict || remoteAbort(r))
}

// keepAlive sends "pending" every p.every until accept, drop or ctx end.
func (p *provisioner) keepAlive(ctx context.Context) {
	defer close(p.done)
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.stop:
			return
		case <-p.m.clock.After(p.every):
		}
		resp, err := p.client.ReportProvisioning(ctx, p.job.ID, p.job.Token, api.ProvisioningRequest{Status: "pending"})
		p.m.metrics.apiRequest(p.r, "runner_provisioning", http.MethodPost, statusOf(resp))
		switch {
		case err != nil:
			if ctx.Err() == nil {
				p.log.Warn("provisioning keep-alive failed; will retry", "err", err)
			}
		case gone(resp):
			p.drop("keep-alive refused", resp)
			return
		case resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusMethodNotAllowed:
			// No runner_provisioning endpoint: keep alive with PUT pending.
			r2, err := p.client.UpdateJob(ctx, p.job.ID, api.UpdateJobRequest{Info: p.info, Token: p.job.Token, State: api.StatePending})
			if err == nil && gone(r2) {
				p.drop("keep-alive refused", r2)
				return
			}
		}
	}
}

func (p *provisioner) stopKeepAlive() {
	p.stopOnce.Do(func() { close(p.stop) })
	<-p.done
}

// accept tells the coordinator the job starts now. Transport errors are
// retried for a while: a job runs only once it is accepted.
func (p *provisioner) accept(ctx context.Context) error {
	p.stopKeepAlive()
	if p.isDropped() {
		return errDropped
	}
	var last error
	for attempt := range 5 {
		if attempt > 0 {
			sleep(ctx, p.m.clock, time.Duration(attempt)*time.Second)
		}
		resp, err := p.client.ReportProvisioning(ctx, p.job.ID, p.job.Token, api.ProvisioningRequest{Status: "accepted"})
		p.m.metrics.apiRequest(p.r, "runner_provisioning", http.MethodPost, statusOf(resp))
		if err == nil && (resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusMethodNotAllowed) {
			// A coordinator without the endpoint: GitLab's draft form.
			resp, err = p.client.UpdateJob(ctx, p.job.ID, api.UpdateJobRequest{Info: p.info, Token: p.job.Token, State: api.StateRunning})
		}
		switch {
		case err != nil:
			last = err
			if ctx.Err() != nil {
				return ctx.Err()
			}
			continue
		case gone(resp):
			p.drop("accept refused", resp)
			return errDropped
		case resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusAccepted:
			p.mu.Lock()
			p.accepted = true
			p.mu.Unlock()
			p.m.metrics.provisioned("accepted", p.m.clock.Now().Sub(p.started))
			p.log.Info("job accepted", "provisioning", p.m.clock.Now().Sub(p.started).Round(time.Millisecond))
			return nil
		default:
			last = fmt.Errorf("accept: status %d", resp.StatusCode)
		}
	}
	return last
}

// decline gives the job back to the coordinator's queue.
func (p *provisioner) decline(ctx context.Context, reason string) {
	p.stopKeepAlive()
	if p.isDropped() {
		return
	}
	resp, err := p.client.ReportProvisioning(ctx, p.job.ID, p.job.Token, api.ProvisioningRequest{Status: "declined", Reason: reason})
	p.m.metrics.apiRequest(p.r, "runner_provisioning", http.MethodPost, statusOf(resp))
	if err != nil {
		p.log.Warn("could not decline the job; the coordinator's deadline will return it", "err", err)
		return
	}
	p.m.metrics.provisioned("declined", p.m.clock.Now().Sub(p.started))
	p.log.Warn("job declined", "reason", reason, "status", resp.StatusCode)
}

// testPrepareDelay is fault injection for end-to-end tests only: with
// DROVER_TEST_PREPARE_DELAY set (a Go duration), every job waits that long
// before its executor prepares, so a test can kill a manager while it is
// provisioning. It is read once, by New.
func testPrepareDelay() time.Duration {
	d, err := time.ParseDuration(os.Getenv("DROVER_TEST_PREPARE_DELAY"))
	if err != nil || d < 0 {
		return 0
	}
	return d
}
