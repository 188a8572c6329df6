package router

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/coordinator/store"
	"github.com/drover-ci/drover/internal/runnerapi"
)

// waiter is one downstream jobs/request looking for a job.
type waiter struct {
	key      mgrKey
	runner   store.Runner
	features api.FeaturesInfo
	since    time.Time
	held     bool      // a long poll: counts as demand upstream
	ch       chan *job // buffered 1: dispatch never blocks
}

// runnerToken picks the runner token of a request: the body's token, else
// the RUNNER-TOKEN header (runners send both).
func runnerToken(r *http.Request, body string) string {
	if body != "" {
		return body
	}
	return r.Header.Get(api.HeaderRunnerToken)
}

// authRunner finds the runner of token; ok is false when a 403 or 500 has
// been written.
func (r *Router) authRunner(ctx context.Context, w http.ResponseWriter, token string) (store.Runner, bool) {
	if token == "" {
		runnerapi.WriteError(w, http.StatusForbidden, "403 Forbidden: missing runner token", "token")
		return store.Runner{}, false
	}
	rn, err := r.st.RunnerByTokenHash(ctx, store.HashToken(token))
	if errors.Is(err, store.ErrNotFound) {
		runnerapi.WriteError(w, http.StatusForbidden, "403 Forbidden: invalid runner token", "token")
		return rn, false
	}
	if err != nil {
		r.internalError(ctx, w, "look up runner", err)
		return rn, false
	}
	return rn, true
}

// touchManager records a runner manager's contact in the store, at most
// every few seconds per manager unless force is set.
func (r *Router) touchManager(ctx context.Context, rn store.Runner, sys string, info api.VersionInfo, force bool) {
	now := r.clock.Now()
	k := mgrKey{rn.ID, sys}
	r.mu.Lock()
	last, ok := r.contactSeen[k]
	if !force && ok && now.Sub(last) < 5*time.Second {
		r.mu.Unlock()
		return
	}
	r.contactSeen[k] = now
	r.mu.Unlock()
	m := store.RunnerManager{
		RunnerID: rn.ID, SystemID: sys, ContactedAt: now,
		Version: info.Version, Executor: info.Executor, Platform: info.Platform, Arch: info.Architecture,
	}
	if err := r.st.UpsertRunnerManager(ctx, m); err != nil && !errors.Is(err, store.ErrNotFound) {
		r.log.Warn("record runner manager", "runner_id", rn.ID, "system_id", sys, "err", err)
	}
}

// handleVerify is POST /api/v4/runners/verify: 200 with the runner's id
// and token, 403 for an unknown token.
func (r *Router) handleVerify(w http.ResponseWriter, req *http.Request) {
	var body api.VerifyRequest
	if e := runnerapi.DecodeJSON(w, req, &body, maxV4Body, false); e != nil {
		runnerapi.WriteBad(w, e)
		return
	}
	tok := runnerToken(req, body.Token)
	rn, ok := r.authRunner(req.Context(), w, tok)
	if !ok {
		return
	}
	r.touchManager(req.Context(), rn, body.SystemID, body.Info, true)
	r.log.Info("runner verified", "runner_id", rn.ID, "system_id", body.SystemID)
	runnerapi.WriteJSON(w, http.StatusOK, api.VerifyResponse{ID: rn.ID, Token: tok})
}

