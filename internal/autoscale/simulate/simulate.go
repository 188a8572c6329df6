package simulate

import (
	"cmp"
	"container/heap"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"time"

	"github.com/drover-ci/drover/internal/autoscale"
	"github.com/drover-ci/drover/internal/clock"
	"github.com/drover-ci/drover/internal/fleet"
	"github.com/drover-ci/drover/internal/fleet/sim"
)

// DefaultDuration is the simulated span when Options.Duration is zero: a
// day of trace plus an hour to watch the pool shrink.
const DefaultDuration = 25 * time.Hour

// DefaultStart is the virtual time of a trace's second 0 (a Monday, UTC),
// which decides the policy periods in force.
var DefaultStart = time.Date(2026, 1, 5, 0, 0, 0, 0, time.UTC)

// Options configure a simulation.
type Options struct {
	Policy     *autoscale.Policy
	BootTime   time.Duration // mean instance boot time
	BootSpread time.Duration // boot times spread uniformly over BootTime ± BootSpread
	DeleteTime time.Duration // how long a deletion takes
	// Duration is the simulated span; jobs arriving later are left out.
	// 0 = DefaultDuration.
	Duration time.Duration
	Start    time.Time // 0 = DefaultStart
	Seed     uint64    // seeds the boot time spread
	// PollInterval is the manager's check_interval: jobs not yet taken
	// are requested (Reserve) only every PollInterval, all the jobs
	// queued at once, as a manager that asks again at once after getting
	// a job; a job it could not reserve waits for the next poll. 0 = at
	// every event (an idealised manager that sees each job the moment it
	// is queued). A reserved job waits for its slot (Acquire) without a
	// timeout: instance_acquire_timeout (15 min by default) is far beyond
	// the waits simulated policies cause.
	PollInterval time.Duration
	// Samples is the number of timeline points kept for the plot; 0 =
	// 1000, negative = none.
	Samples int
	Logger  *slog.Logger // the pool's log; nil = discarded
	// WarmUp is the trace of the day before (arrivals from its own second
	// 0, sorted), replayed before the measured one on the same pool, so
	// that the pool starts the day as a manager that ran yesterday does:
	// with its instances and what it learnt (an adaptive schedule's
	// statistics and feedback). Nothing of the warm-up is reported. nil =
	// the pool starts empty at Start.
	WarmUp []Job
	// LateAfter is the wait beyond which Result.Hours counts a job late:
	// 0 = autoscale.DefaultTargetWait (30 s), the p95 target the adaptive
	// policy keeps by default.
	LateAfter time.Duration
	// WarmUpSpan is how much of the warm-up day's end is replayed: 0 =
	// all of it (WarmUpDay). A pool without statistics of its own (a
	// static configuration) needs only the last hour or two to start the
	// day as it would have.
	WarmUpSpan time.Duration
	// Billing is how the cloud bills the instances, for the billed
	// instance time reported: nil = Policy.Billing (which the policy also
	// decides with). A different one measures a policy in a billing model
	// it does not know of (billing-blind).
	Billing *autoscale.Billing
}

// WarmUpDay is the length of a warm-up trace: a day, before Start.
const WarmUpDay = 24 * time.Hour

// Report is the outcome of a simulation. Waits are nearest-rank
// percentiles over every job that arrived; a job still queued at the end
// counts with the wait it had so far.
type Report struct {
	Jobs           int     `json:"jobs"`
	WaitP50        float64 `json:"wait_p50_s"`
	WaitP95        float64 `json:"wait_p95_s"`
	WaitP99        float64 `json:"wait_p99_s"`
	WaitMax        float64 `json:"wait_max_s"`
	BusyInstanceS  float64 `json:"busy_instance_s"`
	IdleInstanceS  float64 `json:"idle_instance_s"`
	PeakInstances  int     `json:"peak_instances"`
	FinalInstances int     `json:"final_instances"`
	Created        int     `json:"created"`
	Removed        int     `json:"removed"`

	// Not in the JSON report (its keys are fixed), shown in the text one.
	CreatingInstanceS float64 `json:"-"`
	RemovingInstanceS float64 `json:"-"`
	// BilledInstanceS is what the cloud bills for the day: every
	// instance's lifetime (creation requested to deletion done) as
	// Options.Billing rounds it, each increment counted in the day when it
	// starts in it (an instance alive at the end pays the one it is in).
	BilledInstanceS float64           `json:"-"`
	Billing         autoscale.Billing `json:"-"`
	Unstarted       int               `json:"-"` // jobs still queued at the end
}

