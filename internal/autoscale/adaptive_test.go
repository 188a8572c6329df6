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

func TestErlangSlots(t *testing.T) {
	// 1 job/s of 60 s: a = 60 Erlangs; target 30 s.
	o := Observed{ArrivalRate: 1, MeanDuration: time.Minute, BootTime: time.Minute}
	tw := 30 * time.Second
	c := ErlangSlots(o, tw)
	if WaitTail(c, 60, time.Minute, tw) > 0.05 || WaitTail(c-1, 60, time.Minute, tw) <= 0.05 {
		t.Fatalf("%d is not the least c with P(W > 30s) <= 5%%", c)
	}
	if c <= 60 || float64(c) > 60+3*math.Sqrt(60) {
		t.Errorf("%d far from square-root staffing 60 + β√60", c)
	}
	if n := ErlangSlots(Observed{}, tw); n != 0 {
		t.Errorf("no load: %d", n)
	}
}

func TestAdaptiveSlots(t *testing.T) {
	o := Observed{ArrivalRate: 1, MeanDuration: time.Minute, BootTime: time.Minute}
	tw := 30 * time.Second
	got := AdaptiveSlots(o, tw)
	// Exposure 45 s: p = 1 − e^−0.75, X ~ N(0, 60p(2−p)); the buffer is
	// ⌊2σ⌋ before feedback.
	k := got - 60
	p := -math.Expm1(-0.75)
	sd := math.Sqrt(60*p + 60*p*(1-p))
	if want := int(math.Floor(2 * sd)); k != want {
		t.Fatalf("buffer %d, want ⌊2σ⌋ = %d (σ %.2f)", k, want, sd)
	}
	// The feedback scales it: a gain of ½ halves σ.
	half := o
	half.BufferGain = 0.5
	if want := int(math.Floor(2 * sd / 2)); AdaptiveIdleSlots(half, tw) != want {
		t.Errorf("gain ½: buffer %d, want %d", AdaptiveIdleSlots(half, tw), want)
	}
	if burst := BurstSlots(o, tw); burst != 11 { // Poisson(45): 95% at 56
		t.Errorf("burst bound %d, want 11", burst)
	}
	// More load needs more slots; a looser target fewer.
	if AdaptiveSlots(Observed{ArrivalRate: 2, MeanDuration: time.Minute, BootTime: time.Minute}, tw) <= got {
		t.Error("not monotone in the arrival rate")
	}
	if AdaptiveSlots(o, 55*time.Second) > got {
		t.Error("a looser target wants more slots")
	}
	// Boots well within the target: nothing held ahead.
	if n := AdaptiveSlots(Observed{ArrivalRate: 1, MeanDuration: time.Minute, BootTime: 15 * time.Second}, tw); n != 60 || AdaptiveIdleSlots(Observed{ArrivalRate: 1, MeanDuration: time.Minute, BootTime: 15 * time.Second}, tw) != 0 {
		t.Errorf("fast boots: %d slots, want the load alone", n)
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
	s := Schedule{Adaptive: true, TargetWait: 30 * time.Second, IdleCount: 1, Preemptive: true}
	p := slotPolicy(4, 0, 0, s)
	// 3 jobs a minute of 10 minutes each, 5-minute boots: W = 285 s,
	// p = 1 − e^−0.475, σ = √(30p(2−p)) = 4.29, a buffer of ⌊2σ⌋ = 8.
	o := Observed{ArrivalRate: 0.05, MeanDuration: 10 * time.Minute, BootTime: 5 * time.Minute}
	need := AdaptiveIdleSlots(o, 30*time.Second)
	if need != 8 {
		t.Fatalf("buffer %d, want 8", need)
	}
	if got := SlotIdleTarget(p, &p.Base, 10, o); got != need {
		t.Errorf("idle target %d, want %d", got, need)
	}
	// idle_count is a floor.
	p.Base.IdleCount = 15
	if got := SlotIdleTarget(p, &p.Base, 10, o); got != 15 {
		t.Errorf("idle_count 15: %d", got)
	}
	p.Base.IdleCount = 1
	// max_instances a ceiling: 1 instance × 4 slots, 2 busy.
	p.MaxInstances = 1
	if got := SlotIdleTarget(p, &p.Base, 2, o); got != 2 {
		t.Errorf("max_instances 1 × 4 slots, 2 busy: %d, want 2", got)
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
	if dec.Create != 2 || dec.IdleTarget != 8 {
		t.Errorf("create %d (target %d), want 2 instances of 4 slots for 8", dec.Create, dec.IdleTarget)
	}
}