// handleUnregisterManager is DELETE /api/v4/runners/managers: 204.
func (r *Router) handleUnregisterManager(w http.ResponseWriter, req *http.Request) {
	var body api.UnregisterRequest
	if e := runnerapi.DecodeJSON(w, req, &body, maxV4Body, false); e != nil {
		runnerapi.WriteBad(w, e)
		return
	}
	rn, ok := r.authRunner(req.Context(), w, runnerToken(req, body.Token))
	if !ok {
		return
	}
	if body.SystemID == "" {
		runnerapi.WriteError(w, http.StatusBadRequest, "system_id is required", "system_id")
		return
	}
	if err := r.st.DeleteRunnerManager(req.Context(), rn.ID, body.SystemID); err != nil && !errors.Is(err, store.ErrNotFound) {
		r.internalError(req.Context(), w, "unregister runner manager", err)
		return
	}
	r.mu.Lock()
	delete(r.managers, mgrKey{rn.ID, body.SystemID})
	delete(r.contactSeen, mgrKey{rn.ID, body.SystemID})
	r.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

// versionLocked returns the current queue version of k.
func (r *Router) versionLocked(k mgrKey) string {
	v, ok := r.versions[k]
	if !ok {
		r.seq++
		v = strconv.FormatInt(r.seq, 36)
		r.versions[k] = v
	}
	return v
}

// handleJobRequest is POST /api/v4/jobs/request.
//
// Answers 403 for a bad token, 201 with the job payload, 204 when there is
// none. Every answer carries X-GitLab-Last-Update. A request whose
// last_update equals the current version is held up to LongPollTimeout;
// while it is held it counts as demand for the upstream poller.
func (r *Router) handleJobRequest(w http.ResponseWriter, req *http.Request) {
	var body api.JobRequest
	if e := runnerapi.DecodeJSON(w, req, &body, maxV4Body, false); e != nil {
		runnerapi.WriteBad(w, e)
		return
	}
	ctx := req.Context()
	rn, ok := r.authRunner(ctx, w, runnerToken(req, body.Token))
	if !ok {
		return
	}
	r.touchManager(ctx, rn, body.SystemID, body.Info, false)
	key := mgrKey{rn.ID, body.SystemID}
	now := r.clock.Now()

	r.mu.Lock()
	r.managers[key] = &mgrSeen{runner: rn, features: body.Info.Features, lastSeen: now}
	version := r.versionLocked(key)
	if rn.Paused {
		r.mu.Unlock()
		w.Header().Set(api.HeaderLastUpdate, version)
		w.WriteHeader(http.StatusNoContent)
		return
	}
	wt := &waiter{
		key: key, runner: rn, features: body.Info.Features, since: now,
		held: body.LastUpdate != "" && body.LastUpdate == version,
		ch:   make(chan *job, 1),
	}
	r.waiters[wt] = struct{}{}
	r.dispatchLocked(now)
	j := r.takeLocked(wt)
	held := j == nil && wt.held
	if !held {
		delete(r.waiters, wt)
	}
	r.mu.Unlock()
	if held {
		r.kickPoller()
		timer := r.clock.NewTimer(r.cfg.LongPollTimeout)
		select {
		case j = <-wt.ch:
		case <-timer.C():
		case <-ctx.Done():
		}
		timer.Stop()
		r.mu.Lock()
		delete(r.waiters, wt)
		if j == nil {
			j = r.takeLocked(wt) // assigned while we stopped waiting
		}
		if ctx.Err() != nil {
			// The runner went away; nobody reads an answer.
			if j != nil {
				r.requeueLocked(j, r.clock.Now())
			}
			r.mu.Unlock()
			return
		}
		if j == nil {
			r.seq++
			version = strconv.FormatInt(r.seq, 36)
			r.versions[key] = version
		}
		r.mu.Unlock()
	}
	w.Header().Set(api.HeaderLastUpdate, version)
	if j == nil {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	body2 := j.raw1
	if wt.features.TwoPhaseJobCommit {
		body2 = j.raw2
		w.Header().Set(HeaderAckTimeout, strconv.FormatFloat(r.cfg.AckTimeout.Seconds(), 'f', -1, 64))
	}
	r.log.Info("job handed out", "job_id", j.id, "runner_id", rn.ID, "system_id", body.SystemID, "project", j.project, "two_phase", wt.features.TwoPhaseJobCommit)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body2)))
	w.WriteHeader(http.StatusCreated)
	w.Write(body2)
}

// takeLocked returns the job dispatched to w, if any.
func (r *Router) takeLocked(w *waiter) *job {
	select {
	case j := <-w.ch:
		return j
	default:
		return nil
	}
}

// dispatchLocked hands queued jobs to waiting runners: jobs in fair order,
// each to the best waiter that can run it (see bestWaiterLocked).
func (r *Router) dispatchLocked(now time.Time) {
	for len(r.waiters) > 0 && r.queue.Len() > 0 {
		var best *waiter
		j := r.queue.Pop(func(j *job) bool {
			best = r.bestWaiterLocked(j, now)
			return best != nil
		})
		if j == nil {
			return
		}
		delete(r.waiters, best)
		j.state = jobOffered
		j.sysID = best.key.systemID
		j.runnerID = best.runner.ID
		j.twoPhaseDown = best.features.TwoPhaseJobCommit
		j.deadline = now.Add(r.cfg.AckTimeout)
		r.metrics.handedOut.Inc()
		best.ch <- j
	}
}

// bestWaiterLocked picks the waiter to offer j to: healthy runner managers
// before ones that declined or went silent lately, then the one waiting
// longest. A runner manager that declined j itself within declineCooldown
// is not offered j.
func (r *Router) bestWaiterLocked(j *job, now time.Time) *waiter {
	var best *waiter
	bestBad := false
	for w := range r.waiters {
		if !canRun(&w.runner, &w.features, j) {
			continue
		}
		if t, ok := j.declinedBy[w.key.systemID]; ok && now.Sub(t) < declineCooldown {
			continue
		}
		bad := r.unhealthyLocked(w.key.systemID, now)
		if best == nil || (bestBad && !bad) || (bad == bestBad && w.since.Before(best.since)) {
			best, bestBad = w, bad
		}
	}
	return best
}

// requeueLocked puts an offered job back at the head of its project queue
// and offers it again.
func (r *Router) requeueLocked(j *job, now time.Time) {
	if r.jobs[j.id] != j || j.state == jobQueued {
		return
	}
	j.state = jobQueued
	j.sysID = ""
	j.twoPhaseDown = false
	r.queue.PushFront(j)
	r.dispatchLocked(now)
	r.kickPoller()
}

// kickPoller wakes the upstream poller to re-check demand.
func (r *Router) kickPoller() {
	select {
	case r.pollKick <- struct{}{}:
	default:
	}
}
