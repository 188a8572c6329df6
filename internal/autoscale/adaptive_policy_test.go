package autoscale

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

func TestAdaptiveIdleTime(t *testing.T) {
	for _, tc := range []struct {
		name     string
		idleTime time.Duration
		boot     time.Duration
		want     time.Duration
	}{
		{"boot time − target_wait when boots are longer", 10 * time.Minute, 2 * time.Minute, time.Minute},
		{"a third of target_wait when boots are short", 10 * time.Minute, 30 * time.Second, 20 * time.Second},
		{"idle_time bounds it", 10 * time.Second, 2 * time.Minute, 10 * time.Second},
		{"no boot observed yet", 10 * time.Minute, 0, 10 * time.Minute},
		{"idle_time 0", 0, 30 * time.Second, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := Schedule{Adaptive: true, TargetWait: time.Minute, IdleTime: tc.idleTime}
			if got := AdaptiveIdleTime(&s, Observed{BootTime: tc.boot}); got != tc.want {
				t.Errorf("AdaptiveIdleTime = %s, want %s", got, tc.want)
			}
		})
	}
}

// TestDecideAdaptiveBillingAware: billed per started hour, an idle
// instance beyond the hold that nothing needs is kept while its paid hour
// has more than 5 min left and removed in the last 5 min, unless the load
// needs it then; per second with a minute's minimum, it is kept through
// the minute's first 50 s only.
func TestDecideAdaptiveBillingAware(t *testing.T) {
	o := Observed{ArrivalRate: 0.01, MeanDuration: 5 * time.Minute, BootTime: 30 * time.Second}
	idle := func(age time.Duration) []Instance {
		return []Instance{{ID: "a", State: StateIdle, Created: t0.Add(-age), Ready: t0.Add(-age + 30*time.Second), LastUsed: t0.Add(-time.Minute), UseCount: 1}}
	}
	for _, tc := range []struct {
		name    string
		billing Billing
		age     time.Duration
		demand  Demand
		removed bool
	}{
		{"per hour, 40 min into its hour: kept", Billing{Increment: time.Hour}, 40 * time.Minute, Demand{Observed: o}, false},
		{"per hour, 56 min into its hour: removed", Billing{Increment: time.Hour}, 56 * time.Minute, Demand{Observed: o}, true},
		{"per hour, second hour, 30 min into it: kept", Billing{Increment: time.Hour}, 90 * time.Minute, Demand{Observed: o}, false},
		{"per hour, 56 min in, a job waits: kept into the next hour", Billing{Increment: time.Hour}, 56 * time.Minute, Demand{Waiting: 1, Observed: o}, false},
		{"per second, 1 min minimum, 30 s old: kept", Billing{Increment: time.Second, Minimum: time.Minute}, 30 * time.Second, Demand{Observed: o}, false},
		{"per second, 1 min minimum, 55 s old: removed", Billing{Increment: time.Second, Minimum: time.Minute}, 55 * time.Second, Demand{Observed: o}, true},
		{"per second, past the minimum: removed", Billing{Increment: time.Second, Minimum: time.Minute}, 10 * time.Minute, Demand{Observed: o}, true},
	} {
		p := slotPolicy(1, 0, 0, Schedule{Adaptive: true, TargetWait: time.Minute, IdleTime: 10 * time.Minute})
		p.Billing = tc.billing
		dec := Decide(p, t0, idle(tc.age), tc.demand)
		if got := len(dec.Remove) == 1; got != tc.removed {
			t.Errorf("%s: removals %+v, want removed %v", tc.name, dec.Remove, tc.removed)
		}
		// A static schedule does not know of billing: idle_time decides.
		p.Base.Adaptive = false
		if dec := Decide(p, t0, idle(tc.age), tc.demand); len(dec.Remove) != 0 {
			t.Errorf("%s: a static schedule removed %+v within idle_time", tc.name, dec.Remove)
		}
	}
}

