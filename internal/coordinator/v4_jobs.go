package coordinator

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/runnerapi"
	"github.com/drover-ci/drover/internal/store"
)

// jobForRunner loads job {id} and checks that the job token is the one of
// its current assignment; hash is the token's hash. On failure it has
// written 404 (unknown job), 409 (the token belongs to an earlier
// assignment of this job) or 403 (any other token), and ok is false.
func (c *Coordinator) jobForRunner(w http.ResponseWriter, r *http.Request, bodyToken string) (j store.Job, hash string, ok bool) {
	id, ok := runnerapi.PathID(r)
	if !ok {
		runnerapi.WriteError(w, http.StatusNotFound, "404 Job Not Found", "id")
		return store.Job{}, "", false
	}
	j, err := c.st.GetJob(r.Context(), id)
	if errors.Is(err, store.ErrNotFound) {
		runnerapi.WriteError(w, http.StatusNotFound, "404 Job Not Found", "id")
		return j, "", false
	}
	if err != nil {
		c.internalError(r.Context(), w, "load job", err)
		return j, "", false
	}
	tok := runnerapi.JobToken(r, bodyToken)
	if tok == "" {
		runnerapi.WriteError(w, http.StatusForbidden, "403 Forbidden: invalid job token", "token")
		return j, "", false
	}
	hash = store.HashToken(tok)
	if j.TokenHash != "" && runnerapi.TokenEqual(hash, j.TokenHash) {
		return j, hash, true
	}
	owner, err := c.st.RetiredJobToken(r.Context(), hash)
	switch {
	case err == nil && owner == j.ID:
		writeGone(w, j.Status)
	case err == nil || errors.Is(err, store.ErrNotFound):
		runnerapi.WriteError(w, http.StatusForbidden, "403 Forbidden: invalid job token", "token")
	default:
		c.internalError(r.Context(), w, "look up job token", err)
	}
	return j, hash, false
}

// lockedJobForRunner is jobForRunner under the job lock, taken first: a
// claim, the reaper, a cancel or the runner's own other call may move the
// job, never while it is held, so the one read is current. On success the
// caller releases the lock with unlock; on failure it is released and the
// answer written.
func (c *Coordinator) lockedJobForRunner(w http.ResponseWriter, r *http.Request, bodyToken string) (j store.Job, unlock func(), ok bool) {
	id, ok := runnerapi.PathID(r)
	if !ok {
		runnerapi.WriteError(w, http.StatusNotFound, "404 Job Not Found", "id")
		return store.Job{}, nil, false
	}
	unlock = c.lockJob(id)
	if j, _, ok = c.jobForRunner(w, r, bodyToken); !ok {
		unlock()
		return j, nil, false
	}
	return j, unlock, true
}

// reloadForRunner re-reads job id under its job lock (a claim, the reaper,
// a cancel or the runner's own other call may have moved it) and checks
// that hash is still its current token; if not, the assignment ended
// meanwhile and it has answered 409.
func (c *Coordinator) reloadForRunner(w http.ResponseWriter, r *http.Request, id int64, hash string) (store.Job, bool) {
	j, err := c.st.GetJob(r.Context(), id)
	if err != nil {
		c.internalError(r.Context(), w, "load job", err)
		return j, false
	}
	if j.TokenHash == "" || !runnerapi.TokenEqual(hash, j.TokenHash) {
		writeGone(w, j.Status)
		return j, false
	}
	return j, true
}

func setJobHeaders(w http.ResponseWriter, s store.Status) {
	if rs := remoteStatus(s); rs != "" {
		w.Header().Set(hdrJobStatus, rs)
	}
	w.Header().Set(hdrUpdateInterval, traceUpdateInterval)
}

// sameFinal reports whether a final update in state would produce status s:
// a retried final PUT for a finished job is answered 200.
func sameFinal(state api.JobState, s store.Status) bool {
	switch state {
	case api.StateSuccess:
		// A success reported while canceling became canceled.
		return s == store.StatusSuccess || s == store.StatusCanceled
	case api.StateFailed:
		return s == store.StatusFailed || s == store.StatusCanceled
	}
	return false
}

