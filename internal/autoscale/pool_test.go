package autoscale

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/drover-ci/drover/internal/clock"
	"github.com/drover-ci/drover/internal/fleet"
	"github.com/drover-ci/drover/internal/fleet/sim"
)

var poolT0 = time.Date(2026, 1, 5, 8, 0, 0, 0, time.UTC)

type poolHarness struct {
	t    *testing.T
	clk  *clock.Fake
	prov *sim.Provider
	pool *Pool
	m    *PoolMetrics
}

func newPoolHarness(t *testing.T, pol *Policy, so sim.Options, mod func(*PoolOptions)) *poolHarness {
	t.Helper()
	clk := clock.NewFake(poolT0)
	so.Clock = clk
	h := &poolHarness{t: t, clk: clk, prov: sim.New(so), m: NewPoolMetrics(prometheus.NewRegistry())}
	h.pool = h.newPool(pol, mod)
	return h
}

func (h *poolHarness) newPool(pol *Policy, mod func(*PoolOptions)) *Pool {
	h.t.Helper()
	o := PoolOptions{Policy: pol, Provider: h.prov, Clock: h.clk, Settings: fleet.Settings{Name: "r1"}, Metrics: h.m}
	if mod != nil {
		mod(&o)
	}
	p, err := NewPool(o)
	if err != nil {
		h.t.Fatalf("NewPool = %v", err)
	}
	return p
}

// advance moves the clock and runs one scaling pass.
func (h *poolHarness) advance(d time.Duration) {
	h.clk.Advance(d)
	h.pool.Tick(h.t.Context())
}

func (h *poolHarness) count(s State) int {
	insts, _ := h.pool.Snapshot()
	n := 0
	for _, in := range insts {
		if in.State == s {
			n++
		}
	}
	return n
}

// acquireAfterBoot reserves a slot for a job queued 40 s ago, finds
// none ready (the pool has 30 s boots and nothing ready yet), lets the
// pool boot one and returns the job's slot: a job that waited longer than
// a 30 s target.
func (h *poolHarness) acquireAfterBoot() *Acquisition {
	h.t.Helper()
	r, err := h.pool.Reserve()
	if err != nil {
		h.t.Fatalf("Reserve = %v", err)
	}
	r.SetQueuedAt(h.clk.Now().Add(-40 * time.Second))
	if a, err := h.pool.TryAcquire(r); a != nil || err != nil {
		h.t.Fatalf("TryAcquire with no instance ready = %v, %v", a, err)
	}
	h.advance(time.Second)
	h.advance(30 * time.Second)
	a, err := h.pool.TryAcquire(r)
	if err != nil || a == nil {
		h.t.Fatalf("TryAcquire after the boot = %v, %v", a, err)
	}
	return a
}

func (h *poolHarness) total() int { insts, _ := h.pool.Snapshot(); return len(insts) }

func (h *poolHarness) mustAcquire() *Acquisition {
	h.t.Helper()
	r, err := h.pool.Reserve()
	if err != nil {
		h.t.Fatalf("Reserve() = %v", err)
	}
	a, err := h.pool.TryAcquire(r)
	if err != nil || a == nil {
		h.t.Fatalf("TryAcquire() = %v, %v; want a slot", a, err)
	}
	return a
}

func poolTestPolicy(capacity, idle int, idleTime time.Duration, maxInst int) *Policy {
	return &Policy{
		Dialect: DialectAutoscaler, CapacityPerInstance: capacity, MaxInstances: maxInst,
		Base: Schedule{IdleCount: idle, IdleTime: idleTime, Preemptive: idle > 0},
	}
}

func TestPoolReserveAcquireRelease(t *testing.T) {
	h := newPoolHarness(t, poolTestPolicy(2, 2, time.Hour, 4), sim.Options{BootTime: 30 * time.Second}, nil)
	h.pool.Tick(t.Context())
	if got := h.count(StateCreating); got != 1 {
		t.Fatalf("creating = %d, want 1 (idle 2 slots / 2 per instance)", got)
	}
	if _, err := h.pool.Reserve(); !errors.Is(err, ErrNoCapacity) {
		t.Fatalf("Reserve() before any instance is ready = %v, want ErrNoCapacity (preemptive)", err)
	}
	h.advance(30 * time.Second)
	if got := h.count(StateIdle); got != 1 {
		t.Fatalf("idle = %d, want 1 after the boot time", got)
	}
	a1 := h.mustAcquire()
	a2 := h.mustAcquire()
	if a1.InstanceID != a2.InstanceID || a1.Slot == a2.Slot {
		t.Fatalf("acquisitions %s/%d and %s/%d: want two slots of one instance", a1.InstanceID, a1.Slot, a2.InstanceID, a2.Slot)
	}
	if a1.Info.InternalAddr == "" {
		t.Errorf("acquisition has no connect info")
	}
	if _, err := h.pool.Reserve(); !errors.Is(err, ErrNoCapacity) {
		t.Fatalf("Reserve() with every slot taken = %v, want ErrNoCapacity", err)
	}
	h.pool.Tick(t.Context())
	if got := h.total(); got != 2 {
		t.Fatalf("instances = %d, want 2 (2 busy slots + 2 idle slots)", got)
	}
	h.pool.Release(a1)
	h.pool.Release(a1) // twice: no-op
	a3 := h.mustAcquire()
	if a3.InstanceID != a2.InstanceID || a3.Slot != a1.Slot {
		t.Errorf("after release got %s/%d, want the freed slot %s/%d", a3.InstanceID, a3.Slot, a1.InstanceID, a1.Slot)
	}
	insts, _ := h.pool.Snapshot()
	if insts[0].UseCount != 3 || insts[0].Acquired != 2 {
		t.Errorf("instance use count %d acquired %d, want 3 and 2", insts[0].UseCount, insts[0].Acquired)
	}
	obs := h.pool.Observed()
	if obs.BootTime != 30*time.Second || obs.ArrivalRate <= 0 {
		t.Errorf("observed %+v, want boot time 30s and a positive arrival rate", obs)
	}
}

