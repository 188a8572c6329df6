package coordinator

import (
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/coordinator/store"
	"github.com/prometheus/client_golang/prometheus"
)

// notifier is the long-poll side of jobs/request.
//
// Each runner manager has a queue version, sent as X-GitLab-Last-Update.
// A request that echoes the current version and finds no job is held: it
// registers a waiter and blocks on the waiter's channel, the request
// context and a timer. Enqueueing a job calls wake, which signals only the
// waiters whose runner could take that job. A held request therefore costs
// one goroutine and one map entry; nothing polls.
//
// Versions live in memory: after a restart every runner's echo is stale,
// so its first request is answered at once, which is always correct.
type notifier struct {
	gauge prometheus.Gauge
	seq   atomic.Int64

	mu       sync.Mutex
	versions map[mgrKey]string
	waiters  map[*waiter]struct{}
}

// waiter is one held jobs/request.
type waiter struct {
	runner   store.Runner
	features api.FeaturesInfo
	ch       chan struct{} // buffered 1: a wake is never lost, never blocks
}

func newNotifier(g prometheus.Gauge) *notifier {
	n := &notifier{gauge: g, versions: map[mgrKey]string{}, waiters: map[*waiter]struct{}{}}
	// Start the sequence at the wall clock so versions from an earlier
	// process never collide with this one's.
	n.seq.Store(time.Now().UnixNano())
	return n
}

// version returns the current version of k, creating one if needed.
func (n *notifier) version(k mgrKey) string {
	n.mu.Lock()
	defer n.mu.Unlock()
	v, ok := n.versions[k]
	if !ok {
		v = strconv.FormatInt(n.seq.Add(1), 36)
		n.versions[k] = v
	}
	return v
}

// bump gives k a fresh version and returns it.
func (n *notifier) bump(k mgrKey) string {
	v := strconv.FormatInt(n.seq.Add(1), 36)
	n.mu.Lock()
	n.versions[k] = v
	n.mu.Unlock()
	return v
}

// add registers a waiter. Register before looking at the queue, so a job
// enqueued between the look and the wait still wakes it.
func (n *notifier) add(r store.Runner, f api.FeaturesInfo) *waiter {
	w := &waiter{runner: r, features: f, ch: make(chan struct{}, 1)}
	n.mu.Lock()
	n.waiters[w] = struct{}{}
	n.mu.Unlock()
	n.gauge.Inc()
	return w
}

func (n *notifier) remove(w *waiter) {
	n.mu.Lock()
	delete(n.waiters, w)
	n.mu.Unlock()
	n.gauge.Dec()
}

// wake signals every waiter that could take j.
func (n *notifier) wake(j *store.Job) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for w := range n.waiters {
		if canRun(&w.runner, w.features, j) {
			select {
			case w.ch <- struct{}{}:
			default:
			}
		}
	}
}

// canRun is the matching rule: the job's tags are a subset of the runner's;
// untagged jobs only go to run_untagged runners; jobs with an image (or
// services) only to runners whose executor announces that feature.
func canRun(r *store.Runner, f api.FeaturesInfo, j *store.Job) bool {
	if r.Paused {
		return false
	}
	if len(j.Tags) == 0 {
		if !r.RunUntagged {
			return false
		}
	} else {
		for _, t := range j.Tags {
			if !slices.Contains(r.Tags, t) {
				return false
			}
		}
	}
	if j.Image != "" && !f.Image {
		return false
	}
	if len(j.Spec.Services) > 0 && !f.Services {
		return false
	}
	return true
}
