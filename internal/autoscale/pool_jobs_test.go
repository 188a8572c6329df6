package autoscale

import (
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/fleet/sim"
)

func TestPoolJobTrace(t *testing.T) {
	h := newPoolHarness(t, poolTestPolicy(2, 2, time.Hour, 4), sim.Options{BootTime: 30 * time.Second}, nil)
	h.advance(0)
	for range 4 {
		h.advance(10 * time.Second)
	}
	// A job queued 20 s before it was received, run for 3 min.
	r, err := h.pool.Reserve()
	if err != nil {
		t.Fatal(err)
	}
	r.SetTimeInQueue(20 * time.Second)
	queued := h.clk.Now().Add(-20 * time.Second)
	a, err := h.pool.TryAcquire(r)
	if err != nil || a == nil {
		t.Fatalf("TryAcquire = %v, %v", a, err)
	}
	// A second job, taken at once, still running: not in the trace yet.
	b := h.mustAcquire()
	if tr := h.pool.JobTrace(); len(tr.Jobs) != 0 {
		t.Fatalf("jobs before any release = %+v", tr.Jobs)
	}
	h.advance(3 * time.Minute)
	h.pool.Release(a)
	h.pool.Release(a) // twice: recorded once
	h.advance(time.Minute)
	h.pool.Release(b)

	tr := h.pool.JobTrace()
	if tr.Now != h.clk.Now() || tr.Policy == nil || tr.Policy.Base.IdleCount != 2 || tr.BootTime < 30*time.Second || tr.BootTime > 40*time.Second {
		t.Errorf("trace now %v policy %+v boot %v", tr.Now, tr.Policy, tr.BootTime)
	}
	want := []JobRecord{
		{Arrival: queued, Duration: 3 * time.Minute},
		{Arrival: queued.Add(20 * time.Second), Duration: 4 * time.Minute},
	}
	if len(tr.Jobs) != len(want) {
		t.Fatalf("jobs = %+v, want %+v", tr.Jobs, want)
	}
	for i := range want {
		if !tr.Jobs[i].Arrival.Equal(want[i].Arrival) || tr.Jobs[i].Duration != want[i].Duration {
			t.Errorf("job %d = %+v, want %+v", i, tr.Jobs[i], want[i])
		}
	}

	// A day later they are out of the window.
	h.clk.Advance(JobLogWindow)
	if tr := h.pool.JobTrace(); len(tr.Jobs) != 0 {
		t.Errorf("jobs a day later = %+v, want none", tr.Jobs)
	}
}

func TestPoolJobTraceClaimNotRecorded(t *testing.T) {
	h := newPoolHarness(t, poolTestPolicy(1, 1, time.Hour, 2), sim.Options{}, nil)
	for range 3 {
		h.advance(10 * time.Second)
	}
	a := h.mustAcquire()
	a.arrival = time.Time{} // as Claim makes it: the arrival is unknown
	h.pool.Release(a)
	if tr := h.pool.JobTrace(); len(tr.Jobs) != 0 {
		t.Errorf("jobs = %+v, want none", tr.Jobs)
	}
}

func TestJobLogBounded(t *testing.T) {
	t0 := time.Date(2026, 1, 5, 8, 0, 0, 0, time.UTC)
	l := jobLog{size: 3}
	// Released in another order than they arrived.
	for _, s := range []int{5, 1, 4, 2, 3} {
		l.add(JobRecord{Arrival: t0.Add(time.Duration(s) * time.Second), Duration: time.Duration(s)})
	}
	got := l.since(t0)
	if len(got) != 3 || got[0].Duration != 2 || got[1].Duration != 3 || got[2].Duration != 4 {
		t.Errorf("since = %+v, want the last three released (arrivals 2, 3, 4) by arrival", got)
	}
	if got := l.since(t0.Add(3 * time.Second)); len(got) != 2 || got[0].Duration != 3 {
		t.Errorf("since +3s = %+v", got)
	}
	off := jobLog{size: 0}
	off.add(JobRecord{Arrival: t0})
	if got := off.since(t0); len(got) != 0 {
		t.Errorf("size 0 keeps %+v", got)
	}
}
