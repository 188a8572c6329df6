package simulate

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"

	"github.com/drover-ci/drover/internal/autoscale"
)

// SweepResult is the report of one static idle_count.
type SweepResult struct {
	IdleCount  int
	Preemptive bool // preemptive_mode of the run
	Report     Report
}

// SweepIdleCount simulates o with each static idle count in counts (the
// base schedule and every period set to it, adaptive off, preemptive mode
// as the defaults have it: on when the count is above zero) and returns
// every result plus the one with the least idle instance time whose p95
// wait is at most targetP95; best is nil when none meets the target.
// It answers "what does the best hand-tuned idle_count cost?", the
// baseline the adaptive policy is measured against.
func SweepIdleCount(ctx context.Context, o Options, jobs []Job, counts []int, targetP95 time.Duration) (best *SweepResult, all []SweepResult, err error) {
	return sweep(ctx, o, jobs, counts, false, targetP95)
}

// SweepIdleCountBothModes is SweepIdleCount with each count run in both
// preemptive modes (preemptive_mode = false, and = true when the count is
// above zero: a preemptive pool with no idle slot never takes a job), the
// results in that order. The best is the cheapest of all that meet the
// target, so the baseline is the best hand-tuned static configuration
// whichever mode an operator would pick.
func SweepIdleCountBothModes(ctx context.Context, o Options, jobs []Job, counts []int, targetP95 time.Duration) (best *SweepResult, all []SweepResult, err error) {
	return sweep(ctx, o, jobs, counts, true, targetP95)
}

func sweep(ctx context.Context, o Options, jobs []Job, counts []int, both bool, targetP95 time.Duration) (best *SweepResult, all []SweepResult, err error) {
	if o.Policy == nil {
		return nil, nil, fmt.Errorf("sweep idle_count: no policy")
	}
	o.Samples = -1
	type config struct {
		count      int
		preemptive bool
	}
	var cfgs []config
	for _, c := range counts {
		switch {
		case !both:
			cfgs = append(cfgs, config{c, c > 0})
		case c > 0:
			cfgs = append(cfgs, config{c, false}, config{c, true})
		default:
			cfgs = append(cfgs, config{c, false})
		}
	}
	// The runs are independent: spread them over the CPUs.
	all = make([]SweepResult, len(cfgs))
	errs := make([]error, len(cfgs))
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), len(cfgs)) {
		wg.Go(func() {
			for i := range next {
				c := cfgs[i]
				pol := StaticIdle(o.Policy, c.count)
				setPreemptive(pol, c.preemptive)
				oc := o
				oc.Policy = pol
				res, err := Run(ctx, oc, jobs)
				if err != nil {
					errs[i] = fmt.Errorf("sweep idle_count %d (preemptive %v): %w", c.count, c.preemptive, err)
					continue
				}
				all[i] = SweepResult{IdleCount: c.count, Preemptive: c.preemptive, Report: res.Report}
			}
		})
	}
	for i := range cfgs {
		next <- i
	}
	close(next)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, nil, err
	}
	for i := range all {
		r := &all[i]
		if r.Report.WaitP95 <= targetP95.Seconds() && (best == nil || r.Report.IdleInstanceS < best.Report.IdleInstanceS) {
			best = r
		}
	}
	return best, all, nil
}

func setPreemptive(pol *autoscale.Policy, preemptive bool) {
	pol.Base.Preemptive = preemptive
	for i := range pol.Schedules {
		pol.Schedules[i].Preemptive = preemptive
	}
}

// StaticIdle returns a copy of pol whose schedules all keep idle slots
// idle count, with adaptive sizing off.
func StaticIdle(pol *autoscale.Policy, idle int) *autoscale.Policy {
	cp := *pol
	set := func(s *autoscale.Schedule) {
		s.IdleCount = idle
		s.Adaptive = false
		s.ScaleFactor = 0
		s.Preemptive = idle > 0
	}
	set(&cp.Base)
	cp.Schedules = append([]autoscale.Schedule(nil), pol.Schedules...)
	for i := range cp.Schedules {
		set(&cp.Schedules[i])
	}
	return &cp
}

// Comparison is a policy's simulation against the best static idle_count
// that meets the same p95 target.
type Comparison struct {
	Policy     Report        // the policy as given (e.g. adaptive)
	BestStatic *SweepResult  // nil when no static count meets the target
	Static     []SweepResult // every static count tried
	TargetP95  time.Duration
	// PolicyMeetsTarget tells whether the policy's own p95 wait is within
	// TargetP95; a saving only counts when it is.
	PolicyMeetsTarget bool
	// IdleSaving is 1 − policy idle / best static idle (0.3 = 30 % less
	// idle instance time); 0 when there is no best static.
	IdleSaving float64
}

// Compare simulates o.Policy as it is and the static idle counts in
// counts in both preemptive modes (SweepIdleCountBothModes), with every
// other setting, idle_time included, as o.Policy has them, and compares
// the idle instance time of the policy with that of the cheapest static
// configuration meeting targetP95. It is the measurement of "adaptive vs
// best static".
func Compare(ctx context.Context, o Options, jobs []Job, counts []int, targetP95 time.Duration) (*Comparison, error) {
	po := o
	po.Samples = -1
	res, err := Run(ctx, po, jobs)
	if err != nil {
		return nil, fmt.Errorf("compare: policy: %w", err)
	}
	best, all, err := SweepIdleCountBothModes(ctx, o, jobs, counts, targetP95)
	if err != nil {
		return nil, fmt.Errorf("compare: %w", err)
	}
	c := &Comparison{Policy: res.Report, BestStatic: best, Static: all, TargetP95: targetP95,
		PolicyMeetsTarget: res.WaitP95 <= targetP95.Seconds()}
	if best != nil && best.Report.IdleInstanceS > 0 {
		c.IdleSaving = 1 - res.IdleInstanceS/best.Report.IdleInstanceS
	}
	return c, nil
}
