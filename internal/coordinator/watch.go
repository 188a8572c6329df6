package coordinator

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/coordinator/store"
	"github.com/drover-ci/drover/internal/runnerapi"
)

// POST /api/v4/jobs/watch is drover's way to tell a runner manager at once
// that one of its running jobs was canceled, however little the job
// prints: GitLab's runner learns it only from the answers to its trace
// PATCHes and keep-alive PUTs. A manager holds one watch per coordinator
// for all its jobs; the coordinator answers when the status of one of
// them is no longer the one the manager sent, or after the wait. Every
// job answer of the runner API carries X-Drover-Job-Watch, so a manager
// knows which coordinators serve it; GitLab's don't, and nothing changes
// there.
const (
	// defaultWatchWait is how long a watch is held when it names no
	// timeout; the long-poll timeout caps it.
	defaultWatchWait = 30 * time.Second
	// maxWatchedJobs bounds one watch request (a manager with more
	// running jobs than this on one coordinator splits its watch).
	maxWatchedJobs = 5000
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
// for a token that is not the job's; 404 for an unknown job), so the
// runner acts on it as it would on that answer.
func (c *Coordinator) handleWatchJobs(w http.ResponseWriter, r *http.Request) {
	var req api.WatchRequest
	if e := runnerapi.DecodeJSON(w, r, &req, maxV4Body, false); e != nil {
		runnerapi.WriteBad(w, e)
		return
	}
	switch {
	case len(req.Jobs) == 0:
		runnerapi.WriteError(w, http.StatusBadRequest, "jobs: at least one job to watch is needed", "jobs")
		return
	case len(req.Jobs) > maxWatchedJobs:
		runnerapi.WriteError(w, http.StatusBadRequest, "jobs: at most 5000 jobs per watch", "jobs")
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
		changes, err := c.watchedChanges(ctx, req.Jobs)
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

// watchedChanges returns the jobs of jobs whose answer to a PUT would now
// be other than 200 with the Job-Status given.
func (c *Coordinator) watchedChanges(ctx context.Context, jobs []api.WatchedJob) ([]api.JobChange, error) {
	var out []api.JobChange
	for _, wj := range jobs {
		code, status, err := c.jobAnswer(ctx, wj.ID, wj.Token)
		if err != nil {
			return nil, err
		}
		if code != http.StatusOK || status != wj.JobStatus {
			out = append(out, api.JobChange{ID: wj.ID, StatusCode: code, JobStatus: status})
		}
	}
	return out, nil
}

// jobAnswer is the status code and Job-Status a PUT on job id with token
// would be answered with now (see jobForRunner and answerInactive).
func (c *Coordinator) jobAnswer(ctx context.Context, id int64, token string) (int, string, error) {
	j, err := c.st.GetJob(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return http.StatusNotFound, "", nil
	}
	if err != nil {
		return 0, "", err
	}
	hash := store.HashToken(token)
	if j.TokenHash == "" || !runnerapi.TokenEqual(hash, j.TokenHash) {
		owner, err := c.st.RetiredJobToken(ctx, hash)
		switch {
		case err == nil && owner == j.ID:
			return http.StatusConflict, goneStatus(j.Status), nil
		case err == nil || errors.Is(err, store.ErrNotFound):
			return http.StatusForbidden, "", nil
		default:
			return 0, "", err
		}
	}
	switch {
	case runnerHolds(j.Status):
		return http.StatusOK, remoteStatus(j.Status), nil
	case j.Status == store.StatusCanceled || !j.Status.Finished():
		return http.StatusConflict, goneStatus(j.Status), nil
	default:
		return http.StatusForbidden, remoteStatus(j.Status), nil
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
