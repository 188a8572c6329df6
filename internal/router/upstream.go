package router

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/runnerapi"
)

// The upstream side: one poller with at most one jobs/request in flight,
// keep-alives for held jobs, declines.

// upstreamCall does one JSON exchange with the upstream and returns the
// status, headers and body (at most 64 MiB).
func (r *Router) upstreamCall(ctx context.Context, method, rel string, hdr http.Header, in any, endpoint string) (int, http.Header, []byte, error) {
	b, err := json.Marshal(in)
	if err != nil {
		return 0, nil, nil, err
	}
	u := *r.upBase
	u.Path += rel
	req, err := http.NewRequestWithContext(ctx, method, u.String(), bytes.NewReader(b))
	if err != nil {
		return 0, nil, nil, err
	}
	for k, vs := range hdr {
		req.Header[k] = vs
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", r.ua)
	req.Header.Set(api.HeaderRequestID, runnerapi.RandomToken("", 12))
	resp, err := r.http.Do(req)
	if err != nil {
		r.metrics.upstream.WithLabelValues(endpoint, "error").Inc()
		return 0, nil, nil, fmt.Errorf("%s %s: %w", method, rel, err)
	}
	defer resp.Body.Close()
	r.metrics.upstream.WithLabelValues(endpoint, strconv.Itoa(resp.StatusCode)).Inc()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return resp.StatusCode, resp.Header, nil, fmt.Errorf("%s %s: read answer: %w", method, rel, err)
	}
	return resp.StatusCode, resp.Header, body, nil
}

func (r *Router) setUpOK(ok bool) {
	r.mu.Lock()
	r.upOK = ok
	r.mu.Unlock()
}

// verifyUpstream checks the router's token once at start, for readiness
// and an early, clear log line.
func (r *Router) verifyUpstream(ctx context.Context) {
	h := http.Header{}
	h.Set(api.HeaderRunnerToken, r.cfg.UpstreamToken)
	code, _, _, err := r.upstreamCall(ctx, http.MethodPost, "runners/verify", h,
		api.VerifyRequest{Token: r.cfg.UpstreamToken, SystemID: r.cfg.SystemID, Info: r.runnerInfo(api.FeaturesInfo{TwoPhaseJobCommit: true})}, "verify")
	switch {
	case err != nil:
		r.log.Warn("upstream not reachable", "upstream", r.cfg.Upstream, "err", err)
	case code == http.StatusOK:
		r.log.Info("upstream verified the router's token", "upstream", r.cfg.Upstream, "system_id", r.cfg.SystemID)
		r.setUpOK(true)
	default:
		r.log.Error("upstream rejected the router's token", "upstream", r.cfg.Upstream, "status", code)
	}
}

// wantJobLocked reports whether the poller should ask for a job now, and
// with which features: the union of the waiting runners' (or, when
// prefetching, of the live runner managers').
func (r *Router) wantJobLocked(now time.Time) (api.FeaturesInfo, bool) {
	var f api.FeaturesInfo
	n := 0
	for w := range r.waiters {
		if w.held {
			unionFeatures(&f, &w.features)
			n++
		}
	}
	if n == 0 && r.cfg.Prefetch > 0 && !r.upClassic && r.queue.Len() < r.cfg.Prefetch {
		for _, m := range r.managers {
			if now.Sub(m.lastSeen) < 2*r.cfg.LongPollTimeout && !m.runner.Paused {
				unionFeatures(&f, &m.features)
				n++
			}
		}
	}
	if n == 0 {
		return f, false
	}
	f.TwoPhaseJobCommit = true
	return f, true
}

// poll is the upstream poller: one jobs/request in flight at most, sent
// only while a downstream runner waits (or prefetching is allowed).
func (r *Router) poll(ctx context.Context) {
	backoff := time.Duration(0)
	for ctx.Err() == nil {
		r.mu.Lock()
		f, want := r.wantJobLocked(r.clock.Now())
		last := r.lastUpdate
		r.mu.Unlock()
		if !want {
			select {
			case <-ctx.Done():
				return
			case <-r.pollKick:
			case <-r.clock.After(time.Second): // live runner managers age out
			}
			continue
		}
		ok := r.pollOnce(ctx, f, last)
		if ok {
			backoff = 0
			continue
		}
		backoff = min(max(2*backoff, time.Second), 30*time.Second)
		select {
		case <-ctx.Done():
			return
		case <-r.clock.After(backoff):
		}
	}
}

