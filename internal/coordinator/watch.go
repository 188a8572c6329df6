package coordinator

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/runnerapi"
	"github.com/drover-ci/drover/internal/store"
)

// POST /api/v4/jobs/watch is drover's way to tell a runner manager at once
// that one of its running jobs was canceled, however little the job
// prints: GitLab's runner learns it only from the answers to its trace
// PATCHes and keep-alive PUTs. A manager holds one watch per coordinator
// for all its jobs; the coordinator answers when the status of one of
// them is no longer the one the manager sent, or after the wait.
//
// A watch carries the runner token, as jobs/request does, and answers
// only about that runner's jobs: a job that does not exist, that is
// another runner's, or that is named with a token that never was its, is
// answered 404 alike, so the answers tell nothing of other jobs. At most
// api.MaxWatchedJobs jobs a request, looked up in one read of the store
// (two when some token is not its job's current one) per look. Every
// job answer of the runner API carries X-Drover-Job-Watch, so a manager
// knows which coordinators serve it; GitLab's don't, and nothing changes
// there.
const (
	// defaultWatchWait is how long a watch is held when it names no
	// timeout; the long-poll timeout caps it.
	defaultWatchWait = 30 * time.Second
)

// watchHub wakes held watches when a job they watch changes here, or, as
// announced by the store, through another coordinator.
type watchHub struct {
	mu   sync.Mutex
	subs map[int64]map[chan struct{}]struct{}
}

func newWatchHub() *watchHub {
	return &watchHub{subs: map[int64]map[chan struct{}]struct{}{}}
}

// subscribe returns a channel that gets a value (buffered 1, never
// blocking the sender) when one of ids changes; cancel ends the interest.
func (h *watchHub) subscribe(ids []int64) (ch chan struct{}, cancel func()) {
	ch = make(chan struct{}, 1)
	h.mu.Lock()
	for _, id := range ids {
		s := h.subs[id]
		if s == nil {
			s = map[chan struct{}]struct{}{}
			h.subs[id] = s
		}
		s[ch] = struct{}{}
	}
	h.mu.Unlock()
	return ch, func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		for _, id := range ids {
			if s := h.subs[id]; s != nil {
				delete(s, ch)
				if len(s) == 0 {
					delete(h.subs, id)
				}
			}
		}
	}
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// changed wakes the watches of job id.
func (h *watchHub) changed(id int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for ch := range h.subs[id] {
		signal(ch)
	}
}

// changedAll wakes every watch (changes may have been missed).
func (h *watchHub) changedAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, s := range h.subs {
		for ch := range s {
			signal(ch)
		}
	}
}

// jobChanged tells the watches of job id, here and, for a change that a
// runner must act on at once (a cancel), on the other coordinators of a
// shared store, that its status changed.
func (c *Coordinator) jobChanged(ctx context.Context, id int64, announce bool) {
	c.watch.changed(id)
	c.pages.changed(id)
	if !announce {
		return
	}
	if a, ok := c.st.(store.JobAnnouncer); ok {
		if err := a.AnnounceJobChange(ctx, id); err != nil {
			// The other coordinators' watchers still learn it from the
			// next PATCH or keep-alive answer of the job's runner.
			c.log.Warn("could not announce a job change to the other coordinators", "job_id", id, "err", err)
		}
	}
}

// handleWatchJobs is POST /api/v4/jobs/watch (api.WatchRequest): answered
// 200 with the jobs whose Job-Status differs from the one given, at once
// or as soon as one does, or with none after the wait. Each changed job
// carries the status code and Job-Status that a PUT with its token would
// get now (200 with the new status; 409 when the assignment is over; 403
// for a job that finished), or 404 for a job that is not the runner's
// (see watchAnswer). 403 for a missing or unknown runner token, 400 for
// no jobs or more than api.MaxWatchedJobs.
func (c *Coordinator) handleWatchJobs(w http.ResponseWriter, r *http.Request) {
	var req api.WatchRequest
	rn, ok := c.runners.DecodeRunnerRequest(w, r, &req, func() (string, string) { return req.Token, "" })
	if !ok {
		return
	}
	switch {
	case len(req.Jobs) == 0:
		runnerapi.WriteError(w, http.StatusBadRequest, "jobs: at least one job to watch is needed", "jobs")
		return
	case len(req.Jobs) > api.MaxWatchedJobs:
		runnerapi.WriteError(w, http.StatusBadRequest,
			fmt.Sprintf("jobs: %d jobs in one watch, at most %d: split them over several watches", len(req.Jobs), api.MaxWatchedJobs), "jobs")
		return
	}
	ids := make([]int64, len(req.Jobs))
	for i, j := range req.Jobs {
		if j.ID <= 0 || j.Token == "" {
			runnerapi.WriteError(w, http.StatusBadRequest, "jobs: each job needs an id and its token", "jobs")
			return
		}
		ids[i] = j.ID
	}
	wait := defaultWatchWait
	if req.Timeout > 0 {
		wait = time.Duration(req.Timeout * float64(time.Second))
	}
	wait = min(wait, c.cfg.LongPollTimeout)

	ctx := r.Context()
	// Subscribe before the first look, so a change between the two is
	// not missed.
	ch, cancel := c.watch.subscribe(ids)
	defer cancel()
	timer := c.clock.NewTimer(wait)
	defer timer.Stop()
	c.metrics.watches.Inc()
	defer c.metrics.watches.Dec()
	for {
		changes, err := c.watchedChanges(ctx, rn.ID, req.Jobs)
		if err != nil {
			if ctx.Err() == nil {
				c.internalError(r.Context(), w, "watch jobs", err)
			}
			return
		}
		if len(changes) > 0 {
			runnerapi.WriteJSON(w, http.StatusOK, api.WatchResponse{Jobs: changes})
			return
		}
		select {
		case <-ch:
		case <-timer.C():
			runnerapi.WriteJSON(w, http.StatusOK, api.WatchResponse{Jobs: []api.JobChange{}})
			return
		case <-ctx.Done():
			return
		}
	}
}

