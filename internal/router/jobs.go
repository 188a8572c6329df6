package router

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/runnerapi"
)

// Calls about jobs from downstream runners.
//
// While the router holds a job (queued or offered), keep-alives, declines
// and the accept are its business: keep-alives and declines are answered
// here, the accept is forwarded upstream. Everything else, and every call
// about a job the router does not hold (accepted, or started by an earlier
// router process), is forwarded to the upstream verbatim and the
// upstream's answer relayed back.

// hopHeaders are not forwarded in either direction.
var hopHeaders = []string{
	"Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization",
	"Te", "Trailer", "Transfer-Encoding", "Upgrade", "Proxy-Connection",
}

// heldJob returns the job id of the request if the router holds it and
// the request's job token is that job's. Otherwise it returns nil and the
// caller forwards: the upstream judges tokens of jobs it knows.
func (r *Router) heldJob(req *http.Request, bodyToken string) *job {
	id, err := strconv.ParseInt(req.PathValue("id"), 10, 64)
	if err != nil {
		return nil
	}
	tok := bodyToken
	if tok == "" {
		tok = req.Header.Get(api.HeaderJobToken)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	j := r.jobs[id]
	if j == nil || tok == "" || !runnerapi.TokenEqual(tok, j.token) {
		return nil
	}
	return j
}

// notYours answers a call about a job the router took back from the caller
// (declined, or its keep-alives stopped): 409 with Job-Status canceled, so
// any runner drops it.
func notYours(w http.ResponseWriter) {
	w.Header().Set(api.HeaderJobStatus, api.RemoteCanceled)
	runnerapi.WriteError(w, http.StatusConflict, "409 Conflict: the job is no longer assigned to this runner", "")
}

// okHeld answers a keep-alive of a held job.
func okHeld(w http.ResponseWriter) {
	w.Header().Set(api.HeaderTraceUpdateInterval, "3")
	runnerapi.WriteJSON(w, http.StatusOK, struct{}{})
}

// handleUpdateJob is PUT /api/v4/jobs/{id}.
func (r *Router) handleUpdateJob(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, req.Body, runnerapi.MaxRunnerBody))
	if err != nil {
		runnerapi.WriteError(w, http.StatusRequestEntityTooLarge, "body too large", "")
		return
	}
	var upd struct {
		Token string       `json:"token"`
		State api.JobState `json:"state"`
	}
	_ = json.Unmarshal(body, &upd) // a bad body is the upstream's to reject
	j := r.heldJob(req, upd.Token)
	if j == nil {
		r.forward(w, req, bytes.NewReader(body))
		return
	}
	now := r.clock.Now()
	r.mu.Lock()
	switch {
	case j.state == jobQueued:
		r.mu.Unlock()
		notYours(w)
		return
	case j.state == jobOffered && upd.State == api.StatePending:
		j.deadline = now.Add(r.cfg.AckTimeout)
		r.mu.Unlock()
		okHeld(w)
		return
	case j.state == jobOffered:
		// running is the accept (a classic runner's first PUT, or the
		// two-phase PUT form); a final state without one is forwarded the
		// same way: the job is the caller's from now on.
		j.state = jobAccepting
		r.mu.Unlock()
		r.accept(w, req, j, bytes.NewReader(body))
		return
	}
	r.mu.Unlock()
	r.forward(w, req, bytes.NewReader(body))
}

// handleProvisioning is POST /api/v4/jobs/{id}/runner_provisioning.
func (r *Router) handleProvisioning(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, req.Body, runnerapi.MaxRunnerBody))
	if err != nil {
		runnerapi.WriteError(w, http.StatusRequestEntityTooLarge, "body too large", "")
		return
	}
	var p api.ProvisioningRequest
	if err := json.Unmarshal(body, &p); err != nil {
		runnerapi.WriteError(w, http.StatusBadRequest, "malformed JSON body", "")
		return
	}
	j := r.heldJob(req, "")
	if j == nil {
		r.forward(w, req, bytes.NewReader(body))
		return
	}
	now := r.clock.Now()
	r.mu.Lock()
	if j.state == jobQueued {
		r.mu.Unlock()
		notYours(w)
		return
	}
	if j.state == jobAccepting {
		r.mu.Unlock()
		r.forward(w, req, bytes.NewReader(body))
		return
	}
	switch p.Status {
	case "pending":
		j.deadline = now.Add(r.cfg.AckTimeout)
		r.mu.Unlock()
		okHeld(w)
	case "accepted":
		if !j.twoPhaseUp {
			// The job already runs upstream: the accept ends the router's part.
			r.acceptedLocked(j)
			r.mu.Unlock()
			w.Header().Set(api.HeaderJobStatus, api.RemoteRunning)
			okHeld(w)
			return
		}
		j.state = jobAccepting
		r.mu.Unlock()
		r.accept(w, req, j, bytes.NewReader(body))
	case "declined":
		sys := j.sysID
		if j.declinedBy == nil {
			j.declinedBy = map[string]time.Time{}
		}
		j.declinedBy[sys] = now
		r.markBadLocked(sys, now, false)
		r.metrics.declines.WithLabelValues("downstream").Inc()
		r.log.Info("job declined by runner", "job_id", j.id, "system_id", sys, "reason", p.Reason)
		r.requeueLocked(j, now)
		r.mu.Unlock()
		okHeld(w)
	default:
		r.mu.Unlock()
		runnerapi.WriteError(w, http.StatusBadRequest, "status must be pending, accepted or declined", "status")
	}
}

