package simulate_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/drover-ci/drover/internal/autoscale"
	"github.com/drover-ci/drover/internal/autoscale/simulate"
	"github.com/drover-ci/drover/internal/autoscale/tracegen"
)

// The adaptive pool, replayed on the fake clock through a bursty day with
// a tight max_instances and an idle_count floor: at every point of the
// timeline it has at most max_instances in all states, and at least the
// floor free (idle or booting) unless max_instances leaves no room, or
// within one scaling pass after a job took a slot (the pool restores the
// floor at its next pass, update_interval_when_expecting = 2 s later at
// most); and the same day, policy and seed give the same report and
// timeline.
func TestAdaptiveRunProperties(t *testing.T) {
	for _, tc := range []struct {
		shape      string
		boot       time.Duration
		maxInst    int
		floor      int
		preemptive bool
	}{
		{"bursty", 30 * time.Second, 25, 3, false},
		{"diurnal", 2 * time.Minute, 40, 5, false},
		{"weekend", 2 * time.Minute, 12, 2, true},
	} {
		t.Run(fmt.Sprintf("%s/boot=%s", tc.shape, tc.boot), func(t *testing.T) {
			t.Parallel()
			s, err := tracegen.ShapeNamed(tc.shape)
			if err != nil {
				t.Fatal(err)
			}
			o := s.Options
			o.Seed, o.Jobs, o.Span = 7, o.Jobs/8, 3*time.Hour
			tr, err := tracegen.Generate(o)
			if err != nil {
				t.Fatal(err)
			}
			pol := &autoscale.Policy{
				Dialect: autoscale.DialectAutoscaler, CapacityPerInstance: 1, MaxInstances: tc.maxInst, MaxGrowthRate: 10,
				Base: autoscale.Schedule{Adaptive: true, IdleCount: tc.floor, TargetWait: 30 * time.Second, IdleTime: 10 * time.Minute, Preemptive: tc.preemptive},
			}
			opts := simulate.Options{Policy: pol, BootTime: tc.boot, BootSpread: tc.boot / 6, PollInterval: 3 * time.Second,
				Duration: 4 * time.Hour, Samples: 4 * 3600}
			res, err := simulate.Run(t.Context(), opts, tr)
			if err != nil {
				t.Fatalf("Run = %v", err)
			}
			if res.PeakInstances != tc.maxInst {
				t.Errorf("peak %d instances, want max_instances %d reached and never passed", res.PeakInstances, tc.maxInst)
			}
			var below time.Duration                // since when the pool is below its floor; 0 = it is not
			for _, smp := range res.Timeline[1:] { // the first sample is before the first scaling pass
				total := smp.Creating + smp.Idle + smp.Busy + smp.Removing
				if total > tc.maxInst {
					t.Fatalf("at %s: %d instances, max_instances %d", smp.At, total, tc.maxInst)
				}
				if smp.Creating > pol.MaxGrowthRate {
					t.Fatalf("at %s: %d creating, MaxGrowthRate %d", smp.At, smp.Creating, pol.MaxGrowthRate)
				}
				free := smp.Idle + smp.Creating
				switch {
				case free >= tc.floor || total >= tc.maxInst || smp.Creating >= pol.MaxGrowthRate:
					below = 0
				case below == 0:
					below = smp.At
				case smp.At-below > 2*time.Second:
					t.Fatalf("at %s: %+v: %d free since %s, below the idle_count floor %d with room to grow", smp.At, smp, free, below, tc.floor)
				}
			}
			again, err := simulate.Run(t.Context(), opts, tr)
			if err != nil {
				t.Fatalf("Run again = %v", err)
			}
			if d := cmp.Diff(res, again); d != "" {
				t.Errorf("the same run twice differs (-first +second):\n%s", d)
			}
		})
	}
}
