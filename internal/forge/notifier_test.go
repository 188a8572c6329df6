package forge

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/clock"
	"github.com/drover-ci/drover/internal/lockedbuf"
)

var t0 = time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)

// notifierRig is a Notifier posting to a Gitea stand-in, on a fake clock,
// reporting every attempt on a channel.
type notifierRig struct {
	n        *Notifier
	clk      *clock.Fake
	attempts chan Attempt
	got      chan seen
	srv      string
	log      *lockedbuf.Buffer
}

func newRig(t *testing.T, cfg NotifierConfig, reply func(w http.ResponseWriter, r *http.Request)) *notifierRig {
	t.Helper()
	srv, got := standIn(t, reply)
	rig := &notifierRig{clk: clock.NewFake(t0), attempts: make(chan Attempt, 100), got: got, srv: srv.URL, log: &lockedbuf.Buffer{}}
	cfg.Clock = rig.clk
	cfg.Poster = &StatusClient{HTTP: srv.Client()}
	cfg.OnAttempt = func(a Attempt) { rig.attempts <- a }
	rig.n = NewNotifier(slog.New(slog.NewTextHandler(rig.log, nil)), cfg)
	return rig
}

// run starts Run and returns a func that stops it and waits for it.
func (r *notifierRig) run(t *testing.T) (stop func()) {
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { r.n.Run(ctx); close(done) }()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return stop
}

func (r *notifierRig) status(sha string, st PipelineStatus) Status {
	return Status{Repo: Repo{Forge: Gitea, APIURL: r.srv, Path: "o/r", Token: "t"}, SHA: sha, State: st, Context: "drover"}
}

func TestNotifierRetriesWithBackoff(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	calls := 0
	var rig *notifierRig
	var at []time.Time
	rig = newRig(t, NotifierConfig{MinBackoff: time.Second, MaxBackoff: 3 * time.Second, MaxAttempts: 10, Workers: 1},
		func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			calls++
			n := calls
			at = append(at, rig.clk.Now())
			mu.Unlock()
			if n <= 4 {
				w.WriteHeader(http.StatusServiceUnavailable)
				return
			}
			w.WriteHeader(http.StatusCreated)
		})
	rig.run(t)
	rig.n.Send(rig.status(sha1, StatusSuccess))
	// 1s, 2s, then capped at 3s.
	for i, want := range []time.Duration{time.Second, 2 * time.Second, 3 * time.Second, 3 * time.Second} {
		a := <-rig.attempts
		if a.N != i+1 || a.Err == nil || a.RetryIn != want {
			t.Fatalf("attempt %d = N %d err %v retry in %v; want a failure, retry in %v", i+1, a.N, a.Err, a.RetryIn, want)
		}
		rig.clk.Advance(want)
	}
	if a := <-rig.attempts; a.N != 5 || a.Err != nil || a.RetryIn != 0 {
		t.Fatalf("attempt 5 = N %d err %v retry in %v; want delivered", a.N, a.Err, a.RetryIn)
	}
	mu.Lock()
	var offsets []time.Duration
	for _, tm := range at {
		offsets = append(offsets, tm.Sub(t0))
	}
	mu.Unlock()
	if fmt.Sprint(offsets) != "[0s 1s 3s 6s 9s]" {
		t.Errorf("posts at %v after Send, want [0s 1s 3s 6s 9s]", offsets)
	}
	if s := rig.n.Stats(); s.Delivered != 1 || s.Retried != 4 || s.Failed != 0 || rig.n.Len() != 0 {
		t.Errorf("Stats = %+v, Len %d", s, rig.n.Len())
	}
	if !strings.Contains(rig.log.String(), "will retry") || !strings.Contains(rig.log.String(), "503") {
		t.Errorf("log does not tell of the failures:\n%s", rig.log)
	}
}