// Sample is the pool and queue at one point of the simulation.
type Sample struct {
	At                             time.Duration // since the start
	Creating, Idle, Busy, Removing int
	Queued                         int // arrived, not yet on a slot
}

// Result is a Report plus the timeline for the plot.
type Result struct {
	Report
	Duration time.Duration
	Timeline []Sample
	// Waits is every job's queue wait in seconds, in arrival order (a job
	// still queued at the end with the wait it had so far).
	Waits []float64
	// Hours breaks the day down by the hour from the start: where the
	// instance time went and which jobs waited (the last one may be
	// shorter than an hour).
	Hours []Hour
	// Lifetimes are the lives of the instances billed in the day, for
	// billing them in another model (Bill).
	Lifetimes []Lifetime
}

// Lifetime is an instance's life as a cloud bills it: from the creation
// request to the end of its deletion (zero: alive at the end).
type Lifetime struct{ Created, Deleted time.Time }

// Bill bills lives with b over the day [start, start+d): the total and,
// into hours (the day's, from start), each hour's BilledS; the sum of
// the hours is the total.
func Bill(lives []Lifetime, b autoscale.Billing, start time.Time, d time.Duration, hours []Hour) float64 {
	for h := range hours {
		hours[h].BilledS = 0
	}
	end := start.Add(d)
	total := 0.0
	for _, l := range lives {
		last := end
		if !l.Deleted.IsZero() {
			last = minTime(l.Deleted.Add(time.Nanosecond), end)
		}
		first := max(int(l.Created.Sub(start)/time.Hour), 0)
		for h := first; h < len(hours); h++ {
			from := start.Add(time.Duration(h) * time.Hour)
			if !from.Before(last) {
				break
			}
			s := b.BilledWithin(l.Created, l.Deleted, from, minTime(from.Add(time.Hour), end)).Seconds()
			hours[h].BilledS += s
			total += s
		}
	}
	return total
}

// Hour is one hour of a simulation: the jobs that arrived in it, how
// they waited, and the instance time spent in it by state.
type Hour struct {
	Start   time.Duration // since the start of the day
	Jobs    int           // arrived in this hour
	Late    int           // of those, waited longer than Options.LateAfter
	WaitP95 float64       // seconds, over the jobs that arrived in this hour
	BusyS   float64       // instance-seconds busy
	IdleS   float64       // instance-seconds idle
	// CreatingS is the instance-seconds spent booting.
	CreatingS float64
	// BilledS is the instance-seconds billed for the increments that
	// started in this hour (Bill).
	BilledS float64
}

// account adds the state cur held over [from, to) to the hours it spans.
func (r *Result) account(start, from, to time.Time, cur Sample) {
	for from.Before(to) {
		h := int(from.Sub(start) / time.Hour)
		if h < 0 || h >= len(r.Hours) {
			return
		}
		end := minTime(to, start.Add(time.Duration(h+1)*time.Hour))
		dt := end.Sub(from).Seconds()
		hr := &r.Hours[h]
		hr.BusyS += dt * float64(cur.Busy)
		hr.IdleS += dt * float64(cur.Idle)
		hr.CreatingS += dt * float64(cur.Creating)
		from = end
	}
}

