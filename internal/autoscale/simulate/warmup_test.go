package simulate_test

import (
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/autoscale"
	"github.com/drover-ci/drover/internal/autoscale/simulate"
	"github.com/drover-ci/drover/internal/autoscale/tracegen"
)

// The warm-up day runs on the same pool before the reported one and
// counts for nothing in the report: not its jobs, not the instance time
// before midnight, not its creations. What carries over is the pool: a
// job of the warm-up running past midnight is busy time of the day.
func TestRunWarmUpIsNotReported(t *testing.T) {
	pol := &autoscale.Policy{Dialect: autoscale.DialectAutoscaler, CapacityPerInstance: 1,
		Base: autoscale.Schedule{IdleTime: time.Minute}}
	// The warm-up: a job at 21:00 for 4 h (until 01:00) and one at 23:00
	// for 30 min; the day: one job at 02:00 for 10 min.
	warm := readTrace(t, "75600,14400\n82800,1800\n")
	day := readTrace(t, "7200,600\n")
	for _, tc := range []struct {
		name     string
		span     time.Duration
		wantBusy float64 // the day's busy instance-seconds
	}{
		// The 21:00 job started after a 30 s boot: it runs until 01:00:30.
		{"whole warm-up day", 0, 3630 + 600},
		// From 22:00 on: the 21:00 job is not replayed.
		{"last two hours", 2 * time.Hour, 600},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := simulate.Run(t.Context(), simulate.Options{Policy: pol, BootTime: 30 * time.Second, Duration: 3 * time.Hour,
				WarmUp: warm, WarmUpSpan: tc.span, Samples: -1}, day)
			if err != nil {
				t.Fatalf("Run = %v", err)
			}
			r := res.Report
			if r.Jobs != 1 || len(res.Waits) != 1 || r.WaitMax != 30 {
				t.Errorf("jobs %d, waits %v, max wait %v: want the day's one job, waiting a boot", r.Jobs, res.Waits, r.WaitMax)
			}
			if r.BusyInstanceS != tc.wantBusy {
				t.Errorf("busy instance-seconds %v, want %v", r.BusyInstanceS, tc.wantBusy)
			}
			// Only the day's instance was created in the day (the warm-up
			// ones were before midnight); every instance is gone at the end.
			if r.Created != 1 || r.FinalInstances != 0 {
				t.Errorf("created %d, final %d: want 1 created in the day, none left", r.Created, r.FinalInstances)
			}
		})
	}
	unsorted := []simulate.Job{{Arrival: 10 * time.Second, Duration: time.Second}, {Arrival: 5 * time.Second, Duration: time.Second}}
	if _, err := simulate.Run(t.Context(), simulate.Options{Policy: pol, WarmUp: unsorted}, day); err == nil {
		t.Error("Run with an unsorted warm-up = nil error")
	}
}

// An adaptive pool that ran the day before starts the day knowing the
// load: on the first hour of a quiet-night day it keeps jobs from waiting
// where a fresh pool, learning from nothing, lets more of them miss the
// target.
func TestRunWarmUpAdaptiveStartsLearnt(t *testing.T) {
	day, err := tracegen.Day("diurnal", 101)
	if err != nil {
		t.Fatal(err)
	}
	yesterday, err := tracegen.Day("diurnal", 1101)
	if err != nil {
		t.Fatal(err)
	}
	firstHourMisses := func(warm []simulate.Job) int {
		o := benchOptions(adaptivePolicy(), 2*time.Minute)
		o.Duration, o.Samples, o.WarmUp = 2*time.Hour, -1, warm
		res, err := simulate.Run(t.Context(), o, day)
		if err != nil {
			t.Fatalf("Run = %v", err)
		}
		n := 0
		for i, j := range day {
			if j.Arrival < time.Hour && res.Waits[i] > benchTarget.Seconds() {
				n++
			}
		}
		return n
	}
	cold, warm := firstHourMisses(nil), firstHourMisses(yesterday)
	if warm >= cold {
		t.Errorf("jobs later than the target in the first hour: %d after a warm-up, %d from a fresh pool; want fewer after the warm-up", warm, cold)
	}
	t.Logf("first hour, jobs later than %s: fresh pool %d, after yesterday %d", benchTarget, cold, warm)
}