// accept forwards a downstream accept of j upstream and settles j by the
// answer: accepted, gone (409/403/404: the upstream took it back), or
// offered again (transport or server error: the runner retries).
func (r *Router) accept(w http.ResponseWriter, req *http.Request, j *job, body io.Reader) {
	code, hdr := r.forward(w, req, body)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.jobs[j.id] != j {
		return
	}
	switch {
	case code >= 200 && code < 300 && hdr.Get(api.HeaderJobStatus) != api.RemoteCanceled && hdr.Get(api.HeaderJobStatus) != api.RemoteFailed:
		r.acceptedLocked(j)
	case code == http.StatusConflict || code == http.StatusForbidden || code == http.StatusNotFound || code >= 200 && code < 300:
		r.log.Info("upstream took the job back at accept", "job_id", j.id, "status", code, "job_status", hdr.Get(api.HeaderJobStatus))
		r.forgetLocked(j)
	default:
		j.state = jobOffered
		j.deadline = r.clock.Now().Add(r.cfg.AckTimeout)
	}
}

// acceptedLocked ends the router's part in j.
func (r *Router) acceptedLocked(j *job) {
	r.markGoodLocked(j.sysID)
	r.metrics.routed.Inc()
	r.log.Info("job accepted", "job_id", j.id, "system_id", j.sysID)
	r.forgetLocked(j)
}

// forgetLocked drops j from the router's state.
func (r *Router) forgetLocked(j *job) {
	if r.jobs[j.id] != j {
		return
	}
	if j.state == jobQueued {
		r.queue.Remove(j)
	}
	delete(r.jobs, j.id)
}

// handlePatchTrace is PATCH /api/v4/jobs/{id}/trace: forwarded, also while
// the job is offered (preparation logs).
func (r *Router) handlePatchTrace(w http.ResponseWriter, req *http.Request) {
	if j := r.heldJob(req, ""); j != nil {
		r.mu.Lock()
		queued := j.state == jobQueued
		r.mu.Unlock()
		if queued {
			notYours(w)
			return
		}
	}
	r.forward(w, req, req.Body)
}

// handleForward forwards a request as it is (artifacts downloads).
func (r *Router) handleForward(w http.ResponseWriter, req *http.Request) {
	r.forward(w, req, req.Body)
}

// maxForwardedArtifact sizes the read deadline of an artifact upload the
// router streams upstream; the upstream enforces its own size cap.
const maxForwardedArtifact = 1 << 30

// handleUploadArtifacts forwards an artifact upload as it is, streaming:
// the body goes upstream as it arrives, never held by the router.
func (r *Router) handleUploadArtifacts(w http.ResponseWriter, req *http.Request) {
	runnerapi.AllowSlowBody(w, req, maxForwardedArtifact)
	r.forward(w, req, req.Body)
}

// forward sends req (with body) to the same path under the upstream's
// /api/v4/ and relays the answer. It returns the status and headers
// relayed; a transport failure is answered 502 (runners retry it).
func (r *Router) forward(w http.ResponseWriter, req *http.Request, body io.Reader) (int, http.Header) {
	rel := strings.TrimPrefix(req.URL.Path, "/api/v4/")
	u := *r.upBase
	u.Path += rel
	u.RawQuery = req.URL.RawQuery
	out, err := http.NewRequestWithContext(req.Context(), req.Method, u.String(), body)
	if err != nil {
		runnerapi.WriteError(w, http.StatusBadGateway, "forward: "+err.Error(), "")
		return http.StatusBadGateway, w.Header()
	}
	for k, vs := range req.Header {
		out.Header[k] = vs
	}
	for _, h := range hopHeaders {
		out.Header.Del(h)
	}
	if req.ContentLength >= 0 {
		out.ContentLength = req.ContentLength
	}
	if b, ok := body.(*bytes.Reader); ok {
		out.ContentLength = int64(b.Len())
	}
	endpoint := forwardEndpoint(req.Method, rel)
	resp, err := r.http.Do(out)
	if err != nil {
		r.metrics.upstream.WithLabelValues(endpoint, "error").Inc()
		if req.Context().Err() == nil {
			r.log.Warn("forward to upstream failed", "path", req.URL.Path, "err", err)
		}
		runnerapi.WriteError(w, http.StatusBadGateway, "upstream unreachable", "")
		return http.StatusBadGateway, w.Header()
	}
	defer resp.Body.Close()
	r.metrics.upstream.WithLabelValues(endpoint, strconv.Itoa(resp.StatusCode)).Inc()
	for k, vs := range resp.Header {
		w.Header()[k] = vs
	}
	for _, h := range hopHeaders {
		w.Header().Del(h)
	}
	w.WriteHeader(resp.StatusCode)
	io.Copy(w, resp.Body)
	return resp.StatusCode, resp.Header
}

// forwardEndpoint names a forwarded call for metrics.
func forwardEndpoint(method, rel string) string {
	switch {
	case strings.HasSuffix(rel, "/trace"):
		return "trace"
	case strings.HasSuffix(rel, "/runner_provisioning"):
		return "runner_provisioning"
	case strings.Contains(rel, "/artifacts"):
		return "artifacts"
	case method == http.MethodPut:
		return "update_job"
	}
	return "other"
}
