package sim

import (
	"errors"
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/clock"
	"github.com/drover-ci/drover/internal/fleet"
	"github.com/drover-ci/drover/internal/fleet/fleettest"
)

func TestLifecycle(t *testing.T) {
	clk := clock.NewFake(time.Unix(0, 0))
	p := New(Options{Clock: clk, BootTime: 30 * time.Second, DeleteTime: 5 * time.Second})
	if _, err := p.Init(t.Context(), fleet.Settings{Name: "r"}); err != nil {
		t.Fatal(err)
	}
	if n, err := p.Increase(t.Context(), 2); n != 2 || err != nil {
		t.Fatalf("Increase = %d, %v", n, err)
	}
	if st := fleettest.States(t, p); len(st) != 2 || st["r-000001"] != fleet.StateCreating {
		t.Fatalf("states %v, want 2 creating", st)
	}
	if err := p.Heartbeat(t.Context(), "r-000001"); err == nil {
		t.Error("Heartbeat of a booting instance succeeded")
	}
	clk.Advance(30 * time.Second)
	if st := fleettest.States(t, p); st["r-000001"] != fleet.StateRunning {
		t.Fatalf("states %v after boot, want running", st)
	}
	if err := p.Heartbeat(t.Context(), "r-000001"); err != nil {
		t.Errorf("Heartbeat = %v", err)
	}
	p.FailHeartbeat("r-000001", 1)
	if err := p.Heartbeat(t.Context(), "r-000001"); !errors.Is(err, ErrInjected) {
		t.Errorf("Heartbeat = %v, want injected failure", err)
	}
	ok, err := p.Decrease(t.Context(), []string{"r-000001", "nope"})
	if len(ok) != 1 || !errors.Is(err, fleet.ErrNotFound) {
		t.Fatalf("Decrease = %v, %v; want r-000001 accepted, nope not found", ok, err)
	}
	if st := fleettest.States(t, p); st["r-000001"] != fleet.StateDeleting {
		t.Fatalf("state %v, want deleting", st["r-000001"])
	}
	clk.Advance(5 * time.Second)
	if st := fleettest.States(t, p); st["r-000001"] != fleet.StateDeleted {
		t.Fatalf("state %v, want deleted (reported once)", st["r-000001"])
	}
	if st := fleettest.States(t, p); len(st) != 1 {
		t.Fatalf("states %v, want the deleted instance gone", st)
	}
	if c, r := p.Counts(); c != 2 || r != 1 {
		t.Errorf("Counts = %d, %d; want 2, 1", c, r)
	}
}

func TestFailuresAndMaxSize(t *testing.T) {
	clk := clock.NewFake(time.Unix(0, 0))
	p := New(Options{Clock: clk, MaxSize: 3})
	p.FailCreate(1)
	if n, err := p.Increase(t.Context(), 2); n != 0 || !errors.Is(err, ErrInjected) {
		t.Fatalf("Increase = %d, %v; want 0 and an injected failure", n, err)
	}
	if n, err := p.Increase(t.Context(), 5); n != 3 || err == nil {
		t.Fatalf("Increase = %d, %v; want 3 and a max size error", n, err)
	}
	p.FailDelete(1)
	if ok, err := p.Decrease(t.Context(), []string{"sim-000001"}); len(ok) != 0 || !errors.Is(err, ErrInjected) {
		t.Fatalf("Decrease = %v, %v; want injected failure", ok, err)
	}
	p.Vanish("sim-000002")
	if live := p.Live(); len(live) != 2 {
		t.Errorf("Live = %v after a vanish, want 2", live)
	}
}

func TestBootSpreadDeterministic(t *testing.T) {
	boots := func(seed uint64) []fleet.State {
		clk := clock.NewFake(time.Unix(0, 0))
		p := New(Options{Clock: clk, BootTime: 30 * time.Second, BootSpread: 10 * time.Second, Seed: seed})
		p.Increase(t.Context(), 50)
		clk.Advance(30 * time.Second)
		var out []fleet.State
		p.Update(t.Context(), func(_ string, st fleet.State) { out = append(out, st) })
		return out
	}
	a, b := boots(7), boots(7)
	running := 0
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("same seed, instance %d: %v vs %v", i, a[i], b[i])
		}
		if a[i] == fleet.StateRunning {
			running++
		}
	}
	if running == 0 || running == len(a) {
		t.Errorf("%d of %d running at the mean boot time, want a spread", running, len(a))
	}
}

func TestRealClock(t *testing.T) {
	p := New(Options{BootTime: 5 * time.Millisecond})
	p.Increase(t.Context(), 1)
	if st := fleettest.States(t, p); st["sim-000001"] != fleet.StateCreating {
		t.Fatalf("state %v right after Increase, want creating", st)
	}
	time.Sleep(10 * time.Millisecond)
	if st := fleettest.States(t, p); st["sim-000001"] != fleet.StateRunning {
		t.Fatalf("state %v after the boot time, want running", st)
	}
}

// TestLifetimes: an instance's life runs from its creation to the end of
// its deletion, a refused deletion request not ending it, and one not
// deleted yet has no end.
func TestLifetimes(t *testing.T) {
	t0 := time.Unix(0, 0)
	clk := clock.NewFake(t0)
	p := New(Options{Clock: clk, DeleteTime: 5 * time.Second})
	if n, err := p.Increase(t.Context(), 3); n != 3 || err != nil {
		t.Fatalf("Increase = %d, %v", n, err)
	}
	// sim-000001 deleted in the second it was created.
	if _, err := p.Decrease(t.Context(), []string{"sim-000001"}); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Minute)
	p.FailDelete(1)
	if _, err := p.Decrease(t.Context(), []string{"sim-000002"}); !errors.Is(err, ErrInjected) {
		t.Fatalf("Decrease = %v, want an injected failure", err)
	}
	clk.Advance(time.Minute)
	if _, err := p.Decrease(t.Context(), []string{"sim-000002"}); err != nil {
		t.Fatalf("retried Decrease = %v", err)
	}
	clk.Advance(time.Minute)
	var got [][2]time.Duration
	p.Lifetimes(func(c, d time.Time) {
		end := time.Duration(-1)
		if !d.IsZero() {
			end = d.Sub(t0)
		}
		got = append(got, [2]time.Duration{c.Sub(t0), end})
	})
	want := [][2]time.Duration{{0, 5 * time.Second}, {0, 2*time.Minute + 5*time.Second}, {0, -1}}
	if len(got) != len(want) {
		t.Fatalf("lifetimes %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("instance %d: created, deleted at %v, want %v", i+1, got[i], want[i])
		}
	}
}
