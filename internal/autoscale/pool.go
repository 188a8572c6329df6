package autoscale

// The pool is the runtime half of autoscaling (the "taskscaler"): it keeps
// the instances a fleet.Provider reports, hands out job slots on them, and
// runs the pure policy (Decide, CanReserve) on a loop, carrying out what it
// decides. Instance life cycle as the pool sees it:
//
//	Increase ──► creating ──(provider: running, ready command ok)──► idle ◄──► busy
//	                │                                                 │
//	                └──(boot timeout, ready command failed)──► removing ◄──(idle time, max_use_count,
//	                                                              │         heartbeat failures, shutdown)
//	                                                              ▼
//	                                                   (provider: deleted / gone) dropped
//
// A creation the provider refused is never counted: only the number
// Increase reports as requested becomes "pending" until Update shows the
// new instances. Removing instances count toward max_instances until the
// provider reports them gone.

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"time"

	"github.com/drover-ci/drover/internal/clock"
	"github.com/drover-ci/drover/internal/fleet"
)

// ErrNoCapacity is returned by Reserve when a slot may not be reserved now.
var ErrNoCapacity = errors.New("no capacity")

// ErrPoolClosed is returned by Reserve and Acquire after Shutdown.
var ErrPoolClosed = errors.New("autoscale pool is shut down")

// ErrAcquireTimeout is returned (wrapped) by Acquire when no slot became
// free within AcquireTimeout.
var ErrAcquireTimeout = errors.New("timed out waiting for an instance slot")

// Defaults of PoolOptions (the [runners.autoscaler] defaults).
const (
	poolDefaultFailureThreshold            = 3
	poolDefaultAcquireTimeout              = 15 * time.Minute
	poolDefaultUpdateInterval              = time.Minute
	poolDefaultUpdateIntervalWhenExpecting = 2 * time.Second
	poolDefaultDeletionRetryInterval       = time.Minute
	poolDefaultShutdownDeletionInterval    = 10 * time.Second
)

const (
	// poolPendingTimeout drops a requested creation the provider never
	// reported, so a lost request does not hold a max_instances slot
	// forever.
	poolPendingTimeout = 15 * time.Minute
	// poolMaxCreateBackoff bounds the pause after failed creations or ready
	// commands.
	poolMaxCreateBackoff = 5 * time.Minute
	// poolStatsWindow is the time constant of the arrival-rate EWMA.
	poolStatsWindow = 10 * time.Minute
	// poolStatsAlpha is the weight of a new sample in the boot time EWMA.
	poolStatsAlpha = 0.1
	// poolDurationAlpha is the weight of a job's run time in the mean
	// duration (about the last 100 jobs): durations are log-normal with a
	// long tail, and the last ten made the offered load, and with it the
	// adaptive buffer, swing by a fifth.
	poolDurationAlpha = 0.01
)

// Removal reasons of the pool's own (the policy gives its own texts).
const (
	PoolReasonMaxUseCount     = "max_use_count"
	PoolReasonHeartbeat       = "heartbeat_failed"
	PoolReasonReadyFailed     = "ready_command_failed"
	PoolReasonBootTimeout     = "boot_timeout"
	PoolReasonUnknownAtStart  = "unknown_at_startup"
	PoolReasonShutdown        = "shutdown"
	PoolReasonProviderDeleted = "deleted_by_provider"
	PoolReasonBroken          = "broken"
	PoolReasonSuspended       = "suspended_by_provider"
	PoolReasonInterrupted     = "job_interrupted"
)

