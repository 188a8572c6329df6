package autoscale

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/drover-ci/drover/internal/config"
)

// State of an instance as the policy sees it.
type State int

const (
	StateCreating State = iota // asked for, not ready yet (booting or running ready command)
	StateIdle                  // ready, no slot acquired
	StateBusy                  // ready, at least one slot acquired
	StateRemoving              // removal requested or in progress (counts toward max_instances/limit)
)

// String returns the state's name.
func (s State) String() string {
	switch s {
	case StateCreating:
		return "creating"
	case StateIdle:
		return "idle"
	case StateBusy:
		return "busy"
	case StateRemoving:
		return "removing"
	}
	return fmt.Sprintf("State(%d)", int(s))
}

// Instance is one instance of the pool.
type Instance struct {
	ID       string
	State    State
	Created  time.Time // creation requested
	Ready    time.Time // zero until ready
	LastUsed time.Time // end of its last job; zero = never used (idle time then counts from Ready, else Created)
	UseCount int       // jobs started on it
	Acquired int       // slots in use now
}

// idleSince is when the instance's current idle spell began.
func (in *Instance) idleSince() time.Time {
	switch {
	case !in.LastUsed.IsZero():
		return in.LastUsed
	case !in.Ready.IsZero():
		return in.Ready
	}
	return in.Created
}

// Observed is what the pool measured; only the adaptive policy uses it.
type Observed struct {
	ArrivalRate  float64       // jobs per second, recent (EWMA)
	MeanDuration time.Duration // mean job run time, recent
	BootTime     time.Duration // mean instance creation->ready time, recent
	// ArrivalDispersion is the index of dispersion of arrivals (variance
	// over mean of the arrivals per 10 s): 1 for Poisson arrivals, about
	// E[K²]/E[K] when jobs come in pipeline fan-outs of K. Values below 1
	// (or unset) count as 1.
	ArrivalDispersion float64
	// BufferGain is the adaptive policy's correction from the waits jobs
	// got while it was in force (the pool's feedback loop, see
	// AdaptiveIdleSlots): it multiplies the spread the buffer is sized
	// for. 0 counts as 1.
	BufferGain float64
}

// Demand is the work that is not on an instance yet. Reserved and Waiting
// are disjoint: a reservation whose job has called Acquire and waits for a
// slot counts in Waiting only.
type Demand struct {
	Reserved int // slots reserved: job requests in flight + jobs received but not yet on an instance
	Waiting  int // acquisitions waiting for a slot right now
	Observed Observed
}

// Removal is an instance the policy wants gone, and why.
type Removal struct {
	ID     string
	Reason string
}

// Decision is what Decide wants done now.
type Decision struct {
	Create       int       // instances to create now
	CreateReason string    // why ("idle target 4 slots, have 2", "waiting jobs", ...); when Create is 0, what blocks a wanted creation, if anything
	Remove       []Removal // instances to remove now, with the reason for each
	IdleTarget   int       // idle slots wanted (after period/scale factor/adaptive)
	Schedule     *Schedule // the active schedule (nil = top-level values)
}

// Dialect is the configuration dialect a Policy came from.
type Dialect int

const (
	// DialectMachine is [runners.machine]: capacity in machines, one job
	// per machine, GitLab Runner's docker+machine algorithm.
	DialectMachine Dialect = iota
	// DialectAutoscaler is [runners.autoscaler]: capacity in job slots,
	// capacity_per_instance slots per instance, taskscaler's algorithm.
	DialectAutoscaler
)

// String returns the config table of the dialect.
func (d Dialect) String() string {
	if d == DialectMachine {
		return "runners.machine"
	}
	return "runners.autoscaler"
}

// Policy is the whole autoscaling configuration of one runner, both dialects
// normalised to one engine. A Policy must not be changed once in use; it is
// safe for concurrent use by Decide, CanReserve and Active.
type Policy struct {
	Dialect             Dialect    // DialectMachine ([runners.machine]) or DialectAutoscaler ([runners.autoscaler])
	CapacityPerInstance int        // slots per instance; 1 for machine dialect
	MaxUseCount         int        // MaxBuilds / max_use_count; 0 = unlimited
	MaxInstances        int        // limit / max_instances, in every state; 0 = unlimited
	MaxGrowthRate       int        // creations in flight at once; 0 = unlimited
	Concurrent          int        // global concurrent (bounds the jobs CanReserve lets in); 0 = unlimited
	Limit               int        // the runner's limit, in jobs (bounds them too); 0 = unlimited
	Base                Schedule   // top-level values
	Schedules           []Schedule // periods; LAST active one wins

	// ReservationThrottling (autoscaler dialect, preemptive mode; default
	// on): in-flight reservations may not exceed the free slots on ready
	// instances minus capacity_per_instance (but one is always allowed
	// while a slot is free), so that long-polling job requests cannot pin
	// idle instances forever.
	ReservationThrottling bool

	// ScaleThrottle paces instance creations (autoscaler dialect's
	// [runners.autoscaler.scale_throttle]); the pool applies it, not
	// Decide.
	ScaleThrottle ScaleThrottle

	// Billing is how the cloud bills the instances (billing_increment,
	// billing_minimum): the simulator reports billed instance-time with
	// it, and the adaptive policy's scale-in keeps an idle instance whose
	// paid period has time left (see AdaptiveKeep).
	Billing Billing

	// Warnings found while reading the configuration (unknown keys,
	// deprecated keys, periods that can hardly match).
	Warnings []config.Warning
}

