package autoscale

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/drover-ci/drover/internal/fleet/sim"
)

// A manager that dies with jobs on an instance: the state file lists
// their slots, the restarted pool keeps them out of other jobs' reach
// until the resumed jobs claim them, and frees the ones nobody claims
// after ClaimGrace.
func TestPoolClaimAfterRestart(t *testing.T) {
	state := filepath.Join(t.TempDir(), "r1.json")
	pol := poolTestPolicy(2, 1, time.Hour, 1)
	withState := func(o *PoolOptions) { o.StateFile = state }
	h := newPoolHarness(t, pol, sim.Options{}, withState)
	h.pool.Tick(t.Context())
	h.advance(2 * time.Second)
	a0, a1 := h.mustAcquire(), h.mustAcquire()
	if a0.InstanceID != a1.InstanceID || a0.Slot == a1.Slot {
		t.Fatalf("acquired %+v and %+v; want two slots of one instance", a0, a1)
	}
	h.advance(time.Second) // the state file records the held slots
	if err := h.pool.Shutdown(t.Context(), false); err != nil {
		t.Fatal(err)
	}

	h.pool = h.newPool(pol, withState)
	h.pool.Tick(t.Context())
	if got := h.count(StateBusy); got != 1 {
		t.Fatalf("busy after restart = %d, want the instance with held slots", got)
	}
	// Held slots are not handed to new jobs.
	r, err := h.pool.Reserve()
	if err == nil {
		if a, _ := h.pool.TryAcquire(r); a != nil {
			t.Fatalf("a new job got held slot %d of %s", a.Slot, a.InstanceID)
		}
		h.pool.Unreserve(r)
	}
	got, err := h.pool.Claim(t.Context(), a0.InstanceID, a0.Slot)
	if err != nil || got.InstanceID != a0.InstanceID || got.Slot != a0.Slot {
		t.Fatalf("Claim = %+v, %v; want slot %d of %s", got, err, a0.Slot, a0.InstanceID)
	}
	// A slot already claimed is another job's.
	if _, err := h.pool.Claim(t.Context(), a0.InstanceID, a0.Slot); !errors.Is(err, ErrSlotGone) {
		t.Errorf("second Claim of one slot = %v; want ErrSlotGone", err)
	}
	if _, err := h.pool.Claim(t.Context(), "no-such", 0); !errors.Is(err, ErrSlotGone) {
		t.Errorf("Claim on an unknown instance = %v; want ErrSlotGone", err)
	}
	if _, err := h.pool.Claim(t.Context(), a0.InstanceID, 7); !errors.Is(err, ErrSlotGone) {
		t.Errorf("Claim of slot 7 = %v; want ErrSlotGone", err)
	}
	// The other held slot is never claimed: freed after the grace.
	h.advance(ClaimGrace + time.Minute)
	a, err := h.pool.TryAcquire(mustReserve(t, h.pool))
	if err != nil || a == nil || a.Slot != a1.Slot {
		t.Fatalf("after the grace: %+v, %v; want the unclaimed slot %d free", a, err, a1.Slot)
	}
	h.pool.Release(got)
	h.pool.Release(a)
	if got := h.count(StateIdle); got != 1 {
		t.Errorf("idle after releasing both = %d, want 1", got)
	}
}

func mustReserve(t *testing.T, p *Pool) *Reservation {
	t.Helper()
	r, err := p.Reserve()
	if err != nil {
		t.Fatalf("Reserve = %v", err)
	}
	return r
}

// Claim waits for the instance to be re-adopted and ready; a cancelled
// wait returns the context's error.
func TestPoolClaimWaits(t *testing.T) {
	h := newPoolHarness(t, poolTestPolicy(1, 1, time.Hour, 1), sim.Options{BootTime: 10 * time.Second}, nil)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := h.pool.Claim(ctx, "x", 0); !errors.Is(err, context.Canceled) {
		t.Errorf("Claim before the first sync, cancelled = %v; want context.Canceled", err)
	}
	h.pool.Tick(t.Context())
	id := ""
	for i := 0; i < 10 && id == ""; i++ {
		h.advance(time.Second) // reported, creating, not ready
		if insts, _ := h.pool.Snapshot(); len(insts) == 1 {
			id = insts[0].ID
		}
	}
	if id == "" || h.count(StateCreating) != 1 {
		t.Fatalf("no instance being created (id %q)", id)
	}
	done := make(chan error, 1)
	go func() {
		_, err := h.pool.Claim(t.Context(), id, 0)
		done <- err
	}()
	h.advance(11 * time.Second)
	h.advance(time.Second)
	if err := <-done; err != nil {
		t.Fatalf("Claim once ready = %v", err)
	}
}