// PoolOptions configure a Pool. Zero values mean the [runners.autoscaler]
// defaults: FailureThreshold 3, AcquireTimeout 15m, UpdateInterval 1m,
// UpdateIntervalWhenExpecting 2s, DeletionRetryInterval 1m,
// ShutdownDeletionInterval 10s.
type PoolOptions struct {
	Policy   *Policy
	Provider fleet.Provider
	Settings fleet.Settings
	Clock    clock.Clock
	Logger   *slog.Logger
	// StateFile keeps the pool's instances across restarts; "" = none. A
	// restarted pool re-adopts the instances it lists and deletes every
	// other instance the provider reports.
	StateFile string
	// AdoptUnknown adopts instances found at start that the state file
	// does not list instead of deleting them. For providers whose
	// instances the pool does not own (a static list of hosts); never for
	// a cloud group, where such an instance would be an orphan.
	AdoptUnknown bool
	// RemoveInterrupted removes, at the first sync after a restart, every
	// re-adopted instance on which the previous process had jobs (slots
	// the state file lists as held), instead of keeping those slots for
	// the jobs to be resumed. For executors that cannot resume a job (the
	// instance executor): what such a job left running there would
	// otherwise go on beside the next jobs. GitLab Runner does the same
	// by default (keep_instance_with_acquisitions = false).
	RemoveInterrupted bool
	// InstanceReady runs on each new instance before it takes jobs
	// (instance_ready_command); an error removes the instance. nil = none.
	InstanceReady func(ctx context.Context, info fleet.ConnectInfo) error
	// InstanceGone is called (in its own goroutine) with the id of every
	// instance the pool drops (deleted or vanished), so that callers can
	// forget what they kept of it (connections, host keys). nil = none.
	InstanceGone     func(id string)
	FailureThreshold int
	AcquireTimeout   time.Duration

	UpdateInterval              time.Duration
	UpdateIntervalWhenExpecting time.Duration
	DeletionRetryInterval       time.Duration
	ShutdownDeletionInterval    time.Duration

	// JobLogSize is the most served jobs JobTrace keeps (pool_jobs.go);
	// 0 = DefaultJobLogSize, negative = none.
	JobLogSize int

	Metrics *PoolMetrics
	// Executor, RunnerName and SystemID are for GitLab Runner's metric
	// families (PoolMetrics): the runner's executor (docker+machine
	// reports in docker+machine's families, any other in fleeting's and
	// the taskscaler's), its [[runners]] name and the manager's system id.
	Executor   string
	RunnerName string
	SystemID   string
}

// Reservation is a slot promised to a job that is being requested or was
// received but is not on an instance yet.
type Reservation struct {
	waiting bool          // in Acquire: counted as Demand.Waiting instead of Reserved
	arrived bool          // counted as an arrival
	since   time.Time     // when the job was queued (SetQueuedAt), else its first acquire
	inQueue time.Duration // the job's wait at the coordinator before it was received (SetTimeInQueue)
	done    bool          // acquired or unreserved
}

// SetQueuedAt tells when the reservation's job was queued (at the
// coordinator), if the caller knows: the adaptive policy's feedback then
// measures the job's whole queue wait, not only its wait at the pool.
// Call it before the first Acquire or TryAcquire.
func (r *Reservation) SetQueuedAt(t time.Time) {
	if r != nil {
		r.since = t
	}
}

// SetTimeInQueue tells how long the reservation's job had been queued at
// the coordinator when the runner received it (the job payload's
// job_info.time_in_queue_seconds), for callers that know that wait but
// not the coordinator's clock: the pool counts the job as queued d before
// its first Acquire or TryAcquire, so that the adaptive policy's feedback
// measures the job's whole queue wait. SetQueuedAt, when called, wins.
// Call it before the first Acquire or TryAcquire; d <= 0 is ignored.
func (r *Reservation) SetTimeInQueue(d time.Duration) {
	if r != nil && d > 0 {
		r.inQueue = d
	}
}

// Acquisition is a job slot on a ready instance.
type Acquisition struct {
	InstanceID string
	Slot       int // 0..capacity_per_instance-1, unique per instance while held
	Info       fleet.ConnectInfo
	// Lost is closed if the instance goes away under the job.
	Lost <-chan struct{}

	start    time.Time
	arrival  time.Time // the job's queue time (zero for a Claim)
	released bool
}

type poolInstance struct {
	id        string
	state     State
	provState fleet.State
	created   time.Time
	ready     time.Time
	lastUsed  time.Time
	useCount  int
	slots     []bool
	acquired  int
	// held marks slots taken by jobs of a manager that died, recorded in
	// the state file: kept for Claim until heldUntil.
	held      []bool
	heldUntil time.Time
	// slotJobs are the jobs holding the slots (0 = not told), for the
	// state file: a restarted pool then keeps only the slots of jobs that
	// will be resumed (KeepHeld).
	slotJobs  []int64
	info      fleet.ConnectInfo
	readying  bool // ready command running
	hbFails   int
	lost      chan struct{}
	lostDone  bool
	reason    string    // removal reason
	requested bool      // Decrease accepted
	attempts  int       // failed Decrease calls
	retryAt   time.Time // next Decrease when not yet accepted (or not acted on)

	// For metrics (pool_metrics.go).
	asked       bool      // answers a creation the pool requested (at created)
	runningSeen bool      // reported running once
	deleteAt    time.Time // deletion first accepted (or begun by the provider)
}

