package coordinator

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/coordinator/store"
)

// reapOnce ends the jobs whose runner let them down, once:
//   - running or canceling for longer than their timeout + TimeoutGrace →
//     failed, job_execution_timeout;
//   - no PUT/PATCH from the runner for StaleTimeout → failed,
//     runner_system_failure (a canceling job becomes canceled);
//   - waiting_for_runner_ack past its ack deadline → back to pending, or
//     failed with runner_provisioning_timeout once MaxProvisioningRetries
//     returns are used up (giveBack).
//
// A line saying why is appended to the job's trace before a final state is
// committed.
func (c *Coordinator) reapOnce(ctx context.Context) {
	now := c.clock.Now()
	c.expireOnce(ctx, now)
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
	switch {
	case !j.StartedAt.IsZero() && now.Sub(j.StartedAt) > timeout+c.cfg.TimeoutGrace:
		return store.StatusFailed, api.JobExecutionTimeout, fmt.Sprintf("ERROR: Job failed: execution took longer than %s (coordinator)", timeout)
	case !j.ContactedAt.IsZero() && now.Sub(j.ContactedAt) > c.cfg.StaleTimeout:
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
	log := c.log.With("job_id", listed.ID, "runner_id", listed.RunnerID)
	unlock, err := c.lockJobEverywhere(ctx, listed.ID)
	if err != nil {
		if ctx.Err() == nil {
			log.Error("reaper: lock job", "err", err)
		}
		return
	}
	defer unlock()
	// Again under the lock: the runner, a cancel or another coordinator's
	// reaper may have moved the job since it was listed.
	cur, err := c.st.GetJob(ctx, listed.ID)
	if err != nil {
		if ctx.Err() == nil {
			log.Error("reaper: load job", "err", err)
		}
		return
	}
	j := &cur
	to, reason, line := c.reapVerdict(j, now)
	if to == "" {
		return
	}
	size, err := c.traces.Size(ctx, j.ID)
	if err != nil {
		log.Error("reaper: trace size", "err", err)
		return
	}
	// Trace first, state second: a committed final state always covers its
	// trace. The append is conditional on the size just read: a runner's
	// PATCH, or another coordinator's reaper, that got there in between
	// wins, and this pass leaves the job alone.
	end, err := c.traces.Append(ctx, j.ID, size, []byte("\n"+line+"\n"))
	if err != nil {
		var off *store.TraceOffsetError
		if !errors.As(err, &off) {
			log.Error("reaper: append trace", "err", err)
		}
		return
	}
	ch := store.JobChange{Status: to, FinishedAt: now, At: now}
	if reason != "" {
		rs := string(reason)
		ch.FailureReason = &rs
	}
	got, err := c.st.TransitionJob(ctx, j.ID, []store.Status{j.Status}, ch)
	if err != nil {
		// The runner (or a cancel) got there first: take our line back.
		if terr := c.traces.Truncate(context.WithoutCancel(ctx), j.ID, end, size); terr != nil {
			log.Error("reaper: undo trace line", "err", terr)
		}
		if !errors.Is(err, store.ErrConflict) {
			log.Error("reaper: finish job", "err", err)
		}
		return
	}
	c.finished(&got)
	log.Warn("job reaped", "status", got.Status, "failure_reason", got.FailureReason)
}
