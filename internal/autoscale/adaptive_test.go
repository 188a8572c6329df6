package autoscale

import (
	"math"
	"testing"
	"time"
)

// Erlang C against values from the closed form
// C = (a^c/c! · c/(c−a)) / (Σ_{k<c} a^k/k! + a^c/c! · c/(c−a)).
func TestErlangC(t *testing.T) {
	for _, tc := range []struct {
		c    int
		a    float64
		want float64
	}{
		{2, 1, 1.0 / 3},
		{3, 2, 4.0 / 9},
		{5, 4, 0.5541125541125541},
		{10, 8, 0.4091801507964435},
		{20, 15, 0.16042938741692364},
		{100, 90, 0.21694048090636636},
		{1, 0.5, 0.5}, // M/M/1: P(wait) = ρ
		{3, 3, 1},     // overloaded
		{2, 5, 1},
		{4, 0, 0},
	} {
		if got := ErlangC(tc.c, tc.a); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("ErlangC(%d, %v) = %v, want %v", tc.c, tc.a, got, tc.want)
		}
	}
	// M/M/1 waiting tail: ρ·exp(−(1−ρ)t/D).
	if got, want := WaitTail(1, 0.5, 10*time.Second, 20*time.Second), 0.5*math.Exp(-1); math.Abs(got-want) > 1e-12 {
		t.Errorf("WaitTail M/M/1 = %v, want %v", got, want)
	}
}

func TestPoissonQuantile(t *testing.T) {
	for _, tc := range []struct {
		m    float64
		q    float64
		want int
	}{
		{10, 0.95, 15}, // P(X<=14) = 0.9165, P(X<=15) = 0.9513
		{1, 0.95, 3},   // 0.9197, 0.9810
		{0.05, 0.95, 0},
		{0, 0.95, 0},
		{100, 0.95, 117}, // normal: 100 + 1.645·10 + ... ; exact 117
	} {
		if got := PoissonQuantile(tc.m, tc.q); got != tc.want {
			t.Errorf("PoissonQuantile(%v, %v) = %d, want %d", tc.m, tc.q, got, tc.want)
		}
	}
	// The normal approximation above a mean of 500 stays close to the
	// square-root rule.
	if got := PoissonQuantile(10000, 0.95); got < 10160 || got > 10170 {
		t.Errorf("PoissonQuantile(10000) = %d", got)
	}
}

func TestAdaptiveSlots(t *testing.T) {
	// 1 job/s of 60 s: a = 60 Erlangs; target 30 s, boots 60 s.
	o := Observed{ArrivalRate: 1, MeanDuration: time.Minute, BootTime: time.Minute}
	tw := 30 * time.Second
	got := AdaptiveSlots(o, tw)
	cq := queueSlots(o, tw)
	if WaitTail(cq, 60, time.Minute, tw) > 0.05 || WaitTail(cq-1, 60, time.Minute, tw) <= 0.05 {
		t.Fatalf("queue part %d is not the least c with P(W > 30s) <= 5%%", cq)
	}
	if cq <= 60 || float64(cq) > 60+3*math.Sqrt(60) {
		t.Errorf("queue part %d far from square-root staffing 60 + β√60", cq)
	}
	burst := BurstSlots(o) // arrivals in 60 s: Poisson(60), 95% at 73
	if burst != 13 {
		t.Errorf("burst %d, want 13", burst)
	}
	if got != cq+burst {
		t.Errorf("AdaptiveSlots %d, want %d + %d", got, cq, burst)
	}

	// More load needs more slots; a looser target fewer.
	if AdaptiveSlots(Observed{ArrivalRate: 2, MeanDuration: time.Minute, BootTime: time.Minute}, tw) <= got {
		t.Error("not monotone in the arrival rate")
	}
	if AdaptiveSlots(o, 55*time.Second) > got {
		t.Error("a looser target wants more slots")
	}
	// Boots well within the target: nothing held ahead.
	if n := AdaptiveSlots(Observed{ArrivalRate: 1, MeanDuration: time.Minute, BootTime: 10 * time.Second}, tw); n != 0 {
		t.Errorf("fast boots: %d slots", n)
	}
	// No observations: 0.
	if n := AdaptiveSlots(Observed{}, tw); n != 0 {
		t.Errorf("no load: %d", n)
	}
	if n := AdaptiveSlots(Observed{ArrivalRate: math.Inf(1), MeanDuration: time.Minute}, tw); n != 0 {
		t.Errorf("infinite rate: %d", n)
	}
	if n := AdaptiveSlots(Observed{ArrivalRate: 1e12, MeanDuration: time.Hour, BootTime: time.Hour}, tw); n != maxAdaptiveSlots {
		t.Errorf("absurd load: %d, want the cap", n)
	}
}

func TestAdaptivePolicy(t *testing.T) {
	s := Schedule{Adaptive: true, TargetWait: 30 * time.Second, IdleCount: 2, Preemptive: true}
	p := slotPolicy(4, 0, 0, s)
	o := Observed{ArrivalRate: 0.5, MeanDuration: 2 * time.Minute, BootTime: time.Minute}
	need := AdaptiveSlots(o, 30*time.Second)
	if got := SlotIdleTarget(p, &p.Base, 10, o); got != need-10 {
		t.Errorf("idle target %d, want %d − 10 busy", got, need)
	}
	// idle_count is a floor.
	if got := SlotIdleTarget(p, &p.Base, need+5, o); got != 2 {
		t.Errorf("busy above the need: %d, want idle_count 2", got)
	}
	// max_instances a ceiling.
	p.MaxInstances = 5
	if got := SlotIdleTarget(p, &p.Base, 10, o); got != 10 {
		t.Errorf("max_instances 5 × 4 slots, 10 busy: %d, want 10", got)
	}
	// Preemptive without observations still keeps one slot, or it would
	// never take a job.
	q := slotPolicy(1, 0, 0, Schedule{Adaptive: true, Preemptive: true})
	if got := SlotIdleTarget(q, &q.Base, 0, Observed{}); got != 1 {
		t.Errorf("preemptive adaptive without load: %d", got)
	}
	// Decide creates for it.
	p.MaxInstances = 0
	dec := Decide(p, t0, nil, Demand{Observed: o})
	if want := (need + 3) / 4; dec.Create != want {
		t.Errorf("create %d, want %d instances for %d slots", dec.Create, want, need)
	}
}