func TestPoolOnDemandAndIdleRemoval(t *testing.T) {
	pol := &Policy{Dialect: DialectMachine, CapacityPerInstance: 1, Base: Schedule{IdleTime: 10 * time.Minute}}
	h := newPoolHarness(t, pol, sim.Options{BootTime: 20 * time.Second}, nil)
	h.pool.Tick(t.Context())
	if h.total() != 0 {
		t.Fatalf("instances = %d with IdleCount 0, want 0", h.total())
	}
	r, err := h.pool.Reserve()
	if err != nil {
		t.Fatalf("Reserve() = %v, want on-demand success", err)
	}
	if a, _ := h.pool.TryAcquire(r); a != nil {
		t.Fatalf("TryAcquire() = %v with no instance", a)
	}
	h.pool.Tick(t.Context())
	if got := h.count(StateCreating); got != 1 {
		t.Fatalf("creating = %d, want 1 for the waiting job", got)
	}
	h.advance(20 * time.Second)
	a, err := h.pool.TryAcquire(r)
	if err != nil || a == nil {
		t.Fatalf("TryAcquire() after boot = %v, %v", a, err)
	}
	h.advance(5 * time.Minute)
	h.pool.Release(a)
	h.advance(9 * time.Minute)
	if got := h.count(StateIdle); got != 1 {
		t.Fatalf("idle = %d 9m after the job, want 1 (IdleTime 10m)", got)
	}
	// Idle time must be exceeded (strictly, as GitLab Runner counts it):
	// the tick a minute later removes the machine.
	h.advance(time.Minute)
	h.advance(time.Minute)
	h.advance(2 * time.Second) // the update that sees the deletion done
	if h.total() != 0 || len(h.prov.Live()) != 0 {
		t.Fatalf("instances = %d, provider live %v after IdleTime; want none", h.total(), h.prov.Live())
	}
	if got := testutil.ToFloat64(h.m.Removals.WithLabelValues("r1", "too_many_idle_machines")); got != 1 {
		t.Errorf("removals{reason=too_many_idle_machines} = %v, want 1", got)
	}
}

func TestPoolMaxUseCount(t *testing.T) {
	pol := poolTestPolicy(1, 1, time.Hour, 0)
	pol.MaxUseCount = 2
	h := newPoolHarness(t, pol, sim.Options{}, nil)
	h.pool.Tick(t.Context())
	h.advance(2 * time.Second)
	first := ""
	for i := range 2 {
		a := h.mustAcquire()
		if first == "" {
			first = a.InstanceID
		} else if a.InstanceID != first {
			t.Fatalf("job %d on %s, want %s", i, a.InstanceID, first)
		}
		h.pool.Release(a)
	}
	insts, _ := h.pool.Snapshot()
	if insts[0].ID != first || insts[0].State != StateRemoving {
		t.Fatalf("instance %s state %v after 2 jobs, want removing (max_use_count 2)", insts[0].ID, insts[0].State)
	}
	if got := testutil.ToFloat64(h.m.Removals.WithLabelValues("r1", PoolReasonMaxUseCount)); got != 1 {
		t.Errorf("removals{max_use_count} = %v, want 1", got)
	}
	h.pool.Tick(t.Context()) // deletes it, creates a replacement
	h.advance(2 * time.Second)
	for _, id := range h.prov.Live() {
		if id == first {
			t.Errorf("retired instance %s still live", id)
		}
	}
	if h.count(StateIdle) != 1 {
		t.Errorf("idle = %d, want a replacement", h.count(StateIdle))
	}
}

