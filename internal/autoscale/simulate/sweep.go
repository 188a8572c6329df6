package simulate

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/drover-ci/drover/internal/autoscale"
)

// SweepResult is the report of one static configuration.
type SweepResult struct {
	IdleCount  int
	IdleTime   time.Duration // idle_time of the run (every schedule)
	Preemptive bool          // preemptive_mode of the run
	Report     Report
	Hours      []Hour // the run hour by hour, late meaning over the sweep's target
	// Lifetimes are the run's instance lives, for Rebill.
	Lifetimes []Lifetime
}

// Rebill bills r's run in billing model b (the day from start, as the
// run had it): Report.BilledInstanceS and every hour's BilledS.
func (r *SweepResult) Rebill(b autoscale.Billing, start time.Time) {
	if start.IsZero() {
		start = DefaultStart
	}
	r.Hours = slices.Clone(r.Hours)
	d := time.Duration(len(r.Hours)) * time.Hour
	r.Report.BilledInstanceS = Bill(r.Lifetimes, b, start, d, r.Hours)
	r.Report.Billing = b
}

// BestBilled is the result of all with the least billed instance time
// whose p95 wait is at most targetP95: the cheapest static configuration
// for the person paying. nil when none meets the target.
func BestBilled(all []SweepResult, targetP95 time.Duration) *SweepResult {
	var best *SweepResult
	for i := range all {
		r := &all[i]
		if r.Report.WaitP95 <= targetP95.Seconds() && (best == nil || r.Report.BilledInstanceS < best.Report.BilledInstanceS) {
			best = r
		}
	}
	return best
}

// Setting describes the configuration of r as an operator writes it:
// "idle_count 3, idle_time 1m0s, preemptive off".
func (r *SweepResult) Setting() string {
	mode := "off"
	if r.Preemptive {
		mode = "on"
	}
	return fmt.Sprintf("idle_count %d, idle_time %s, preemptive %s", r.IdleCount, r.IdleTime, mode)
}

// PreemptiveModes says which preemptive_mode values a sweep tries for each
// idle count.
type PreemptiveModes int

const (
	// PreemptiveDefault is the mode the configuration defaults give: on
	// when idle_count is above zero.
	PreemptiveDefault PreemptiveModes = iota
	// PreemptiveOff runs every count with preemptive_mode = false.
	PreemptiveOff
	// PreemptiveOn runs every count above zero with preemptive_mode =
	// true (a preemptive pool with no idle slot never takes a job, so
	// count 0 runs non-preemptive).
	PreemptiveOn
	// PreemptiveBoth runs each count off, then on when it is above zero.
	PreemptiveBoth
)

// ParsePreemptiveModes reads "default", "off", "on" or "both".
func ParsePreemptiveModes(s string) (PreemptiveModes, error) {
	switch s {
	case "default":
		return PreemptiveDefault, nil
	case "off", "false":
		return PreemptiveOff, nil
	case "on", "true":
		return PreemptiveOn, nil
	case "both":
		return PreemptiveBoth, nil
	}
	return 0, fmt.Errorf("preemptive mode %q: want default, off, on or both", s)
}

// modes is the preemptive_mode values tried with idle count c.
func (m PreemptiveModes) modes(c int) []bool {
	switch {
	case m == PreemptiveOff || c == 0:
		return []bool{false}
	case m == PreemptiveOn || m == PreemptiveDefault:
		return []bool{true}
	}
	return []bool{false, true}
}

// Grid is the set of static configurations a sweep tries: every idle
// count with every idle time and the preemptive modes asked for.
type Grid struct {
	IdleCounts []int
	// IdleTimes are the idle_time values; none = the idle_time each
	// schedule of the policy has.
	IdleTimes  []time.Duration
	Preemptive PreemptiveModes
}

