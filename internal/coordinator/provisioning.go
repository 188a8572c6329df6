package coordinator

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/runnerapi"
	"github.com/drover-ci/drover/internal/store"
)

// Two-phase job start: a runner that announces two_phase_job_commit gets a
// job in waiting_for_runner_ack and must accept it before AckTimeout, or
// keep it alive, or decline it. The three moves live here and are shared by
// POST runner_provisioning, PUT jobs/{id} (state pending / running) and the
// reaper (expiry).

// Statuses of a runner_provisioning body.
const (
	provPending  = "pending"
	provAccepted = "accepted"
	provDeclined = "declined"
)

// maxReason bounds the reason a runner gives; it is only logged.
const maxReason = 1024

// handleProvisioning is POST /api/v4/jobs/{id}/runner_provisioning, with
// JOB-TOKEN and body {"status": "pending" | "accepted" | "declined",
// "reason": "..."}. For a job in waiting_for_runner_ack: pending pushes the
// ack deadline to now + AckTimeout; accepted starts it (running, the job
// timeout counts from now); declined puts it back in the queue at once.
//
// Answers, all but 404 with Job-Status: 200; 400 for a bad body or a
// decline of a job already running; 403 for a token that never belonged to
// the job; 404 for an unknown job; 409 when the caller's assignment is over
// (declined, expired, re-assigned, canceled, failed). Repeating accepted or
// pending on a running job is a harmless 200 (Job-Status running or
// canceling).
func (c *Coordinator) handleProvisioning(w http.ResponseWriter, r *http.Request) {
	var req api.ProvisioningRequest
	if e := runnerapi.DecodeJSON(w, r, &req, maxV4Body, false); e != nil {
		runnerapi.WriteBad(w, e)
		return
	}
	j, hash, ok := c.jobForRunner(w, r, "")
	if !ok {
		return
	}
	switch req.Status {
	case provPending, provAccepted, provDeclined:
	default:
		setJobHeaders(w, j.Status)
		runnerapi.WriteError(w, http.StatusBadRequest, fmt.Sprintf("status %q: want pending, accepted or declined", req.Status), "status")
		return
	}
	reason := req.Reason
	if len(reason) > maxReason {
		reason = reason[:maxReason]
	}
	ctx := r.Context()
	unlock := c.lockJob(j.ID)
	if req.Status == provDeclined {
		// A decline may fail the job with a line in its trace, as the
		// reaper of another coordinator may: one at a time.
		unlock()
		var err error
		if unlock, err = c.lockJobEverywhere(ctx, j.ID); err != nil {
			c.internalError(r.Context(), w, "lock job", err)
			return
		}
	}
	defer unlock()
	if j, ok = c.reloadForRunner(w, r, j.ID, hash); !ok {
		return
	}
	now := c.clock.Now()
	var got store.Job
	var err error
	switch {
	case j.Status == store.StatusWaitingForRunnerAck:
		switch req.Status {
		case provPending:
			got, err = c.keepAlive(ctx, &j, now)
		case provAccepted:
			got, err = c.accept(ctx, &j, reason, now)
		case provDeclined:
			got, err = c.giveBack(ctx, &j, outcomeDeclined, reason, now)
		}
	case isActive(j.Status):
		c.touchJob(ctx, j.ID)
		if req.Status == provDeclined && j.Status == store.StatusCanceling {
			// Declining a job that is being canceled is as good as the
			// runner's PUT failed.
			got, err = c.transitionJob(ctx, j.ID, []store.Status{store.StatusCanceling},
				store.JobChange{Status: store.StatusCanceled, FinishedAt: now, At: now, IfVersion: j.Version})
			if err == nil {
				c.finished(&got)
				c.log.Info("job canceled: declined while canceling", "job_id", j.ID, "runner_id", j.RunnerID, "system_id", j.RunnerSystemID, "reason", reason)
			}
			break
		}
		if req.Status == provDeclined {
			setJobHeaders(w, j.Status)
			runnerapi.WriteError(w, http.StatusBadRequest, "the job was accepted and is "+string(j.Status)+": report its end with PUT state=failed", "status")
			return
		}
		got = j
	default:
		c.answerInactive(w, &j, "")
		return
	}
	if errors.Is(err, store.ErrConflict) {
		// Moved under us without the job lock: only an admin cancel does.
		c.answerInactive(w, &got, "")
		return
	}
	if err != nil {
		c.internalError(r.Context(), w, "runner provisioning", err)
		return
	}
	c.answerApplied(w, &got)
}