// An adaptive schedule removes idle instances beyond what the demand and
// its idle target need once they have idled the adaptive hold (here a
// third of the target, 20 s, as boots are shorter than it); a static one
// with the same idle_time keeps them for idle_time; the instances the
// target needs stay either way.
func TestDecideAdaptiveRemovesSurplusAfterTheHold(t *testing.T) {
	o := Observed{ArrivalRate: 0.01, MeanDuration: 5 * time.Minute, BootTime: 30 * time.Second}
	// A target of one minute with 30 s boots: no buffer ahead.
	if k := AdaptiveIdleSlots(o, time.Minute); k != 0 {
		t.Fatalf("test assumes an idle target of 0 for %+v, got %d", o, k)
	}
	idle := func(id string, since time.Duration) Instance {
		return Instance{ID: id, State: StateIdle, Created: t0.Add(-time.Hour), Ready: t0.Add(-time.Hour), LastUsed: t0.Add(-since), UseCount: 1}
	}
	insts := []Instance{idle("a", 40*time.Second), idle("b", 10*time.Second), idle("c", 5*time.Minute)}
	for _, tc := range []struct {
		name     string
		s        Schedule
		demand   Demand
		wantGone []string
	}{
		{"adaptive: idle beyond the hold go", Schedule{Adaptive: true, TargetWait: time.Minute, IdleTime: 10 * time.Minute}, Demand{Observed: o}, []string{"a", "c"}},
		{"adaptive: a waiting job keeps the first", Schedule{Adaptive: true, TargetWait: time.Minute, IdleTime: 10 * time.Minute}, Demand{Waiting: 1, Observed: o}, []string{"c"}},
		{"adaptive: idle_time is the bound", Schedule{Adaptive: true, TargetWait: time.Minute, IdleTime: 5 * time.Second}, Demand{Observed: o}, []string{"a", "b", "c"}},
		{"static keeps idle_time", Schedule{IdleTime: 10 * time.Minute}, Demand{Observed: o}, nil},
		{"static past idle_time", Schedule{IdleTime: time.Minute}, Demand{Observed: o}, []string{"c"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := slotPolicy(1, 0, 0, tc.s)
			dec := Decide(p, t0, insts, tc.demand)
			var gone []string
			for _, r := range dec.Remove {
				gone = append(gone, r.ID)
			}
			if len(gone) != len(tc.wantGone) {
				t.Fatalf("removed %v, want %v", gone, tc.wantGone)
			}
			for i := range gone {
				if gone[i] != tc.wantGone[i] {
					t.Fatalf("removed %v, want %v", gone, tc.wantGone)
				}
			}
			if tc.s.Adaptive && len(dec.Remove) > 0 && tc.s.IdleTime > o.BootTime {
				if r := dec.Remove[0].Reason; !strings.Contains(r, "adaptive hold 20s") {
					t.Errorf("reason %q does not name the adaptive hold", r)
				}
			}
		})
	}
}

// Without preemptive mode an adaptive pool takes a job although no slot
// is free, and Decide creates an instance for it at once.
func TestAdaptiveNonPreemptiveTakesJobsOnDemand(t *testing.T) {
	p := slotPolicy(1, 3, 0, Schedule{Adaptive: true, TargetWait: time.Minute})
	o := Observed{ArrivalRate: 0.01, MeanDuration: 5 * time.Minute, BootTime: 30 * time.Second}
	busy := []Instance{{ID: "a", State: StateBusy, Created: t0, Ready: t0, Acquired: 1, UseCount: 1}}
	if !CanReserve(p, t0, busy, Demand{Observed: o}) {
		t.Fatal("adaptive non-preemptive refused a job with room under max_instances")
	}
	if CanReserve(p, t0, busy, Demand{Reserved: 2, Observed: o}) {
		t.Error("took a 4th job with max_instances 3")
	}
	dec := Decide(p, t0, busy, Demand{Waiting: 1, Observed: o})
	if dec.Create != 1 {
		t.Errorf("create %d for a waiting job, want 1 (%s)", dec.Create, dec.CreateReason)
	}
	// Preemptive (set explicitly) still refuses without a free slot.
	p.Base.Preemptive = true
	if CanReserve(p, t0, busy, Demand{Observed: o}) {
		t.Error("preemptive adaptive took a job without a free slot")
	}
}