// hourStats fills in the jobs of each hour from waits (seconds, in the
// order of arrivals).
func (r *Result) hourStats(arrivals []time.Duration, waits []float64, lateAfter time.Duration) {
	per := make([][]float64, len(r.Hours))
	for i, a := range arrivals {
		h := int(a / time.Hour)
		if h < 0 || h >= len(r.Hours) {
			continue
		}
		per[h] = append(per[h], waits[i])
		r.Hours[h].Jobs++
		if waits[i] > lateAfter.Seconds() {
			r.Hours[h].Late++
		}
	}
	for h, ws := range per {
		slices.Sort(ws)
		r.Hours[h].WaitP95 = percentile(ws, 0.95)
	}
}

type simJob struct {
	Job
	res     *autoscale.Reservation
	started bool
	wait    time.Duration
}

type running struct {
	end time.Time
	acq *autoscale.Acquisition
}

type endHeap []running

func (h endHeap) Len() int           { return len(h) }
func (h endHeap) Less(i, j int) bool { return h[i].end.Before(h[j].end) }
func (h endHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *endHeap) Push(x any)        { *h = append(*h, x.(running)) }
func (h *endHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

type replay struct {
	polling bool // Reserve only at poll times (Options.PollInterval)
	poll    bool // this event is a poll time
	pool    *autoscale.Pool
	clk     *clock.Fake
	t0      time.Time
	jobs    []simJob
	head    int // first job not started
	resEnd  int // jobs[:resEnd] hold (or held) a reservation
	arrived int // jobs[:arrived] have arrived
	ends    endHeap
	queued  int
}

// Run replays jobs (sorted by arrival, as ReadTrace returns them) and
// reports. It returns ctx's error if ctx is cancelled.
func Run(ctx context.Context, o Options, jobs []Job) (*Result, error) {
	if o.Policy == nil {
		return nil, errors.New("simulate: no policy")
	}
	byArrival := func(a, b Job) int { return cmp.Compare(a.Arrival, b.Arrival) }
	if !slices.IsSortedFunc(jobs, byArrival) {
		return nil, errors.New("simulate: jobs are not sorted by arrival")
	}
	if !slices.IsSortedFunc(o.WarmUp, byArrival) {
		return nil, errors.New("simulate: warm-up jobs are not sorted by arrival")
	}
	if o.Duration <= 0 {
		o.Duration = DefaultDuration
	}
	if o.Start.IsZero() {
		o.Start = DefaultStart
	}
	if o.Samples == 0 {
		o.Samples = 1000
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	// The clock starts a day early when there is a warm-up; job arrivals
	// are relative to first (the warm-up's start, else Start).
	var warm, skip time.Duration // warm-up replayed; its part left out
	if len(o.WarmUp) > 0 {
		warm = WarmUpDay
		if o.WarmUpSpan > 0 && o.WarmUpSpan < WarmUpDay {
			warm, skip = o.WarmUpSpan, WarmUpDay-o.WarmUpSpan
		}
	}
	first := o.Start.Add(-warm)
	clk := clock.NewFake(first)
	prov := sim.New(sim.Options{Clock: clk, BootTime: o.BootTime, BootSpread: o.BootSpread, DeleteTime: o.DeleteTime, Seed: o.Seed})
	pool, err := autoscale.NewPool(autoscale.PoolOptions{
		Policy: o.Policy, Provider: prov, Clock: clk, Logger: slog.New(virtualTime{o.Logger.Handler(), clk}),
		Settings: fleet.Settings{Name: "sim"},
	})
	if err != nil {
		return nil, fmt.Errorf("simulate: %w", err)
	}
	s := &replay{pool: pool, clk: clk, t0: first, polling: o.PollInterval > 0}
	nextPoll := first
	for _, j := range o.WarmUp {
		if j.Arrival >= skip && j.Arrival < WarmUpDay {
			j.Arrival -= skip
			s.jobs = append(s.jobs, simJob{Job: j})
		}
	}
	measured := len(s.jobs) // s.jobs[measured:] are the reported day's
	for _, j := range jobs {
		if j.Arrival < o.Duration {
			j.Arrival += warm
			s.jobs = append(s.jobs, simJob{Job: j})
		}
	}
	var created0, removed0 int // the provider's counts when the day starts
	end := o.Start.Add(o.Duration)
	res := &Result{Duration: o.Duration}
	res.Hours = make([]Hour, (o.Duration+time.Hour-1)/time.Hour)
	for h := range res.Hours {
		res.Hours[h].Start = time.Duration(h) * time.Hour
	}
	if o.LateAfter <= 0 {
		o.LateAfter = autoscale.DefaultTargetWait
	}
	var step time.Duration
	nextSample := o.Start
	if o.Samples > 0 {
		step = max(time.Second, o.Duration/time.Duration(o.Samples))
	}

	nextTick := pool.Tick(ctx)
	var cur Sample
	observe := func() {
		cur.Creating, cur.Idle, cur.Busy, cur.Removing = pool.Counts()
		cur.Queued = s.queued
		res.PeakInstances = max(res.PeakInstances, cur.Creating+cur.Idle+cur.Busy+cur.Removing)
	}
	observe()
	// The warm-up's peak is dropped when the day begins.
	inDay := warm == 0
	for events := 0; ; events++ {
		if events%4096 == 0 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
		now := clk.Now()
		if !inDay && !now.Before(o.Start) {
			// The reported day begins: the warm-up is not accounted.
			inDay = true
			created0, removed0 = prov.Counts()
			res.PeakInstances = cur.Creating + cur.Idle + cur.Busy + cur.Removing
		}
		t := minTime(nextTick, end)
		if !inDay {
			t = minTime(t, o.Start)
		}
		if s.arrived < len(s.jobs) {
			t = minTime(t, first.Add(s.jobs[s.arrived].Arrival))
		}
		if len(s.ends) > 0 {
			t = minTime(t, s.ends[0].end)
		}
		if s.polling && s.resEnd < s.arrived {
			if nextPoll.Before(now) {
				// The next multiple of PollInterval since the start, now
				// included.
				nextPoll = now.Add((o.PollInterval - now.Sub(first)%o.PollInterval) % o.PollInterval)
			}
			t = minTime(t, nextPoll)
		}
		// The state is constant over [now, t): account for it.
		dt := t.Sub(now).Seconds()
		if !inDay {
			dt = 0
		}
		res.BusyInstanceS += dt * float64(cur.Busy)
		res.IdleInstanceS += dt * float64(cur.Idle)
		res.CreatingInstanceS += dt * float64(cur.Creating)
		res.RemovingInstanceS += dt * float64(cur.Removing)
		if inDay {
			res.account(o.Start, now, t, cur)
		}
		for step > 0 && inDay && nextSample.Before(t) {
			smp := cur
			smp.At = nextSample.Sub(o.Start)
			res.Timeline = append(res.Timeline, smp)
			nextSample = nextSample.Add(step)
		}
		if !t.Before(end) {
			break
		}
		clk.Advance(t.Sub(now))
		for len(s.ends) > 0 && !s.ends[0].end.After(t) {
			r := heap.Pop(&s.ends).(running)
			pool.Release(r.acq)
		}
		for s.arrived < len(s.jobs) && first.Add(s.jobs[s.arrived].Arrival).Compare(t) <= 0 {
			s.arrived++
			s.queued++
		}
		if s.polling {
			// Poll times are the multiples of PollInterval since the start.
			s.poll = t.Equal(nextPoll) || t.Sub(first)%o.PollInterval == 0
			if s.poll {
				nextPoll = t.Add(o.PollInterval)
			}
		}
		changed := s.dispatch(t)
		nextTick = pool.Tick(ctx)
		if changed || s.queued > 0 {
			s.dispatch(t)
		}
		observe()
	}
	res.Jobs = len(s.jobs) - measured
	waits := make([]float64, 0, res.Jobs)
	arrivals := make([]time.Duration, 0, res.Jobs)
	for i := measured; i < len(s.jobs); i++ {
		j := &s.jobs[i]
		arrivals = append(arrivals, j.Arrival-warm)
		w := j.wait
		if !j.started {
			w = end.Sub(first.Add(j.Arrival))
			res.Unstarted++
		}
		waits = append(waits, w.Seconds())
	}
	res.Waits = slices.Clone(waits)
	res.hourStats(arrivals, res.Waits, o.LateAfter)
	slices.Sort(waits)
	res.WaitP50 = percentile(waits, 0.50)
	res.WaitP95 = percentile(waits, 0.95)
	res.WaitP99 = percentile(waits, 0.99)
	res.WaitMax = percentile(waits, 1)
	res.FinalInstances = cur.Creating + cur.Idle + cur.Busy + cur.Removing
	res.Created, res.Removed = prov.Counts()
	res.Created -= created0
	res.Removed -= removed0
	// The instances deleted by the end are deleted when billed.
	if d := end.Sub(clk.Now()); d > 0 {
		clk.Advance(d)
	}
	res.Billing = o.Policy.Billing
	if o.Billing != nil {
		res.Billing = *o.Billing
	}
	prov.Lifetimes(func(c, d time.Time) {
		if d.IsZero() || d.After(o.Start) {
			res.Lifetimes = append(res.Lifetimes, Lifetime{Created: c, Deleted: d})
		}
	})
	res.BilledInstanceS = Bill(res.Lifetimes, res.Billing, o.Start, o.Duration, res.Hours)
	return res, nil
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// dispatch gives slots to queued jobs in arrival order and reports
// whether any reservation or acquisition changed.
func (s *replay) dispatch(now time.Time) bool {
	changed := false
	blocked := false
	// Jobs holding a reservation, waiting for a slot.
	for i := s.head; i < s.resEnd; i++ {
		j := &s.jobs[i]
		if j.started {
			continue
		}
		a, err := s.pool.TryAcquire(j.res)
		if err != nil || a == nil {
			blocked = true
			break
		}
		s.start(j, a, now)
		changed = true
	}
	// Jobs the manager has not requested yet.
	for s.resEnd < s.arrived && (!s.polling || s.poll) {
		r, err := s.pool.Reserve()
		if err != nil {
			break
		}
		j := &s.jobs[s.resEnd]
		r.SetQueuedAt(s.t0.Add(j.Arrival))
		j.res = r
		s.resEnd++
		changed = true
		a, err := s.pool.TryAcquire(r)
		if err != nil || a == nil {
			blocked = true
			continue
		}
		if blocked {
			// An earlier job is still waiting: it gets the slot first, and
			// this job takes over its waiting reservation.
			for k := s.head; k < s.resEnd-1; k++ {
				if e := &s.jobs[k]; !e.started {
					e.res, j.res = j.res, e.res
					j = e
					break
				}
			}
		}
		s.start(j, a, now)
	}
	for s.head < s.resEnd && s.jobs[s.head].started {
		s.head++
	}
	return changed
}

func (s *replay) start(j *simJob, a *autoscale.Acquisition, now time.Time) {
	j.started = true
	j.wait = now.Sub(s.t0.Add(j.Arrival))
	heap.Push(&s.ends, running{end: now.Add(j.Duration), acq: a})
	s.queued--
}

// percentile is the nearest-rank percentile of sorted xs.
func percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	k := int(math.Ceil(p*float64(len(xs)))) - 1
	return xs[min(max(k, 0), len(xs)-1)]
}

// virtualTime stamps log records with the simulation's clock, so the
// pool's log reads in simulated time.
type virtualTime struct {
	slog.Handler
	clk clock.Clock
}

func (v virtualTime) Handle(ctx context.Context, r slog.Record) error {
	r.Time = v.clk.Now()
	return v.Handler.Handle(ctx, r)
}

func (v virtualTime) WithAttrs(as []slog.Attr) slog.Handler {
	return virtualTime{v.Handler.WithAttrs(as), v.clk}
}

func (v virtualTime) WithGroup(name string) slog.Handler {
	return virtualTime{v.Handler.WithGroup(name), v.clk}
}