// handleUpdateJob is PUT /api/v4/jobs/{id}: keep-alive (state running or
// pending) or the final state (success, failed). For a job waiting for its
// runner's accept, state running is the accept and state pending a
// keep-alive (see handleProvisioning). Answers 200, 403 (wrong token, job
// finished), 404 (unknown job), 409 (the caller's assignment is over:
// re-queued, re-assigned, canceled), 412 (output.checksum does not match
// the stored trace, which is then reset: the runner resends it all), with
// Job-Status and X-GitLab-Trace-Update-Interval.
func (c *Coordinator) handleUpdateJob(w http.ResponseWriter, r *http.Request) {
	var req api.UpdateJobRequest
	if e := runnerapi.DecodeJSON(w, r, &req, maxV4Body, false); e != nil {
		runnerapi.WriteBad(w, e)
		return
	}
	if e := runnerapi.ValidInfo(&req.Info); e != nil {
		runnerapi.WriteBad(w, e)
		return
	}
	j, unlock, ok := c.lockedJobForRunner(w, r, req.Token)
	if !ok {
		return
	}
	defer unlock()
	switch req.State {
	case api.StateRunning, api.StatePending, api.StateSuccess, api.StateFailed:
	default:
		setJobHeaders(w, j.Status)
		runnerapi.WriteError(w, http.StatusBadRequest, fmt.Sprintf("unknown state %q", req.State), "state")
		return
	}
	ctx := r.Context()
	log := c.log.With("job_id", j.ID, "runner_id", j.RunnerID)

	if !runnerHolds(j.Status) {
		c.answerInactive(w, &j, req.State)
		return
	}
	c.runners.Touch(ctx, store.Runner{ID: j.RunnerID}, j.RunnerSystemID, req.Info, false)
	if j.Status == store.StatusWaitingForRunnerAck && (req.State == api.StateRunning || req.State == api.StatePending) {
		now := c.clock.Now()
		var got store.Job
		var err error
		if req.State == api.StateRunning {
			got, err = c.accept(ctx, &j, "PUT state=running", now)
		} else {
			got, err = c.keepAlive(ctx, &j, now)
		}
		if errors.Is(err, store.ErrConflict) {
			c.answerInactive(w, &got, req.State)
			return
		}
		if err != nil {
			c.internalError(r.Context(), w, "update job", err)
			return
		}
		c.answerApplied(w, &got)
		return
	}
	c.touchJob(ctx, j.ID)
	if req.State == api.StateRunning || req.State == api.StatePending {
		setJobHeaders(w, j.Status)
		runnerapi.WriteJSON(w, http.StatusOK, struct{}{})
		return
	}

	sum := req.Output.Checksum
	if sum == "" {
		sum = req.Checksum
	}
	if sum != "" {
		have, err := c.traces.Checksum(ctx, j.ID)
		if err != nil {
			c.internalError(r.Context(), w, "trace checksum", err)
			return
		}
		if !strings.EqualFold(have, sum) {
			if err := c.traces.Truncate(ctx, j.ID, -1, 0); err != nil {
				c.internalError(r.Context(), w, "reset trace", err)
				return
			}
			log.Warn("trace checksum mismatch, asking for the whole log", "have", have, "runner", sum)
			setJobHeaders(w, j.Status)
			runnerapi.WriteError(w, http.StatusPreconditionFailed, "trace checksum mismatch: send the whole log again", "output.checksum")
			return
		}
	}

	now := c.clock.Now()
	var got store.Job
	cov, covRead := "", false // the log's coverage, read once
	for attempt := 1; ; attempt++ {
		from, ch := finalChange(&j, &req, now)
		if ch.Status == store.StatusSuccess || ch.Status == store.StatusFailed {
			// A canceled job gets none: its log was cut short.
			if !covRead {
				cov, covRead = c.jobCoverage(ctx, log, &j), true
			}
			if cov != "" {
				ch.Coverage = &cov
			}
		}
		var err error
		got, err = c.transitionJob(ctx, j.ID, from, ch)
		if errors.Is(err, store.ErrConflict) {
			// Something without the job lock moved the job after it was
			// read: an admin cancel (running → canceling) came first, and
			// the final state is decided again from the state it left.
			// Anything else means the assignment is over.
			if attempt < 3 && isActive(got.Status) && got.TokenHash == j.TokenHash {
				j = got
				continue
			}
			c.answerInactive(w, &got, req.State)
			return
		}
		if err != nil {
			c.internalError(r.Context(), w, "finish job", err)
			return
		}
		break
	}
	c.finished(&got)
	log.Info("job finished", "status", got.Status, "failure_reason", got.FailureReason)
	setJobHeaders(w, got.Status)
	runnerapi.WriteJSON(w, http.StatusOK, struct{}{})
}

