package simulate

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/drover-ci/drover/internal/autoscale"
)

// A hindsight schedule is the yardstick for policies that follow the
// load: one static setting per hour of the day, each hour's picked
// knowing how the whole day went. It is built from the runs of a static
// sweep (every SweepResult with its Hours): for each hour of the day it
// picks the setting that, together with the other hours' picks, keeps the
// fewest idle instance-seconds while the late jobs of the whole day stay
// within what the p95 target allows. An operator could write it as 24
// periods; no policy that only knows the past can do better on that day
// except by acting within the hour.

// HindsightHours is the number of hours a hindsight schedule sets: one per
// hour of the day.
const HindsightHours = 24

// HindsightPlan is a hindsight schedule: a static setting per hour of the
// day, with what the sweep's runs predict for it.
type HindsightPlan struct {
	Hours [HindsightHours]SweepResult // setting per hour of the day (Report and Hours left empty)
	// PredictedIdleS and PredictedLate add up each hour's idle time and
	// late jobs as the uniform run of its setting had them: the plan's
	// cost if the hours did not affect each other.
	PredictedIdleS float64
	PredictedLate  int
}

// LateBudget is how many of n jobs may wait longer than the target with
// the nearest-rank p95 wait still within it.
func LateBudget(n int) int {
	if n <= 0 {
		return 0
	}
	return n - int(math.Ceil(targetQuantile*float64(n)))
}

// targetQuantile is the quantile of the waits the target is on: a p95.
const targetQuantile = 0.95

// PlanHindsight picks one setting of runs per hour of the day so that the
// idle time the runs' Hours predict is least with at most budget late jobs
// (an exact knapsack over the hours). The 25th hour of a run (after the
// day's last arrival) counts toward the first hour of the day: the same
// period is in force then. It fails when runs is empty, a run has no
// hours, or not even the least-late setting of each hour stays within
// budget.
func PlanHindsight(runs []SweepResult, budget int) (*HindsightPlan, error) {
	return PlanHindsightCost(runs, budget, IdleCost)
}

// HourCost is what a hindsight schedule minimises, hour by hour.
type HourCost func(*Hour) float64

// IdleCost is an hour's idle instance-seconds (issue 19's yardstick).
func IdleCost(h *Hour) float64 { return h.IdleS }

// BilledCost is an hour's billed instance-seconds (Hour.BilledS): what
// the person paying minimises.
func BilledCost(h *Hour) float64 { return h.BilledS }

// PlanHindsightCost is PlanHindsight minimising cost instead of idle
// time (PredictedIdleS is then the predicted cost).
func PlanHindsightCost(runs []SweepResult, budget int, cost HourCost) (*HindsightPlan, error) {
	if len(runs) == 0 {
		return nil, errors.New("hindsight: no static runs")
	}
	if budget < 0 {
		budget = 0
	}
	idle := make([][HindsightHours]float64, len(runs))
	late := make([][HindsightHours]int, len(runs))
	for i, r := range runs {
		if len(r.Hours) == 0 {
			return nil, fmt.Errorf("hindsight: run %d (%s) has no hours", i, r.Setting())
		}
		for _, h := range r.Hours {
			hod := int(h.Start/time.Hour) % HindsightHours
			idle[i][hod] += cost(&h)
			late[i][hod] += h.Late
		}
	}
	// best[l] is the least idle time of the hours so far with l late jobs
	// in total; pick[h][l] the run chosen for hour h on that path.
	inf := math.Inf(1)
	best := make([]float64, budget+1)
	for l := 1; l <= budget; l++ {
		best[l] = inf
	}
	pick := make([][]int32, HindsightHours)
	next := make([]float64, budget+1)
	for h := range HindsightHours {
		pick[h] = make([]int32, budget+1)
		for l := range next {
			next[l] = inf
			pick[h][l] = -1
		}
		for l, cost := range best {
			if math.IsInf(cost, 1) {
				continue
			}
			for i := range runs {
				nl := l + late[i][h]
				if nl > budget {
					continue
				}
				if c := cost + idle[i][h]; c < next[nl] {
					next[nl], pick[h][nl] = c, int32(i)
				}
			}
		}
		best, next = next, best
	}
	end := -1
	for l, cost := range best {
		if !math.IsInf(cost, 1) && (end < 0 || cost < best[end]) {
			end = l
		}
	}
	if end < 0 {
		return nil, fmt.Errorf("hindsight: no choice of settings keeps the day within %d late jobs", budget)
	}
	p := &HindsightPlan{PredictedIdleS: best[end], PredictedLate: end}
	l := end
	for h := HindsightHours - 1; h >= 0; h-- {
		i := pick[h][l]
		r := runs[i]
		p.Hours[h] = SweepResult{IdleCount: r.IdleCount, IdleTime: r.IdleTime, Preemptive: r.Preemptive}
		l -= late[i][h]
	}
	return p, nil
}

