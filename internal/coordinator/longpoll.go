package coordinator

import (
	"errors"
	"sync"
	"time"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/store"
	"github.com/prometheus/client_golang/prometheus"
)

// notifier is the long-poll side of jobs/request.
//
// Each runner manager has a queue version (runnerapi.Versions), sent as
// X-GitLab-Last-Update. A request that echoes the current version and
// finds no job is held: it
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
// Coordinators sharing a database behind one address get a runner's
// requests in turn. Their versions share a prefix (the database's cluster
// id), and a request echoing a version with that prefix which this
// coordinator did not issue is held like one echoing its own (adopt): a
// held request looks at the shared queue first, so holding it is always
// safe, and a runner is not answered at once on every switch.
type notifier struct {
	gauge prometheus.Gauge

	mu sync.Mutex
	// waiters in the order they began to wait: a job goes to the one
	// that has waited longest, so no runner is starved by luckier ones.
	waiters waitList
}

// waitList is a doubly linked list of waiters: add, remove and walking in
// order cost no allocation beyond the waiter.
type waitList struct {
	head, tail *waiter
	n          int
}

func (l *waitList) push(w *waiter) {
	w.prev, w.next = l.tail, nil
	if l.tail != nil {
		l.tail.next = w
	} else {
		l.head = w
	}
	l.tail = w
	l.n++
	w.listed = true
}

func (l *waitList) unlink(w *waiter) {
	if !w.listed {
		return
	}
	if w.prev != nil {
		w.prev.next = w.next
	} else {
		l.head = w.next
	}
	if w.next != nil {
		w.next.prev = w.prev
	} else {
		l.tail = w.prev
	}
	w.prev, w.next, w.listed = nil, nil, false
	l.n--
}

// waiter is one held jobs/request.
type waiter struct {
	runner   store.Runner
	features api.FeaturesInfo
	// ch carries the job a wake is for (nil: look at the queue, events may
	// have been missed). Buffered 1: a wake never blocks; a waiter with a
	// wake pending is not given another.
	ch chan *store.Job

	prev, next *waiter // in notifier.waiters, under notifier.mu
	listed     bool
}

func newNotifier(g prometheus.Gauge) *notifier {
	return &notifier{gauge: g}
}

// add registers a waiter. Register before looking at the queue, so a job
// enqueued between the look and the wait still wakes it.
func (n *notifier) add(r store.Runner, f api.FeaturesInfo) *waiter {
	w := &waiter{runner: r, features: f, ch: make(chan *store.Job, 1)}
	n.mu.Lock()
	n.waiters.push(w)
	n.mu.Unlock()
	n.gauge.Inc()
	return w
}

// remove unregisters w. A wake it was handed and did not act on goes to
// another waiter.
func (n *notifier) remove(w *waiter) {
	n.mu.Lock()
	n.waiters.unlink(w)
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

// wake hands j to the waiter that has waited longest among those that
// could take it and have no wake pending.
func (n *notifier) wake(j *store.Job) { n.wakeExcept(j, nil) }

// wakeExcept is wake passing skip over; it reports whether a waiter was
// woken.
func (n *notifier) wakeExcept(j *store.Job, skip *waiter) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	for w := n.waiters.head; w != nil; w = w.next {
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
	for w := n.waiters.head; w != nil; w = w.next {
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

// claimKey is one state of a job: its id and version.
type claimKey struct{ id, version int64 }

// claimSet remembers the job states this coordinator is claiming or has
// claimed. A claim is a conditional write of one job version; once a
// version was claimed (or a claim of it failed on a newer version) every
// other claim of it must fail, and while one claim of it is running the
// others would wait for the writer only to lose. Requests woken together
// and runners asking again after a hand-out read the queue before the
// writes they race with commit: the set lets them skip those jobs without
// a database write. The store still decides: the set only spares writes
// that would have failed. A job back in the queue has a new version and is
// claimable again.
type claimSet struct {
	mu   sync.Mutex
	m    map[claimKey]time.Time // when the claim began; zero while running
	ends int
}

// claimMemory is how long a claimed version is remembered: far longer than
// a read of the queue takes.
const claimMemory = time.Minute

// begin reports whether the caller may claim (id, version); if so, it
// must call end.
func (c *claimSet) begin(id, version int64) bool {
	k := claimKey{id, version}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[claimKey]time.Time{}
	}
	if _, ok := c.m[k]; ok {
		return false
	}
	c.m[k] = time.Time{}
	return true
}

// end records the outcome of a claim begun with begin: a version claimed
// or found outdated stays taken; after any other error it may be tried
// again.
func (c *claimSet) end(id, version int64, err error, now time.Time) {
	k := claimKey{id, version}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil && !errors.Is(err, store.ErrConflict) {
		delete(c.m, k)
		return
	}
	c.m[k] = now
	c.ends++
	if c.ends%1024 == 0 {
		for k, at := range c.m {
			if !at.IsZero() && now.Sub(at) > claimMemory {
				delete(c.m, k)
			}
		}
	}
}