func TestNotifierGivesUp(t *testing.T) {
	t.Parallel()
	rig := newRig(t, NotifierConfig{MinBackoff: time.Second, MaxAttempts: 2},
		func(w http.ResponseWriter, r *http.Request) {
			if strings.Contains(r.URL.Path, sha1) {
				w.WriteHeader(http.StatusInternalServerError)
				return
			}
			w.WriteHeader(http.StatusUnprocessableEntity)
		})
	rig.run(t)
	rig.n.Send(rig.status(sha1, StatusSuccess))
	if a := <-rig.attempts; a.N != 1 || a.RetryIn != time.Second {
		t.Fatalf("attempt 1: %+v", a)
	}
	rig.clk.Advance(time.Second)
	if a := <-rig.attempts; a.N != 2 || a.Err == nil || a.RetryIn != 0 {
		t.Fatalf("attempt 2 = %+v, want the last, failed", a)
	}
	// A 4xx is not retried at all.
	rig.n.Send(rig.status(sha2, StatusSuccess))
	if a := <-rig.attempts; a.N != 1 || a.Err == nil || a.RetryIn != 0 || IsRetryable(a.Err) {
		t.Fatalf("422 attempt = %+v, want given up", a)
	}
	if s := rig.n.Stats(); s.Failed != 2 || s.Delivered != 0 || rig.n.Len() != 0 {
		t.Errorf("Stats = %+v, Len %d", s, rig.n.Len())
	}
	if !strings.Contains(rig.log.String(), "giving up") || !strings.Contains(rig.log.String(), "422") {
		t.Errorf("log:\n%s", rig.log)
	}
}

func TestNotifierHonoursRetryAfter(t *testing.T) {
	t.Parallel()
	first := true
	var mu sync.Mutex
	rig := newRig(t, NotifierConfig{MinBackoff: time.Second, MaxBackoff: time.Minute}, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if first {
			first = false
			w.Header().Set("Retry-After", "30")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		w.WriteHeader(http.StatusCreated)
	})
	rig.run(t)
	rig.n.Send(rig.status(sha1, StatusRunning))
	if a := <-rig.attempts; a.RetryIn != 30*time.Second {
		t.Fatalf("after 429 with Retry-After: 30, retry in %v", a.RetryIn)
	}
	rig.clk.Advance(30 * time.Second)
	if a := <-rig.attempts; a.Err != nil {
		t.Fatalf("attempt 2: %v", a.Err)
	}
}

func TestNotifierCoalescesWaiting(t *testing.T) {
	t.Parallel()
	rig := newRig(t, NotifierConfig{}, nil)
	// Queued before Run: only the newest of each (repo, sha, context) goes.
	rig.n.Send(rig.status(sha1, StatusPending))
	rig.n.Send(rig.status(sha1, StatusRunning))
	other := rig.status(sha1, StatusRunning)
	other.Context = "drover/lint"
	rig.n.Send(other)
	rig.n.Send(rig.status(sha1, StatusFailed))
	if rig.n.Len() != 2 {
		t.Fatalf("Len = %d, want 2", rig.n.Len())
	}
	rig.run(t)
	states := map[string]any{}
	for range 2 {
		r := <-rig.got
		states[r.Body["context"].(string)] = r.Body["state"]
		if a := <-rig.attempts; a.Err != nil {
			t.Fatal(a.Err)
		}
	}
	if fmt.Sprint(states) != "map[drover:failure drover/lint:pending]" {
		t.Errorf("delivered %v", states)
	}
	if s := rig.n.Stats(); s.Coalesced != 2 || s.Delivered != 2 || rig.n.Len() != 0 {
		t.Errorf("Stats = %+v, Len %d", s, rig.n.Len())
	}
}