// watchedChanges returns the jobs of jobs whose answer would now be other
// than 200 with the Job-Status given (see watchAnswer), for runner
// runnerID: one read of the store for all of them, and a second only when
// some token is not its job's current one.
func (c *Coordinator) watchedChanges(ctx context.Context, runnerID int64, jobs []api.WatchedJob) ([]api.JobChange, error) {
	ids := make([]int64, len(jobs))
	for i, wj := range jobs {
		ids[i] = wj.ID
	}
	states, err := c.st.JobStates(ctx, ids)
	if err != nil {
		return nil, fmt.Errorf("watched jobs: %w", err)
	}
	byID := make(map[int64]store.JobState, len(states))
	for _, st := range states {
		byID[st.ID] = st
	}
	hashes := make([]string, len(jobs))
	var stale []string
	for i, wj := range jobs {
		hashes[i] = store.HashToken(wj.Token)
		if st, ok := byID[wj.ID]; ok && !currentToken(st, hashes[i]) {
			stale = append(stale, hashes[i])
		}
	}
	var retired map[string]int64
	if len(stale) > 0 {
		if retired, err = c.st.RetiredJobTokens(ctx, stale); err != nil {
			return nil, fmt.Errorf("watched jobs' tokens: %w", err)
		}
	}
	var out []api.JobChange
	for i, wj := range jobs {
		st, ok := byID[wj.ID]
		code, status := watchAnswer(st, ok, runnerID, hashes[i], retired)
		if code != http.StatusOK || status != wj.JobStatus {
			out = append(out, api.JobChange{ID: wj.ID, StatusCode: code, JobStatus: status})
		}
	}
	return out, nil
}

// currentToken reports whether hash is the token of st's current
// assignment.
func currentToken(st store.JobState, hash string) bool {
	return st.TokenHash != "" && runnerapi.TokenEqual(hash, st.TokenHash)
}

// watchAnswer is the status code and Job-Status of a watched job (st, or
// none when !found) named with token hash by runner runnerID: what a PUT
// with the token would get now (see jobForRunner and answerInactive) when
// the token is the job's current one and the job is the runner's, 409 when
// it is one of the job's earlier tokens (that assignment is over; knowing
// the token proves it was the caller's), and otherwise 404, alike for an
// unknown job, another runner's and a token that never was the job's.
// retired holds the retired tokens among the hashes, by job.
func watchAnswer(st store.JobState, found bool, runnerID int64, hash string, retired map[string]int64) (int, string) {
	switch {
	case !found:
		return http.StatusNotFound, ""
	case currentToken(st, hash) && st.RunnerID == runnerID:
	case retired[hash] == st.ID:
		return http.StatusConflict, goneStatus(st.Status)
	default:
		return http.StatusNotFound, ""
	}
	switch {
	case runnerHolds(st.Status):
		return http.StatusOK, remoteStatus(st.Status)
	case st.Status == store.StatusCanceled || !st.Status.Finished():
		return http.StatusConflict, goneStatus(st.Status)
	default:
		return http.StatusForbidden, remoteStatus(st.Status)
	}
}

// advertiseWatch sets X-Drover-Job-Watch on the answers of next.
func (c *Coordinator) advertiseWatch(next http.HandlerFunc) http.HandlerFunc {
	v := formatSeconds(min(defaultWatchWait, c.cfg.LongPollTimeout))
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(hdrJobWatch, v)
		next(w, r)
	}
}