// Burstier arrivals (a larger index of dispersion) want a larger buffer.
func TestAdaptiveIdleSlotsDispersion(t *testing.T) {
	o := Observed{ArrivalRate: 0.25, MeanDuration: 7 * time.Minute, BootTime: 30 * time.Second}
	prev := -1
	for _, d := range []float64{0, 1, 3, 7, 15} {
		o.ArrivalDispersion = d
		k := AdaptiveIdleSlots(o, 30*time.Second)
		if k < prev {
			t.Errorf("dispersion %v: buffer %d below %d", d, k, prev)
		}
		prev = k
	}
	o.ArrivalDispersion = 1
	poisson := AdaptiveIdleSlots(o, 30*time.Second)
	o.ArrivalDispersion = 7
	if bursty := AdaptiveIdleSlots(o, 30*time.Second); bursty <= poisson {
		t.Errorf("dispersion 7: buffer %d, Poisson %d: bursts want more", bursty, poisson)
	}
	o.ArrivalDispersion = 0.2 // below 1 counts as 1
	if k := AdaptiveIdleSlots(o, 30*time.Second); k != poisson {
		t.Errorf("dispersion 0.2: %d, want the Poisson %d", k, poisson)
	}
}

// The bursts' part of the buffer follows the load less than the Poisson
// part: a pipeline's fan-out keeps its size when fewer come. At a
// sixteenth of the load a bursty buffer keeps well over the quarter that
// square-root staffing would, a Poisson one about that quarter, and both
// still grow with the load.
func TestAdaptiveIdleSlotsBurstsFollowLoadSlowly(t *testing.T) {
	sized := func(rate, disp float64) float64 {
		o := Observed{ArrivalRate: rate, MeanDuration: 7 * time.Minute, BootTime: 2 * time.Minute, ArrivalDispersion: disp}
		a, _ := offeredLoad(o)
		return changeSD(o, a, exposure(o, 30*time.Second))
	}
	for _, tc := range []struct {
		disp     float64
		min, max float64 // the spread at 1/16 of the load over the spread at the full load
	}{
		{1, 0.24, 0.26},  // Poisson: √(1/16)
		{7, 0.35, 0.65},  // the generated days' pipelines
		{25, 0.35, 0.65}, // the bursty day's
	} {
		full, low := sized(1, tc.disp), sized(1.0/16, tc.disp)
		if r := low / full; r < tc.min || r > tc.max {
			t.Errorf("dispersion %v: spread %.2f at 1/16 of the load, %.2f at the full load (ratio %.3f, want %.2f–%.2f)", tc.disp, low, full, r, tc.min, tc.max)
		}
		prev := 0.0
		for _, rate := range []float64{1.0 / 64, 1.0 / 16, 0.25, 1, 4} {
			sd := sized(rate, tc.disp)
			if sd <= prev {
				t.Errorf("dispersion %v: spread %.2f at rate %v, not above %.2f at a lower one", tc.disp, sd, rate, prev)
			}
			prev = sd
		}
	}
	for _, tc := range []struct{ v, want float64 }{
		{0, 0}, {-1, 0}, {math.NaN(), 0}, {math.Inf(1), 0},
		{burstPivot, burstPivot},
		{burstPivot * 32, burstPivot * 4}, // 32^0.4 = 4
		{burstPivot / 32, burstPivot / 4}, // below the pivot: more than v
	} {
		if got := burstVariance(tc.v); math.Abs(got-tc.want) > 1e-9*max(1, tc.want) {
			t.Errorf("burstVariance(%v) = %v, want %v", tc.v, got, tc.want)
		}
	}
}