// finalChange is the move that ends job j, as read, on the runner's final
// update req: from exactly j's status (so that a cancel landing between
// the read and the move makes it fail, rather than be overwritten) to
// canceled when j is canceling, else to the state the runner reports.
func finalChange(j *store.Job, req *api.UpdateJobRequest, now time.Time) ([]store.Status, store.JobChange) {
	ch := store.JobChange{FinishedAt: now, At: now}
	from := []store.Status{j.Status}
	if j.Status == store.StatusWaitingForRunnerAck {
		// A runner may fail a job before it accepts it (GitLab Runner does
		// so when the payload fails its checks).
		prov := j.ProvisioningNanos + max(0, int64(now.Sub(j.AssignedAt)))
		ch.ProvisioningNanos, ch.IfVersion = &prov, j.Version
	}
	switch {
	case j.Status == store.StatusCanceling:
		// Canceled whatever the runner reports, as GitLab does: a script
		// that finished before the runner heard of the cancel does not
		// turn a cancel into a success.
		ch.Status = store.StatusCanceled
		ch.ExitCode = req.ExitCode
	case req.State == api.StateSuccess:
		ch.Status = store.StatusSuccess
		zero := 0
		ch.ExitCode = &zero
	default:
		ch.Status = store.StatusFailed
		reason := req.FailureReason
		if reason == "" {
			reason = api.ScriptFailure
		} else if !reason.Valid() {
			reason = api.UnknownFailure
		}
		rs := string(reason)
		ch.FailureReason = &rs
		ch.ExitCode = req.ExitCode // none for a failure without one
	}
	return from, ch
}

// finished does the bookkeeping of a job that reached a final state.
func (c *Coordinator) finished(j *store.Job) {
	c.forgetJob(j.ID)
	c.jobChanged(context.Background(), j.ID, false)
	c.metrics.finished.WithLabelValues(string(j.Status)).Inc()
}

// handlePatchTrace is PATCH /api/v4/jobs/{id}/trace: appends the body at
// Content-Range start (which must equal the stored size). Traces are taken
// while a job waits for its runner's accept (preparation logs). Answers 202
// with Range: 0-<size>; 416 with Range: 0-<size> when start is not the
// stored size; 413 for a body over 1 MiB; 403 for a wrong token or a
// finished job, and for a patch that would take the trace past
// MaxTraceSize (the job is then failed: refuseTraceOverLimit); 409 when
// the caller's assignment is over; 400 for a bad Content-Range; 507 while
// the data directory that holds the trace files is under MinFreeDisk.
func (c *Coordinator) handlePatchTrace(w http.ResponseWriter, r *http.Request) {
	j, unlock, ok := c.lockedJobForRunner(w, r, "")
	if !ok {
		return
	}
	defer unlock()
	if !runnerHolds(j.Status) {
		c.answerInactive(w, &j, "")
		return
	}
	start, end, err := api.ParseContentRange(r.Header.Get("Content-Range"))
	if err != nil {
		setJobHeaders(w, j.Status)
		runnerapi.WriteError(w, http.StatusBadRequest, err.Error(), "Content-Range")
		return
	}
	// end-start, not end-start+1: that overflows for 0-MaxInt64.
	if r.ContentLength > maxTracePart || end-start >= maxTracePart {
		setJobHeaders(w, j.Status)
		runnerapi.WriteError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("trace patch larger than %d bytes", maxTracePart), "")
		return
	}
	if c.tracesInDataDir && c.refuseOnLowDisk(w, j.ID, j.Status, writeTrace) {
		c.touchJob(r.Context(), j.ID) // the runner is there, and will send it again
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxTracePart+1))
	if err != nil {
		setJobHeaders(w, j.Status)
		runnerapi.WriteError(w, http.StatusBadRequest, "read body: "+err.Error(), "")
		return
	}
	if len(body) > maxTracePart {
		setJobHeaders(w, j.Status)
		runnerapi.WriteError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("trace patch larger than %d bytes", maxTracePart), "")
		return
	}

	ctx := r.Context()
	setJobHeaders(w, j.Status)
	if int64(len(body)) != end-start+1 {
		runnerapi.WriteError(w, http.StatusBadRequest, fmt.Sprintf("body has %d bytes, Content-Range says %d", len(body), end-start+1), "Content-Range")
		return
	}
	if end >= c.cfg.MaxTraceSize { // the trace would be end+1 bytes
		c.refuseTraceOverLimit(w, r, &j, start)
		return
	}
	size, err := c.traces.Append(ctx, j.ID, start, body)
	var off *store.TraceOffsetError
	if errors.As(err, &off) {
		w.Header().Set("Range", api.FormatRange(off.Size))
		runnerapi.WriteError(w, http.StatusRequestedRangeNotSatisfiable, fmt.Sprintf("range starts at %d, trace has %d bytes", start, off.Size), "Content-Range")
		return
	}
	if err != nil {
		c.internalError(r.Context(), w, "append trace", err)
		return
	}
	c.pages.changed(j.ID) // live logs in the web UI
	c.touchJob(ctx, j.ID)
	w.Header().Set("Range", api.FormatRange(size))
	w.WriteHeader(http.StatusAccepted)
}