// FullGrid is the whole grid an operator can tune, as issue 19 defines
// it: idle_count 0–32 × idle_time 30 s, 1, 2, 5, 10 and 20 min ×
// preemptive_mode off and on.
func FullGrid() Grid {
	g := Grid{
		IdleTimes:  []time.Duration{30 * time.Second, time.Minute, 2 * time.Minute, 5 * time.Minute, 10 * time.Minute, 20 * time.Minute},
		Preemptive: PreemptiveBoth,
	}
	for c := 0; c <= 32; c++ {
		g.IdleCounts = append(g.IdleCounts, c)
	}
	return g
}

// SweepIdleCount simulates o with each static idle count in counts (the
// base schedule and every period set to it, adaptive off, preemptive mode
// as the defaults have it: on when the count is above zero) and returns
// every result plus the one with the least idle instance time whose p95
// wait is at most targetP95; best is nil when none meets the target.
// It answers "what does the best hand-tuned idle_count cost?", the
// baseline the adaptive policy is measured against.
func SweepIdleCount(ctx context.Context, o Options, jobs []Job, counts []int, targetP95 time.Duration) (best *SweepResult, all []SweepResult, err error) {
	return SweepGrid(ctx, o, jobs, Grid{IdleCounts: counts}, targetP95)
}

// SweepIdleCountBothModes is SweepIdleCount with each count run in both
// preemptive modes (preemptive_mode = false, and = true when the count is
// above zero: a preemptive pool with no idle slot never takes a job), the
// results in that order. The best is the cheapest of all that meet the
// target, so the baseline is the best hand-tuned static configuration
// whichever mode an operator would pick.
func SweepIdleCountBothModes(ctx context.Context, o Options, jobs []Job, counts []int, targetP95 time.Duration) (best *SweepResult, all []SweepResult, err error) {
	return SweepGrid(ctx, o, jobs, Grid{IdleCounts: counts, Preemptive: PreemptiveBoth}, targetP95)
}

