package coordinator

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/store"
	"github.com/drover-ci/drover/internal/store/sqlite"
	"github.com/prometheus/client_golang/prometheus"
)

// stallingStore holds QueueHeads, once armed, until the request that
// called it is cancelled, then lets the real store see the cancelled
// context: a runner that goes away in the middle of a claim.
type stallingStore struct {
	store.Store
	armed   atomic.Bool
	entered chan struct{}
}

func (s *stallingStore) QueueHeads(ctx context.Context, queued, active []store.Status, limit int) ([]store.Job, error) {
	if s.armed.CompareAndSwap(true, false) {
		close(s.entered)
		<-ctx.Done()
	}
	return s.Store.QueueHeads(ctx, queued, active, limit)
}

// TestLongPollClientGone: a runner that disconnects while its jobs/request
// is held, or while the request is claiming, is an ordinary event: the
// waiter is gone, no ERROR is logged and the metrics count a 499, never
// a 500.
func TestLongPollClientGone(t *testing.T) {
	for _, tc := range []struct {
		name        string
		duringClaim bool
	}{
		{"while held", false},
		{"while claiming", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			st, err := sqlite.Open(t.Context(), filepath.Join(dir, "coordinator.db"))
			if err != nil {
				t.Fatal(err)
			}
			ss := &stallingStore{Store: st, entered: make(chan struct{})}
			e := openEnv(t, dir, func(c *Config) { c.LongPollTimeout = time.Minute; c.Store = ss })
			_, tok := e.runner(nil)
			resp, _ := e.request(tok, "", api.FeaturesInfo{})
			lu := resp.Header.Get(hdrLastUpdate)
			ss.armed.Store(tc.duringClaim)

			ctx, cancel := context.WithCancel(t.Context())
			errc := make(chan error, 1)
			go func() {
				req, _ := http.NewRequestWithContext(ctx, "POST", e.srv.URL+"/api/v4/jobs/request",
					strings.NewReader(fmt.Sprintf(`{"token":%q,"system_id":"s_test","last_update":%q}`, tok, lu)))
				_, err := e.srv.Client().Do(req)
				errc <- err
			}()
			if tc.duringClaim {
				<-ss.entered
			} else {
				waitFor(t, func() bool { return waiters(e) == 1 })
			}
			cancel()
			if err := <-errc; err == nil {
				t.Fatal("cancelled jobs/request returned no error")
			}
			waitFor(t, func() bool { return waiters(e) == 0 })
			var m string
			waitFor(t, func() bool {
				_, b := e.do("GET", "/metrics", nil, nil)
				m = string(b)
				return strings.Contains(m, `code="499",endpoint="POST /api/v4/jobs/request"`)
			})
			if strings.Contains(m, `code="500"`) {
				t.Errorf("metrics count a 500:\n%s", grepLines(m, `code="500"`))
			}
			if n := e.errorLogs.Load(); n != 0 {
				t.Errorf("%d ERROR log records for a runner that went away, want 0", n)
			}
		})
	}
}

// TestWakeOrder: a job wakes the matching waiter that has waited longest,
// one waiter per job, and a waiter handed a wake is passed over until it
// has taken it.
func TestWakeOrder(t *testing.T) {
	n := newNotifier(prometheus.NewGauge(prometheus.GaugeOpts{Name: "w"}))
	untagged := store.Runner{RunUntagged: true}
	tagged := store.Runner{Tags: []string{"gpu"}}
	a := n.add(untagged, api.FeaturesInfo{})
	g := n.add(tagged, api.FeaturesInfo{})
	b := n.add(untagged, api.FeaturesInfo{})
	c := n.add(untagged, api.FeaturesInfo{})
	pending := func(w *waiter) *store.Job {
		select {
		case j := <-w.ch:
			return j
		default:
			return nil
		}
	}
	j1, j2, jg := &store.Job{ID: 1}, &store.Job{ID: 2}, &store.Job{ID: 3, Tags: []string{"gpu"}}
	n.wake(j1)
	n.wake(j2)
	n.wake(jg)
	for _, tc := range []struct {
		name string
		w    *waiter
		want *store.Job
	}{{"a", a, j1}, {"g", g, jg}, {"b", b, j2}, {"c", c, nil}} {
		if got := pending(tc.w); got != tc.want {
			t.Errorf("waiter %s woken for %v, want %v", tc.name, got, tc.want)
		}
	}
	// a leaves; b has taken its wake and is again the oldest free
	// untagged waiter, ahead of c: it gets the next job.
	n.remove(a)
	j4 := &store.Job{ID: 4}
	n.wake(j4)
	if got := pending(b); got != j4 {
		t.Errorf("b (oldest) woken for %v, want job 4", got)
	}
	if got := pending(c); got != nil {
		t.Errorf("c woken for %v, want nothing", got)
	}
	if n.waiters.n != 3 {
		t.Errorf("%d waiters listed, want 3", n.waiters.n)
	}
}

// TestClaimSet: a job version is claimed once; a claim running or done
// makes others skip it without a database write; a claim that failed for
// another reason (the database) may be tried again; a job back in the
// queue (new version) is claimable; old entries are forgotten.
func TestClaimSet(t *testing.T) {
	var c claimSet
	now := time.Unix(1_700_000_000, 0)
	if !c.begin(1, 1) {
		t.Fatal("begin(1,1) = false on an empty set")
	}
	if c.begin(1, 1) {
		t.Error("begin(1,1) while it runs = true")
	}
	c.end(1, 1, nil, now)
	if c.begin(1, 1) {
		t.Error("begin(1,1) after it was claimed = true")
	}
	if !c.begin(1, 2) {
		t.Error("begin(1,2) (job back in the queue) = false")
	}
	c.end(1, 2, store.ErrConflict, now)
	if c.begin(1, 2) {
		t.Error("begin(1,2) after a conflict = true")
	}
	if !c.begin(2, 1) {
		t.Fatal("begin(2,1) = false")
	}
	c.end(2, 1, store.ErrUnavailable, now)
	if !c.begin(2, 1) {
		t.Error("begin(2,1) after a database error = false, want a retry allowed")
	}
	c.end(2, 1, nil, now)
	// Entries older than claimMemory go at the next sweep.
	later := now.Add(claimMemory + time.Second)
	for i := range int64(1024) {
		if c.begin(100+i, 1) {
			c.end(100+i, 1, nil, later)
		}
	}
	if _, ok := c.m[claimKey{1, 1}]; ok {
		t.Error("claim of (1,1) still remembered after claimMemory")
	}
	if _, ok := c.m[claimKey{100, 1}]; !ok {
		t.Error("recent claim (100,1) forgotten")
	}
}
