package simulate_test

import (
	"math"
	"math/bits"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/autoscale"
	"github.com/drover-ci/drover/internal/autoscale/simulate"
	"github.com/drover-ci/drover/internal/autoscale/tracegen"
)

func TestLateBudget(t *testing.T) {
	for _, c := range []struct{ n, want int }{
		{0, 0}, {1, 0}, {19, 0}, {20, 1}, {21, 1}, {100, 5}, {101, 5}, {20_000, 1000},
	} {
		if got := simulate.LateBudget(c.n); got != c.want {
			t.Errorf("LateBudget(%d) = %d, want %d", c.n, got, c.want)
		}
	}
}

// hourRun is a sweep result with the given idle seconds and late jobs per
// hour of the day (and an optional 25th hour of idle time).
func hourRun(count int, idle []float64, late []int, after float64) simulate.SweepResult {
	r := simulate.SweepResult{IdleCount: count, IdleTime: 30 * time.Second}
	for h := range simulate.HindsightHours {
		r.Hours = append(r.Hours, simulate.Hour{Start: time.Duration(h) * time.Hour, IdleS: idle[h], Late: late[h]})
	}
	r.Hours = append(r.Hours, simulate.Hour{Start: 24 * time.Hour, IdleS: after})
	return r
}

// The plan is the exact optimum: on random two-setting days it keeps the
// least idle time within the budget of every one of the 2^24 choices.
func TestPlanHindsightIsOptimal(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 3 {
		idleA, idleB := make([]float64, 24), make([]float64, 24)
		lateA, lateB := make([]int, 24), make([]int, 24)
		for h := range 24 {
			idleA[h] = float64(rng.IntN(1000))
			idleB[h] = idleA[h] + float64(1+rng.IntN(3000)) // more idle, fewer late
			lateB[h] = rng.IntN(5)
			lateA[h] = lateB[h] + rng.IntN(20)
		}
		runs := []simulate.SweepResult{hourRun(1, idleA, lateA, 0), hourRun(9, idleB, lateB, 0)}
		minLate := 0
		for h := range 24 {
			minLate += lateB[h]
		}
		budget := minLate + 40 + 10*trial
		plan, err := simulate.PlanHindsight(runs, budget)
		if err != nil {
			t.Fatalf("PlanHindsight = %v", err)
		}
		// Walk all 2^24 choices in Gray-code order, one hour flipped per step.
		idle, late := 0.0, 0
		for h := range 24 {
			idle += idleA[h]
			late += lateA[h]
		}
		bestIdle := math.Inf(1)
		if late <= budget {
			bestIdle = idle
		}
		var usingB uint32
		for i := uint32(1); i < 1<<24; i++ {
			h := bits.TrailingZeros32(i)
			usingB ^= 1 << h
			if usingB&(1<<h) != 0 {
				idle += idleB[h] - idleA[h]
				late += lateB[h] - lateA[h]
			} else {
				idle -= idleB[h] - idleA[h]
				late -= lateB[h] - lateA[h]
			}
			if late <= budget && idle < bestIdle {
				bestIdle = idle
			}
		}
		if math.Abs(plan.PredictedIdleS-bestIdle) > 1e-6 {
			t.Errorf("trial %d: plan predicts %v idle s, the best choice has %v", trial, plan.PredictedIdleS, bestIdle)
		}
		// The plan's settings add up to what it predicts.
		gotIdle, gotLate := 0.0, 0
		for h, r := range plan.Hours {
			if r.IdleCount == 9 {
				gotIdle, gotLate = gotIdle+idleB[h], gotLate+lateB[h]
			} else {
				gotIdle, gotLate = gotIdle+idleA[h], gotLate+lateA[h]
			}
		}
		if math.Abs(gotIdle-plan.PredictedIdleS) > 1e-6 || gotLate != plan.PredictedLate || gotLate > budget {
			t.Errorf("trial %d: the plan's hours add up to %v idle s and %d late, it predicts %v and %d (budget %d)", trial, gotIdle, gotLate, plan.PredictedIdleS, plan.PredictedLate, budget)
		}
	}
}

// The hour after the day is the first hour's period again: its idle time
// counts there. Without the budget for the cheap setting's late jobs the
// plan keeps the other one, and a budget nothing meets is an error.
func TestPlanHindsightHourAfterAndBudget(t *testing.T) {
	flat := func(v float64) []float64 {
		s := make([]float64, 24)
		for i := range s {
			s[i] = v
		}
		return s
	}
	lates := func(h0 int) []int { s := make([]int, 24); s[0] = h0; return s }
	// Setting 1 is cheaper in hour 0 alone (90 < 100) but keeps 50 idle
	// seconds in the hour after the day: 140 > 100.
	runs := []simulate.SweepResult{
		hourRun(1, append([]float64{90}, flat(100)[1:]...), lates(0), 50),
		hourRun(2, flat(100), lates(0), 0),
	}
	plan, err := simulate.PlanHindsight(runs, 0)
	if err != nil {
		t.Fatal(err)
	}
	if plan.Hours[0].IdleCount != 2 || plan.PredictedIdleS != 2400 {
		t.Errorf("hour 0 = %s, predicted %v idle s; want idle_count 2 and 2400 s", plan.Hours[0].Setting(), plan.PredictedIdleS)
	}
	// A cheap setting with 3 late jobs in hour 0: taken only with budget 3.
	runs = []simulate.SweepResult{hourRun(0, flat(10), lates(3), 0), hourRun(5, flat(100), lates(1), 0)}
	for _, c := range []struct{ budget, want0 int }{{1, 5}, {2, 5}, {3, 0}} {
		plan, err := simulate.PlanHindsight(runs, c.budget)
		if err != nil {
			t.Fatalf("budget %d: %v", c.budget, err)
		}
		if plan.Hours[0].IdleCount != c.want0 || plan.Hours[1].IdleCount != 0 {
			t.Errorf("budget %d: hours 0, 1 = %d, %d; want %d, 0", c.budget, plan.Hours[0].IdleCount, plan.Hours[1].IdleCount, c.want0)
		}
	}
	if _, err := simulate.PlanHindsight(runs, 0); err == nil || !strings.Contains(err.Error(), "0 late jobs") {
		t.Errorf("budget 0 with a late job in every setting: err = %v", err)
	}
	if _, err := simulate.PlanHindsight(nil, 5); err == nil {
		t.Error("no runs: no error")
	}
}