// refuseTraceOverLimit answers a PATCH at start that would take job j's
// trace past MaxTraceSize as GitLab answers it (Ci::AppendBuildTraceService:
// the job is dropped with failure_reason trace_size_exceeded and the PATCH
// answered 403 Forbidden): the patch is not written, a last line saying
// why is, and the job fails (a job being canceled is canceled). The 403,
// with Job-Status failed, makes GitLab Runner and drover's manager abort
// the job and send no more; a final PUT that still comes finds the job
// finished (200 for state failed, 403 otherwise). A patch at another
// offset than the trace's size is answered 416 first, as any.
func (c *Coordinator) refuseTraceOverLimit(w http.ResponseWriter, r *http.Request, j *store.Job, start int64) {
	ctx := r.Context()
	limit := c.cfg.MaxTraceSize
	size, err := c.traces.Size(ctx, j.ID)
	if err != nil {
		c.internalError(ctx, w, "trace size", err)
		return
	}
	if size != start {
		w.Header().Set("Range", api.FormatRange(size))
		runnerapi.WriteError(w, http.StatusRequestedRangeNotSatisfiable, fmt.Sprintf("range starts at %d, trace has %d bytes", start, size), "Content-Range")
		return
	}
	now := c.clock.Now()
	ch := store.JobChange{Status: store.StatusFailed, FinishedAt: now, At: now, IfVersion: j.Version}
	if j.Status == store.StatusCanceling {
		ch.Status = store.StatusCanceled
	} else {
		reason := string(api.TraceSizeExceeded)
		ch.FailureReason = &reason
	}
	if j.Status == store.StatusWaitingForRunnerAck {
		prov := j.ProvisioningNanos + max(0, int64(now.Sub(j.AssignedAt)))
		ch.ProvisioningNanos = &prov
	}
	line := fmt.Sprintf("ERROR: Job failed: job's log exceeded limit of %d bytes (coordinator)", limit)
	got, err := c.finishWithLine(ctx, j, size, line, ch)
	var off *store.TraceOffsetError
	switch {
	case errors.As(err, &off):
		// Another coordinator's reaper wrote its line meanwhile.
		w.Header().Set("Range", api.FormatRange(off.Size))
		runnerapi.WriteError(w, http.StatusRequestedRangeNotSatisfiable, fmt.Sprintf("range starts at %d, trace has %d bytes", start, off.Size), "Content-Range")
		return
	case errors.Is(err, store.ErrConflict):
		c.answerInactive(w, &got, "")
		return
	case err != nil:
		c.internalError(ctx, w, "fail job over its trace limit", err)
		return
	}
	c.finished(&got)
	c.log.Warn("job failed: its log would exceed the limit", "job_id", j.ID, "runner_id", j.RunnerID,
		"trace_size", size, "patch_end", r.Header.Get("Content-Range"), "max_trace_size", limit, "status", got.Status)
	setJobHeaders(w, got.Status)
	runnerapi.WriteError(w, http.StatusForbidden, fmt.Sprintf("403 Forbidden: job's log exceeded limit of %d bytes (--max-trace-size)", limit), "")
}