// answerApplied answers a runner's call that took effect: 200 with the
// job's status (after a decline: pending, or failed once the retries are
// used up).
func (c *Coordinator) answerApplied(w http.ResponseWriter, j *store.Job) {
	setJobHeaders(w, j.Status)
	if j.Status == store.StatusWaitingForRunnerAck {
		w.Header().Set(hdrAckTimeout, formatSeconds(c.cfg.AckTimeout))
	}
	runnerapi.WriteJSON(w, http.StatusOK, struct{}{})
}

// answerInactive answers a runner whose token is the job's current one but
// whose job is no longer running: a repeated final update that matches is
// 200; a canceled job is 409 (the assignment is over); any other final
// state is 403, as before two-phase start existed.
func (c *Coordinator) answerInactive(w http.ResponseWriter, j *store.Job, state api.JobState) {
	if j.Status.Finished() && sameFinal(state, j.Status) {
		setJobHeaders(w, j.Status)
		runnerapi.WriteJSON(w, http.StatusOK, struct{}{})
		return
	}
	if j.Status == store.StatusCanceled || !j.Status.Finished() {
		writeGone(w, j.Status)
		return
	}
	setJobHeaders(w, j.Status)
	runnerapi.WriteError(w, http.StatusForbidden, "403 Forbidden: job is "+string(j.Status), "")
}

// writeGone answers 409: the job is no longer the caller's.
func writeGone(w http.ResponseWriter, s store.Status) {
	w.Header().Set(hdrJobStatus, goneStatus(s))
	w.Header().Set(hdrUpdateInterval, traceUpdateInterval)
	runnerapi.WriteError(w, http.StatusConflict, "409 Conflict: the job is no longer assigned to this runner (job is "+string(s)+")", "")
}

func formatSeconds(d time.Duration) string {
	return strconv.FormatFloat(d.Seconds(), 'f', -1, 64)
}

// The moves below take a job read under its job lock and apply the change
// only to that very version of it (IfVersion). ErrConflict means something
// without the lock (an admin cancel) moved it first; the returned job is
// then the current one.

// keepAlive pushes the ack deadline of waiting job j to now + AckTimeout.
func (c *Coordinator) keepAlive(ctx context.Context, j *store.Job, now time.Time) (store.Job, error) {
	got, err := c.transitionJob(ctx, j.ID, fromWaiting, store.JobChange{
		Status: store.StatusWaitingForRunnerAck, AckDeadline: now.Add(c.cfg.AckTimeout),
		ContactedAt: now, At: now, IfVersion: j.Version,
	})
	if err == nil {
		c.log.Debug("job kept alive", "job_id", j.ID, "runner_id", j.RunnerID, "system_id", j.RunnerSystemID, "ack_deadline", got.AckDeadline)
	}
	return got, err
}

// accept starts waiting job j: running, with the job timeout counted from
// now.
func (c *Coordinator) accept(ctx context.Context, j *store.Job, reason string, now time.Time) (store.Job, error) {
	prov := j.ProvisioningNanos + max(0, int64(now.Sub(j.AssignedAt)))
	got, err := c.transitionJob(ctx, j.ID, fromWaiting, store.JobChange{
		Status: store.StatusRunning, StartedAt: now, AcceptedAt: now, ContactedAt: now,
		ProvisioningNanos: &prov, At: now, IfVersion: j.Version,
	})
	if err != nil {
		return got, err
	}
	c.metrics.provisioning.WithLabelValues(outcomeAccepted).Inc()
	c.log.Info("job accepted", "job_id", j.ID, "runner_id", j.RunnerID, "system_id", j.RunnerSystemID, "reason", reason,
		"provisioning", now.Sub(j.AssignedAt), "attempt", j.ProvisioningAttempts)
	return got, nil
}

