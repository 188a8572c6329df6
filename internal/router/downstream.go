package router

import (
	"net/http"
	"strconv"
	"time"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/runnerapi"
	"github.com/drover-ci/drover/internal/store"
)

// waiter is one downstream jobs/request looking for a job.
type waiter struct {
	key      runnerapi.ManagerKey
	runner   store.Runner
	features api.FeaturesInfo
	since    time.Time
	held     bool      // a long poll: counts as demand upstream
	ch       chan *job // buffered 1: dispatch never blocks
}

// handleJobRequest is POST /api/v4/jobs/request.
//
// Answers 403 for a bad token, 201 with the job payload, 204 when there is
// none. Every answer carries X-GitLab-Last-Update. A request whose
// last_update equals the current version is held up to LongPollTimeout;
// while it is held it counts as demand for the upstream poller.
func (r *Router) handleJobRequest(w http.ResponseWriter, req *http.Request) {
	var body api.JobRequest
	rn, ok := r.runners.DecodeRunnerRequest(w, req, &body, func() (string, string) { return body.Token, body.SystemID })
	if !ok {
		return
	}
	ctx := req.Context()
	r.runners.Touch(ctx, rn, body.SystemID, body.Info, false)
	key := runnerapi.ManagerKey{RunnerID: rn.ID, SystemID: body.SystemID}
	now := r.clock.Now()
	current := r.versions.Current(key, body.LastUpdate)
	version := r.versions.Get(key)

	r.mu.Lock()
	r.managers[key] = &mgrSeen{runner: rn, features: body.Info.Features, lastSeen: now}
	if rn.Paused {
		r.mu.Unlock()
		w.Header().Set(api.HeaderLastUpdate, version)
		w.WriteHeader(http.StatusNoContent)
		return
	}
	wt := &waiter{
		key: key, runner: rn, features: body.Info.Features, since: now,
		held: current,
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
		r.mu.Unlock()
		if j == nil {
			version = r.versions.Bump(key)
		}
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
		j.sysID = best.key.SystemID
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
		if t, ok := j.declinedBy[w.key.SystemID]; ok && now.Sub(t) < declineCooldown {
			continue
		}
		bad := r.unhealthyLocked(w.key.SystemID, now)
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
