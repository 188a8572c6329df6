package autoscale

import (
	"strings"
	"time"

	"github.com/drover-ci/drover/internal/fleet"
)

// What a pool shows of itself (the runner manager's fleet page): its
// instances, its demand, the last decision of the policy and a history
// of instance counts over the last hour. Status reads them; nothing here
// changes the pool.

const (
	// HistoryWindow is how far back PoolStatus.History goes.
	HistoryWindow = time.Hour
	// historyStep is the spacing of the history's samples: the time is cut
	// into steps and a scaling pass in the step of the newest sample
	// replaces it.
	historyStep = 15 * time.Second
	// historyLen bounds the history: a window of samples a step apart,
	// and one more.
	historyLen = int(HistoryWindow/historyStep) + 1
)

// InstanceStatus is one instance of a pool as Status shows it.
type InstanceStatus struct {
	// ID is "" for a creation the provider has not reported yet.
	ID            string
	State         State
	ProviderState fleet.State // "" for a creation not reported yet
	Created       time.Time
	Ready         time.Time // zero until ready
	LastUsed      time.Time
	UseCount      int
	Acquired      int    // slots held by jobs
	Reason        string // why it is being removed
}

// DecisionStatus is the policy's last decision and what the pool did.
type DecisionStatus struct {
	At         time.Time // zero: no decision yet
	Create     int       // instances the policy wanted created
	Created    int       // instances asked of the provider (0 while creations back off)
	Reason     string    // Decision.CreateReason
	IdleTarget int
	Removals   []Removal
	// Schedule is the periods of the schedule in force, "" for the
	// top-level values.
	Schedule string
}

// Sample is the pool at one moment: its instances by state and the jobs
// waiting for a slot or reserved.
type Sample struct {
	At                             time.Time
	Creating, Idle, Busy, Removing int
	Waiting, Reserved              int
}

// ProviderError is the provider's last failed call.
type ProviderError struct {
	Op  string // init, update, increase, decrease, connect_info, heartbeat, ready_command
	Err string
	At  time.Time // zero: none yet
}

// RunnerStatus is one autoscaled runner of a runner manager (a runner of
// config.toml with its own pool) and its pool's status: what a runner
// manager reports about its pools, for instance on its fleet page.
type RunnerStatus struct {
	Name       string // the runner's name in config.toml
	ShortToken string
	Plugin     string // the fleet provider
	Status     PoolStatus
}

// PoolStatus is a pool at the time Status was called.
type PoolStatus struct {
	Now time.Time
	// Provider is what the provider's Init answered (zero before it).
	Provider fleet.Info
	// ProviderError is its last failed call.
	ProviderError ProviderError
	// ConfigError says why the pool creates nothing, when the provider
	// refuses its configuration (max_instances above max_size).
	ConfigError         string
	CapacityPerInstance int
	MaxInstances        int // 0 = unlimited
	Instances           []InstanceStatus
	Demand              Demand
	LastDecision        DecisionStatus
	// History holds samples of the last HistoryWindow, oldest first, a
	// scaling pass apart (at least historyStep), the last one taken now.
	History []Sample
	// Usage is the instance time of the last HistoryWindow by state, and
	// what the cloud bills for it (Policy.Billing).
	Usage Usage
}

// Usage is a pool's instance time over a window: by state, from the
// history's samples (each one's counts held until the next), and billed,
// from the instances' lifetimes (creation requested to deletion
// confirmed) as Policy.Billing rounds them: the increments that started
// in the window, an instance's first with the minimum.
type Usage struct {
	Since, Until                   time.Time
	Busy, Idle, Creating, Removing time.Duration
	Billed                         time.Duration
	Billing                        Billing
}

// lifetime is an instance's life as the cloud bills it.
type lifetime struct{ created, gone time.Time }

// recordGoneLocked keeps the lifetime of an instance that is gone (its
// deletion confirmed at gone) while it can still be part of Usage.
func (p *Pool) recordGoneLocked(created, gone time.Time) {
	keep := p.gone[:0]
	for _, l := range p.gone {
		if l.gone.After(gone.Add(-HistoryWindow)) {
			keep = append(keep, l)
		}
	}
	p.gone = append(keep, lifetime{created, gone})
}