// ScaleThrottle is a token bucket on instance creations, as taskscaler
// has it: up to Burst creations at once, refilled at Limit per second.
// Zero values are the defaults: Limit 100, Burst max_instances (Limit when
// max_instances is 0).
type ScaleThrottle struct {
	Limit int // creations per second
	Burst int // creations at once
}

// DefaultScaleThrottleLimit is taskscaler's default creation rate.
const DefaultScaleThrottleLimit = 100

// Throttle returns the creation rate (per second) and burst in force,
// defaults filled in. The machine dialect has no scale_throttle: its
// creations are paced by MaxGrowthRate alone, and Throttle returns 0, 0
// (no throttle).
func (p *Policy) Throttle() (limit float64, burst int) {
	if p.Dialect != DialectAutoscaler {
		return 0, 0
	}
	l := p.ScaleThrottle.Limit
	if l <= 0 {
		l = DefaultScaleThrottleLimit
	}
	b := p.ScaleThrottle.Burst
	if b <= 0 {
		b = p.MaxInstances
	}
	if b <= 0 {
		b = l
	}
	return float64(l), b
}

// Active returns the schedule in force at now (last matching, else &p.Base).
func (p *Policy) Active(now time.Time) *Schedule {
	for i := len(p.Schedules) - 1; i >= 0; i-- {
		if s := &p.Schedules[i]; s.in(now, p.Dialect) {
			return s
		}
	}
	return &p.Base
}

// JobCap is the most jobs of the runner the manager runs at once: the
// global concurrent and the runner's limit, whichever is set and smaller;
// 0 = unlimited. CanReserve lets no more in, as the manager does not.
func (p *Policy) JobCap() int {
	switch {
	case p.Concurrent <= 0:
		return max(p.Limit, 0)
	case p.Limit <= 0:
		return p.Concurrent
	}
	return min(p.Concurrent, p.Limit)
}

// CapWarning explains how concurrent or the runner's limit keeps an
// autoscaler-dialect pool from ever filling: the manager runs fewer of
// the runner's jobs at once (JobCap) than max_instances ×
// capacity_per_instance slots, so a job waits at the coordinator while
// max_instances would allow an instance for it, and a simulation or
// sweep of the policy measures the cap rather than the policy. runner
// names the runner in the message. It returns "" when the cap is not
// below the slots, when max_instances is 0 (unlimited) and for the
// machine dialect, whose limit is the cap on machines itself and where
// GitLab Runner's documented sizing keeps it above concurrent for idle
// machines (concurrent 20, limit 40, IdleCount 10).
func (p *Policy) CapWarning(runner string) string {
	jobCap := p.JobCap()
	if p.Dialect != DialectAutoscaler || p.MaxInstances <= 0 || jobCap <= 0 {
		return ""
	}
	slots := int64(p.MaxInstances) * int64(p.capacity())
	if int64(jobCap) >= slots {
		return ""
	}
	var caps, raise []string
	if p.Concurrent > 0 && int64(p.Concurrent) < slots {
		c := fmt.Sprintf("concurrent = %d", p.Concurrent)
		if p.Concurrent == config.DefaultConcurrent {
			c += ", as when config.toml does not set it"
		}
		caps, raise = append(caps, c), append(raise, "concurrent")
	}
	if p.Limit > 0 && int64(p.Limit) < slots {
		caps, raise = append(caps, fmt.Sprintf("limit = %d", p.Limit)), append(raise, "the runner's limit")
	}
	jobs := "jobs"
	if jobCap == 1 {
		jobs = "job"
	}
	return fmt.Sprintf("runner %q runs at most %d %s at once (%s), fewer than the %d slots of max_instances %d × capacity_per_instance %d: the pool never fills and further jobs wait at the coordinator; set %s to at least %d, or lower max_instances",
		runner, jobCap, jobs, strings.Join(caps, "; "), slots, p.MaxInstances, p.capacity(), strings.Join(raise, " and "), slots)
}

