package autoscale

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/drover-ci/drover/internal/fleet"
	"github.com/drover-ci/drover/internal/fleet/sim"
)

// TestPoolRefusesMaxInstancesAboveMaxSize: a policy asking for more
// instances than the provider holds creates nothing and says both
// numbers; a reload that fits lifts the refusal.
func TestPoolRefusesMaxInstancesAboveMaxSize(t *testing.T) {
	h := newPoolHarness(t, poolTestPolicy(1, 2, time.Hour, 5), sim.Options{MaxSize: 3}, nil)
	h.pool.Tick(t.Context())
	h.advance(2 * time.Second)
	if created, _ := h.prov.Counts(); created != 0 {
		t.Fatalf("created %d with max_instances 5 above max_size 3, want 0", created)
	}
	st := h.pool.Status()
	for _, want := range []string{"max_instances 5", "max_size 3", "sim/r1"} {
		if !strings.Contains(st.ConfigError, want) {
			t.Errorf("Status().ConfigError = %q, want it to say %q", st.ConfigError, want)
		}
	}
	if st.Provider.ID != "sim/r1" || st.Provider.MaxSize != 3 {
		t.Errorf("Status().Provider = %+v, want the provider's Init answer", st.Provider)
	}
	if got := testutil.ToFloat64(h.m.Provider.WithLabelValues("r1", "sim/r1", "sim", "")); got != 1 {
		t.Errorf("provider_info{sim/r1} = %v, want 1", got)
	}
	h.pool.SetPolicy(poolTestPolicy(1, 2, time.Hour, 3))
	h.advance(2 * time.Second)
	if created, _ := h.prov.Counts(); created != 2 {
		t.Errorf("created %d after max_instances fits, want 2", created)
	}
	if st := h.pool.Status(); st.ConfigError != "" {
		t.Errorf("ConfigError after the fix = %q, want none", st.ConfigError)
	}
}

// TestPoolMaxInstancesUnsetLeavesLimitToProvider: max_instances 0 is no
// refusal; the provider's max_size bounds the group.
func TestPoolMaxInstancesUnsetLeavesLimitToProvider(t *testing.T) {
	h := newPoolHarness(t, poolTestPolicy(1, 2, time.Hour, 0), sim.Options{MaxSize: 3}, nil)
	h.pool.Tick(t.Context())
	if created, _ := h.prov.Counts(); created != 2 {
		t.Errorf("created %d, want 2", created)
	}
	if st := h.pool.Status(); st.ConfigError != "" {
		t.Errorf("ConfigError = %q, want none", st.ConfigError)
	}
}

// expiringProvider hands out connect info that expires a minute after it
// is asked for, and counts the asks per instance.
type expiringProvider struct {
	*sim.Provider
	now func() time.Time

	mu    sync.Mutex
	asked map[string]int
	state map[string]fleet.State // overrides of the sim's states
}

func (e *expiringProvider) ConnectInfo(ctx context.Context, id string) (fleet.ConnectInfo, error) {
	ci, err := e.Provider.ConnectInfo(ctx, id)
	e.mu.Lock()
	e.asked[id]++
	n := e.asked[id]
	e.mu.Unlock()
	exp := e.now().Add(time.Minute)
	ci.Expires = &exp
	ci.Password = strings.Repeat("x", n) // a new credential each time
	return ci, err
}

func (e *expiringProvider) Update(ctx context.Context, fn func(string, fleet.State)) error {
	return e.Provider.Update(ctx, func(id string, st fleet.State) {
		e.mu.Lock()
		if o, ok := e.state[id]; ok {
			st = o
		}
		e.mu.Unlock()
		fn(id, st)
	})
}

