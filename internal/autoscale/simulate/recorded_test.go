package simulate

import (
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/autoscale"
)

func TestRecorded(t *testing.T) {
	start := time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC)
	recs := []autoscale.JobRecord{
		{Arrival: start.Add(-time.Second), Duration: time.Minute}, // before start: left out
		{Arrival: start, Duration: 2 * time.Minute},
		{Arrival: start.Add(90 * time.Second), Duration: 3 * time.Minute},
	}
	got := Recorded(start, recs)
	want := []Job{{Arrival: 0, Duration: 2 * time.Minute}, {Arrival: 90 * time.Second, Duration: 3 * time.Minute}}
	if len(got) != len(want) {
		t.Fatalf("Recorded = %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i].Arrival != want[i].Arrival || got[i].Duration != want[i].Duration {
			t.Errorf("job %d = %+v, want %+v", i, got[i], want[i])
		}
	}
}

func TestAlternativePolicy(t *testing.T) {
	pol := &autoscale.Policy{
		Dialect: autoscale.DialectAutoscaler, CapacityPerInstance: 2, MaxInstances: 7,
		Base:      autoscale.Schedule{IdleCount: 1, IdleTime: time.Minute, ScaleFactor: 0.5},
		Schedules: []autoscale.Schedule{{Periods: []string{"* * 9-17 * * mon-fri *"}, IdleCount: 4}},
	}
	alt := Alternative{IdleCount: 3, IdleTime: 5 * time.Minute, Preemptive: true, Adaptive: true, TargetWait: 20 * time.Second}
	got := alt.Policy(pol)
	for i, s := range append([]autoscale.Schedule{got.Base}, got.Schedules...) {
		if AlternativeOf(&s) != alt {
			t.Errorf("schedule %d = %+v, want the alternative's values", i, s)
		}
	}
	if got.MaxInstances != 7 || got.CapacityPerInstance != 2 || got.Base.ScaleFactor != 0.5 || len(got.Schedules[0].Periods) != 1 {
		t.Errorf("other settings changed: %+v", got)
	}
	if pol.Base.IdleCount != 1 || pol.Schedules[0].IdleCount != 4 || pol.Base.Adaptive {
		t.Errorf("the original policy changed: %+v", pol)
	}
}