func TestNotifierCoalescesInFlight(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	rig := newRig(t, NotifierConfig{Workers: 2}, func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.URL.Path, sha1) {
			// Hold the first post of sha1 until the test has sent more.
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}
		w.WriteHeader(http.StatusCreated)
	})
	rig.run(t)
	rig.n.Send(rig.status(sha1, StatusPending))
	if r := <-rig.got; r.Body["state"] != "pending" {
		t.Fatalf("first post %v", r.Body)
	}
	// While it is in flight: two newer states (only the last must go),
	// and another commit, which must not wait behind the held post.
	rig.n.Send(rig.status(sha1, StatusRunning))
	rig.n.Send(rig.status(sha1, StatusSuccess))
	rig.n.Send(rig.status(sha2, StatusSuccess))
	if r := <-rig.got; !strings.Contains(r.Path, sha2) {
		t.Fatalf("second post %s, want sha2's", r.Path)
	}
	<-rig.attempts // sha2's
	close(release)
	if a := <-rig.attempts; a.Status.State != StatusPending || a.Err != nil {
		t.Fatalf("attempt %+v", a)
	}
	if r := <-rig.got; r.Body["state"] != "success" || !strings.Contains(r.Path, sha1) {
		t.Fatalf("after the held post came %s %v, want sha1 success", r.Path, r.Body)
	}
	if a := <-rig.attempts; a.Status.State != StatusSuccess || a.Err != nil {
		t.Fatalf("attempt %+v", a)
	}
	if s := rig.n.Stats(); s.Delivered != 3 || s.Coalesced != 2 || rig.n.Len() != 0 {
		t.Errorf("Stats = %+v, Len %d", s, rig.n.Len())
	}
}

func TestNotifierBoundedQueueDropsOldest(t *testing.T) {
	t.Parallel()
	rig := newRig(t, NotifierConfig{QueueSize: 3, Workers: 1}, nil)
	shas := []string{sha1, sha2, sha0, strings.Repeat("a", 40), strings.Repeat("b", 40)}
	for _, sha := range shas { // no Run yet: nothing is delivered, Send must not block
		rig.n.Send(rig.status(sha, StatusSuccess))
	}
	if s := rig.n.Stats(); rig.n.Len() != 3 || s.Dropped != 2 {
		t.Fatalf("Len %d, Stats %+v; want 3 queued, 2 dropped", rig.n.Len(), s)
	}
	if c := strings.Count(rig.log.String(), "queue full"); c != 2 {
		t.Errorf("%d log lines about the full queue, want 2:\n%s", c, rig.log)
	}
	rig.run(t)
	var order []string
	for range 3 {
		r := <-rig.got
		order = append(order, r.Path[len(r.Path)-40:])
		<-rig.attempts
	}
	if fmt.Sprint(order) != fmt.Sprint(shas[2:]) {
		t.Errorf("delivered %v, want the newest three in order %v", order, shas[2:])
	}
}

func TestNotifierSendNeverBlocks(t *testing.T) {
	t.Parallel()
	// The stand-in never answers until the test ends: the worker is stuck
	// in a post, yet Send must return every time.
	rig := newRig(t, NotifierConfig{QueueSize: 10, Workers: 1}, func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done()
	})
	stop := rig.run(t)
	rig.n.Send(rig.status(sha1, StatusPending))
	<-rig.got
	for i := range 1000 {
		rig.n.Send(rig.status(fmt.Sprintf("%040x", i+1), StatusRunning))
	}
	if rig.n.Len() != 10 {
		t.Errorf("Len = %d, want 10", rig.n.Len())
	}
	// Stopping cancels the stuck post; Run returns.
	stop()
	if s := rig.n.Stats(); s.Delivered != 0 || s.Failed != 0 {
		t.Errorf("a post cut short by shutdown was counted: %+v", s)
	}
}

func TestNotifierStopsWhileWaiting(t *testing.T) {
	t.Parallel()
	rig := newRig(t, NotifierConfig{MinBackoff: time.Hour}, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusBadGateway)
	})
	stop := rig.run(t)
	rig.n.Send(rig.status(sha1, StatusPending))
	if a := <-rig.attempts; a.RetryIn != time.Hour {
		t.Fatalf("attempt %+v", a)
	}
	stop() // returns although the retry is an hour away on a clock nobody advances
	if rig.n.Len() != 1 {
		t.Errorf("Len = %d, want the waiting status kept", rig.n.Len())
	}
}
