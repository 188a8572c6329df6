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