func (p *Policy) capacity() int {
	if p.Dialect == DialectMachine || p.CapacityPerInstance < 1 {
		return 1
	}
	return p.CapacityPerInstance
}

// usable is the number of further jobs the instance can take now: its
// free slots, no more than its remaining uses.
func (p *Policy) usable(in *Instance, capacity int) int {
	u := capacity - in.Acquired
	if p.MaxUseCount > 0 {
		u = min(u, p.MaxUseCount-in.UseCount)
	}
	return max(u, 0)
}

// freshUsable is what a new instance offers.
func (p *Policy) freshUsable(capacity int) int {
	if p.MaxUseCount > 0 {
		return min(capacity, p.MaxUseCount)
	}
	return capacity
}

// Decide is pure: same inputs, same output. Instances are in list order
// (oldest first). It never proposes more than MaxInstances in all states,
// nor more than MaxGrowthRate creating at once.
func Decide(p *Policy, now time.Time, instances []Instance, d Demand) Decision {
	s := p.Active(now)
	var dec Decision
	if s != &p.Base {
		dec.Schedule = s
	}
	if p.Dialect == DialectMachine {
		decideMachine(p, s, now, instances, d, &dec)
	} else {
		decideSlots(p, s, now, instances, d, &dec)
	}
	return dec
}

// MachineIdleTarget is the number of idle machines the machine dialect
// wants with inUse machines in use: IdleCount, or with IdleScaleFactor > 0
// floor(inUse × IdleScaleFactor) bounded below by max(1, IdleCountMin) and
// above by IdleCount. It is the least number of available machines for
// which GitLab Runner's "idle target exceeded" predicate holds.
func MachineIdleTarget(s *Schedule, inUse int) int {
	if s.ScaleFactor <= 0 {
		return max(s.IdleCount, 0)
	}
	scaled := int(math.Floor(float64(inUse) * s.ScaleFactor))
	return max(min(s.IdleCount, max(1, s.IdleCountMin, scaled)), 0)
}

func decideMachine(p *Policy, s *Schedule, now time.Time, instances []Instance, d Demand, dec *Decision) {
	busy := 0
	for i := range instances {
		if instances[i].State == StateBusy {
			busy++
		}
	}
	waiting := max(d.Waiting, 0)
	// Jobs waiting for a machine are in use in GitLab's counting (their
	// machine is being created in state Used).
	target := MachineIdleTarget(s, busy+waiting)
	dec.IdleTarget = target

	// Removal walks the list in order, counting as it goes: the first
	// machines that keep the idle target survive, later ones past IdleTime
	// go. Available starts below zero by the waiting jobs, which will take
	// the first idle machines.
	avail, total := -waiting, 0
	idle, creating := 0, 0
	// Reasons are the same for every machine of a kind: made once, when
	// first needed, so that trimming thousands allocates little.
	var tooManyBuilds, tooMany, tooIdle string
	for i := range instances {
		in := &instances[i]
		switch in.State {
		case StateIdle:
			var reason string
			switch {
			case p.MaxUseCount > 0 && in.UseCount >= p.MaxUseCount:
				if tooManyBuilds == "" {
					tooManyBuilds = fmt.Sprintf("too many builds: MaxBuilds %d reached", p.MaxUseCount)
				}
				reason = tooManyBuilds
			case p.MaxInstances > 0 && total >= p.MaxInstances:
				if tooMany == "" {
					tooMany = fmt.Sprintf("too many machines: limit %d reached by the machines before it", p.MaxInstances)
				}
				reason = tooMany
			case now.Sub(in.idleSince()) > s.IdleTime && avail >= target:
				if tooIdle == "" {
					tooIdle = fmt.Sprintf("too many idle machines: idle longer than IdleTime %s while the idle target %d is met", s.IdleTime, target)
				}
				reason = tooIdle
			}
			if reason != "" {
				if dec.Remove == nil {
					dec.Remove = make([]Removal, 0, 8)
				}
				dec.Remove = append(dec.Remove, Removal{ID: in.ID, Reason: reason})
				break
			}
			avail++
			idle++
		case StateCreating:
			avail++
			creating++
		}
		total++
	}

	c := creator{p: p, total: total, creating: creating}
	// On demand: a machine for every waiting job that no idle or booting
	// machine will serve.
	if need := waiting - idle - creating; need > 0 {
		if n := c.create(need); n > 0 {
			dec.addReason(fmt.Sprintf("%d waiting jobs without a machine", n))
		}
		if n := need - c.created; n > 0 {
			dec.blocked(fmt.Sprintf("%d waiting jobs without a machine", n), c.blockedBy())
		}
	}
	avail = idle + creating + c.created - waiting
	if avail < target {
		want := target - avail
		n := c.create(want)
		if n > 0 {
			dec.addReason(fmt.Sprintf("idle target %d machines, have %d", target, max(avail, 0)))
		}
		if n < want {
			dec.blocked(fmt.Sprintf("idle target %d machines, have %d", target, max(avail+n, 0)), c.blockedBy())
		}
	}
	dec.Create = c.created
}

