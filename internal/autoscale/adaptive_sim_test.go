package autoscale

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// simulate replays Poisson arrivals with exponential durations through the
// harness for d and returns the p95 wait of the jobs that arrived after
// warm-up and the idle instance-seconds spent.
func simulate(t *testing.T, p *Policy, lambda float64, mean, boot, d time.Duration, observe bool) (p95 time.Duration, idleSeconds int) {
	t.Helper()
	rng := rand.New(rand.NewPCG(1, 2))
	f := newFleet(t, p, boot)
	f.removeTime = 10 * time.Second
	if observe {
		f.observed = Observed{ArrivalRate: lambda, MeanDuration: mean, BootTime: boot}
	}
	next := f.clk.Now().Add(time.Duration(rng.ExpFloat64() / lambda * float64(time.Second)))
	warm := f.clk.Now().Add(30 * time.Minute)
	end := f.clk.Now().Add(d)
	counted := 0
	for f.clk.Now().Before(end) {
		for !next.After(f.clk.Now()) {
			f.submit(1, time.Duration(rng.ExpFloat64()*float64(mean)).Round(time.Second)+time.Second)
			next = next.Add(time.Duration(rng.ExpFloat64() / lambda * float64(time.Second)))
		}
		if f.clk.Now().Before(warm) {
			counted = len(f.waits)
		}
		f.step()
		idleSeconds += f.counts().idle
		f.clk.Advance(time.Second)
	}
	waits := slices.Clone(f.waits[counted:])
	slices.Sort(waits)
	if len(waits) == 0 {
		t.Fatal("no jobs")
	}
	return waits[int(math.Ceil(0.95*float64(len(waits))))-1], idleSeconds
}

// The adaptive policy meets its p95 target on the load it is sized for,
// with instances that take longer than the target to boot. idle_time 0
// removes every instance the target does not need at once, so the target
// alone must do it.
func TestAdaptiveMeetsTarget(t *testing.T) {
	if testing.Short() {
		t.Skip("simulates 4 hours")
	}
	const lambda = 0.2 // jobs/s
	mean, boot, target := 2*time.Minute, time.Minute, 30*time.Second
	adaptive := &Policy{Dialect: DialectAutoscaler, CapacityPerInstance: 1, ReservationThrottling: true,
		Base: Schedule{Adaptive: true, TargetWait: target}}
	p95, idle := simulate(t, adaptive, lambda, mean, boot, 4*time.Hour, true)
	t.Logf("adaptive: p95 wait %s, %d idle instance-seconds", p95, idle)
	if p95 > target {
		t.Errorf("adaptive p95 wait %s > target %s", p95, target)
	}
	// Without idle capacity every job waits about one boot: the target is
	// missed, so the test can tell.
	onDemand := &Policy{Dialect: DialectAutoscaler, CapacityPerInstance: 1}
	if p95, _ := simulate(t, onDemand, lambda, mean, boot, 4*time.Hour, false); p95 <= target {
		t.Logf("on demand: p95 wait %s", p95)
		t.Errorf("on demand p95 wait %s meets the target: the scenario does not test anything", p95)
	}
}
