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

// adaptivePolicy is the configuration the adaptive-vs-static measurement
// uses: capacity 1, 30 s boots, p95 target 30 s.
func adaptivePolicy() *autoscale.Policy {
	return &autoscale.Policy{
		Dialect: autoscale.DialectAutoscaler, CapacityPerInstance: 1, MaxInstances: 500,
		Base: autoscale.Schedule{IdleCount: 1, IdleTime: 10 * time.Minute, Preemptive: true, Adaptive: true, TargetWait: 30 * time.Second},
	}
}

// BenchmarkAdaptiveVsBestStatic measures, on a generated 20,000-job day
// with 30 s boots, the idle instance-hours of the adaptive policy against
// the best static idle_count (0..40) meeting the same 30 s p95
// wait. Run with -benchtime 1x; it reports the numbers as metrics.
func BenchmarkAdaptiveVsBestStatic(b *testing.B) {
	tr := dayTrace(b, 20_000)
	counts := []int{0, 1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 24, 32, 40}
	for b.Loop() {
		c, err := simulate.Compare(b.Context(), simulate.Options{Policy: adaptivePolicy(), BootTime: 30 * time.Second, BootSpread: 5 * time.Second}, tr, counts, 30*time.Second)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(c.Policy.IdleInstanceS/3600, "adaptive_idle_h")
		b.ReportMetric(c.Policy.WaitP95, "adaptive_p95_s")
		if !c.PolicyMeetsTarget {
			b.Logf("the policy misses the p95 target: %.1f s > %s", c.Policy.WaitP95, c.TargetP95)
		}
		if c.BestStatic != nil {
			b.ReportMetric(float64(c.BestStatic.IdleCount), "best_static_idle_count")
			b.ReportMetric(c.BestStatic.Report.IdleInstanceS/3600, "static_idle_h")
			b.ReportMetric(c.BestStatic.Report.WaitP95, "static_p95_s")
			b.ReportMetric(100*c.IdleSaving, "saving_pct")
		}
	}
}
