package simulate_test

import (
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/autoscale"
	"github.com/drover-ci/drover/internal/autoscale/simulate"
	"github.com/drover-ci/drover/internal/autoscale/tracegen"
)

func dayTrace(tb testing.TB, jobs int) []simulate.Job {
	tb.Helper()
	tr, err := tracegen.Generate(tracegen.Options{Seed: 1, Jobs: jobs})
	if err != nil {
		tb.Fatalf("Generate = %v", err)
	}
	return tr
}

func dayPolicy() *autoscale.Policy {
	return &autoscale.Policy{
		Dialect: autoscale.DialectAutoscaler, CapacityPerInstance: 2, MaxInstances: 400,
		Base: autoscale.Schedule{IdleCount: 20, IdleTime: 20 * time.Minute, Preemptive: true},
	}
}

// BenchmarkSimulateDay50k replays a 50,000-job day (diurnal load,
// pipeline bursts) with 30 s boots. Target: ≤ 10 s per run.
func BenchmarkSimulateDay50k(b *testing.B) {
	tr := dayTrace(b, 50_000)
	b.ResetTimer()
	for b.Loop() {
		res, err := simulate.Run(b.Context(), simulate.Options{Policy: dayPolicy(), BootTime: 30 * time.Second, BootSpread: 5 * time.Second}, tr)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(res.WaitP95, "p95_wait_s")
		b.ReportMetric(res.IdleInstanceS/3600, "idle_h")
	}
}
