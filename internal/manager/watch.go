package manager

import (
	"context"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/drover-ci/drover/internal/api"
)

// Cancels that reach the manager at once.
//
// GitLab's runner API tells a runner that its job was canceled only in the
// answers to the job's trace PATCHes and keep-alive PUTs, so a job that
// prints nothing hears of it at the next keep-alive (10 s here, 30 s in
// GitLab Runner). Drover's coordinator also serves POST jobs/watch (it
// says so with X-Drover-Job-Watch on every job answer): one held request
// per coordinator and runner token covering all the jobs this manager runs
// there with that token (the coordinator answers only about the jobs of
// the runner whose token a watch carries), answered as soon as one of
// them changes; more than api.MaxWatchedJobs jobs are split over several
// requests held together. Coordinators that do not advertise it (GitLab)
// are not asked.

const (
	// watchDebounce gathers the jobs that start together into one new
	// watch request instead of one each.
	watchDebounce = 100 * time.Millisecond
	// watchMaxBackoff bounds the wait after failed watch requests.
	watchMaxBackoff = 30 * time.Second
)

// watchTarget is a job's side of the watch: where its answers go.
type watchTarget interface {
	handle(r *api.Response) (abort bool)
}

type watchEntry struct {
	job    api.WatchedJob
	target watchTarget
	// done: the job's answer ended it for the runner (aborted); it is no
	// longer watched, so its unchanged answer does not return at once.
	done bool
}

// watcherKey names a jobWatcher: a coordinator and a runner token there.
type watcherKey struct{ url, token string }

// jobWatcher holds the jobs/watch requests of one coordinator URL for the
// jobs of one runner token.
type jobWatcher struct {
	m      *Manager
	url    string
	token  string
	client *api.Client
	wait   time.Duration
	// perRequest is the most jobs one request names: api.MaxWatchedJobs
	// (smaller in tests, to split without a thousand jobs).
	perRequest int

	mu      sync.Mutex
	jobs    map[int64]*watchEntry
	running bool
	kick    chan struct{} // buffered 1: a job was added
}

// watchSupported records what an answer from the coordinator at url said
// about jobs/watch.
func (m *Manager) noteWatch(url string, r *api.Response) {
	if r != nil && r.JobWatch > 0 {
		m.watchWaits.Store(url, r.JobWatch)
	}
}

// watcherFor returns the watcher of the jobs of runner token at url, or
// nil when the coordinator there has not said it serves jobs/watch.
func (m *Manager) watcherFor(url, token string, client *api.Client) *jobWatcher {
	v, ok := m.watchWaits.Load(url)
	if !ok || m.opts.NoJobWatch {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	k := watcherKey{url, token}
	w := m.watchers[k]
	if w == nil {
		w = &jobWatcher{
			m: m, url: url, token: token, client: client, wait: v.(time.Duration), perRequest: api.MaxWatchedJobs,
			jobs: map[int64]*watchEntry{}, kick: make(chan struct{}, 1),
		}
		m.watchers[k] = w
	}
	return w
}

// add watches job id (token, the Job-Status last seen) for target until
// the returned function is called.
func (w *jobWatcher) add(id int64, token, status string, target watchTarget) (remove func()) {
	e := &watchEntry{job: api.WatchedJob{ID: id, Token: token, JobStatus: status}, target: target}
	w.mu.Lock()
	w.jobs[id] = e
	start := !w.running
	w.running = true
	w.mu.Unlock()
	if start {
		go w.run()
	} else {
		select {
		case w.kick <- struct{}{}:
		default:
		}
	}
	return func() {
		w.mu.Lock()
		if w.jobs[id] == e {
			delete(w.jobs, id)
		}
		w.mu.Unlock()
	}
}

// snapshot returns the jobs to watch; with none left the watcher stops.
func (w *jobWatcher) snapshot() []api.WatchedJob {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []api.WatchedJob
	for _, e := range w.jobs {
		if !e.done {
			out = append(out, e.job)
		}
	}
	if len(out) == 0 {
		w.running = false
	}
	return out
}

// watchResult is the outcome of one watch request.
type watchResult struct {
	resp *api.WatchResponse
	r    *api.Response
	err  error
}

// run sends watch requests while there are jobs to watch: one covering
// them all, or, beyond api.MaxWatchedJobs, one per slice of that many,
// held together; the first to come back ends the others, and the next
// round asks again. A job added while a request is held ends that request
// (after watchDebounce, to gather jobs that start together) so that the
// next one covers it.
func (w *jobWatcher) run() {
	log := w.m.logger.With("coordinator", w.url)
	backoff := time.Second
	for {
		jobs := w.snapshot()
		if len(jobs) == 0 {
			return
		}
		ctx, cancel := context.WithCancel(context.Background())
		kicked := make(chan struct{})
		stopKick := make(chan struct{})
		go func() {
			select {
			case <-w.kick:
				select {
				case <-w.m.clock.After(watchDebounce):
				case <-stopKick:
				}
				close(kicked)
				cancel()
			case <-stopKick:
			}
		}()
		parts := slices.Collect(slices.Chunk(jobs, w.perRequest))
		results := make(chan watchResult, len(parts))
		for _, part := range parts {
			go func() {
				resp, r, err := w.client.WatchJobs(ctx, api.WatchRequest{Token: w.token, Jobs: part, Timeout: w.wait.Seconds()})
				results <- watchResult{resp, r, err}
			}()
		}
		first := <-results
		close(stopKick)
		wasKicked := false
		select {
		case <-kicked:
			wasKicked = true
		default:
		}
		cancel()
		// The others end now; what they learnt before is not lost.
		for range len(parts) - 1 {
			if res := <-results; res.err == nil && res.r.StatusCode == http.StatusOK {
				w.apply(res.resp.Jobs)
			}
		}
		err, r := first.err, first.r
		w.m.metrics.apiRequest(nil, "watch_jobs", http.MethodPost, r)
		switch {
		case wasKicked && err != nil:
			continue // a new job: ask again with it
		case err == nil && r.StatusCode == http.StatusOK:
			backoff = time.Second
			w.apply(first.resp.Jobs)
			continue
		case err == nil && (r.StatusCode == http.StatusNotFound || r.StatusCode == http.StatusMethodNotAllowed):
			// It advertised the watch but does not serve it (a proxy in
			// between?): stop asking; cancels come with the job answers.
			log.Warn("the coordinator does not serve jobs/watch after all; cancels of silent jobs will be noticed at the next keep-alive", "status", r.StatusCode)
			w.m.watchWaits.Delete(w.url)
			w.mu.Lock()
			clear(w.jobs)
			w.running = false
			w.mu.Unlock()
			return
		case err != nil:
			log.Debug("job watch failed; will retry", "err", err, "in", backoff)
		default:
			log.Debug("job watch refused; will retry", "status", r.StatusCode, "in", backoff)
		}
		select {
		case <-w.kick:
		case <-w.m.clock.After(backoff):
		}
		backoff = min(2*backoff, watchMaxBackoff)
	}
}

// apply hands each change to its job as the answer it stands for.
func (w *jobWatcher) apply(changes []api.JobChange) {
	for _, ch := range changes {
		w.mu.Lock()
		e := w.jobs[ch.ID]
		if e != nil {
			if ch.StatusCode == http.StatusOK {
				e.job.JobStatus = ch.JobStatus
			} else {
				e.done = true
			}
		}
		w.mu.Unlock()
		if e == nil {
			continue // ended meanwhile
		}
		e.target.handle(&api.Response{StatusCode: ch.StatusCode, JobStatus: ch.JobStatus})
	}
}