// pollOnce sends one jobs/request upstream; false means back off.
func (r *Router) pollOnce(ctx context.Context, f api.FeaturesInfo, last string) bool {
	h := http.Header{}
	h.Set(api.HeaderRunnerToken, r.cfg.UpstreamToken)
	req := api.JobRequest{Info: r.runnerInfo(f), Token: r.cfg.UpstreamToken, SystemID: r.cfg.SystemID, LastUpdate: last}
	code, hdr, body, err := r.upstreamCall(ctx, http.MethodPost, "jobs/request", h, req, "request_job")
	if err != nil {
		if ctx.Err() == nil {
			r.log.Warn("upstream job request failed", "err", err)
			r.setUpOK(false)
		}
		return false
	}
	r.mu.Lock()
	if v := hdr.Get(api.HeaderLastUpdate); v != "" {
		r.lastUpdate = v
	}
	// A 5xx is an upstream that is down behind its proxy (502, 503,
	// 504): not ready, as when it cannot be reached at all.
	r.upOK = code != http.StatusForbidden && code < 500
	r.mu.Unlock()
	switch code {
	case http.StatusCreated:
		if err := r.ingest(body, hdr); err != nil {
			r.log.Error("upstream sent a job the router cannot read", "err", err)
		}
		return true
	case http.StatusNoContent:
		return true
	case http.StatusForbidden:
		r.log.Error("upstream rejected the router's token", "status", code)
		return false
	default:
		r.log.Warn("upstream job request got an unexpected answer", "status", code)
		return false
	}
}

// payloadView is what the router reads of a job payload.
type payloadView struct {
	ID      int64  `json:"id"`
	Token   string `json:"token"`
	JobInfo struct {
		ProjectFullPath string `json:"project_full_path"`
	} `json:"job_info"`
	Variables api.Variables `json:"variables"`
	Image     struct {
		Name string `json:"name"`
	} `json:"image"`
	Services []json.RawMessage `json:"services"`
	Features struct {
		TwoPhaseJobCommit bool `json:"two_phase_job_commit"`
	} `json:"features"`
	Tags *[]string `json:"tags"`
}

// withTwoPhase returns the payload with features.two_phase_job_commit set
// to on, every other byte of meaning kept (unknown keys included).
func withTwoPhase(raw []byte, on bool) ([]byte, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(raw, &top); err != nil {
		return nil, err
	}
	feats := map[string]json.RawMessage{}
	if b, ok := top["features"]; ok && string(b) != "null" {
		if err := json.Unmarshal(b, &feats); err != nil {
			return nil, err
		}
	}
	if on {
		feats["two_phase_job_commit"] = json.RawMessage("true")
	} else {
		delete(feats, "two_phase_job_commit")
	}
	b, err := json.Marshal(feats)
	if err != nil {
		return nil, err
	}
	top["features"] = b
	return json.Marshal(top)
}

