package simulate

import (
	"context"
	"fmt"
	"time"

	"github.com/drover-ci/drover/internal/autoscale"
)

// SweepResult is the report of one static idle_count.
type SweepResult struct {
	IdleCount int
	Report    Report
}

// SweepIdleCount simulates o with each static idle count in counts (the
// base schedule and every period set to it, adaptive off, preemptive mode
// as the defaults have it: on when the count is above zero) and returns
// every result plus the one with the least idle instance time whose p95
// wait is at most targetP95; best is nil when none meets the target.
// It answers "what does the best hand-tuned idle_count cost?", the
// baseline the adaptive policy is measured against.
func SweepIdleCount(ctx context.Context, o Options, jobs []Job, counts []int, targetP95 time.Duration) (best *SweepResult, all []SweepResult, err error) {
	if o.Policy == nil {
		return nil, nil, fmt.Errorf("sweep idle_count: no policy")
	}
	o.Samples = -1
	for _, c := range counts {
		pol := StaticIdle(o.Policy, c)
		oc := o
		oc.Policy = pol
		res, err := Run(ctx, oc, jobs)
		if err != nil {
			return nil, all, fmt.Errorf("sweep idle_count %d: %w", c, err)
		}
		all = append(all, SweepResult{IdleCount: c, Report: res.Report})
	}
	for i := range all {
		r := &all[i]
		if r.Report.WaitP95 <= targetP95.Seconds() && (best == nil || r.Report.IdleInstanceS < best.Report.IdleInstanceS) {
			best = r
		}
	}
	return best, all, nil
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
// counts, and compares the idle instance time of the policy with that of
// the cheapest static count meeting targetP95. It is the measurement of
// "adaptive vs best static".
func Compare(ctx context.Context, o Options, jobs []Job, counts []int, targetP95 time.Duration) (*Comparison, error) {
	po := o
	po.Samples = -1
	res, err := Run(ctx, po, jobs)
	if err != nil {
		return nil, fmt.Errorf("compare: policy: %w", err)
	}
	best, all, err := SweepIdleCount(ctx, o, jobs, counts, targetP95)
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
