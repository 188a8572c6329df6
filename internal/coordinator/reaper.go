package coordinator

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/store"
)

// reapOnce ends the jobs whose runner let them down, once:
//   - running or canceling for longer than their timeout + TimeoutGrace →
//     failed, job_execution_timeout;
//   - no PUT/PATCH from the runner for StaleTimeout, counted from this
//     coordinator's start at the earliest → failed, runner_system_failure
//     (a canceling job becomes canceled);
//   - waiting_for_runner_ack past its ack deadline → back to pending, or
//     failed with runner_provisioning_timeout once MaxProvisioningRetries
//     returns are used up (giveBack);
//   - artifacts past their expire_at → deleted (expireArtifacts);
//   - webhook deliveries older than deliveryRetention → forgotten
//     (expireDeliveries);
//   - on the first pass and then every orphanSweepInterval, files of the
//     artifacts directory that no record names → removed (sweepOrphans).
//
// A line saying why is appended to the job's trace before a final state is
// committed.
func (c *Coordinator) reapOnce(ctx context.Context) {
	now := c.clock.Now()
	c.expireOnce(ctx, now)
	c.expireArtifacts(ctx, now)
	c.expireDeliveries(ctx, now)
	if c.sweeps.due(now) {
		c.sweepOrphans(ctx, now)
	}
	var after int64
	for {
		jobs, err := c.st.ListJobs(ctx, store.JobFilter{Statuses: fromActive, AfterID: after, Limit: 500})
		if err != nil {
			if ctx.Err() == nil {
				c.log.Error("reaper: list jobs", "err", err)
			}
			return
		}
		for i := range jobs {
			j := &jobs[i]
			after = j.ID
			c.reapJob(ctx, j, now)
		}
		if len(jobs) < 500 {
			return
		}
	}
}

// expireOnce returns the waiting jobs whose ack deadline passed.
func (c *Coordinator) expireOnce(ctx context.Context, now time.Time) {
	var after int64
	for {
		jobs, err := c.st.ListJobs(ctx, store.JobFilter{Statuses: fromWaiting, AfterID: after, Limit: 500})
		if err != nil {
			if ctx.Err() == nil {
				c.log.Error("reaper: list waiting jobs", "err", err)
			}
			return
		}
		for i := range jobs {
			after = jobs[i].ID
			if !jobs[i].AckDeadline.After(now) {
				c.expireJob(ctx, jobs[i].ID, now)
			}
		}
		if len(jobs) < 500 {
			return
		}
	}
}

// reapVerdict says whether job j, as read at now, is to be ended by the
// reaper: its new status, failure reason and the line for its trace; to is
// "" when the job is left alone.
func (c *Coordinator) reapVerdict(j *store.Job, now time.Time) (to store.Status, reason api.FailureReason, line string) {
	if !isActive(j.Status) {
		return "", "", ""
	}
	timeout := time.Duration(j.RunTimeout) * time.Second
	if j.RunTimeout <= 0 {
		timeout = time.Duration(api.DefaultJobTimeout) * time.Second
	}
	// A runner that could not reach this coordinator because it was not
	// running is given the whole StaleTimeout from its start: a manager
	// holding a finished job's final update in its store delivers it when
	// the coordinator is back, however long it was away.
	heard := j.ContactedAt
	if heard.Before(c.upSince) {
		heard = c.upSince
	}
	switch {
	case !j.StartedAt.IsZero() && now.Sub(j.StartedAt) > timeout+c.cfg.TimeoutGrace:
		return store.StatusFailed, api.JobExecutionTimeout, fmt.Sprintf("ERROR: Job failed: execution took longer than %s (coordinator)", timeout)
	case !j.ContactedAt.IsZero() && now.Sub(heard) > c.cfg.StaleTimeout:
		if j.Status == store.StatusCanceling {
			return store.StatusCanceled, "", "Job canceled: the runner stopped answering while canceling (coordinator)"
		}
		return store.StatusFailed, api.RunnerSystemFailure, fmt.Sprintf("ERROR: Job failed: no word from the runner for %s (coordinator)", now.Sub(j.ContactedAt).Round(time.Second))
	}
	return "", "", ""
}

func (c *Coordinator) reapJob(ctx context.Context, listed *store.Job, now time.Time) {
	if to, _, _ := c.reapVerdict(listed, now); to == "" {
		return
	}
	c.endJob(ctx, listed.ID, "job reaped", func(j *store.Job) (store.Status, api.FailureReason, string) {
		return c.reapVerdict(j, now)
	})
}

// endJob ends job id as verdict says, judged again on the job read under
// the job lock held on every coordinator: the runner, a cancel or another
// coordinator may have moved it since the caller looked. The verdict's
// line goes into the trace first, then the final state is committed (a
// committed final state always covers its trace). what names the action
// in the log.
func (c *Coordinator) endJob(ctx context.Context, id int64, what string, verdict func(*store.Job) (store.Status, api.FailureReason, string)) {
	log := c.log.With("job_id", id)
	unlock, err := c.lockJobEverywhere(ctx, id)
	if err != nil {
		if ctx.Err() == nil {
			log.Error(what+": lock job", "err", err)
		}
		return
	}
	defer unlock()
	cur, err := c.st.GetJob(ctx, id)
	if err != nil {
		if ctx.Err() == nil {
			log.Error(what+": load job", "err", err)
		}
		return
	}
	j := &cur
	to, reason, line := verdict(j)
	if to == "" {
		return
	}
	now := c.clock.Now()
	log = log.With("runner_id", j.RunnerID)
	size, err := c.traces.Size(ctx, j.ID)
	if err != nil {
		log.Error(what+": trace size", "err", err)
		return
	}
	ch := store.JobChange{Status: to, FinishedAt: now, At: now}
	if reason != "" {
		rs := string(reason)
		ch.FailureReason = &rs
	}
	got, err := c.finishWithLine(ctx, j, size, line, ch)
	var off *store.TraceOffsetError
	switch {
	case errors.As(err, &off) || errors.Is(err, store.ErrConflict):
		return // the runner (or a cancel) got there first
	case err != nil:
		log.Error(what, "err", err)
		return
	}
	c.finished(&got)
	log.Warn(what, "status", got.Status, "failure_reason", got.FailureReason)
}

// finishWithLine appends line to job j's trace, which has size bytes, and
// then commits ch from j's status: a committed final state always covers
// its trace. The append is conditional on size: a runner's PATCH that got
// there since it was read wins (a *store.TraceOffsetError, nothing
// written). A transition that loses (store.ErrConflict, with the job as it
// is now) takes the line back.
func (c *Coordinator) finishWithLine(ctx context.Context, j *store.Job, size int64, line string, ch store.JobChange) (store.Job, error) {
	end, err := c.traces.Append(ctx, j.ID, size, []byte("\n"+line+"\n"))
	if err != nil {
		return *j, fmt.Errorf("append trace line: %w", err)
	}
	got, err := c.transitionJob(ctx, j.ID, []store.Status{j.Status}, ch)
	if err != nil {
		if terr := c.traces.Truncate(context.WithoutCancel(ctx), j.ID, end, size); terr != nil {
			c.log.Error("undo trace line", "job_id", j.ID, "err", terr)
		}
		return got, fmt.Errorf("finish job: %w", err)
	}
	return got, nil
}
