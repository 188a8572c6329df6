package coordinator

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/coordinator/store"
)

// jobForRunner loads job {id} and checks the job token. On failure it has
// written 404 (unknown job) or 403 (wrong token) and ok is false.
func (c *Coordinator) jobForRunner(w http.ResponseWriter, r *http.Request, bodyToken string) (store.Job, bool) {
	id, ok := pathID(r)
	if !ok {
		writeError(w, http.StatusNotFound, "404 Job Not Found", "id")
		return store.Job{}, false
	}
	j, err := c.st.GetJob(r.Context(), id)
	if errors.Is(err, store.ErrNotFound) {
		writeError(w, http.StatusNotFound, "404 Job Not Found", "id")
		return j, false
	}
	if err != nil {
		c.internalError(w, "load job", err)
		return j, false
	}
	tok := bodyToken
	if tok == "" {
		tok = r.Header.Get(hdrJobToken)
	}
	if tok == "" || j.TokenHash == "" || !tokenEqual(store.HashToken(tok), j.TokenHash) {
		writeError(w, http.StatusForbidden, "403 Forbidden: invalid job token", "token")
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
		return s == store.StatusSuccess
	case api.StateFailed:
		return s == store.StatusFailed || s == store.StatusCanceled
	}
	return false
}

// handleUpdateJob is PUT /api/v4/jobs/{id}: keep-alive (state running) or
// the final state (success, failed). Answers 200, 403 (wrong token, job not
// the runner's any more), 404 (unknown job), 412 (output.checksum does not
// match the stored trace, which is then reset: the runner resends it all),
// with Job-Status and X-GitLab-Trace-Update-Interval.
func (c *Coordinator) handleUpdateJob(w http.ResponseWriter, r *http.Request) {
	var req api.UpdateJobRequest
	if e := decodeJSON(w, r, &req, maxV4Body, false); e != nil {
		writeBad(w, e)
		return
	}
	j, ok := c.jobForRunner(w, r, req.Token)
	if !ok {
		return
	}
	switch req.State {
	case api.StateRunning, api.StatePending, api.StateSuccess, api.StateFailed:
	default:
		setJobHeaders(w, j.Status)
		writeError(w, http.StatusBadRequest, fmt.Sprintf("unknown state %q", req.State), "state")
		return
	}
	ctx := r.Context()
	unlock := c.lockJob(j.ID)
	defer unlock()
	// Re-read under the job lock: a PATCH, the reaper or a cancel may have
	// moved it since.
	j, err := c.st.GetJob(ctx, j.ID)
	if err != nil {
		c.internalError(w, "load job", err)
		return
	}
	log := c.log.With("job_id", j.ID, "runner_id", j.RunnerID)

	if !isActive(j.Status) {
		setJobHeaders(w, j.Status)
		if j.Status.Finished() && sameFinal(req.State, j.Status) {
			writeJSON(w, http.StatusOK, struct{}{})
			return
		}
		writeError(w, http.StatusForbidden, "403 Forbidden: job is "+string(j.Status), "")
		return
	}
	c.touchJob(ctx, j.ID)
	c.touchManager(ctx, store.Runner{ID: j.RunnerID}, j.RunnerSystemID, req.Info, false)
	if req.State == api.StateRunning || req.State == api.StatePending {
		setJobHeaders(w, j.Status)
		writeJSON(w, http.StatusOK, struct{}{})
		return
	}

	sum := req.Output.Checksum
	if sum == "" {
		sum = req.Checksum
	}
	if sum != "" {
		have, err := c.traces.Checksum(j.ID)
		if err != nil {
			c.internalError(w, "trace checksum", err)
			return
		}
		if !strings.EqualFold(have, sum) {
			if err := c.traces.Truncate(j.ID, 0); err != nil {
				c.internalError(w, "reset trace", err)
				return
			}
			log.Warn("trace checksum mismatch, asking for the whole log", "have", have, "runner", sum)
			setJobHeaders(w, j.Status)
			writeError(w, http.StatusPreconditionFailed, "trace checksum mismatch: send the whole log again", "output.checksum")
			return
		}
	}

	now := c.clock.Now()
	ch := store.JobChange{FinishedAt: now, At: now}
	switch {
	case req.State == api.StateSuccess:
		ch.Status = store.StatusSuccess
		zero := 0
		ch.ExitCode = &zero
	case j.Status == store.StatusCanceling:
		ch.Status = store.StatusCanceled
		code := req.ExitCode
		ch.ExitCode = &code
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
		code := req.ExitCode
		ch.ExitCode = &code
	}
	got, err := c.st.TransitionJob(ctx, j.ID, fromActive, ch)
	if errors.Is(err, store.ErrConflict) {
		setJobHeaders(w, got.Status)
		if sameFinal(req.State, got.Status) {
			writeJSON(w, http.StatusOK, struct{}{})
			return
		}
		writeError(w, http.StatusForbidden, "403 Forbidden: job is "+string(got.Status), "")
		return
	}
	if err != nil {
		c.internalError(w, "finish job", err)
		return
	}
	c.finished(&got)
	log.Info("job finished", "status", got.Status, "failure_reason", got.FailureReason)
	setJobHeaders(w, got.Status)
	writeJSON(w, http.StatusOK, struct{}{})
}