func (in *poolInstance) closeLost() {
	if !in.lostDone {
		in.lostDone = true
		close(in.lost)
	}
}

// Pool is one runner's instance pool. Reserve, Unreserve, Acquire, Release
// and SetPolicy may be called from any goroutine; Tick and Run are the
// scaling loop and must not run concurrently with each other.
type Pool struct {
	o      PoolOptions
	clk    clock.Clock
	log    *slog.Logger
	runner string

	tickMu   sync.Mutex // serialises scaling passes and Shutdown
	initDone bool       // Provider.Init succeeded (guarded by tickMu)
	nextFull time.Time  // next heartbeat round (guarded by tickMu)

	mu          sync.Mutex
	pol         *Policy
	insts       []*poolInstance // creation order
	byID        map[string]*poolInstance
	pending     []time.Time // creations requested, not yet reported by Update
	reserved    int
	waiting     int
	closed      bool
	started     bool
	restored    map[string]poolStateInstance
	keep        func(jobID int64) bool // KeepHeld
	slotFree    chan struct{}          // closed and replaced when a slot may have become free
	wake        chan struct{}
	closedCh    chan struct{}
	dirty       bool // state file needs writing
	lastSync    time.Time
	createFails int
	createAt    time.Time // no creations before this (backoff)

	// scale_throttle's token bucket (throttleLocked).
	throttleTokens float64
	throttleAt     time.Time // last refill; zero = not used yet
	throttleLimit  float64   // the limit and burst it was filled for
	throttleBurst  int
	throttleNext   time.Time // when a held-back creation can go; zero = none held

	// Observed statistics.
	rate     float64
	rateAt   time.Time
	meanDur  float64 // seconds
	meanBoot float64 // seconds
	haveDur  bool
	haveBoot bool
	bursts   dispersionEstimator
	feedback waitFeedback
	snapBuf  []Instance

	// What Status shows (pool_status.go).
	provInfo     fleet.Info // the provider's Init answer
	provErrMu    sync.Mutex // guards lastProvErr (set with or without mu held)
	lastProvErr  ProviderError
	sizeErr      string // max_instances above the provider's max_size: no creations
	lastDecision DecisionStatus
	history      history
	gone         []lifetime // instances gone within the last HistoryWindow, for Usage
	jobs         jobLog     // served jobs, for JobTrace (pool_jobs.go)
}

// NewPool checks the options, fills in defaults and reads the state file
// if there is one. It does not talk to the provider: Run (or the first
// Tick) initialises it and reconciles the instances.
func NewPool(o PoolOptions) (*Pool, error) {
	if o.Policy == nil {
		return nil, errors.New("autoscale pool: no policy")
	}
	if o.Provider == nil {
		return nil, errors.New("autoscale pool: no provider")
	}
	if o.FailureThreshold <= 0 {
		o.FailureThreshold = poolDefaultFailureThreshold
	}
	if o.AcquireTimeout <= 0 {
		o.AcquireTimeout = poolDefaultAcquireTimeout
	}
	if o.UpdateInterval <= 0 {
		o.UpdateInterval = poolDefaultUpdateInterval
	}
	if o.UpdateIntervalWhenExpecting <= 0 {
		o.UpdateIntervalWhenExpecting = poolDefaultUpdateIntervalWhenExpecting
	}
	if o.DeletionRetryInterval <= 0 {
		o.DeletionRetryInterval = poolDefaultDeletionRetryInterval
	}
	if o.ShutdownDeletionInterval <= 0 {
		o.ShutdownDeletionInterval = poolDefaultShutdownDeletionInterval
	}
	logger := o.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	p := &Pool{
		o:        o,
		clk:      clock.OrReal(o.Clock),
		log:      logger.With("runner", o.Settings.Name),
		runner:   o.Settings.Name,
		pol:      o.Policy,
		byID:     map[string]*poolInstance{},
		slotFree: make(chan struct{}),
		wake:     make(chan struct{}, 1),
		closedCh: make(chan struct{}),
		jobs:     jobLog{size: cmp.Or(o.JobLogSize, DefaultJobLogSize)},
	}
	if o.StateFile != "" {
		st, learnt, err := readPoolStateFile(o.StateFile)
		if err != nil {
			return nil, err
		}
		p.restored = st
		p.restoreLearntLocked(learnt)
	}
	return p, nil
}