// SlotIdleTarget is the number of idle slots the autoscaler dialect wants
// with acquired slots in use: idle_count (or the adaptive size, see
// AdaptiveIdleSlots), raised to ceil(scale_factor × acquired) when
// scale_factor > 0, that product capped by scale_factor_limit when it is
// > 0; never more than max_instances can hold.
func SlotIdleTarget(p *Policy, s *Schedule, acquired int, o Observed) int {
	t := max(s.IdleCount, 0)
	if s.Adaptive {
		t = max(t, AdaptiveIdleSlots(o, s.TargetWait))
		if t == 0 && s.Preemptive {
			t = 1 // preemptive with nothing idle would never take a job
		}
	}
	if s.ScaleFactor > 0 {
		scaled := int(math.Ceil(float64(acquired) * s.ScaleFactor))
		if s.ScaleFactorLimit > 0 {
			scaled = min(scaled, s.ScaleFactorLimit)
		}
		t = max(t, scaled)
	}
	if p.MaxInstances > 0 {
		t = min(t, max(p.MaxInstances*p.capacity()-acquired, 0))
	}
	return t
}

func decideSlots(p *Policy, s *Schedule, now time.Time, instances []Instance, d Demand, dec *Decision) {
	capacity := p.capacity()
	acquired, free := 0, 0
	for i := range instances {
		in := &instances[i]
		if in.State == StateRemoving {
			continue
		}
		acquired += in.Acquired
		if in.State != StateIdle {
			free += p.usable(in, capacity) // busy and booting instances are kept
		}
	}
	target := SlotIdleTarget(p, s, acquired, d.Observed)
	dec.IdleTarget = target
	// A reservation is a job request in flight, not a job. In preemptive
	// mode it holds a ready slot, which stays free for it, the idle target
	// coming on top (as taskscaler counts it). Otherwise it holds nothing
	// and creates nothing: on-demand instances are created for jobs
	// received (Waiting), not for every long-polling request.
	reserved := 0
	if s.Preemptive {
		reserved = max(d.Reserved, 0)
	}
	needFree := reserved + max(d.Waiting, 0) + target
	idleTime := s.IdleTime
	band := 0 // free slots kept beyond needFree against boots (AdaptiveBand)
	if s.Adaptive {
		idleTime = AdaptiveIdleTime(s, d.Observed)
		band = AdaptiveBand(s, d.Observed, target)
	}

	// total counts every instance, for max_instances on creation; kept
	// only those that stay (not removing, not removed by this pass), so
	// that, unlike docker+machine's walk, an instance on its way out never
	// pushes a good one over max_instances.
	total, kept, creating := 0, 0, 0
	var usedUp, tooMany, tooIdle string // made once, see decideMachine
	for i := range instances {
		in := &instances[i]
		removed := in.State == StateRemoving
		switch in.State {
		case StateCreating:
			creating++
		case StateIdle:
			u := p.usable(in, capacity)
			var reason string
			switch {
			case in.Acquired != 0:
			case p.MaxUseCount > 0 && in.UseCount >= p.MaxUseCount:
				if usedUp == "" {
					usedUp = fmt.Sprintf("max_use_count %d reached", p.MaxUseCount)
				}
				reason = usedUp
			case p.MaxInstances > 0 && kept >= p.MaxInstances:
				if tooMany == "" {
					tooMany = fmt.Sprintf("too many instances: max_instances %d reached by the instances before it", p.MaxInstances)
				}
				reason = tooMany
			case now.Sub(in.idleSince()) > idleTime && free >= needFree+band && !(s.Adaptive && AdaptiveKeep(p.Billing, in.Created, now)):
				if tooIdle == "" {
					what := "idle_time " + s.IdleTime.String()
					if idleTime != s.IdleTime {
						what = "the adaptive hold " + idleTime.String()
					}
					kept := ""
					if band > 0 {
						kept = fmt.Sprintf(", %d more kept against boots", band)
					}
					tooIdle = fmt.Sprintf("idle longer than %s and not needed: %d free slots wanted (%d reserved, %d waiting, idle target %d%s) are there without it",
						what, needFree+band, max(d.Reserved, 0), max(d.Waiting, 0), target, kept)
				}
				reason = tooIdle
			}
			if reason != "" {
				dec.Remove = append(dec.Remove, Removal{ID: in.ID, Reason: reason})
				removed = true
			} else {
				free += u
			}
		}
		total++
		if !removed {
			kept++
		}
	}

	if free >= needFree {
		return
	}
	per := p.freshUsable(capacity)
	want := (needFree - free + per - 1) / per
	c := creator{p: p, total: total, creating: creating}
	n := c.create(want)
	desc := fmt.Sprintf("%d slots wanted free (%d reserved, %d waiting, idle target %d), have %d",
		needFree, max(d.Reserved, 0), max(d.Waiting, 0), target, free)
	if n > 0 {
		dec.addReason(desc)
	}
	if n < want {
		dec.blocked(desc, c.blockedBy())
	}
	dec.Create = n
}