// giveBack takes waiting job j from its runner, which declined it or let
// the ack deadline pass (outcome): the token is retired, the runner
// manager is remembered as one to pass over, and the job goes back to the
// queue, or fails with runner_provisioning_timeout when it has gone back
// MaxProvisioningRetries times already.
func (c *Coordinator) giveBack(ctx context.Context, j *store.Job, outcome, reason string, now time.Time) (store.Job, error) {
	returns := j.ProvisioningReturns + 1
	prov := j.ProvisioningNanos + max(0, int64(now.Sub(j.AssignedAt)))
	avoid := slices.Clone(j.AvoidSystemIDs)
	if !slices.Contains(avoid, j.RunnerSystemID) {
		avoid = append(avoid, j.RunnerSystemID)
	}
	none := ""
	ch := store.JobChange{
		TokenHash: &none, ProvisioningReturns: &returns, ProvisioningNanos: &prov, AvoidSystemIDs: &avoid,
		At: now, IfVersion: j.Version,
	}
	log := c.log.With("job_id", j.ID, "runner_id", j.RunnerID, "system_id", j.RunnerSystemID, "reason", reason,
		"outcome", outcome, "returns", returns)
	fail := returns > c.cfg.MaxProvisioningRetries
	size, end := int64(-1), int64(0)
	if fail {
		rs := string(api.RunnerProvisioningTimeout)
		ch.Status, ch.FailureReason, ch.FinishedAt = store.StatusFailed, &rs, now
		var err error
		if size, err = c.traces.Size(ctx, j.ID); err != nil {
			return *j, err
		}
		// Trace first, state second, as the reaper does.
		line := fmt.Sprintf("\nERROR: Job failed: no runner started it: %d hand-outs were declined or not acknowledged in time (coordinator)\n", returns)
		if end, err = c.traces.Append(ctx, j.ID, size, []byte(line)); err != nil {
			// A trace that moved meanwhile (through another coordinator)
			// is a job that moved: the transition below would lose too.
			return *j, err
		}
	} else {
		zero := int64(0)
		ch.Status, ch.RunnerID, ch.RunnerSystemID, ch.QueuedAt = store.StatusPending, &zero, &none, now
	}
	got, err := c.transitionJob(ctx, j.ID, fromWaiting, ch)
	if err != nil {
		if size >= 0 {
			if terr := c.traces.Truncate(context.WithoutCancel(ctx), j.ID, end, size); terr != nil {
				log.Error("undo trace line", "err", terr)
			}
		}
		return got, err
	}
	c.metrics.provisioning.WithLabelValues(outcome).Inc()
	c.forgetJob(j.ID)
	c.jobChanged(ctx, j.ID, false) // the token is retired
	if fail {
		c.finished(&got)
		log.Warn("job failed: provisioning retries used up", "failure_reason", got.FailureReason)
		return got, nil
	}
	// The next runner's trace starts at 0; keep this attempt's aside.
	if err := c.traces.Archive(ctx, j.ID, j.ProvisioningAttempts); err != nil {
		log.Error("archive trace of the attempt", "err", err)
		if err := c.traces.Truncate(ctx, j.ID, -1, 0); err != nil {
			log.Error("reset trace", "err", err)
		}
	}
	log.Info("job returned to the queue")
	// For every other runner this is a new job.
	c.poll.wake(&got)
	return got, nil
}

// returnUnsent gives job id back to the queue at once: it was claimed for
// a two-phase runner whose request ended before the answer was written.
func (c *Coordinator) returnUnsent(ctx context.Context, id int64) {
	unlock, err := c.lockJobEverywhere(ctx, id)
	if err != nil {
		c.log.Error("return unsent job: lock", "job_id", id, "err", err)
		return
	}
	defer unlock()
	j, err := c.st.GetJob(ctx, id)
	if err != nil {
		c.log.Error("return unsent job: load", "job_id", id, "err", err)
		return
	}
	if j.Status != store.StatusWaitingForRunnerAck {
		return
	}
	if _, err := c.giveBack(ctx, &j, outcomeDeclined, "the runner's request ended before it got the job", c.clock.Now()); err != nil && !errors.Is(err, store.ErrConflict) {
		c.log.Error("return unsent job", "job_id", id, "err", err)
	}
}

// expireJob is the reaper's half: job id goes back to the queue if it is
// still waiting and its ack deadline is not after now.
func (c *Coordinator) expireJob(ctx context.Context, id int64, now time.Time) {
	unlock, err := c.lockJobEverywhere(ctx, id)
	if err != nil {
		if ctx.Err() == nil {
			c.log.Error("reaper: lock job", "job_id", id, "err", err)
		}
		return
	}
	defer unlock()
	j, err := c.st.GetJob(ctx, id)
	if err != nil {
		if ctx.Err() == nil {
			c.log.Error("reaper: load job", "job_id", id, "err", err)
		}
		return
	}
	if j.Status != store.StatusWaitingForRunnerAck || j.AckDeadline.After(now) {
		return // accepted, declined or kept alive meanwhile
	}
	if _, err := c.giveBack(ctx, &j, outcomeExpired, "ack deadline passed", now); err != nil && !errors.Is(err, store.ErrConflict) {
		c.log.Error("reaper: expire job", "job_id", id, "err", err)
	}
}

// avoidedUntil returns when a runner manager that gave job j back may have
// it again, or the zero time if systemID may take it now: managers that
// declined it or let it expire are passed over until the job has been back
// in the queue for AckTimeout, so another manager gets the first chance.
func (c *Coordinator) avoidedUntil(j *store.Job, systemID string, now time.Time) time.Time {
	if j.ProvisioningReturns == 0 || !slices.Contains(j.AvoidSystemIDs, systemID) {
		return time.Time{}
	}
	until := j.QueuedAt.Add(c.cfg.AckTimeout)
	if !now.Before(until) {
		return time.Time{}
	}
	return until
}
