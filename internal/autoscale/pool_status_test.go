package autoscale

import (
	"strings"
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/fleet/sim"
)

func TestPoolStatus(t *testing.T) {
	h := newPoolHarness(t, poolTestPolicy(2, 2, time.Hour, 4), sim.Options{BootTime: 30 * time.Second}, nil)
	if st := h.pool.Status(); len(st.Instances) != 0 || !st.LastDecision.At.IsZero() || len(st.History) != 1 {
		t.Fatalf("before the first pass: %+v", st)
	}
	h.advance(0)
	st := h.pool.Status()
	if st.LastDecision.At != poolT0 || st.LastDecision.Create != 1 || st.LastDecision.Created != 1 ||
		!strings.Contains(st.LastDecision.Reason, "idle target") || st.LastDecision.IdleTarget != 2 {
		t.Errorf("last decision = %+v, want one creation for the idle target at t0", st.LastDecision)
	}
	if len(st.Instances) != 1 || st.Instances[0].State != StateCreating {
		t.Errorf("instances = %+v, want one creating", st.Instances)
	}
	if st.CapacityPerInstance != 2 || st.MaxInstances != 4 {
		t.Errorf("capacity %d, max %d", st.CapacityPerInstance, st.MaxInstances)
	}

	// Booted: idle, then busy with a job.
	for range 4 {
		h.advance(10 * time.Second)
	}
	a := h.mustAcquire()
	st = h.pool.Status()
	if len(st.Instances) != 1 || st.Instances[0].State != StateBusy || st.Instances[0].UseCount != 1 ||
		st.Instances[0].Acquired != 1 || st.Instances[0].ID == "" || st.Instances[0].Ready.IsZero() {
		t.Errorf("instances = %+v, want one busy with one job", st.Instances)
	}
	last := st.History[len(st.History)-1]
	if last.At != h.clk.Now() || last.Busy != 1 || last.Creating != 0 {
		t.Errorf("newest sample = %+v, want the pool now", last)
	}
	if first := st.History[0]; first.At != poolT0.Add(10*time.Second) || first.Creating != 1 {
		t.Errorf("oldest sample = %+v, want one creating at t0+10s (the last pass of its step)", first)
	}
	h.pool.Release(a)
}

func TestPoolHistoryBounded(t *testing.T) {
	h := newPoolHarness(t, poolTestPolicy(1, 1, time.Hour, 2), sim.Options{}, nil)
	// Passes 5 s apart share a sample; a window and a half of them keeps
	// only the last hour.
	for range int(1.5 * float64(HistoryWindow/(5*time.Second))) {
		h.advance(5 * time.Second)
	}
	hist := h.pool.Status().History
	if len(hist) > historyLen+1 {
		t.Fatalf("%d samples, want at most %d", len(hist), historyLen+1)
	}
	now := h.clk.Now()
	if age := now.Sub(hist[0].At); age >= HistoryWindow || age < HistoryWindow-2*historyStep {
		t.Errorf("oldest sample %v old, want just under %v", age, HistoryWindow)
	}
	for i := 1; i < len(hist)-1; i++ {
		if a, b := hist[i-1].At.Truncate(historyStep), hist[i].At.Truncate(historyStep); !b.After(a) {
			t.Fatalf("samples %d and %d (%v, %v) in the same step", i-1, i, hist[i-1].At, hist[i].At)
		}
	}
}

func TestHistoryRing(t *testing.T) {
	var h history
	t0 := poolT0
	for i := range 2 * historyLen {
		h.add(Sample{At: t0.Add(time.Duration(i) * historyStep), Idle: i})
	}
	got := h.since(time.Time{})
	if len(got) != historyLen || got[0].Idle != historyLen || got[len(got)-1].Idle != 2*historyLen-1 {
		t.Fatalf("ring holds %d samples from %d to %d, want the last %d", len(got), got[0].Idle, got[len(got)-1].Idle, historyLen)
	}
	h.add(Sample{At: got[len(got)-1].At.Add(historyStep - time.Second), Idle: -1})
	if got := h.since(time.Time{}); len(got) != historyLen || got[len(got)-1].Idle != -1 {
		t.Errorf("a sample within a step did not replace the newest")
	}
}

// TestPoolUsageBilled: the fleet page's usage bills every instance as the
// policy's billing rounds it, beside its booting and idle time; one that
// is gone still counts for the window.
func TestPoolUsageBilled(t *testing.T) {
	pol := poolTestPolicy(1, 1, time.Minute, 3)
	pol.Billing = Billing{Increment: time.Hour}
	h := newPoolHarness(t, pol, sim.Options{BootTime: 30 * time.Second}, nil)
	for range 60 {
		h.advance(10 * time.Second) // ten minutes
	}
	u := h.pool.Status().Usage
	if u.Billed != time.Hour {
		t.Errorf("one instance for ten minutes, per started hour: billed %s, want 1h0m0s", u.Billed)
	}
	if u.Creating < 20*time.Second || u.Creating > 45*time.Second || u.Idle < 9*time.Minute || u.Idle > 10*time.Minute {
		t.Errorf("booting %s, idle %s: want about 30 s booting and the rest of ten minutes idle", u.Creating, u.Idle)
	}
	// A job takes the idle instance: a second one is made for the idle
	// target; when the job ends one is too many and goes after idle_time.
	a := h.mustAcquire()
	for range 6 {
		h.advance(10 * time.Second)
	}
	h.pool.Release(a)
	for range 30 {
		h.advance(10 * time.Second)
	}
	st := h.pool.Status()
	if n := len(st.Instances); n != 1 {
		t.Fatalf("%d instances, want 1 after the second one's idle time", n)
	}
	if st.Usage.Billed != 2*time.Hour {
		t.Errorf("two instances, one gone, per started hour: billed %s, want 2h0m0s", st.Usage.Billed)
	}
	if st.Usage.Busy < 50*time.Second || st.Usage.Busy > 70*time.Second {
		t.Errorf("busy %s, want about a minute", st.Usage.Busy)
	}
}