// ingest queues a job the upstream handed to the router.
func (r *Router) ingest(raw []byte, hdr http.Header) error {
	var p payloadView
	if err := json.Unmarshal(raw, &p); err != nil {
		return err
	}
	raw1, err := withTwoPhase(raw, false)
	if err != nil {
		return err
	}
	raw2, err := withTwoPhase(raw, true)
	if err != nil {
		return err
	}
	now := r.clock.Now()
	j := &job{
		id: p.ID, token: p.Token, raw1: raw1, raw2: raw2,
		twoPhaseUp: p.Features.TwoPhaseJobCommit, upAck: DefaultAckTimeout,
		project: p.JobInfo.ProjectFullPath, image: p.Image.Name != "", services: len(p.Services) > 0,
		pulledAt: now, lastUpKeep: now,
	}
	if s := hdr.Get(HeaderAckTimeout); s != "" {
		// Seconds, possibly fractional; keep-alives go at a third of it,
		// so a floor keeps a silly value from flooding the upstream.
		if n, err := strconv.ParseFloat(s, 64); err == nil && n > 0 {
			j.upAck = max(time.Duration(n*float64(time.Second)), 300*time.Millisecond)
		}
	}
	j.namespace = namespaceOf(j.project)
	switch {
	case p.Tags != nil:
		j.tags, j.tagsKnown = *p.Tags, true
	case hasVar(p.Variables, "CI_JOB_TAGS"):
		j.tags, j.tagsKnown = parseTags(p.Variables.Get("CI_JOB_TAGS")), true
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.upClassic = !j.twoPhaseUp
	if old := r.jobs[j.id]; old != nil {
		// The upstream gave the job to the router again (it expired there):
		// the new hand-out has a new token; the old one is void.
		r.forgetLocked(old)
	}
	r.jobs[j.id] = j
	r.queue.Push(j)
	r.metrics.pulled.Inc()
	r.log.Info("job pulled from upstream", "job_id", j.id, "project", j.project, "two_phase", j.twoPhaseUp, "ack_timeout", j.upAck)
	r.dispatchLocked(now)
	return nil
}

func hasVar(vs api.Variables, key string) bool {
	for _, v := range vs {
		if v.Key == key {
			return true
		}
	}
	return false
}

// tick expires silent offers, sends due upstream keep-alives and declines
// jobs no live runner could take for NoRunnerTimeout.
func (r *Router) tick(ctx context.Context) {
	now := r.clock.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, j := range r.jobs {
		if j.state == jobOffered && now.After(j.deadline) {
			r.log.Warn("runner went silent on an offered job; requeueing", "job_id", j.id, "system_id", j.sysID)
			r.markBadLocked(j.sysID, now, true)
			r.metrics.declines.WithLabelValues("expired").Inc()
			r.requeueLocked(j, now)
		}
		if j.state == jobQueued && j.twoPhaseUp {
			if r.anyLiveRunnerLocked(j, now) {
				j.noRunner = time.Time{}
			} else if j.noRunner.IsZero() {
				j.noRunner = now
			} else if now.Sub(j.noRunner) >= r.cfg.NoRunnerTimeout {
				r.log.Warn("no runner can take the job; declining it upstream", "job_id", j.id)
				r.metrics.declines.WithLabelValues("router").Inc()
				r.forgetLocked(j)
				r.goUpstream(ctx, j, "declined", "no runner behind the router can take this job")
				continue
			}
		}
		if j.state != jobAccepting && !j.keepInFlight && now.Sub(j.lastUpKeep) >= j.upAck/3 {
			j.keepInFlight = true
			if j.twoPhaseUp {
				r.goUpstream(ctx, j, "pending", "")
			} else {
				r.goUpstream(ctx, j, "", "")
			}
		}
	}
	r.dispatchLocked(now)
}

// anyLiveRunnerLocked reports whether a downstream runner manager seen
// lately could run j.
func (r *Router) anyLiveRunnerLocked(j *job, now time.Time) bool {
	for _, m := range r.managers {
		if now.Sub(m.lastSeen) < 2*r.cfg.LongPollTimeout && canRun(&m.runner, &m.features, j) {
			return true
		}
	}
	return false
}

// goUpstream reports on held job j upstream, in the background: status
// pending or declined (runner_provisioning), or "" for a classic job's
// keep-alive (PUT state=running). An answer saying the job is no longer
// the router's drops it.
func (r *Router) goUpstream(ctx context.Context, j *job, status, reason string) {
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		h := http.Header{}
		h.Set(api.HeaderJobToken, j.token)
		id := strconv.FormatInt(j.id, 10)
		var code int
		var hdr http.Header
		var err error
		if status == "" {
			code, hdr, _, err = r.upstreamCall(ctx, http.MethodPut, "jobs/"+id, h,
				api.UpdateJobRequest{Info: r.runnerInfo(api.FeaturesInfo{}), Token: j.token, State: api.StateRunning}, "update_job")
		} else {
			code, hdr, _, err = r.upstreamCall(ctx, http.MethodPost, "jobs/"+id+"/runner_provisioning", h,
				api.ProvisioningRequest{Status: status, Reason: reason}, "runner_provisioning")
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		j.keepInFlight = false
		if err != nil {
			if ctx.Err() == nil {
				r.log.Warn("upstream keep-alive failed", "job_id", j.id, "err", err)
			}
			return
		}
		js := hdr.Get(api.HeaderJobStatus)
		if code == http.StatusConflict || code == http.StatusForbidden || code == http.StatusNotFound ||
			js == api.RemoteCanceled || js == api.RemoteFailed {
			if r.jobs[j.id] == j && j.state != jobAccepting {
				r.log.Info("upstream took the job back", "job_id", j.id, "status", code, "job_status", js)
				r.forgetLocked(j)
			}
			return
		}
		if code >= 200 && code < 300 {
			j.lastUpKeep = r.clock.Now()
		}
	}()
}