func TestPoolCreationFailuresBackOffAndAreNotCounted(t *testing.T) {
	pol := &Policy{Dialect: DialectMachine, CapacityPerInstance: 1, MaxInstances: 3, Base: Schedule{IdleCount: 3, IdleTime: time.Hour, Preemptive: true}}
	h := newPoolHarness(t, pol, sim.Options{BootTime: time.Minute}, nil)
	h.prov.FailCreate(2)
	h.pool.Tick(t.Context())
	if h.total() != 0 {
		t.Fatalf("instances = %d after a failed creation, want 0 (never counted)", h.total())
	}
	h.pool.Tick(t.Context()) // backing off: no second call
	if got := testutil.ToFloat64(h.m.ProviderErrors.WithLabelValues("r1", "increase")); got != 1 {
		t.Fatalf("provider errors{increase} = %v, want 1 (backoff)", got)
	}
	h.advance(2 * time.Second) // fails again, backoff 4s
	h.advance(2 * time.Second)
	if h.total() != 0 {
		t.Fatalf("instances = %d during backoff, want 0", h.total())
	}
	h.advance(2 * time.Second)
	if got := h.count(StateCreating); got != 3 {
		t.Fatalf("creating = %d after backoff, want 3", got)
	}
	for range 40 {
		h.advance(2 * time.Second)
		if n := h.total(); n > 3 {
			t.Fatalf("instances = %d, above max_instances 3", n)
		}
	}
	if created, _ := h.prov.Counts(); created != 3 {
		t.Errorf("provider created %d, want exactly 3", created)
	}
	if got := testutil.ToFloat64(h.m.ProviderErrors.WithLabelValues("r1", "increase")); got != 2 {
		t.Errorf("provider errors{increase} = %v, want 2", got)
	}
}

func TestPoolMaxInstancesCountsPending(t *testing.T) {
	h := newPoolHarness(t, poolTestPolicy(1, 5, time.Hour, 2), sim.Options{BootTime: time.Minute}, nil)
	for range 30 {
		h.advance(time.Second)
	}
	if created, _ := h.prov.Counts(); created != 2 {
		t.Errorf("created %d while booting, want 2 (max_instances)", created)
	}
}

func TestPoolDeletionRetries(t *testing.T) {
	pol := &Policy{Dialect: DialectMachine, CapacityPerInstance: 1, Base: Schedule{IdleTime: 0}}
	h := newPoolHarness(t, pol, sim.Options{}, nil)
	h.pool.Tick(t.Context())
	r, _ := h.pool.Reserve()
	h.pool.TryAcquire(r)
	h.pool.Tick(t.Context())
	h.advance(2 * time.Second)
	a, _ := h.pool.TryAcquire(r)
	if a == nil {
		t.Fatal("no slot after boot")
	}
	h.prov.FailDelete(2)
	h.pool.Release(a)
	h.clk.Advance(time.Millisecond) // idle for longer than IdleTime 0
	h.pool.Tick(t.Context())        // removal decided; Decrease fails (1)
	if h.count(StateRemoving) != 1 {
		t.Fatalf("removing = %d, want 1", h.count(StateRemoving))
	}
	h.advance(59 * time.Second)
	if got := testutil.ToFloat64(h.m.DeletionRetries.WithLabelValues("r1")); got != 0 {
		t.Fatalf("retries = %v before DeletionRetryInterval, want 0", got)
	}
	h.advance(time.Second) // retry 1 fails (2); next in 2m
	h.advance(time.Minute)
	if h.count(StateRemoving) != 1 {
		t.Fatalf("removing = %d during backoff, want 1 (still counted)", h.count(StateRemoving))
	}
	h.advance(time.Minute) // retry 2 succeeds
	h.advance(2 * time.Second)
	if h.total() != 0 || len(h.prov.Live()) != 0 {
		t.Fatalf("instances %d, live %v; want all gone", h.total(), h.prov.Live())
	}
	if got := testutil.ToFloat64(h.m.DeletionRetries.WithLabelValues("r1")); got != 2 {
		t.Errorf("deletion retries = %v, want 2", got)
	}
	if got := testutil.ToFloat64(h.m.ProviderErrors.WithLabelValues("r1", "decrease")); got != 2 {
		t.Errorf("provider errors{decrease} = %v, want 2", got)
	}
}