// SweepGrid simulates o once per static configuration of g (idle count
// major, then idle time, then preemptive mode; adaptive sizing and the
// scale factor off in every schedule) and returns every result plus the
// one with the least idle instance time whose p95 wait is at most
// targetP95 (nil when none meets it). The runs are spread over GOMAXPROCS
// goroutines; the results do not depend on how many.
func SweepGrid(ctx context.Context, o Options, jobs []Job, g Grid, targetP95 time.Duration) (best *SweepResult, all []SweepResult, err error) {
	if o.Policy == nil {
		return nil, nil, fmt.Errorf("sweep: no policy")
	}
	o.Samples = -1
	if o.LateAfter <= 0 {
		o.LateAfter = targetP95
	}
	idleTimes := g.IdleTimes
	if len(idleTimes) == 0 {
		idleTimes = []time.Duration{-1} // as configured
	}
	var cfgs []SweepResult
	for _, c := range g.IdleCounts {
		for _, it := range idleTimes {
			for _, pre := range g.Preemptive.modes(c) {
				cfgs = append(cfgs, SweepResult{IdleCount: c, IdleTime: it, Preemptive: pre})
			}
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
				pol := StaticIdle(o.Policy, c.IdleCount)
				setPreemptive(pol, c.Preemptive)
				if c.IdleTime >= 0 {
					setIdleTime(pol, c.IdleTime)
				} else {
					c.IdleTime = pol.Base.IdleTime
				}
				oc := o
				oc.Policy = pol
				res, err := Run(ctx, oc, jobs)
				if err != nil {
					errs[i] = fmt.Errorf("sweep idle_count %d (idle_time %s, preemptive %v): %w", c.IdleCount, c.IdleTime, c.Preemptive, err)
					continue
				}
				c.Report, c.Hours, c.Lifetimes = res.Report, res.Hours, res.Lifetimes
				all[i] = c
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

func setIdleTime(pol *autoscale.Policy, d time.Duration) {
	pol.Base.IdleTime = d
	for i := range pol.Schedules {
		pol.Schedules[i].IdleTime = d
	}
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
	return eachSchedule(pol, func(s *autoscale.Schedule) {
		s.IdleCount = idle
		s.Adaptive = false
		s.ScaleFactor = 0
		s.Preemptive = idle > 0
	})
}

// AdaptiveOf returns a copy of pol whose schedules all use the adaptive
// policy with p95 wait target targetWait: adaptive on, no idle_count floor,
// no scale factor, non-preemptive (as the config reader defaults an
// adaptive policy); idle_time stays as configured (the adaptive policy's
// upper bound on keeping an idle instance). It is the adaptive row a sweep
// prints beside the best static configuration.
func AdaptiveOf(pol *autoscale.Policy, targetWait time.Duration) *autoscale.Policy {
	return eachSchedule(pol, func(s *autoscale.Schedule) {
		s.IdleCount = 0
		s.Adaptive = true
		s.TargetWait = targetWait
		s.ScaleFactor = 0
		s.Preemptive = false
	})
}

// Comparison is a policy's simulation against the best static idle_count
// that meets the same p95 target.
type Comparison struct {
	Policy Report // the policy as given (e.g. adaptive)
	// PolicyHours is the policy's run hour by hour (BestStatic.Hours is
	// the best static one's), late meaning over TargetP95.
	PolicyHours []Hour
	BestStatic  *SweepResult  // nil when no static count meets the target
	Static      []SweepResult // every static count tried
	TargetP95   time.Duration
	// PolicyMeetsTarget tells whether the policy's own p95 wait is within
	// TargetP95; a saving only counts when it is.
	PolicyMeetsTarget bool
	// IdleSaving is 1 − policy idle / best static idle (0.3 = 30 % less
	// idle instance time); 0 when there is no best static.
	IdleSaving float64
}

// IdleRatio is the policy's idle instance time over the best static
// one's (0.7 = 30 % less); NaN when there is no best static or it has no
// idle time.
func (c *Comparison) IdleRatio() float64 {
	if c.BestStatic == nil || !(c.BestStatic.Report.IdleInstanceS > 0) {
		return math.NaN()
	}
	return c.Policy.IdleInstanceS / c.BestStatic.Report.IdleInstanceS
}

// StaticWarmUpSpan is how much of a warm-up day Compare replays for each
// static configuration: a static pool learns nothing, and its instances
// at midnight depend on the last idle_time (20 min at most in the grid)
// only, so two hours give the same start as the whole day at a twelfth
// of the cost.
const StaticWarmUpSpan = 2 * time.Hour

// Compare simulates o.Policy as it is and the static configurations of
// grid (SweepGrid), with every other setting as o.Policy has them, and
// compares the idle instance time of the policy with that of the cheapest
// static configuration meeting targetP95. It is the measurement of
// "adaptive vs best static". With a warm-up day (o.WarmUp) the policy
// replays all of it, the static configurations its last StaticWarmUpSpan
// unless o.WarmUpSpan says otherwise.
func Compare(ctx context.Context, o Options, jobs []Job, grid Grid, targetP95 time.Duration) (*Comparison, error) {
	po := o
	po.Samples = -1
	if po.LateAfter <= 0 {
		po.LateAfter = targetP95
	}
	res, err := Run(ctx, po, jobs)
	if err != nil {
		return nil, fmt.Errorf("compare: policy: %w", err)
	}
	so := o
	if len(so.WarmUp) > 0 && so.WarmUpSpan == 0 {
		so.WarmUpSpan = StaticWarmUpSpan
	}
	best, all, err := SweepGrid(ctx, so, jobs, grid, targetP95)
	if err != nil {
		return nil, fmt.Errorf("compare: %w", err)
	}
	c := &Comparison{Policy: res.Report, PolicyHours: res.Hours, BestStatic: best, Static: all, TargetP95: targetP95,
		PolicyMeetsTarget: res.WaitP95 <= targetP95.Seconds()}
	if best != nil && best.Report.IdleInstanceS > 0 {
		c.IdleSaving = 1 - res.IdleInstanceS/best.Report.IdleInstanceS
	}
	return c, nil
}