// Policy returns a copy of pol with the plan as its schedules: the base
// one set to the first hour's setting and one period per hour, in UTC,
// the plan's hour h being the clock hour h after start (which must be on
// the hour): "* H * * *" for [runners.autoscaler], "* * H * * * *" for
// [runners.machine]. Adaptive sizing and the scale factor are off.
func (p *HindsightPlan) Policy(pol *autoscale.Policy, start time.Time) (*autoscale.Policy, error) {
	start = start.UTC()
	if !start.Truncate(time.Hour).Equal(start) {
		return nil, fmt.Errorf("hindsight: the day starts at %s, not on the hour: an hour of the plan would span two periods", start.Format(time.RFC3339))
	}
	cp := *pol
	set := func(s *autoscale.Schedule, r SweepResult) {
		s.IdleCount, s.IdleTime, s.Preemptive = r.IdleCount, r.IdleTime, r.Preemptive
		s.Adaptive, s.ScaleFactor, s.ScaleFactorLimit = false, 0, 0
	}
	cp.Base = pol.Base
	set(&cp.Base, p.Hours[0])
	cp.Schedules = make([]autoscale.Schedule, HindsightHours)
	for h, r := range p.Hours {
		clock := (start.Hour() + h) % HindsightHours
		period := fmt.Sprintf("* %d * * *", clock)
		if pol.Dialect == autoscale.DialectMachine {
			period = fmt.Sprintf("* * %d * * * *", clock)
		}
		s := autoscale.Schedule{Periods: []string{period}, Timezone: "UTC", IdleCountMin: pol.Base.IdleCountMin}
		set(&s, r)
		cp.Schedules[h] = s
	}
	if err := cp.Compile(); err != nil {
		return nil, fmt.Errorf("hindsight: %w", err)
	}
	return &cp, nil
}

// Hindsight is a hindsight schedule as run, not only predicted.
type Hindsight struct {
	Plan   *HindsightPlan
	Report Report
	Hours  []Hour
	// Budget is the late-job budget the plan was made for; Tries how many
	// plans were run to find one that meets the target.
	Budget, Tries int
	cost          float64 // of the run, as RunHindsightCost measured it
}

func hoursCost(hours []Hour, cost HourCost) float64 {
	c := 0.0
	for i := range hours {
		c += cost(&hours[i])
	}
	return c
}

// maxHindsightTries bounds the plans RunHindsight tries.
const maxHindsightTries = 8

// RunHindsight plans a hindsight schedule from runs (a sweep of jobs with
// o's options) for the target and runs it on jobs with o. The hours
// affect each other a little (the instances one hour leaves to the next),
// so when the plan as run misses the target, it plans again with the
// budget cut by the excess, up to 8 times; it returns the cheapest plan
// that met the target, or an error when none did.
func RunHindsight(ctx context.Context, o Options, jobs []Job, runs []SweepResult, targetP95 time.Duration) (*Hindsight, error) {
	return RunHindsightCost(ctx, o, jobs, runs, targetP95, IdleCost)
}

// RunHindsightCost is RunHindsight minimising cost (BilledCost: the
// billed time of runs' Hours, in o's billing model) instead of idle time.
func RunHindsightCost(ctx context.Context, o Options, jobs []Job, runs []SweepResult, targetP95 time.Duration, cost HourCost) (*Hindsight, error) {
	if o.Policy == nil {
		return nil, errors.New("hindsight: no policy")
	}
	o.Samples = -1
	if o.LateAfter <= 0 {
		o.LateAfter = targetP95
	}
	n := 0
	if len(runs) > 0 {
		n = runs[0].Report.Jobs
	}
	allowed := LateBudget(n)
	budget := allowed
	start := o.Start
	if start.IsZero() {
		start = DefaultStart
	}
	var best *Hindsight
	for try := 1; try <= maxHindsightTries && budget >= 0; try++ {
		plan, err := PlanHindsightCost(runs, budget, cost)
		if err != nil {
			if best != nil {
				break // a smaller budget than any setting allows: keep the plan that met the target
			}
			return nil, err
		}
		pol, err := plan.Policy(o.Policy, start)
		if err != nil {
			return nil, err
		}
		oc := o
		oc.Policy = pol
		res, err := Run(ctx, oc, jobs)
		if err != nil {
			return nil, fmt.Errorf("hindsight: run plan %d: %w", try, err)
		}
		lateRun := 0
		for _, h := range res.Hours {
			lateRun += h.Late
		}
		if res.WaitP95 <= targetP95.Seconds() {
			if c := hoursCost(res.Hours, cost); best == nil || c < best.cost {
				best = &Hindsight{Plan: plan, Report: res.Report, Hours: res.Hours, Budget: budget, Tries: try, cost: c}
			}
			if lateRun >= allowed-allowed/50 {
				break // within 2 % of the allowance: little left to gain
			}
			budget += max((allowed-lateRun)/2, 1) // a bigger budget each time
			continue
		}
		budget -= max(lateRun-allowed, 1)
	}
	if best == nil {
		return nil, fmt.Errorf("hindsight: no plan met the p95 target %s in %d tries: try more or larger idle counts in the sweep, or a longer target", targetP95, maxHindsightTries)
	}
	return best, nil
}