// creator hands out creations within max_instances and MaxGrowthRate.
type creator struct {
	p                        *Policy
	total, creating, created int
}

func (c *creator) create(n int) int {
	k := n
	if c.p.MaxInstances > 0 {
		k = min(k, c.p.MaxInstances-c.total)
	}
	if c.p.MaxGrowthRate > 0 {
		k = min(k, c.p.MaxGrowthRate-c.creating)
	}
	k = max(k, 0)
	c.total += k
	c.creating += k
	c.created += k
	return k
}

func (c *creator) blockedBy() string {
	var why []string
	if c.p.MaxInstances > 0 && c.total >= c.p.MaxInstances {
		why = append(why, fmt.Sprintf("%d instances in all states, limit %d", c.total, c.p.MaxInstances))
	}
	if c.p.MaxGrowthRate > 0 && c.creating >= c.p.MaxGrowthRate {
		why = append(why, fmt.Sprintf("%d being created, MaxGrowthRate %d", c.creating, c.p.MaxGrowthRate))
	}
	return strings.Join(why, "; ")
}

func (d *Decision) addReason(r string) {
	if d.CreateReason != "" {
		d.CreateReason += "; "
	}
	d.CreateReason += r
}

// blocked records what keeps a wanted creation from happening.
func (d *Decision) blocked(what, by string) {
	if by == "" {
		return
	}
	d.addReason(what + ": held back by " + by)
}

// CanReserve reports whether one more slot may be reserved now (preemptive
// mode: only against idle capacity on ready instances, minus reservation
// throttling; non-preemptive: while total possible capacity allows).
//
// The machine dialect is preemptive while the active IdleCount > 0 (GitLab
// Runner does not ask for a job without an idle machine then); with
// IdleCount = 0 machines are made on demand, as long as limit allows one
// more. In both dialects the jobs of this runner (acquired slots, reserved
// and waiting) stay below JobCap (concurrent and limit) when it is set.
func CanReserve(p *Policy, now time.Time, instances []Instance, d Demand) bool {
	s := p.Active(now)
	capacity := p.capacity()
	jobs := max(d.Reserved, 0) + max(d.Waiting, 0)
	acquired, readyFree, removing, idleOrCreating := 0, 0, 0, 0
	for i := range instances {
		in := &instances[i]
		switch in.State {
		case StateRemoving:
			removing++
			continue
		case StateIdle, StateBusy:
			readyFree += p.usable(in, capacity)
			if in.State == StateIdle {
				idleOrCreating++
			}
		case StateCreating:
			idleOrCreating++
		}
		acquired += in.Acquired
	}
	if jobCap := p.JobCap(); jobCap > 0 && acquired+jobs >= jobCap {
		return false
	}
	preemptive := s.Preemptive
	if p.Dialect == DialectMachine {
		preemptive = s.IdleCount > 0
	}
	if preemptive {
		allowed := readyFree
		if p.Dialect == DialectAutoscaler && p.ReservationThrottling && readyFree > capacity {
			allowed = max(readyFree-capacity, 1)
		}
		return jobs < allowed
	}
	if p.MaxInstances <= 0 {
		return true
	}
	if p.Dialect == DialectMachine {
		// Machines needed with one more job: the busy ones, the ones being
		// removed, and one per job not on a machine (idle and booting ones
		// serve those first).
		busy := 0
		for i := range instances {
			if instances[i].State == StateBusy {
				busy++
			}
		}
		return busy+removing+max(jobs+1, idleOrCreating) <= p.MaxInstances
	}
	return acquired+jobs+1 <= (p.MaxInstances-removing)*capacity
}