// finished does the bookkeeping of a job that reached a final state.
func (c *Coordinator) finished(j *store.Job) {
	c.forgetJob(j.ID)
	c.metrics.finished.WithLabelValues(string(j.Status)).Inc()
}

// handlePatchTrace is PATCH /api/v4/jobs/{id}/trace: appends the body at
// Content-Range start (which must equal the stored size). Answers 202 with
// Range: 0-<size>; 416 with Range: 0-<size> when start is not the stored
// size; 413 for a body over 1 MiB; 403 for a wrong token or a job that is
// not running; 400 for a bad Content-Range.
func (c *Coordinator) handlePatchTrace(w http.ResponseWriter, r *http.Request) {
	j, ok := c.jobForRunner(w, r, "")
	if !ok {
		return
	}
	if !isActive(j.Status) {
		setJobHeaders(w, j.Status)
		writeError(w, http.StatusForbidden, "403 Forbidden: job is "+string(j.Status), "")
		return
	}
	start, end, err := api.ParseContentRange(r.Header.Get("Content-Range"))
	if err != nil {
		setJobHeaders(w, j.Status)
		writeError(w, http.StatusBadRequest, err.Error(), "Content-Range")
		return
	}
	if r.ContentLength > maxTracePart || end-start+1 > maxTracePart {
		setJobHeaders(w, j.Status)
		writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("trace patch larger than %d bytes", maxTracePart), "")
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxTracePart+1))
	if err != nil {
		setJobHeaders(w, j.Status)
		writeError(w, http.StatusBadRequest, "read body: "+err.Error(), "")
		return
	}
	if len(body) > maxTracePart {
		setJobHeaders(w, j.Status)
		writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("trace patch larger than %d bytes", maxTracePart), "")
		return
	}

	ctx := r.Context()
	unlock := c.lockJob(j.ID)
	defer unlock()
	j, err = c.st.GetJob(ctx, j.ID)
	if err != nil {
		c.internalError(w, "load job", err)
		return
	}
	setJobHeaders(w, j.Status)
	if !isActive(j.Status) {
		writeError(w, http.StatusForbidden, "403 Forbidden: job is "+string(j.Status), "")
		return
	}
	size, err := c.traces.Size(j.ID)
	if err != nil {
		c.internalError(w, "trace size", err)
		return
	}
	if start != size {
		w.Header().Set("Range", api.FormatRange(size))
		writeError(w, http.StatusRequestedRangeNotSatisfiable, fmt.Sprintf("range starts at %d, trace has %d bytes", start, size), "Content-Range")
		return
	}
	if int64(len(body)) != end-start+1 {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("body has %d bytes, Content-Range says %d", len(body), end-start+1), "Content-Range")
		return
	}
	if size, err = c.traces.Append(j.ID, body); err != nil {
		c.internalError(w, "append trace", err)
		return
	}
	c.touchJob(ctx, j.ID)
	w.Header().Set("Range", api.FormatRange(size))
	w.WriteHeader(http.StatusAccepted)
}