// SetPolicy replaces the policy (config reload). The next scaling pass
// uses it.
func (p *Pool) SetPolicy(pol *Policy) {
	if pol == nil {
		return
	}
	p.mu.Lock()
	p.pol = pol
	p.mu.Unlock()
	p.poke()
}

func (p *Pool) poke() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// signalSlotsLocked wakes every Acquire waiting for a slot.
func (p *Pool) signalSlotsLocked() {
	close(p.slotFree)
	p.slotFree = make(chan struct{})
}

// snapshotLocked returns the policy's view: the pool's instances in
// creation order, then one creating entry per pending creation. The slice
// is reused by the next call.
func (p *Pool) snapshotLocked() []Instance {
	s := p.snapBuf[:0]
	for _, in := range p.insts {
		s = append(s, Instance{
			ID: in.id, State: in.state, Created: in.created, Ready: in.ready,
			LastUsed: in.lastUsed, UseCount: in.useCount, Acquired: in.acquired,
		})
	}
	for _, t := range p.pending {
		s = append(s, Instance{State: StateCreating, Created: t})
	}
	p.snapBuf = s
	return s
}

func (p *Pool) demandLocked(now time.Time) Demand {
	return Demand{Reserved: p.reserved, Waiting: p.waiting, Observed: p.observedLocked(now)}
}

func (p *Pool) observedLocked(now time.Time) Observed {
	var o Observed
	if !p.rateAt.IsZero() {
		o.ArrivalRate = p.rate * math.Exp(-now.Sub(p.rateAt).Seconds()/poolStatsWindow.Seconds())
	}
	o.MeanDuration = time.Duration(p.meanDur * float64(time.Second))
	o.BootTime = time.Duration(p.meanBoot * float64(time.Second))
	o.ArrivalDispersion = p.bursts.index()
	o.BufferGain = p.feedback.gain()
	return o
}

// Snapshot returns the instances as the policy sees them (pending
// creations included, with an empty ID) and the current demand.
func (p *Pool) Snapshot() ([]Instance, Demand) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Instance(nil), p.snapshotLocked()...), p.demandLocked(p.clk.Now())
}

// Observed returns the pool's measured statistics, which Decide gets in
// Demand.Observed: ArrivalRate is an exponentially decaying average (10 min
// time constant) of job arrivals, an arrival being the first Acquire or
// TryAcquire of a reservation (a job received); ArrivalDispersion the
// variance over the mean of the arrivals per 10 s (about the same
// window); MeanDuration an EWMA (weight 0.1) of Acquire→Release times;
// BootTime an EWMA of creation request→ready times; BufferGain the
// adaptive feedback from the queue waits of the jobs acquired while an
// adaptive schedule was in force. In preemptive mode the manager only
// requests jobs it has a slot for, so under overload ArrivalRate is the
// throughput, not the demand still queued at the coordinator (which no
// runner can see); adaptive schedules are not preemptive unless
// configured so, and then it is the demand.
func (p *Pool) Observed() Observed {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.observedLocked(p.clk.Now())
}

// Reserve promises a slot to a job about to be requested. It returns
// ErrNoCapacity when the policy's CanReserve says no, so the caller does
// not ask the coordinator for a job.
func (p *Pool) Reserve() (*Reservation, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, ErrPoolClosed
	}
	now := p.clk.Now()
	if !CanReserve(p.pol, now, p.snapshotLocked(), p.demandLocked(now)) {
		p.metricTaskOp(p.reserveFailureLocked())
		return nil, ErrNoCapacity
	}
	p.metricTaskOp("reserve")
	p.reserved++
	p.poke()
	return &Reservation{}, nil
}