// poolWaitFor polls cond for up to a second (the ready command runs in its
// own goroutine).
func poolWaitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for range 1000 {
		if cond() {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s", what)
}

func TestPoolReadyCommandFailure(t *testing.T) {
	var calls atomic.Int32
	ready := func(ctx context.Context, info fleet.ConnectInfo) error {
		if info.ID == "" {
			return errors.New("no connect info")
		}
		if calls.Add(1) == 1 {
			return errors.New("exit status 1")
		}
		return nil
	}
	h := newPoolHarness(t, poolTestPolicy(1, 1, time.Hour, 0), sim.Options{BootTime: 10 * time.Second}, func(o *PoolOptions) { o.InstanceReady = ready })
	h.pool.Tick(t.Context())
	h.advance(10 * time.Second)
	poolWaitFor(t, "ready command failure", func() bool { return h.count(StateRemoving) == 1 })
	if got := testutil.ToFloat64(h.m.Removals.WithLabelValues("r1", PoolReasonReadyFailed)); got != 1 {
		t.Errorf("removals{ready_command_failed} = %v, want 1", got)
	}
	h.pool.Tick(t.Context()) // deletes it; creation backs off
	if created, _ := h.prov.Counts(); created != 1 {
		t.Fatalf("created %d right after a ready failure, want 1 (backoff)", created)
	}
	h.advance(2 * time.Second)
	h.advance(10 * time.Second)
	poolWaitFor(t, "second instance ready", func() bool { return h.count(StateIdle) == 1 })
	if created, _ := h.prov.Counts(); created != 2 {
		t.Errorf("created %d, want 2", created)
	}
}

func TestPoolHeartbeatFailureThresholdAndLost(t *testing.T) {
	h := newPoolHarness(t, poolTestPolicy(1, 1, time.Hour, 0), sim.Options{}, nil)
	h.pool.Tick(t.Context())
	h.advance(2 * time.Second)
	a := h.mustAcquire()
	h.prov.FailHeartbeat(a.InstanceID, 3)
	for i := range 2 {
		h.advance(time.Minute)
		select {
		case <-a.Lost:
			t.Fatalf("Lost closed after %d failed heartbeats, want 3", i+1)
		default:
		}
	}
	h.advance(time.Minute)
	select {
	case <-a.Lost:
	default:
		t.Fatal("Lost not closed after 3 failed heartbeats (failure_threshold)")
	}
	if got := testutil.ToFloat64(h.m.Removals.WithLabelValues("r1", PoolReasonHeartbeat)); got != 1 {
		t.Errorf("removals{heartbeat_failed} = %v, want 1", got)
	}
	h.pool.Release(a)
}

func TestPoolVanishedInstanceClosesLost(t *testing.T) {
	h := newPoolHarness(t, poolTestPolicy(1, 1, time.Hour, 0), sim.Options{}, nil)
	h.pool.Tick(t.Context())
	h.advance(2 * time.Second)
	a := h.mustAcquire()
	h.prov.Vanish(a.InstanceID)
	h.advance(time.Minute)
	select {
	case <-a.Lost:
	default:
		t.Fatal("Lost not closed for a vanished instance")
	}
	h.pool.Release(a) // the instance is gone: no panic, no effect
}

func TestPoolRestartReadoptsAndDeletesUnknown(t *testing.T) {
	state := filepath.Join(t.TempDir(), "state", "r1.json")
	withState := func(o *PoolOptions) { o.StateFile = state }
	h := newPoolHarness(t, poolTestPolicy(1, 2, time.Hour, 0), sim.Options{BootTime: 5 * time.Second}, withState)
	h.pool.Tick(t.Context())
	h.advance(5 * time.Second)
	a := h.mustAcquire()
	h.pool.Release(a)
	h.pool.Tick(t.Context())
	known := h.prov.Live()
	if len(known) != 2 {
		t.Fatalf("live before restart: %v, want 2 instances", known)
	}
	fi, err := os.Stat(state)
	if err != nil {
		t.Fatalf("state file: %v", err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("state file mode %v, want 0600", fi.Mode().Perm())
	}
	// The manager dies without Shutdown; meanwhile an instance appears that
	// no state file knows (created by a crashed run before it could write).
	if n, err := h.prov.Increase(t.Context(), 1); n != 1 || err != nil {
		t.Fatalf("Increase = %d, %v", n, err)
	}
	orphan := h.prov.Live()[len(h.prov.Live())-1]

	h.pool = h.newPool(poolTestPolicy(1, 2, time.Hour, 0), withState)
	h.advance(5 * time.Second)
	insts, _ := h.pool.Snapshot()
	byID := map[string]Instance{}
	for _, in := range insts {
		byID[in.ID] = in
	}
	for _, id := range known {
		in, ok := byID[id]
		if !ok || in.State == StateRemoving {
			t.Errorf("known instance %s: adopted %v state %v, want re-adopted", id, ok, in.State)
		}
	}
	if byID[a.InstanceID].UseCount != 1 {
		t.Errorf("use count of %s after restart = %d, want 1", a.InstanceID, byID[a.InstanceID].UseCount)
	}
	h.advance(2 * time.Second)
	for _, id := range h.prov.Live() {
		if id == orphan {
			t.Errorf("unknown instance %s not deleted after restart", id)
		}
	}
	if created, _ := h.prov.Counts(); created != len(known)+1 {
		t.Errorf("provider created %d, want %d (nothing new: re-adopted ones suffice)", created, len(known)+1)
	}
	// Re-adopted instances are usable at once.
	if a := h.mustAcquire(); a.Info.InternalAddr == "" {
		t.Error("re-adopted instance has no connect info")
	}
	if got := testutil.ToFloat64(h.m.Removals.WithLabelValues("r1", PoolReasonUnknownAtStart)); got != 1 {
		t.Errorf("removals{unknown_at_startup} = %v, want 1", got)
	}
}

func TestPoolShutdownDeletesEverything(t *testing.T) {
	h := newPoolHarness(t, poolTestPolicy(2, 4, time.Hour, 0), sim.Options{DeleteTime: 3 * time.Second}, nil)
	h.pool.Tick(t.Context())
	h.advance(2 * time.Second)
	a := h.mustAcquire()
	done := make(chan error, 1)
	go func() { done <- h.pool.Shutdown(t.Context(), true) }()
	for {
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("Shutdown = %v", err)
			}
			if live := h.prov.Live(); len(live) != 0 {
				t.Fatalf("live after Shutdown(delete) = %v", live)
			}
			select {
			case <-a.Lost:
			default:
				t.Error("Lost of a job on a deleted instance not closed")
			}
			if _, err := h.pool.Reserve(); !errors.Is(err, ErrPoolClosed) {
				t.Errorf("Reserve after Shutdown = %v, want ErrPoolClosed", err)
			}
			return
		default:
		}
		if h.clk.Pending() > 0 {
			h.clk.Advance(10 * time.Second)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestPoolRunAcquireWaitsForInstance(t *testing.T) {
	pol := &Policy{Dialect: DialectMachine, CapacityPerInstance: 1, Base: Schedule{IdleTime: time.Hour}}
	h := newPoolHarness(t, pol, sim.Options{BootTime: 30 * time.Second}, nil)
	ctx, cancel := context.WithCancel(t.Context())
	runDone := make(chan error, 1)
	go func() { runDone <- h.pool.Run(ctx) }()
	r, err := h.pool.Reserve()
	if err != nil {
		t.Fatalf("Reserve() = %v", err)
	}
	got := make(chan *Acquisition, 1)
	go func() {
		a, err := h.pool.Acquire(ctx, r)
		if err != nil {
			t.Errorf("Acquire = %v", err)
		}
		got <- a
	}()
	var a *Acquisition
	for a == nil {
		select {
		case a = <-got:
		default:
			h.clk.Advance(time.Second)
			time.Sleep(time.Millisecond)
		}
	}
	if a == nil || a.InstanceID == "" {
		t.Fatalf("Acquire returned %+v", a)
	}
	if waited := h.clk.Now().Sub(poolT0); waited < 30*time.Second {
		t.Errorf("acquired after %s, before the 30s boot", waited)
	}
	cancel()
	if err := <-runDone; err != nil {
		t.Errorf("Run = %v, want nil", err)
	}
}

func TestPoolAcquireTimeout(t *testing.T) {
	pol := &Policy{Dialect: DialectMachine, CapacityPerInstance: 1, MaxInstances: 1, Base: Schedule{IdleTime: time.Hour}}
	h := newPoolHarness(t, pol, sim.Options{BootTime: time.Hour}, func(o *PoolOptions) { o.AcquireTimeout = time.Minute })
	r, _ := h.pool.Reserve()
	errc := make(chan error, 1)
	go func() { _, err := h.pool.Acquire(t.Context(), r); errc <- err }()
	poolWaitFor(t, "Acquire to wait", func() bool { return h.clk.Pending() == 1 })
	h.clk.Advance(time.Minute)
	if err := <-errc; !errors.Is(err, ErrAcquireTimeout) {
		t.Fatalf("Acquire = %v, want ErrAcquireTimeout", err)
	}
	if _, d := h.pool.Snapshot(); d.Reserved != 0 || d.Waiting != 0 {
		t.Errorf("demand after timeout %+v, want the reservation given back", d)
	}
}

func TestPoolReasonLabel(t *testing.T) {
	for in, want := range map[string]string{
		"idle for 31m0s, beyond idle target": "idle_for",
		"max_use_count 3 reached":            "max_use_count",
		"":                                   "policy",
		"Too many idle machines":             "too_many_idle_machines",
	} {
		if got := poolReasonLabel(in); got != want {
			t.Errorf("poolReasonLabel(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestPoolShutdownKeepsInstancesForRestart(t *testing.T) {
	state := filepath.Join(t.TempDir(), "r1.json")
	h := newPoolHarness(t, poolTestPolicy(1, 2, time.Hour, 0), sim.Options{}, func(o *PoolOptions) { o.StateFile = state })
	h.pool.Tick(t.Context())
	h.advance(2 * time.Second)
	if err := h.pool.Shutdown(t.Context(), false); err != nil {
		t.Fatalf("Shutdown(false) = %v", err)
	}
	if live := h.prov.Live(); len(live) != 2 {
		t.Fatalf("live after Shutdown(false) = %v, want the 2 instances kept", live)
	}
	st, err := readPoolState(state)
	if err != nil || len(st) != 2 {
		t.Fatalf("state file after Shutdown: %v, %v; want 2 instances", st, err)
	}
	h.pool = h.newPool(poolTestPolicy(1, 2, time.Hour, 0), func(o *PoolOptions) { o.StateFile = state })
	h.pool.Tick(t.Context())
	if got := h.count(StateIdle); got != 2 {
		t.Errorf("idle after restart = %d, want the 2 re-adopted", got)
	}
	if created, _ := h.prov.Counts(); created != 2 {
		t.Errorf("created %d, want 2 (none new)", created)
	}
}

func TestPoolSetPolicyAndGauges(t *testing.T) {
	h := newPoolHarness(t, poolTestPolicy(1, 1, time.Hour, 0), sim.Options{BootTime: 10 * time.Second}, nil)
	h.pool.Tick(t.Context())
	h.advance(10 * time.Second)
	h.pool.SetPolicy(poolTestPolicy(1, 3, time.Hour, 0))
	h.pool.Tick(t.Context())
	if got := h.count(StateCreating); got != 2 {
		t.Fatalf("creating after raising idle_count to 3 = %d, want 2", got)
	}
	if got := testutil.ToFloat64(h.m.Instances.WithLabelValues("r1", "idle")); got != 1 {
		t.Errorf("instances{state=idle} = %v, want 1", got)
	}
	if got := testutil.ToFloat64(h.m.Instances.WithLabelValues("r1", "creating")); got != 2 {
		t.Errorf("instances{state=creating} = %v, want 2", got)
	}
	// The two just asked for are fleeting's pending until reported.
	for state, want := range map[string]float64{"pending": 2, "creating": 0, "running": 1, "deleting": 0} {
		if got := testutil.ToFloat64(h.m.FleetingInstances.WithLabelValues("r1", "", "", state)); got != want {
			t.Errorf("fleeting_provisioner_instances{state=%s} = %v, want %v", state, got, want)
		}
	}
	if got := testutil.ToFloat64(h.m.Creations.WithLabelValues("r1", "idle_target")); got != 3 {
		t.Errorf("creations{idle_target} = %v, want 3", got)
	}
}

func TestPoolStateFileCorrupt(t *testing.T) {
	state := filepath.Join(t.TempDir(), "r1.json")
	os.WriteFile(state, []byte("{not json"), 0o600)
	_, err := NewPool(PoolOptions{Policy: poolTestPolicy(1, 1, 0, 0), Provider: sim.New(sim.Options{}), StateFile: state})
	if err == nil || !strings.Contains(err.Error(), state) {
		t.Fatalf("NewPool with a corrupt state file = %v, want an error naming it", err)
	}
}

// flakyPoolProvider fails Init and Update a number of times.
type flakyPoolProvider struct {
	*sim.Provider
	initFails, updateFails int
	inits                  int
}

func (f *flakyPoolProvider) Init(ctx context.Context, s fleet.Settings) (fleet.Info, error) {
	f.inits++
	if f.initFails > 0 {
		f.initFails--
		return fleet.Info{}, errors.New("cloud API down")
	}
	return f.Provider.Init(ctx, s)
}

func (f *flakyPoolProvider) Update(ctx context.Context, fn func(string, fleet.State)) error {
	if f.updateFails > 0 {
		f.updateFails--
		return errors.New("cloud API down")
	}
	return f.Provider.Update(ctx, fn)
}

func TestPoolProviderDownAtStart(t *testing.T) {
	clk := clock.NewFake(poolT0)
	fp := &flakyPoolProvider{Provider: sim.New(sim.Options{Clock: clk}), initFails: 1, updateFails: 2}
	m := NewPoolMetrics(nil)
	p, err := NewPool(PoolOptions{Policy: poolTestPolicy(1, 2, time.Hour, 0), Provider: fp, Clock: clk, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		p.Tick(t.Context())
		if created, _ := fp.Counts(); created != 0 {
			t.Fatalf("created %d before the first successful update, want 0", created)
		}
		clk.Advance(2 * time.Second)
	}
	p.Tick(t.Context())
	if created, _ := fp.Counts(); created != 2 {
		t.Errorf("created %d after the provider came back, want 2", created)
	}
	if fp.inits != 2 {
		t.Errorf("Init called %d times, want 2 (once more after its failure, not per pass)", fp.inits)
	}
	if got := testutil.ToFloat64(m.ProviderErrors.WithLabelValues("", "update")); got != 2 {
		t.Errorf("provider errors{update} = %v, want 2", got)
	}
}

func TestPoolAdoptUnknown(t *testing.T) {
	h := newPoolHarness(t, poolTestPolicy(1, 1, time.Hour, 0), sim.Options{}, func(o *PoolOptions) { o.AdoptUnknown = true })
	h.prov.Increase(t.Context(), 2)
	h.pool.Tick(t.Context())
	h.advance(2 * time.Second)
	if live := h.prov.Live(); len(live) != 2 {
		t.Errorf("live = %v, want both pre-existing instances adopted", live)
	}
	if got := h.count(StateIdle); got != 2 {
		t.Errorf("idle = %d, want 2", got)
	}
}

// TestPoolConcurrentRealClock runs the loop on the real clock with many
// jobs at once: no slot is ever handed out twice, and Shutdown(delete)
// leaves nothing behind.
func TestPoolConcurrentRealClock(t *testing.T) {
	prov := sim.New(sim.Options{BootTime: 2 * time.Millisecond, BootSpread: time.Millisecond})
	pol := &Policy{Dialect: DialectAutoscaler, CapacityPerInstance: 3, MaxInstances: 4, MaxUseCount: 7,
		Base: Schedule{IdleCount: 2, IdleTime: 5 * time.Millisecond}}
	p, err := NewPool(PoolOptions{Policy: pol, Provider: prov, UpdateInterval: 5 * time.Millisecond, UpdateIntervalWhenExpecting: time.Millisecond, AcquireTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go p.Run(ctx)
	var mu sync.Mutex
	held := map[string]bool{}
	var wg sync.WaitGroup
	for w := range 12 {
		wg.Go(func() {
			for range 15 {
				r, err := p.Reserve()
				if err != nil {
					time.Sleep(time.Millisecond)
					continue
				}
				a, err := p.Acquire(ctx, r)
				if err != nil {
					t.Errorf("worker %d: Acquire = %v", w, err)
					return
				}
				key := fmt.Sprintf("%s/%d", a.InstanceID, a.Slot)
				mu.Lock()
				if held[key] {
					t.Errorf("slot %s handed out twice", key)
				}
				held[key] = true
				mu.Unlock()
				time.Sleep(200 * time.Microsecond)
				mu.Lock()
				delete(held, key)
				mu.Unlock()
				p.Release(a)
			}
		})
	}
	wg.Wait()
	if insts, _ := p.Snapshot(); len(insts) > 4 {
		t.Errorf("%d instances, max_instances 4", len(insts))
	}
	sctx, scancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer scancel()
	if err := p.Shutdown(sctx, true); err != nil {
		t.Fatalf("Shutdown = %v", err)
	}
	if live := prov.Live(); len(live) != 0 {
		t.Errorf("live after Shutdown(delete) = %v", live)
	}
}

// The pool feeds each job's queue wait (from SetQueuedAt, else from its
// first acquire) to the adaptive feedback while an adaptive schedule is in
// force, and hands the gain to the policy in Observed.
func TestPoolAdaptiveFeedback(t *testing.T) {
	pol := &Policy{Dialect: DialectAutoscaler, CapacityPerInstance: 1, MaxInstances: 10,
		Base: Schedule{Adaptive: true, TargetWait: 30 * time.Second, IdleTime: time.Hour}}
	h := newPoolHarness(t, pol, sim.Options{BootTime: 30 * time.Second}, nil)
	h.pool.Tick(t.Context())
	if g := h.pool.Observed().BufferGain; g != 1 {
		t.Fatalf("initial gain %v, want 1", g)
	}
	// A job queued 40 s ago that gets a slot only after a boot: a miss.
	a := h.acquireAfterBoot()
	g := h.pool.Observed().BufferGain
	if g <= 1 {
		t.Fatalf("gain after a miss %v, want > 1", g)
	}
	h.pool.Release(a)
	// A job served at once: the gain goes down.
	h.advance(time.Second)
	h.pool.Release(h.mustAcquire())
	if g2 := h.pool.Observed().BufferGain; g2 >= g {
		t.Errorf("gain after a hit %v, want below %v", g2, g)
	}
	// A static schedule feeds nothing back.
	h.pool.SetPolicy(poolTestPolicy(1, 0, time.Hour, 10))
	g3 := h.pool.Observed().BufferGain
	h.pool.Release(h.mustAcquire())
	if g4 := h.pool.Observed().BufferGain; g4 != g3 {
		t.Errorf("static schedule changed the gain: %v -> %v", g3, g4)
	}
}

// A job's wait at the coordinator (SetTimeInQueue, from the job payload)
// counts in the feedback: served at once from an idle instance after 40 s
// in the coordinator's queue is a miss of a 30 s target, after 10 s a hit.
func TestPoolAdaptiveFeedbackTimeInQueue(t *testing.T) {
	for _, tc := range []struct {
		name     string
		inQueue  time.Duration
		wantMiss bool
	}{
		{"40 s at the coordinator", 40 * time.Second, true},
		{"10 s at the coordinator", 10 * time.Second, false},
		{"not told", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pol := &Policy{Dialect: DialectAutoscaler, CapacityPerInstance: 1, MaxInstances: 10,
				Base: Schedule{Adaptive: true, IdleCount: 1, TargetWait: 30 * time.Second, IdleTime: time.Hour}}
			h := newPoolHarness(t, pol, sim.Options{BootTime: 30 * time.Second}, nil)
			h.pool.Tick(t.Context())
			h.advance(31 * time.Second) // the idle_count floor's instance is ready
			r, err := h.pool.Reserve()
			if err != nil {
				t.Fatalf("Reserve = %v", err)
			}
			r.SetTimeInQueue(tc.inQueue)
			a, err := h.pool.TryAcquire(r)
			if err != nil || a == nil {
				t.Fatalf("TryAcquire with an idle instance = %v, %v", a, err)
			}
			if g := h.pool.Observed().BufferGain; (g > 1) != tc.wantMiss {
				t.Errorf("gain %v after one job; a miss: %v", g, tc.wantMiss)
			}
		})
	}
}

// TestPoolShutdownRecordsPendingCreations: instances asked for and not yet
// seen when the pool shuts down (keeping instances) are in the state file,
// so the next start adopts them instead of leaving them orphaned.
func TestPoolShutdownRecordsPendingCreations(t *testing.T) {
	state := filepath.Join(t.TempDir(), "r1.json")
	h := newPoolHarness(t, poolTestPolicy(1, 2, time.Hour, 0), sim.Options{BootTime: time.Minute}, func(o *PoolOptions) { o.StateFile = state })
	h.pool.Tick(t.Context()) // asks for 2; the pool has not seen them yet
	if err := h.pool.Shutdown(t.Context(), false); err != nil {
		t.Fatalf("Shutdown(false) = %v", err)
	}
	live := h.prov.Live()
	st, err := readPoolState(state)
	if err != nil || len(st) != len(live) || len(live) != 2 {
		t.Fatalf("state file after Shutdown: %v, %v; want the %d live instances %v", st, err, len(live), live)
	}
}

// A restarted manager's pool goes on with what the pool before it learnt
// of the load (arrival rate, job and boot times, burstiness, the adaptive
// feedback's gain): the state file carries it.
func TestPoolStateKeepsLearntStatistics(t *testing.T) {
	state := filepath.Join(t.TempDir(), "r1.json")
	// idle_count 6 (the adaptive buffer's floor) keeps six instances for
	// the bursts below.
	pol := &Policy{Dialect: DialectAutoscaler, CapacityPerInstance: 1, MaxInstances: 10,
		Base: Schedule{Adaptive: true, TargetWait: 30 * time.Second, IdleTime: time.Hour, IdleCount: 6}}
	h := newPoolHarness(t, pol, sim.Options{BootTime: 30 * time.Second}, func(o *PoolOptions) { o.StateFile = state })
	h.pool.Tick(t.Context())
	// A job that waits for a boot (a miss), then short jobs served at once
	// in bursts of six every 30 s (more bursty than Poisson arrivals).
	a := h.acquireAfterBoot()
	h.advance(20 * time.Second)
	h.pool.Release(a)
	for range 120 {
		h.advance(30 * time.Second)
		for range 6 {
			h.pool.Release(h.mustAcquire())
		}
	}
	before := h.pool.Observed()
	if before.ArrivalRate <= 0 || before.MeanDuration <= 0 || before.BootTime <= 0 || before.BufferGain == 1 || before.ArrivalDispersion <= 1 {
		t.Fatalf("observed before the restart %+v: want every statistic measured", before)
	}
	if err := h.pool.Shutdown(t.Context(), false); err != nil {
		t.Fatalf("Shutdown(false) = %v", err)
	}

	again := h.newPool(pol, func(o *PoolOptions) { o.StateFile = state })
	after := again.Observed()
	if after != before {
		t.Errorf("observed after the restart %+v, want %+v", after, before)
	}
	// So does the mean of the miss shapes the feedback's goals follow.
	if got, want := again.feedback.shapes, h.pool.feedback.shapes; !(want.n > 0) || got.sum != want.sum || got.n != want.n || !got.at.Equal(want.at) || !got.first.Equal(want.first) {
		t.Errorf("miss shapes after the restart %+v, want %+v (measured)", got, want)
	}
	// The rate decays from its last arrival on, restart or not.
	h.clk.Advance(10 * time.Minute)
	if got, want := again.Observed().ArrivalRate, before.ArrivalRate/math.E; math.Abs(got-want) > 1e-9*want {
		t.Errorf("arrival rate 10 min later %v, want %v", got, want)
	}

	// A file of an older drover (no statistics) or with garbage in them
	// starts learning anew instead of failing.
	for _, learnt := range []string{``, `,"learnt":{"arrival_rate":-1,"rate_at":"2026-01-01T00:00:00Z","mean_duration_s":-5,"mean_boot_s":0,"dispersion_m":0,"dispersion_s2":0,"log_gain":0,"miss_shape_sum":-1,"miss_shape_n":0}`} {
		if err := os.WriteFile(state, []byte(`{"version":1,"instances":[]`+learnt+`}`), 0o600); err != nil {
			t.Fatal(err)
		}
		fresh := h.newPool(pol, func(o *PoolOptions) { o.StateFile = state })
		if o := fresh.Observed(); o.ArrivalRate != 0 || o.MeanDuration != 0 || o.BootTime != 0 || o.BufferGain != 1 || o.ArrivalDispersion != 1 {
			t.Errorf("observed from %q = %+v, want nothing learnt", learnt, o)
		}
		if fresh.feedback.shapes != (decayingMean{}) {
			t.Errorf("miss shapes from %q = %+v, want none", learnt, fresh.feedback.shapes)
		}
	}
}

// scale_throttle paces creations: a burst at once, then limit a second,
// the pool's next pass coming when the next token is there; the decision
// says what was held back.
func TestPoolScaleThrottle(t *testing.T) {
	pol := poolTestPolicy(1, 7, time.Hour, 20)
	pol.ScaleThrottle = ScaleThrottle{Limit: 2, Burst: 3}
	h := newPoolHarness(t, pol, sim.Options{BootTime: time.Hour}, nil)
	next := h.pool.Tick(t.Context())
	if got := h.total(); got != 3 {
		t.Fatalf("instances after the first pass = %d, want the burst of 3", got)
	}
	if r := h.pool.Status().LastDecision.Reason; !strings.Contains(r, "4 of 7 creations held back by scale_throttle (limit 2/s, burst 3)") {
		t.Errorf("decision reason %q does not say what scale_throttle held back", r)
	}
	// Two tokens a second: the next token in half a second, when the
	// pool looks again.
	if want := poolT0.Add(500 * time.Millisecond); !next.Equal(want) {
		t.Errorf("next pass at %s, want %s (the next token)", next, want)
	}
	for _, step := range []struct {
		after time.Duration
		want  int
	}{{500 * time.Millisecond, 4}, {500 * time.Millisecond, 5}, {time.Second, 7}, {10 * time.Second, 7}} {
		h.advance(step.after)
		if got := h.total(); got != step.want {
			t.Fatalf("instances %s later = %d, want %d", h.clk.Now().Sub(poolT0), got, step.want)
		}
	}
	// Without scale_throttle the defaults (100/s, burst max_instances)
	// hold nothing back here.
	h2 := newPoolHarness(t, poolTestPolicy(1, 7, time.Hour, 20), sim.Options{BootTime: time.Hour}, nil)
	h2.pool.Tick(t.Context())
	if got := h2.total(); got != 7 {
		t.Errorf("default throttle: %d instances, want 7 at once", got)
	}
}