// TestPoolRefreshesExpiringConnectInfo: connect info that expires before
// the next full pass is asked for again, and jobs get the new one.
func TestPoolRefreshesExpiringConnectInfo(t *testing.T) {
	h := newPoolHarness(t, poolTestPolicy(1, 1, time.Hour, 0), sim.Options{}, nil)
	ep := &expiringProvider{Provider: h.prov, now: h.clk.Now, asked: map[string]int{}, state: map[string]fleet.State{}}
	h.pool = h.newPool(poolTestPolicy(1, 1, time.Hour, 0), func(o *PoolOptions) {
		o.Provider = ep
		o.UpdateInterval = 20 * time.Second
	})
	h.pool.Tick(t.Context())
	h.advance(2 * time.Second)
	a := h.mustAcquire()
	if a.Info.Password != "x" {
		t.Fatalf("first acquisition's credential = %q, want the first one", a.Info.Password)
	}
	h.pool.Release(a)
	// 35 s before it expires: inside two update intervals.
	h.advance(25 * time.Second)
	b := h.mustAcquire()
	if b.Info.Password != "xx" {
		t.Errorf("credential after the refresh = %q, want the second one", b.Info.Password)
	}
	h.pool.Release(b)
}

// TestPoolRemovesSuspendedInstance: an instance a plugin reports
// suspended takes no jobs and is removed.
func TestPoolRemovesSuspendedInstance(t *testing.T) {
	h := newPoolHarness(t, poolTestPolicy(1, 1, time.Hour, 0), sim.Options{}, nil)
	ep := &expiringProvider{Provider: h.prov, now: h.clk.Now, asked: map[string]int{}, state: map[string]fleet.State{}}
	h.pool = h.newPool(poolTestPolicy(1, 1, time.Hour, 0), func(o *PoolOptions) { o.Provider = ep })
	h.pool.Tick(t.Context())
	h.advance(2 * time.Second)
	live := h.prov.Live()
	if len(live) != 1 {
		t.Fatalf("live = %v, want 1 instance", live)
	}
	ep.mu.Lock()
	ep.state[live[0]] = fleet.StateSuspended
	ep.mu.Unlock()
	h.advance(time.Minute) // the next sync
	for _, in := range h.pool.Status().Instances {
		if in.ID == live[0] && (in.State != StateRemoving || in.Reason != PoolReasonSuspended) {
			t.Errorf("suspended instance is %s (%s), want removing (%s)", in.State, in.Reason, PoolReasonSuspended)
		}
	}
}

// TestPoolRemoveInterrupted: after a restart, with RemoveInterrupted an
// instance on which the dead process had a job is removed (its job cannot
// be resumed, and what it left running must not meet the next jobs);
// without it the slot is held for the job's resume; an idle instance is
// re-adopted either way.
func TestPoolRemoveInterrupted(t *testing.T) {
	for _, remove := range []bool{true, false} {
		t.Run(fmt.Sprint("remove=", remove), func(t *testing.T) {
			state := filepath.Join(t.TempDir(), "r1.json")
			withState := func(o *PoolOptions) { o.StateFile = state; o.RemoveInterrupted = remove }
			h := newPoolHarness(t, poolTestPolicy(1, 2, time.Hour, 0), sim.Options{}, withState)
			h.pool.Tick(t.Context())
			h.advance(2 * time.Second)
			busy := h.mustAcquire() // the manager dies with this job running
			h.pool.SetJob(busy, 42)
			idle := map[string]bool{}
			for _, in := range h.pool.Status().Instances {
				if in.State == StateIdle {
					idle[in.ID] = true
				}
			}
			h.pool.Tick(t.Context()) // state file written
			h.pool = h.newPool(poolTestPolicy(1, 2, time.Hour, 0), withState)
			h.advance(2 * time.Second)
			for _, in := range h.pool.Status().Instances {
				switch {
				case in.ID == busy.InstanceID && remove:
					if in.State != StateRemoving || in.Reason != PoolReasonInterrupted {
						t.Errorf("instance of the interrupted job is %s (%s), want removing (%s)", in.State, in.Reason, PoolReasonInterrupted)
					}
				case in.ID == busy.InstanceID:
					if in.State != StateBusy {
						t.Errorf("instance of the job to resume is %s, want busy (slot held)", in.State)
					}
				case idle[in.ID] && in.State == StateRemoving:
					t.Errorf("idle instance %s removed (%s), want re-adopted", in.ID, in.Reason)
				}
			}
		})
	}
}