func TestDispersionEstimator(t *testing.T) {
	for _, tc := range []struct {
		name   string
		batch  func(*rand.Rand) int
		want   float64 // E[K²]/E[K]
		within float64
	}{
		{"poisson", func(*rand.Rand) int { return 1 }, 1, 0.15},
		{"batches of 4", func(*rand.Rand) int { return 4 }, 4, 0.6},
		{"geometric fan-out mean 4", func(r *rand.Rand) int {
			k := 1
			for r.Float64() > 0.25 {
				k++
			}
			return k
		}, 7, 1.2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(7, 8))
			var e dispersionEstimator
			if e.index() != 1 {
				t.Fatalf("empty: %v", e.index())
			}
			now := t0
			// Batches at 0.05/s for 10 hours: the EWMA sees ~10 min at a time.
			var sum float64
			n := 0
			for now.Before(t0.Add(10 * time.Hour)) {
				now = now.Add(time.Duration(rng.ExpFloat64() / 0.05 * float64(time.Second)))
				for range tc.batch(rng) {
					e.add(now)
				}
				if now.After(t0.Add(time.Hour)) {
					sum += e.index()
					n++
				}
			}
			if got := sum / float64(n); math.Abs(got-tc.want) > tc.within {
				t.Errorf("mean index %.2f, want %.2f ± %.2f", got, tc.want, tc.within)
			}
		})
	}
}

// A long quiet spell decays the estimate without looping over every
// empty bucket.
func TestDispersionEstimatorQuiet(t *testing.T) {
	var e dispersionEstimator
	for i := range 400 {
		for range 5 {
			e.add(t0.Add(time.Duration(i) * 30 * time.Second))
		}
	}
	if e.index() < 2 {
		t.Fatalf("batches of 5: index %.2f", e.index())
	}
	e.add(t0.Add(24 * 365 * time.Hour))
	if i := e.index(); math.IsNaN(i) || i < 1 {
		t.Errorf("after a year: %v", i)
	}
}

// adaptive = true leaves preemptive_mode off unless it is set, whatever
// idle_count says; a static policy with idle_count > 0 is preemptive.
func TestFromRunnerAdaptivePreemptiveDefault(t *testing.T) {
	for _, tc := range []struct {
		body string
		want bool
	}{
		{"idle_count = 2\nadaptive = true\n", false},
		{"idle_count = 2\nadaptive = true\npreemptive_mode = true\n", true},
		{"idle_count = 2\n", true},
		{"idle_count = 0\nadaptive = true\n", false},
	} {
		p, err := readPolicy(t, header+"  executor = \"instance\"\n  [runners.autoscaler]\n    [[runners.autoscaler.policy]]\n"+tc.body)
		if err != nil {
			t.Fatalf("%q: %v", tc.body, err)
		}
		if got := p.Schedules[0].Preemptive; got != tc.want {
			t.Errorf("%q: preemptive %v, want %v", tc.body, got, tc.want)
		}
	}
}

func TestWaitFeedback(t *testing.T) {
	target := 30 * time.Second
	now := time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC)
	var f waitFeedback
	if f.gain() != 1 {
		t.Fatalf("initial gain %v", f.gain())
	}
	// 21 misses in 500 jobs (the 4.2% goal): the gain comes back to 1.
	for range 4 {
		for range 21 {
			f.note(now, time.Minute, target, Observed{})
		}
		for range 479 {
			f.note(now, time.Second, target, Observed{})
		}
	}
	if g := f.gain(); math.Abs(g-1) > 1e-9 {
		t.Errorf("at the goal: gain %v, want 1", g)
	}
	f = waitFeedback{}
	// Misses raise it, within its bound.
	for range 10 {
		f.note(now, 31*time.Second, target, Observed{})
	}
	if g, want := f.gain(), math.Exp(10*feedbackStep*(1-feedbackGoal)); math.Abs(g-want) > 1e-9 || g <= 1 {
		t.Errorf("after 10 misses: gain %v, want %v", g, want)
	}
	for range 10_000 {
		f.note(now, time.Hour, target, Observed{})
	}
	if g := f.gain(); math.Abs(g-feedbackMaxGain) > 1e-9 {
		t.Errorf("after many misses: gain %v, want the bound %v", g, feedbackMaxGain)
	}
	// Jobs within the target lower it, within its bound; a wait equal to
	// the target is within it.
	for range 100_000 {
		f.note(now, target, target, Observed{})
	}
	if g := f.gain(); math.Abs(g-1.0/feedbackMaxGain) > 1e-9 {
		t.Errorf("after many hits: gain %v, want 1/%v", g, feedbackMaxGain)
	}
	// No target: the default.
	var d waitFeedback
	d.note(now, DefaultTargetWait+time.Second, 0, Observed{})
	if d.gain() <= 1 {
		t.Errorf("a wait beyond the default target did not count as a miss: %v", d.gain())
	}
}