// usageLocked is the Usage of [since, now) with the samples hist (the
// last one taken now).
func (p *Pool) usageLocked(since, now time.Time, hist []Sample) Usage {
	u := Usage{Since: since, Until: now, Billing: p.pol.Billing}
	for i, s := range hist {
		from := maxTime(s.At, since)
		to := now
		if i+1 < len(hist) {
			to = hist[i+1].At
		}
		if !to.After(from) {
			continue
		}
		dt := to.Sub(from)
		u.Busy += time.Duration(s.Busy) * dt
		u.Idle += time.Duration(s.Idle) * dt
		u.Creating += time.Duration(s.Creating) * dt
		u.Removing += time.Duration(s.Removing) * dt
	}
	// An increment that starts now (an instance created now) is billed
	// now: the window's end is just after now.
	b, end := p.pol.Billing, now.Add(time.Nanosecond)
	for _, in := range p.insts {
		u.Billed += b.BilledWithin(in.created, time.Time{}, since, end)
	}
	for _, t := range p.pending {
		u.Billed += b.BilledWithin(t, time.Time{}, since, end)
	}
	for _, l := range p.gone {
		u.Billed += b.BilledWithin(l.created, l.gone, since, end)
	}
	return u
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// history is a ring of samples.
type history struct {
	buf   [historyLen]Sample
	start int // oldest
	n     int
}

// add records s, replacing the newest sample when it is of the same
// historyStep.
func (h *history) add(s Sample) {
	if h.n > 0 {
		last := &h.buf[(h.start+h.n-1)%historyLen]
		if s.At.Truncate(historyStep).Equal(last.At.Truncate(historyStep)) {
			*last = s
			return
		}
	}
	if h.n == historyLen {
		h.buf[h.start] = s
		h.start = (h.start + 1) % historyLen
		return
	}
	h.buf[(h.start+h.n)%historyLen] = s
	h.n++
}

// since returns the samples taken after t, oldest first.
func (h *history) since(t time.Time) []Sample {
	out := make([]Sample, 0, h.n+1)
	for i := range h.n {
		if s := h.buf[(h.start+i)%historyLen]; s.At.After(t) {
			out = append(out, s)
		}
	}
	return out
}

// sampleLocked is the pool now.
func (p *Pool) sampleLocked(now time.Time) Sample {
	s := Sample{At: now, Waiting: p.waiting, Reserved: p.reserved, Creating: len(p.pending)}
	for _, in := range p.insts {
		switch in.state {
		case StateCreating:
			s.Creating++
		case StateIdle:
			s.Idle++
		case StateBusy:
			s.Busy++
		case StateRemoving:
			s.Removing++
		}
	}
	return s
}

// recordSampleLocked adds the pool now to its history (every scaling
// pass).
func (p *Pool) recordSampleLocked(now time.Time) {
	p.history.add(p.sampleLocked(now))
}

// recordDecisionLocked keeps the decision dec of the pass at now, which
// asked the provider for create instances.
func (p *Pool) recordDecisionLocked(now time.Time, pol *Policy, dec *Decision, create int) {
	d := DecisionStatus{
		At: now, Create: dec.Create, Created: max(create, 0), Reason: dec.CreateReason,
		IdleTarget: dec.IdleTarget, Removals: append([]Removal(nil), dec.Remove...),
	}
	if dec.Schedule != nil && dec.Schedule != &pol.Base {
		d.Schedule = strings.Join(dec.Schedule.Periods, ", ")
	}
	p.lastDecision = d
}

// Status returns the pool as it is now, for people to look at.
func (p *Pool) Status() PoolStatus {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.clk.Now()
	st := PoolStatus{
		Now: now, CapacityPerInstance: max(1, p.pol.CapacityPerInstance), MaxInstances: p.pol.MaxInstances,
		Demand: p.demandLocked(now), LastDecision: p.lastDecision,
		Provider: p.provInfo, ConfigError: p.sizeErr,
		Instances: make([]InstanceStatus, 0, len(p.insts)+len(p.pending)),
	}
	for _, in := range p.insts {
		st.Instances = append(st.Instances, InstanceStatus{
			ID: in.id, State: in.state, ProviderState: in.provState, Created: in.created, Ready: in.ready,
			LastUsed: in.lastUsed, UseCount: in.useCount, Acquired: in.acquired, Reason: in.reason,
		})
	}
	for _, t := range p.pending {
		st.Instances = append(st.Instances, InstanceStatus{State: StateCreating, Created: t})
	}
	st.History = append(p.history.since(now.Add(-HistoryWindow)), p.sampleLocked(now))
	st.Usage = p.usageLocked(now.Add(-HistoryWindow), now, st.History)
	p.provErrMu.Lock()
	st.ProviderError = p.lastProvErr
	p.provErrMu.Unlock()
	return st
}