// Unreserve gives a reservation back (no job came). It is a no-op for a
// reservation already acquired or given back.
func (p *Pool) Unreserve(r *Reservation) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if r != nil && !r.done {
		p.metricTaskOp("unreserve")
	}
	p.dropReservationLocked(r)
	p.poke()
}

func (p *Pool) dropReservationLocked(r *Reservation) {
	if r == nil || r.done {
		return
	}
	r.done = true
	if r.waiting {
		p.waiting--
	} else {
		p.reserved--
	}
}

// TryAcquire takes a free slot for r on a ready instance if there is one;
// otherwise it counts r as waiting, so the policy creates capacity for it,
// and returns nil. The first call for a reservation counts as a job
// arrival in the observed statistics. Acquire is the blocking form.
func (p *Pool) TryAcquire(r *Reservation) (*Acquisition, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if r == nil || r.done {
		return nil, errors.New("autoscale pool: acquire with a reservation that was released or used")
	}
	if p.closed {
		return nil, ErrPoolClosed
	}
	now := p.clk.Now()
	if !r.arrived {
		r.arrived = true
		if r.since.IsZero() || r.since.After(now) {
			r.since = now.Add(-r.inQueue)
		}
		p.noteArrivalLocked(now)
	}
	if a := p.takeSlotLocked(now); a != nil {
		a.arrival = r.since
		p.noteWaitLocked(now, now.Sub(r.since))
		p.dropReservationLocked(r)
		p.dirty = true
		return a, nil
	}
	if !r.waiting {
		r.waiting = true
		p.reserved--
		p.waiting++
		p.poke()
	}
	return nil, nil
}

// takeSlotLocked picks the ready instance with a free slot that is the
// most used (to keep others idle and removable), newest on ties.
func (p *Pool) takeSlotLocked(now time.Time) *Acquisition {
	var best *poolInstance
	for i := len(p.insts) - 1; i >= 0; i-- {
		in := p.insts[i]
		if in.state != StateIdle && in.state != StateBusy {
			continue
		}
		if in.acquired >= len(in.slots) || p.pol.MaxUseCount > 0 && in.useCount >= p.pol.MaxUseCount {
			continue
		}
		if best == nil || in.acquired > best.acquired {
			best = in
		}
	}
	if best == nil {
		return nil
	}
	slot := 0
	for best.slots[slot] {
		slot++
	}
	best.slots[slot] = true
	best.acquired++
	best.useCount++
	best.state = StateBusy
	p.metricUsedLocked()
	return &Acquisition{InstanceID: best.id, Slot: slot, Info: best.info, Lost: best.lost, start: now}
}

// Acquire waits, at most AcquireTimeout, for a slot on a ready instance
// for a job that was received. On failure the reservation is given back.
func (p *Pool) Acquire(ctx context.Context, r *Reservation) (*Acquisition, error) {
	timer := p.clk.NewTimer(p.o.AcquireTimeout)
	defer timer.Stop()
	for {
		p.mu.Lock()
		ch := p.slotFree
		p.mu.Unlock()
		a, err := p.TryAcquire(r)
		if err != nil || a != nil {
			return a, err
		}
		select {
		case <-ch:
		case <-ctx.Done():
			p.Unreserve(r)
			return nil, fmt.Errorf("acquire instance slot: %w", ctx.Err())
		case <-timer.C():
			p.Unreserve(r)
			return nil, fmt.Errorf("acquire instance slot after %s: %w", p.o.AcquireTimeout, ErrAcquireTimeout)
		case <-p.closedCh:
			p.Unreserve(r)
			return nil, ErrPoolClosed
		}
	}
}