// The plan as a policy: the period of each hour of the day is in force in
// that hour, with that hour's setting.
func TestHindsightPlanPolicy(t *testing.T) {
	var p simulate.HindsightPlan
	for h := range p.Hours {
		p.Hours[h] = simulate.SweepResult{IdleCount: h, IdleTime: time.Duration(h+1) * time.Minute, Preemptive: h%2 == 1}
	}
	for _, dialect := range []autoscale.Dialect{autoscale.DialectAutoscaler, autoscale.DialectMachine} {
		for _, start := range []time.Time{simulate.DefaultStart, simulate.DefaultStart.Add(7 * time.Hour)} {
			base := adaptivePolicy()
			base.Dialect = dialect
			pol, err := p.Policy(base, start)
			if err != nil {
				t.Fatalf("%s, start %s: Policy = %v", dialect, start, err)
			}
			for h := range 24 {
				at := start.Add(time.Duration(h)*time.Hour + 17*time.Minute + 30*time.Second)
				s := pol.Active(at)
				if s.IdleCount != h || s.IdleTime != time.Duration(h+1)*time.Minute || s.Preemptive != (h%2 == 1) || s.Adaptive {
					t.Errorf("%s, start %s: at %s the active schedule is %+v, want the plan's hour %d", dialect, start.Format(time.TimeOnly), at.Format(time.TimeOnly), s, h)
				}
			}
			if !base.Base.Adaptive || len(base.Schedules) != 0 {
				t.Error("Policy changed the policy it was given")
			}
		}
	}
	if _, err := p.Policy(adaptivePolicy(), simulate.DefaultStart.Add(90*time.Minute)); err == nil || !strings.Contains(err.Error(), "not on the hour") {
		t.Errorf("start at 01:30: err = %v, want one saying it is not on the hour", err)
	}
}

// On a generated day after its day before, the hindsight schedule as run
// meets the target, and its plan predicts no more idle time than the best
// uniform setting it was planned from (that setting is one of its plans).
func TestRunHindsight(t *testing.T) {
	tr, err := tracegen.Generate(tracegen.Options{Seed: 5, Jobs: 3000, PeakRatio: 10})
	if err != nil {
		t.Fatal(err)
	}
	warm, err := tracegen.Generate(tracegen.Options{Seed: 6, Jobs: 3000, PeakRatio: 10})
	if err != nil {
		t.Fatal(err)
	}
	o := benchOptions(adaptivePolicy(), 30*time.Second)
	o.WarmUp, o.WarmUpSpan = warm, simulate.StaticWarmUpSpan
	g := simulate.Grid{IdleTimes: []time.Duration{30 * time.Second, 2 * time.Minute}}
	for c := 0; c <= 12; c += 2 {
		g.IdleCounts = append(g.IdleCounts, c)
	}
	best, all, err := simulate.SweepGrid(t.Context(), o, tr, g, benchTarget)
	if err != nil {
		t.Fatal(err)
	}
	if best == nil {
		t.Fatal("no static setting meets the target")
	}
	hs, err := simulate.RunHindsight(t.Context(), o, tr, all, benchTarget)
	if err != nil {
		t.Fatalf("RunHindsight = %v", err)
	}
	if hs.Report.WaitP95 > benchTarget.Seconds() {
		t.Errorf("hindsight p95 %v s over the target", hs.Report.WaitP95)
	}
	if hs.Plan.PredictedIdleS > best.Report.IdleInstanceS+1e-6 {
		t.Errorf("plan predicts %v idle s, more than the best static setting's %v", hs.Plan.PredictedIdleS, best.Report.IdleInstanceS)
	}
	if hs.Tries < 1 || hs.Budget < 0 {
		t.Errorf("budget %d, tries %d", hs.Budget, hs.Tries)
	}
	late := 0
	for _, h := range hs.Hours {
		late += h.Late
	}
	if late > simulate.LateBudget(len(tr)) {
		t.Errorf("%d late jobs as run, more than the %d the p95 allows", late, simulate.LateBudget(len(tr)))
	}
	t.Logf("best static %s: %.1f idle h; hindsight %.1f idle h (predicted %.1f), p95 %.1f s, %d tries",
		best.Setting(), best.Report.IdleInstanceS/3600, hs.Report.IdleInstanceS/3600, hs.Plan.PredictedIdleS/3600, hs.Report.WaitP95, hs.Tries)
}