// The loop's goal: 4.2 % while boots take at most twice the target,
// rising with the band's share to 4.5 % at three times the target.
func TestFeedbackGoalFor(t *testing.T) {
	target := 30 * time.Second
	for _, tc := range []struct {
		boot time.Duration
		want float64
	}{
		{0, 0.042},
		{30 * time.Second, 0.042},
		{60 * time.Second, 0.042},
		{75 * time.Second, 0.04275},
		{90 * time.Second, 0.0435},
		{120 * time.Second, 0.045},
		{10 * time.Minute, 0.045},
	} {
		if got := feedbackGoalFor(tc.boot, target); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("feedbackGoalFor(%s, %s) = %v, want %v", tc.boot, target, got, tc.want)
		}
	}
}

// The model's miss shape: the misses per job of a buffer of a fixed z,
// more at a low load than at a high one; nothing where the model sizes no
// buffer.
func TestMissShape(t *testing.T) {
	target := 30 * time.Second
	o := func(rate float64, boot time.Duration, disp float64) Observed {
		return Observed{ArrivalRate: rate, MeanDuration: 5 * time.Minute, BootTime: boot, ArrivalDispersion: disp, BufferGain: 3}
	}
	for _, boot := range []time.Duration{30 * time.Second, 2 * time.Minute} {
		for _, disp := range []float64{1, 25} {
			low, high := missShape(o(0.02, boot, disp), target), missShape(o(0.5, boot, disp), target)
			if !(low > high) || !(high > 0) {
				t.Errorf("boot %s, dispersion %v: shape %v at 0.02 jobs/s, %v at 0.5: want both > 0, more at the low load", boot, disp, low, high)
			}
		}
	}
	// Poisson arrivals: σ grows as √λ, so the shape σ/(λ·W) falls as 1/√λ.
	if r := missShape(o(0.01, 2*time.Minute, 1), target) / missShape(o(0.04, 2*time.Minute, 1), target); math.Abs(r-2) > 1e-9 {
		t.Errorf("Poisson load at a quarter: shape ×%v, want ×2", r)
	}
	// The gain does not enter it: the loop's goal must not follow the loop.
	g1 := o(0.1, time.Minute, 4)
	g1.BufferGain = 1
	if a, b := missShape(o(0.1, time.Minute, 4), target), missShape(g1, target); a != b {
		t.Errorf("shape with gain 3 %v, with gain 1 %v: want the same", a, b)
	}
	for name, ob := range map[string]Observed{
		"no load":               o(0, 2*time.Minute, 1),
		"no boot time":          o(0.1, 0, 1),
		"boots within target/2": o(0.1, 15*time.Second, 1),
		"no duration":           {ArrivalRate: 0.1, BootTime: time.Minute},
	} {
		if s := missShape(ob, target); s != 0 {
			t.Errorf("%s: shape %v, want 0", name, s)
		}
	}
}

