package simulate

import (
	"time"

	"github.com/drover-ci/drover/internal/autoscale"
)

// Recorded is the trace of the jobs a pool served (autoscale.JobTrace,
// by arrival) from start on: second 0 of the trace is start, and jobs
// that arrived before it are left out. Run it with Options.Start = start,
// so that the policy's periods apply as they did.
func Recorded(start time.Time, recs []autoscale.JobRecord) []Job {
	jobs := make([]Job, 0, len(recs))
	for _, r := range recs {
		if r.Arrival.Before(start) {
			continue
		}
		jobs = append(jobs, Job{Arrival: r.Arrival.Sub(start), Duration: r.Duration})
	}
	return jobs
}

// Alternative is the values a "what if" gives every schedule of a policy
// (the top-level values and every period).
type Alternative struct {
	IdleCount  int
	IdleTime   time.Duration
	Preemptive bool
	Adaptive   bool
	TargetWait time.Duration // adaptive only
}

// Policy returns a copy of pol with every schedule set to a; the rest
// (capacity, limits, scale factor, periods) stays as pol has it.
func (a Alternative) Policy(pol *autoscale.Policy) *autoscale.Policy {
	return eachSchedule(pol, func(s *autoscale.Schedule) {
		s.IdleCount = a.IdleCount
		s.IdleTime = a.IdleTime
		s.Preemptive = a.Preemptive
		s.Adaptive = a.Adaptive
		s.TargetWait = a.TargetWait
	})
}

// AlternativeOf is the values of the schedule s as an Alternative.
func AlternativeOf(s *autoscale.Schedule) Alternative {
	return Alternative{IdleCount: s.IdleCount, IdleTime: s.IdleTime, Preemptive: s.Preemptive, Adaptive: s.Adaptive, TargetWait: s.TargetWait}
}

// eachSchedule returns a copy of pol whose schedules (the top-level
// values and every period) set changes; pol is not changed.
func eachSchedule(pol *autoscale.Policy, set func(s *autoscale.Schedule)) *autoscale.Policy {
	cp := *pol
	set(&cp.Base)
	cp.Schedules = append([]autoscale.Schedule(nil), pol.Schedules...)
	for i := range cp.Schedules {
		set(&cp.Schedules[i])
	}
	return &cp
}