// MarkBroken removes the instance, tells the jobs on it (Lost) and the
// policy replaces it.
func TestPoolMarkBroken(t *testing.T) {
	h := newPoolHarness(t, poolTestPolicy(2, 1, time.Hour, 2), sim.Options{}, nil)
	h.pool.Tick(t.Context())
	h.advance(2 * time.Second)
	a := h.mustAcquire()
	h.pool.MarkBroken(a.InstanceID, "engine does not answer")
	select {
	case <-a.Lost:
	default:
		t.Fatal("the job's Lost is not closed")
	}
	h.pool.MarkBroken("no-such", "ignored")
	h.advance(time.Second)
	h.advance(2 * time.Second)
	h.advance(2 * time.Second)
	if live := h.prov.Live(); len(live) != 1 || live[0] == a.InstanceID {
		t.Errorf("live = %v; want one replacement for %s", live, a.InstanceID)
	}
	if got := testutil.ToFloat64(h.m.Removals.WithLabelValues("r1", PoolReasonBroken)); got != 1 {
		t.Errorf("removals{reason=broken} = %v, want 1", got)
	}
}

// A restarted pool frees at once the held slots of jobs the manager will
// not resume (KeepHeld), before or after it re-adopted their instance,
// and keeps the others for Claim.
func TestPoolKeepHeld(t *testing.T) {
	for _, early := range []bool{true, false} {
		state := filepath.Join(t.TempDir(), "r1.json")
		pol := poolTestPolicy(3, 1, time.Hour, 1)
		withState := func(o *PoolOptions) { o.StateFile = state }
		h := newPoolHarness(t, pol, sim.Options{}, withState)
		h.pool.Tick(t.Context())
		h.advance(2 * time.Second)
		a := []*Acquisition{h.mustAcquire(), h.mustAcquire(), h.mustAcquire()}
		h.pool.SetJob(a[0], 10) // resumed
		h.pool.SetJob(a[1], 11) // not resumed
		// a[2]: job never told (an older manager): held until the grace
		h.advance(time.Second)
		if err := h.pool.Shutdown(t.Context(), false); err != nil {
			t.Fatal(err)
		}
		h.pool = h.newPool(pol, withState)
		keep := func(id int64) bool { return id == 10 }
		if early {
			h.pool.KeepHeld(keep)
		}
		h.pool.Tick(t.Context())
		if !early {
			h.pool.KeepHeld(keep)
		}
		r := mustReserve(t, h.pool)
		got, err := h.pool.TryAcquire(r)
		if err != nil || got == nil || got.Slot != a[1].Slot {
			t.Fatalf("early=%v: new job got %+v, %v; want the slot %d of the job not resumed", early, got, err, a[1].Slot)
		}
		if c, err := h.pool.Claim(t.Context(), a[0].InstanceID, a[0].Slot); err != nil || c.Slot != a[0].Slot {
			t.Errorf("early=%v: Claim of the resumed job's slot = %+v, %v", early, c, err)
		}
		if r2, err := h.pool.Reserve(); err == nil {
			if x, _ := h.pool.TryAcquire(r2); x != nil {
				t.Errorf("early=%v: slot %d of a job of unknown id was handed out before the grace", early, x.Slot)
			}
			h.pool.Unreserve(r2)
		}
	}
}

// TestPoolClaimCountsUnrecordedUse: a job whose acquisition the state file
// did not record (the manager died before the next write) is counted as a
// use when its resumed job claims the slot, so max_use_count removes the
// instance after it as it would have without the restart.
func TestPoolClaimCountsUnrecordedUse(t *testing.T) {
	state := filepath.Join(t.TempDir(), "r1.json")
	pol := poolTestPolicy(1, 1, time.Hour, 2)
	pol.MaxUseCount = 1
	withState := func(o *PoolOptions) { o.StateFile = state }
	h := newPoolHarness(t, pol, sim.Options{}, withState)
	h.pool.Tick(t.Context())
	h.advance(2 * time.Second) // ready, and written to the state file
	a := h.mustAcquire()
	// The manager dies now: no pass, no shutdown, so the state file still
	// shows the instance unused.
	h.pool = h.newPool(pol, withState)
	h.pool.Tick(t.Context())
	got, err := h.pool.Claim(t.Context(), a.InstanceID, a.Slot)
	if err != nil {
		t.Fatalf("Claim = %v", err)
	}
	insts, _ := h.pool.Snapshot()
	for _, in := range insts {
		if in.ID == a.InstanceID && in.UseCount != 1 {
			t.Fatalf("use count after the claim = %d, want 1", in.UseCount)
		}
	}
	h.pool.Release(got)
	h.advance(time.Second)
	for _, in := range func() []Instance { i, _ := h.pool.Snapshot(); return i }() {
		if in.ID == a.InstanceID && in.State != StateRemoving {
			t.Errorf("instance %s after its one allowed use = %s, want removing (max_use_count 1)", in.ID, in.State)
		}
	}
}