// Where the misses go: a job's goal is the goal times its miss shape over
// the last day's mean, within [goal/4, 4·goal], so that a low load's jobs
// may miss more often than a high one's while a day's goals average out
// to the goal.
func TestWaitFeedbackGoalFollowsShape(t *testing.T) {
	target := 30 * time.Second
	now := time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC)
	obs := func(rate float64) Observed {
		return Observed{ArrivalRate: rate, MeanDuration: 5 * time.Minute, BootTime: 2 * time.Minute, ArrivalDispersion: 1}
	}
	night, day := obs(0.01), obs(0.16) // Poisson: the night's shape is 4× the day's
	var f waitFeedback
	// The first job's shape is the mean: the plain goal.
	if g := f.goal(now, target, day); math.Abs(g-0.045) > 1e-12 {
		t.Fatalf("first job's goal %v, want 0.045", g)
	}
	// A day of 16 hours at the day's load and 8 at the night's, one job
	// every 100 s at night and 16 times as often by day, repeated: the
	// goals average out to the plain goal over the jobs.
	var sum float64
	var n int
	for d := range 3 {
		for h := range 24 {
			o, jobs := day, 576
			if h >= 16 {
				o, jobs = night, 36
			}
			for j := range jobs {
				at := now.Add(time.Duration(d*24+h)*time.Hour + time.Duration(j)*time.Hour/time.Duration(jobs))
				g := f.goal(at, target, o)
				if d == 2 {
					sum += g
					n++
				}
			}
		}
	}
	if mean := sum / float64(n); math.Abs(mean-0.045) > 0.045*0.05 {
		t.Errorf("the day's mean goal %v, want 0.045 within 5 %%", mean)
	}
	at := now.Add(72 * time.Hour)
	gd, gn := f.goal(at, target, day), f.goal(at, target, night)
	if r := gn / gd; math.Abs(r-4) > 4e-3 {
		t.Errorf("night goal / day goal = %v, want the shapes' ratio 4", r)
	}
	if !(gd < 0.045 && gn > 0.045) {
		t.Errorf("goal by day %v, by night %v: want below and above 0.045", gd, gn)
	}
	// A load far from the day's mean is held to the bounds.
	if g := f.goal(at, target, obs(1e-5)); math.Abs(g-4*0.045) > 1e-12 {
		t.Errorf("goal at a load far below the mean %v, want the bound %v", g, 4*0.045)
	}
	if g := f.goal(at, target, obs(1e4)); math.Abs(g-0.045/4) > 1e-12 {
		t.Errorf("goal at a load far above the mean %v, want the bound %v", g, 0.045/4)
	}
	// The mean forgets, by e a day: after a week at the night's load
	// only, the night's jobs are at the plain goal again.
	for j := range 7 * 24 * 36 {
		f.goal(at.Add(time.Duration(j)*100*time.Second), target, night)
	}
	if g := f.goal(at.Add(7*24*time.Hour), target, night); math.Abs(g-0.045) > 0.045*0.02 {
		t.Errorf("after a week at one load, its goal %v, want 0.045 within 2 %%", g)
	}
	// A fresh loop phases the ratio in over its first day: half a day
	// in, a job's goal is the goal times the square root of its ratio to
	// the mean of what came so far.
	var h waitFeedback
	h.goal(now, target, day)
	sd, sn := missShape(day, target), missShape(night, target)
	want := 0.045 * math.Sqrt(sn/((sd+sn*math.Exp(0.5))/(1+math.Exp(0.5))))
	if g := h.goal(now.Add(12*time.Hour), target, night); math.Abs(g-want) > 1e-12 {
		t.Errorf("half a day in, the night's goal %v, want %v", g, want)
	}
	// Miss and hit move the gain by the job's own goal.
	var e waitFeedback
	e.note(now, time.Second, target, day) // first: shape = mean, goal 0.045
	if got, want := e.logGain, -feedbackStep*0.045; math.Abs(got-want) > 1e-12 {
		t.Errorf("after a hit ln g = %v, want %v", got, want)
	}
}

