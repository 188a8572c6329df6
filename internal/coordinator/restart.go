package coordinator

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/runnerapi"
	"github.com/drover-ci/drover/internal/store"
)

// clockSkewMargin is how far a runner manager's clock may run ahead of the
// coordinators' without endLostJobs mistaking a job of its new process for
// one of the old.
const clockSkewMargin = 15 * time.Second

// lostStatuses are the states of a job its runner manager holds.
var lostStatuses = []store.Status{store.StatusWaitingForRunnerAck, store.StatusRunning, store.StatusCanceling}

// endLostJobs ends at once the jobs that runner manager (rn, systemID)
// was given before start, the time its current process started: that
// process has no job store (it says so by sending drover_manager_start),
// so nothing resumes them. Running jobs fail with runner_system_failure, a
// job being canceled is canceled, and a job not yet accepted goes back to
// the queue. Without this they would wait for the silent-runner reaper
// (--stale-timeout). Each start is handled once per coordinator.
func (c *Coordinator) endLostJobs(ctx context.Context, rn store.Runner, systemID string, start time.Time) {
	k := runnerapi.ManagerKey{RunnerID: rn.ID, SystemID: systemID}
	c.contactMu.Lock()
	seen := c.mgrStarts[k].Equal(start)
	c.mgrStarts[k] = start
	c.contactMu.Unlock()
	if seen {
		return
	}
	// start is the manager's clock; jobs are stamped by coordinators'.
	// Only jobs handed out clearly before it are the earlier process's: a
	// clock that runs ahead by less than the margin never ends a job of the
	// new process (a lost job handed out within the margin is left to the
	// silent-runner reaper).
	cutoff := start.Add(-clockSkewMargin)
	lost := func(j *store.Job) bool {
		return j.RunnerID == rn.ID && j.RunnerSystemID == systemID && !j.AssignedAt.IsZero() && j.AssignedAt.Before(cutoff)
	}
	var after int64
	for {
		jobs, err := c.st.ListJobs(ctx, store.JobFilter{Statuses: lostStatuses, AfterID: after, Limit: 500})
		if err != nil {
			if ctx.Err() == nil {
				c.log.Error("jobs of a restarted runner manager: list", "runner_id", rn.ID, "system_id", systemID, "err", err)
			}
			return
		}
		for i := range jobs {
			j := &jobs[i]
			after = j.ID
			if !lost(j) {
				continue
			}
			if j.Status == store.StatusWaitingForRunnerAck {
				c.returnLost(ctx, j.ID, lost)
				continue
			}
			c.endJob(ctx, j.ID, "job ended: its runner manager restarted without a job store", func(j *store.Job) (store.Status, api.FailureReason, string) {
				switch {
				case !lost(j):
					return "", "", ""
				case j.Status == store.StatusRunning:
					return store.StatusFailed, api.RunnerSystemFailure, fmt.Sprintf(
						"ERROR: Job failed: its runner manager (%s) restarted and, without a job store, cannot resume it (coordinator)", systemID)
				case j.Status == store.StatusCanceling:
					return store.StatusCanceled, "", "Job canceled: its runner manager restarted while canceling it (coordinator)"
				}
				return "", "", ""
			})
		}
		if len(jobs) < 500 {
			return
		}
	}
}

// returnLost gives a job not yet accepted by a restarted manager back to
// the queue.
func (c *Coordinator) returnLost(ctx context.Context, id int64, lost func(*store.Job) bool) {
	unlock, err := c.lockJobEverywhere(ctx, id)
	if err != nil {
		return
	}
	defer unlock()
	j, err := c.st.GetJob(ctx, id)
	if err != nil || j.Status != store.StatusWaitingForRunnerAck || !lost(&j) {
		return
	}
	if _, err := c.giveBack(ctx, &j, outcomeExpired, "its runner manager restarted before accepting it", c.clock.Now()); err != nil && !errors.Is(err, store.ErrConflict) {
		c.log.Error("return a job of a restarted runner manager", "job_id", id, "err", err)
	}
}
