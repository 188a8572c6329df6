package coordinator

import (
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
// context and a timer. Enqueueing a job calls wake, which signals one
// waiter whose runner could take that job, handing it the job: a job wakes
// one claim, not a herd of them. The wake is passed on (to another waiter)
// when the woken request does not take that job: it took an older one, it
// is to pass this job over, its claim failed, or it ended before looking.
// So every queued job keeps a waiter looking for it until some runner
// takes it. A held request costs one goroutine and one map entry; nothing
// polls.
//
// Versions live in memory: after a restart every runner's echo is stale,
// so its first request is answered at once, which is always correct.
//
// Coordinators sharing a database behind one address get a runner's
// requests in turn. Their versions share a prefix (the database's cluster
// id), and a request echoing a version with that prefix which this
// coordinator did not issue is held like one echoing its own (adopt): a
// held request looks at the shared queue first, so holding it is always
// safe, and a runner is not answered at once on every switch.
type notifier struct {
	gauge  prometheus.Gauge
	seq    atomic.Int64
	prefix string

	mu       sync.Mutex
	versions map[mgrKey]string
	waiters  map[*waiter]struct{}
}

// waiter is one held jobs/request.
type waiter struct {
	runner   store.Runner
	features api.FeaturesInfo
	// ch carries the job a wake is for (nil: look at the queue, events may
	// have been missed). Buffered 1: a wake never blocks; a waiter with a
	// wake pending is not given another.
	ch chan *store.Job
}

func newNotifier(g prometheus.Gauge, prefix string) *notifier {
	n := &notifier{gauge: g, prefix: prefix, versions: map[mgrKey]string{}, waiters: map[*waiter]struct{}{}}
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
		v = n.prefix + strconv.FormatInt(n.seq.Add(1), 36)
		n.versions[k] = v
	}
	return v
}

// current reports whether echo, a runner's last_update, is k's current
// version. With a prefix, a version of the same prefix issued by another
// coordinator becomes k's version here and is current.
func (n *notifier) current(k mgrKey, echo string) bool {
	if echo == "" {
		return false
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if v, ok := n.versions[k]; ok && v == echo {
		return true
	}
	if n.prefix == "" || len(echo) <= len(n.prefix) || echo[:len(n.prefix)] != n.prefix {
		return false
	}
	n.versions[k] = echo
	return true
}

// bump gives k a fresh version and returns it.
func (n *notifier) bump(k mgrKey) string {
	v := n.prefix + strconv.FormatInt(n.seq.Add(1), 36)
	n.mu.Lock()
	n.versions[k] = v
	n.mu.Unlock()
	return v
}

// add registers a waiter. Register before looking at the queue, so a job
// enqueued between the look and the wait still wakes it.
func (n *notifier) add(r store.Runner, f api.FeaturesInfo) *waiter {
	w := &waiter{runner: r, features: f, ch: make(chan *store.Job, 1)}
	n.mu.Lock()
	n.waiters[w] = struct{}{}
	n.mu.Unlock()
	n.gauge.Inc()
	return w
}

// remove unregisters w. A wake it was handed and did not act on goes to
// another waiter.
func (n *notifier) remove(w *waiter) {
	n.mu.Lock()
	delete(n.waiters, w)
	n.mu.Unlock()
	n.gauge.Dec()
	select {
	case j := <-w.ch:
		if j != nil {
			n.wake(j)
		}
	default:
	}
}

// wake hands j to one waiter that could take it and has no wake pending.
func (n *notifier) wake(j *store.Job) { n.wakeExcept(j, nil) }

// wakeExcept is wake passing skip over; it reports whether a waiter was
// woken.
func (n *notifier) wakeExcept(j *store.Job, skip *waiter) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	for w := range n.waiters {
		if w == skip || !canRun(&w.runner, w.features, j) {
			continue
		}
		select {
		case w.ch <- j:
			return true
		default:
		}
	}
	return false
}

// wakeAll signals every waiter to look at the queue: events may have been
// missed.
func (n *notifier) wakeAll() {
	n.mu.Lock()
	defer n.mu.Unlock()
	for w := range n.waiters {
		select {
		case w.ch <- nil:
		default:
		}
	}
}

// canRun is the matching rule: the job's tags are a subset of the runner's;
// untagged jobs only go to run_untagged runners; jobs with an image (or
// services) only to runners whose executor announces that feature.
func canRun(r *store.Runner, f api.FeaturesInfo, j *store.Job) bool {
	if r.Paused || !tagsFit(r, j.Tags) {
		return false
	}
	if j.Image != "" && !f.Image {
		return false
	}
	if len(j.Spec.Services) > 0 && !f.Services {
		return false
	}
	return true
}