// The gain scales the spread the buffer is sized for.
func TestAdaptiveIdleSlotsGain(t *testing.T) {
	o := Observed{ArrivalRate: 0.25, MeanDuration: 7 * time.Minute, BootTime: 30 * time.Second, ArrivalDispersion: 4}
	base := AdaptiveIdleSlots(o, 30*time.Second)
	if base == 0 {
		t.Fatal("test needs a buffer")
	}
	for _, tc := range []struct {
		gain float64
		cmp  func(k int) bool
		what string
	}{
		{0, func(k int) bool { return k == base }, "unset = 1"},
		{1, func(k int) bool { return k == base }, "1"},
		{4, func(k int) bool { return k > 2*base }, "4: more than twice"},
		{1.0 / 32, func(k int) bool { return k < base }, "1/32: less"},
		{math.Inf(1), func(k int) bool { return k == base }, "+Inf ignored"},
	} {
		o.BufferGain = tc.gain
		if k := AdaptiveIdleSlots(o, 30*time.Second); !tc.cmp(k) {
			t.Errorf("gain %s: buffer %d (base %d)", tc.what, k, base)
		}
	}
}

func TestAdaptiveBand(t *testing.T) {
	for _, tc := range []struct {
		name   string
		tw     time.Duration
		boot   time.Duration
		target int
		want   int
	}{
		{"boots as long as the target: none", 30 * time.Second, 30 * time.Second, 10, 0},
		{"boots of twice the target: none yet", 30 * time.Second, time.Minute, 10, 0},
		{"90 s boots: half the target", 30 * time.Second, 90 * time.Second, 10, 5},
		{"2 min boots: the target again", 30 * time.Second, 2 * time.Minute, 10, 10},
		{"default target_wait", 0, 2 * time.Minute, 10, 10},
		{"rounded down", 30 * time.Second, 2 * time.Minute, 7, 7},
		{"β capped at 2", 30 * time.Second, 10 * time.Minute, 10, 20},
		{"no idle target, no band", 30 * time.Second, 2 * time.Minute, 0, 0},
		{"no boot observed yet", 30 * time.Second, 0, 10, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := Schedule{Adaptive: true, TargetWait: tc.tw, IdleTime: 20 * time.Minute}
			if got := AdaptiveBand(&s, Observed{BootTime: tc.boot}, tc.target); got != tc.want {
				t.Errorf("AdaptiveBand(boot %s, target %d) = %d, want %d", tc.boot, tc.target, got, tc.want)
			}
		})
	}
}

// With boots of four times the target, an adaptive pool keeps idle
// instances past the hold up to its idle target plus the band (here the
// target again) and removes only those beyond, saying why; with boots as
// short as the target it removes everything beyond the target.
func TestDecideAdaptiveBandKeepsBeyondTheTarget(t *testing.T) {
	const tw = 30 * time.Second
	for _, tc := range []struct {
		name     string
		boot     time.Duration
		wantKept func(target int) int
	}{
		{"2 min boots keep target + band", 2 * time.Minute, func(k int) int { return 2 * k }},
		{"30 s boots keep the target", 30 * time.Second, func(k int) int { return k }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := Observed{ArrivalRate: 0.2, MeanDuration: 5 * time.Minute, BootTime: tc.boot}
			s := Schedule{Adaptive: true, TargetWait: tw, IdleTime: 20 * time.Minute}
			target := AdaptiveIdleSlots(o, tw)
			if tc.boot > tw && target == 0 {
				t.Fatalf("test assumes an idle target above 0 for %+v", o)
			}
			var insts []Instance
			for i := range 2*target + 3 {
				insts = append(insts, Instance{ID: string(rune('a' + i)), State: StateIdle, Created: t0.Add(-time.Hour),
					Ready: t0.Add(-time.Hour), LastUsed: t0.Add(-10 * time.Minute), UseCount: 1})
			}
			dec := Decide(slotPolicy(1, 0, 0, s), t0, insts, Demand{Observed: o})
			if kept := len(insts) - len(dec.Remove); kept != tc.wantKept(target) {
				t.Fatalf("kept %d of %d idle instances, want %d (idle target %d)", kept, len(insts), tc.wantKept(target), target)
			}
			if dec.Create != 0 {
				t.Errorf("created %d with the target met", dec.Create)
			}
			band := AdaptiveBand(&s, o, target)
			if r := dec.Remove[0].Reason; (band > 0) != strings.Contains(r, "kept against boots") {
				t.Errorf("band %d, reason %q", band, r)
			}
		})
	}
}