// Release gives a slot back at the end of a job. An instance that reached
// max_use_count is removed once its last slot is released. Releasing twice
// is a no-op.
func (p *Pool) Release(a *Acquisition) {
	if a == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if a.released {
		return
	}
	a.released = true
	p.metricTaskOp("release")
	now := p.clk.Now()
	p.noteDurationLocked(now.Sub(a.start))
	p.recordJobLocked(a, now)
	in := p.byID[a.InstanceID]
	if in == nil {
		return
	}
	if a.Slot < len(in.slots) && in.slots[a.Slot] {
		in.slots[a.Slot] = false
		in.setJobLocked(a.Slot, 0)
		in.acquired--
	}
	in.lastUsed = now
	p.dirty = true
	if in.acquired == 0 && in.state == StateBusy {
		in.state = StateIdle
	}
	if in.state == StateIdle && p.pol.MaxUseCount > 0 && in.useCount >= p.pol.MaxUseCount {
		p.markRemovingLocked(in, PoolReasonMaxUseCount, fmt.Sprintf("used %d times, max_use_count %d", in.useCount, p.pol.MaxUseCount))
	}
	p.signalSlotsLocked()
	p.poke()
}

func (p *Pool) noteArrivalLocked(now time.Time) {
	if !p.rateAt.IsZero() {
		p.rate *= math.Exp(-now.Sub(p.rateAt).Seconds() / poolStatsWindow.Seconds())
	}
	p.rate += 1 / poolStatsWindow.Seconds()
	p.rateAt = now
	p.bursts.add(now)
}

// noteWaitLocked feeds a job's wait for its slot to the adaptive
// policy's feedback, when the active schedule is adaptive.
func (p *Pool) noteWaitLocked(now time.Time, wait time.Duration) {
	if s := p.pol.Active(now); s.Adaptive {
		p.feedback.note(now, wait, s.TargetWait, p.observedLocked(now))
	}
}

func (p *Pool) noteDurationLocked(d time.Duration) {
	if !p.haveDur {
		p.meanDur, p.haveDur = d.Seconds(), true
		return
	}
	p.meanDur += poolDurationAlpha * (d.Seconds() - p.meanDur)
}

func (p *Pool) noteBootLocked(d time.Duration) {
	p.meanBoot, p.haveBoot = poolEWMA(p.meanBoot, d.Seconds(), p.haveBoot), true
}

func poolEWMA(old, x float64, have bool) float64 {
	if !have {
		return x
	}
	return old + poolStatsAlpha*(x-old)
}

// markRemovingLocked decides the removal of in: from now on it takes no
// slot, and the next scaling pass asks the provider to delete it. Jobs
// still on it are told through Lost. label is the metric reason, detail
// the log text.
func (p *Pool) markRemovingLocked(in *poolInstance, label, detail string) {
	if in.state == StateRemoving {
		return
	}
	in.state = StateRemoving
	in.reason = label
	in.retryAt = time.Time{}
	if in.acquired > 0 {
		in.closeLost()
	}
	p.dirty = true
	p.log.Info("removing instance", "instance", in.id, "reason", label, "detail", detail, "jobs", in.acquired)
	if m := p.o.Metrics; m != nil {
		m.Removals.WithLabelValues(p.runner, label).Inc()
	}
}

func (p *Pool) newInstanceLocked(id string, created time.Time) *poolInstance {
	in := &poolInstance{
		id: id, state: StateCreating, created: created,
		slots: make([]bool, max(1, p.pol.CapacityPerInstance)),
		lost:  make(chan struct{}),
	}
	p.insts = append(p.insts, in)
	p.byID[id] = in
	p.dirty = true
	return in
}

func (p *Pool) dropLocked(in *poolInstance, why string) {
	in.closeLost()
	delete(p.byID, in.id)
	for i, x := range p.insts {
		if x == in {
			p.insts = append(p.insts[:i], p.insts[i+1:]...)
			break
		}
	}
	p.dirty = true
	p.log.Info("instance gone", "instance", in.id, "why", why, "jobs", in.acquired)
	p.recordGoneLocked(in.created, p.clk.Now())
	// Only an instance that vanished unasked was not deleted.
	p.metricGoneLocked(in, why != "vanished" || in.state == StateRemoving, p.clk.Now())
	p.signalSlotsLocked()
	if gone := p.o.InstanceGone; gone != nil {
		go gone(in.id)
	}
}

// Counts returns how many instances are in each state; pending creations
// count as creating.
func (p *Pool) Counts() (creating, idle, busy, removing int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var c [4]int
	for _, in := range p.insts {
		c[in.state]++
	}
	return c[StateCreating] + len(p.pending), c[StateIdle], c[StateBusy], c[StateRemoving]
}
