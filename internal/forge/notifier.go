package forge

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/drover-ci/drover/internal/clock"
)

// Poster posts one commit status without retrying; *StatusClient is one.
type Poster interface {
	Post(ctx context.Context, s Status) error
}

// NotifierConfig configures a Notifier; zero fields mean the defaults.
type NotifierConfig struct {
	// Poster sends the statuses; nil means a StatusClient whose
	// http.Client times out after 30s.
	Poster Poster
	// Clock times the backoff; nil means the wall clock.
	Clock clock.Clock
	// QueueSize bounds the statuses waiting, counting one per (repo, sha,
	// context); default 1000. When full, Send drops the oldest waiting.
	QueueSize int
	// Workers is how many posts may be in flight at once; default 2.
	Workers int
	// MaxAttempts is how often one status is tried; default 8.
	MaxAttempts int
	// MinBackoff and MaxBackoff bound the wait before a retry: MinBackoff
	// after the first failure, doubling up to MaxBackoff; defaults 2s and
	// 5m. A longer Retry-After from the forge is honoured up to
	// MaxBackoff.
	MinBackoff time.Duration
	MaxBackoff time.Duration
	// OnAttempt, when set, is called after every post, from the
	// delivering goroutine; it must not block for long. For metrics, and
	// for tests to wait on.
	OnAttempt func(Attempt)
}

// Attempt is the outcome of one post.
type Attempt struct {
	Status Status
	// N counts the posts of this Status, from 1.
	N int
	// Err is nil when the status was delivered.
	Err error
	// RetryIn is the wait before the next post of the same status; 0
	// when there will be none (delivered, given up, or superseded by a
	// newer status of the same repo, sha and context).
	RetryIn time.Duration
}

// NotifierStats counts what a Notifier did since it was made.
type NotifierStats struct {
	Delivered uint64 // statuses the forge accepted
	Failed    uint64 // statuses given up: not retryable, or out of attempts
	Retried   uint64 // failed posts that will be tried again
	Coalesced uint64 // statuses replaced by a newer one before delivery
	Dropped   uint64 // statuses dropped because the queue was full
}

// Notifier delivers commit statuses in the background: Send never blocks,
// Run delivers with retries. For each (forge, API URL, repo, sha,
// context) only the newest status waits: a status that arrives before
// the older one was posted replaces it, and one that arrives while the
// older is being posted is sent right after it.
//
// Retry policy: a post that fails with a retryable error (transport, 408,
// 429, 5xx; see StatusError.Retryable) is tried again after MinBackoff,
// doubling up to MaxBackoff, at most MaxAttempts posts in all; other
// errors give up at once. Statuses still waiting when Run returns are
// lost: statuses are a courtesy to the forge, not a record.
type Notifier struct {
	log    *slog.Logger
	cfg    NotifierConfig
	clk    clock.Clock
	wakeup chan struct{}

	mu    sync.Mutex
	queue []*entry // oldest first
	byKey map[statusKey]*entry
	stats NotifierStats
}

type statusKey struct{ forge, api, repo, sha, context string }

type entry struct {
	key       statusKey
	s         Status
	attempts  int // posts of s so far
	notBefore time.Time
	inFlight  bool
	next      *Status // arrived while s was in flight
}

// NewNotifier returns a Notifier; start its Run.
func NewNotifier(log *slog.Logger, cfg NotifierConfig) *Notifier {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.Poster == nil {
		cfg.Poster = &StatusClient{HTTP: &http.Client{Timeout: 30 * time.Second}}
	}
	if cfg.QueueSize <= 0 {
		cfg.QueueSize = 1000
	}
	if cfg.Workers <= 0 {
		cfg.Workers = 2
	}
	if cfg.MaxAttempts <= 0 {
		cfg.MaxAttempts = 8
	}
	if cfg.MinBackoff <= 0 {
		cfg.MinBackoff = 2 * time.Second
	}
	if cfg.MaxBackoff < cfg.MinBackoff {
		cfg.MaxBackoff = max(5*time.Minute, cfg.MinBackoff)
	}
	return &Notifier{
		log:    log,
		cfg:    cfg,
		clk:    clock.OrReal(cfg.Clock),
		wakeup: make(chan struct{}, 1),
		byKey:  map[statusKey]*entry{},
	}
}

func keyOf(s Status) statusKey {
	c := s.Context
	if c == "" {
		c = DefaultContext
	}
	return statusKey{string(s.Repo.Forge), s.Repo.APIURL, s.Repo.Path, s.SHA, c}
}

// Send queues s for delivery and returns at once.
func (n *Notifier) Send(s Status) {
	k := keyOf(s)
	var dropped *Status
	n.mu.Lock()
	if e := n.byKey[k]; e != nil {
		n.stats.Coalesced++
		if e.inFlight {
			e.next = &s
		} else {
			// The wait of a failing post stays: the forge was failing.
			e.s, e.attempts = s, 0
		}
		n.mu.Unlock()
		return
	}
	if len(n.queue) >= n.cfg.QueueSize {
		i := slices.IndexFunc(n.queue, func(e *entry) bool { return !e.inFlight })
		if i < 0 {
			// Everything waiting is in flight: the new one goes.
			n.stats.Dropped++
			n.mu.Unlock()
			n.logDrop(s)
			return
		}
		old := n.queue[i]
		n.remove(old)
		dropped = &old.s
		n.stats.Dropped++
	}
	e := &entry{key: k, s: s}
	n.queue = append(n.queue, e)
	n.byKey[k] = e
	n.mu.Unlock()
	if dropped != nil {
		n.logDrop(*dropped)
	}
	n.wake()
}

