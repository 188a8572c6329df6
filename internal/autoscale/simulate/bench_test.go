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
// uses: capacity 1, p95 target 30 s, the operator's idle_time (an upper
// bound for the adaptive policy, which removes instances it does not need
// after one observed boot time; the static baseline keeps it as is).
// preemptive_mode is left as the config reader leaves it for adaptive =
// true: off.
func adaptivePolicy(idleTime time.Duration) *autoscale.Policy {
	return &autoscale.Policy{
		Dialect: autoscale.DialectAutoscaler, CapacityPerInstance: 1, MaxInstances: 500,
		Base: autoscale.Schedule{IdleTime: idleTime, Adaptive: true, TargetWait: 30 * time.Second},
	}
}

// staticCounts is the static sweep: every idle_count up to 12, then
// coarser up to 40 (idle time only grows with the count there).
var staticCounts = []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 12, 16, 20, 24, 32, 40}

// benchPoll is the manager's check_interval in the comparison (GitLab
// Runner's default).
const benchPoll = 3 * time.Second

// BenchmarkAdaptiveVsBestStatic measures, on a generated 20,000-job day
// (tracegen seed 1: diurnal load with peak/trough 6, pipeline fan-out of 4
// on average, log-normal durations with a 5 min median) with 30 s ± 5 s
// boots and a manager polling every 3 s, the idle instance-hours of the
// adaptive policy against the best static idle_count (0..40, both
// preemptive modes) meeting the same 30 s p95 wait, for an operator
// idle_time of 10 min, 5 min, 1 min and 30 s (the static runs keep it;
// for the adaptive one it is the upper bound of its hold). Run with
// -benchtime 1x; it reports the numbers as metrics and logs the sweep.
func BenchmarkAdaptiveVsBestStatic(b *testing.B) {
	tr := dayTrace(b, 20_000)
	for _, idle := range []time.Duration{10 * time.Minute, 5 * time.Minute, time.Minute, 30 * time.Second} {
		b.Run("idle_time="+idle.String(), func(b *testing.B) {
			for b.Loop() {
				o := simulate.Options{Policy: adaptivePolicy(idle), BootTime: 30 * time.Second, BootSpread: 5 * time.Second, PollInterval: benchPoll}
				c, err := simulate.Compare(b.Context(), o, tr, staticCounts, 30*time.Second)
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(c.Policy.IdleInstanceS/3600, "adaptive_idle_h")
				b.ReportMetric(c.Policy.CreatingInstanceS/3600, "adaptive_boot_h")
				b.ReportMetric(c.Policy.WaitP95, "adaptive_p95_s")
				for _, r := range c.Static {
					b.Logf("static idle_count %2d preemptive %-5v: p95 %5.1f s, idle %6.1f h, booting %5.1f h, created %5d",
						r.IdleCount, r.Preemptive, r.Report.WaitP95, r.Report.IdleInstanceS/3600, r.Report.CreatingInstanceS/3600, r.Report.Created)
				}
				b.Logf("adaptive: p95 %.1f s, p99 %.1f s, idle %.1f h, booting %.1f h, created %d, peak %d",
					c.Policy.WaitP95, c.Policy.WaitP99, c.Policy.IdleInstanceS/3600, c.Policy.CreatingInstanceS/3600, c.Policy.Created, c.Policy.PeakInstances)
				if !c.PolicyMeetsTarget {
					b.Errorf("the adaptive policy misses the p95 target: %.1f s > %s", c.Policy.WaitP95, c.TargetP95)
				}
				if c.BestStatic == nil {
					b.Log("no static idle_count meets the target")
					continue
				}
				bs := c.BestStatic
				b.ReportMetric(float64(bs.IdleCount), "best_static_idle_count")
				b.ReportMetric(bs.Report.IdleInstanceS/3600, "static_idle_h")
				b.ReportMetric(bs.Report.CreatingInstanceS/3600, "static_boot_h")
				b.ReportMetric(bs.Report.WaitP95, "static_p95_s")
				b.ReportMetric(100*c.IdleSaving, "saving_pct")
				b.Logf("best static: idle_count %d preemptive %v, p95 %.1f s, idle %.1f h; adaptive saves %.1f%% idle instance-hours",
					bs.IdleCount, bs.Preemptive, bs.Report.WaitP95, bs.Report.IdleInstanceS/3600, 100*c.IdleSaving)
			}
		})
	}
}