func (n *Notifier) logDrop(s Status) {
	n.log.Warn("commit status queue full, dropped the oldest status",
		"queue_size", n.cfg.QueueSize, "forge", s.Repo.Forge, "repo", s.Repo.Path, "sha", s.SHA, "state", s.State)
}

func (n *Notifier) wake() {
	select {
	case n.wakeup <- struct{}{}:
	default:
	}
}

// remove takes e out of the queue; n.mu is held.
func (n *Notifier) remove(e *entry) {
	if i := slices.Index(n.queue, e); i >= 0 {
		n.queue = slices.Delete(n.queue, i, i+1)
	}
	delete(n.byKey, e.key)
}

// Stats returns the counters so far.
func (n *Notifier) Stats() NotifierStats {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.stats
}

// Len returns how many statuses wait or are in flight.
func (n *Notifier) Len() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.queue)
}

// Run delivers queued statuses until ctx is done, then returns once the
// posts in flight have returned (they are cancelled with ctx). Call it
// once.
func (n *Notifier) Run(ctx context.Context) {
	var wg sync.WaitGroup
	for range n.cfg.Workers {
		wg.Go(func() { n.work(ctx) })
	}
	wg.Wait()
}

func (n *Notifier) work(ctx context.Context) {
	for ctx.Err() == nil {
		e, s, wait := n.take()
		if e != nil {
			n.deliver(ctx, e, s)
			continue
		}
		var t clock.Timer
		var due <-chan time.Time
		if wait > 0 {
			t = n.clk.NewTimer(wait)
			due = t.C()
			// The clock may have moved on between take and NewTimer, and
			// then the timer fires late: look once more.
			if e, s, _ := n.take(); e != nil {
				t.Stop()
				n.deliver(ctx, e, s)
				continue
			}
		}
		select {
		case <-ctx.Done():
		case <-n.wakeup:
		case <-due:
		}
		if t != nil {
			t.Stop()
		}
	}
}

// take returns the oldest entry due for a post, marked in flight, or nil
// and how long until the next one is due (0: none is waiting).
func (n *Notifier) take() (*entry, Status, time.Duration) {
	n.mu.Lock()
	defer n.mu.Unlock()
	now := n.clk.Now()
	var wait time.Duration
	var found *entry
	for _, e := range n.queue {
		if e.inFlight {
			continue
		}
		if !e.notBefore.After(now) {
			if found == nil {
				found = e
				continue
			}
			// More are due: let another worker have them.
			n.wake()
			break
		}
		if d := e.notBefore.Sub(now); wait == 0 || d < wait {
			wait = d
		}
	}
	if found == nil {
		return nil, Status{}, wait
	}
	found.inFlight = true
	return found, found.s, 0
}

func (n *Notifier) deliver(ctx context.Context, e *entry, s Status) {
	err := n.cfg.Poster.Post(ctx, s)
	n.mu.Lock()
	e.inFlight = false
	if err != nil && ctx.Err() != nil {
		// Shutting down: the post was cut short, not refused.
		if e.next != nil {
			e.s, e.next, e.attempts = *e.next, nil, 0
		}
		n.mu.Unlock()
		return
	}
	e.attempts++
	superseded := e.next != nil
	a := Attempt{Status: s, N: e.attempts, Err: err}
	switch {
	case err == nil:
		n.stats.Delivered++
	case IsRetryable(err) && e.attempts < n.cfg.MaxAttempts && e.next == nil:
		a.RetryIn = n.backoff(e.attempts, err)
		n.stats.Retried++
	default:
		n.stats.Failed++
	}
	now := n.clk.Now()
	switch {
	case e.next != nil:
		// A newer status is waiting: it goes next, after the backoff if
		// this post failed in a way worth waiting for.
		e.s, e.next, e.attempts = *e.next, nil, 0
		if err != nil && IsRetryable(err) {
			e.notBefore = now.Add(n.backoff(a.N, err))
		}
	case a.RetryIn > 0:
		e.notBefore = now.Add(a.RetryIn)
	default:
		n.remove(e)
	}
	n.mu.Unlock()
	n.wake()

	if err != nil {
		attrs := []any{"forge", s.Repo.Forge, "repo", s.Repo.Path, "sha", s.SHA, "context", s.Context,
			"state", s.State, "attempt", a.N, "err", err}
		switch {
		case a.RetryIn > 0:
			n.log.Warn("commit status not delivered, will retry", append(attrs, "retry_in", a.RetryIn)...)
		case superseded:
			n.log.Warn("commit status not delivered, a newer one replaces it", attrs...)
		default:
			n.log.Warn("commit status not delivered, giving up", attrs...)
		}
	}
	if n.cfg.OnAttempt != nil {
		n.cfg.OnAttempt(a)
	}
}

// backoff is the wait after the attempt-th failed post.
func (n *Notifier) backoff(attempt int, err error) time.Duration {
	d := n.cfg.MinBackoff
	for i := 1; i < attempt && d < n.cfg.MaxBackoff; i++ {
		d *= 2
	}
	var se *StatusError
	if errors.As(err, &se) && se.RetryAfter > d {
		d = se.RetryAfter
	}
	return min(d, n.cfg.MaxBackoff)
}
