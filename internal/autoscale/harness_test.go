package autoscale

import (
	"fmt"
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/clock"
)

// simFleet is the test harness: it plays pool, cloud and job queue around
// Decide and CanReserve on a fake clock. Every step it boots instances
// whose boot time is over, ends jobs, puts waiting jobs on free slots,
// takes queued jobs while CanReserve allows, then applies one Decision.
// After every step it checks the invariants Decide promises (limit in all
// states, MaxGrowthRate).
type simFleet struct {
	t          *testing.T
	p          *Policy
	clk        *clock.Fake
	boot       time.Duration // creation -> ready
	removeTime time.Duration // removal -> gone
	inst       []Instance
	removedAt  map[string]time.Time
	jobs       []runningJob
	queue      []queued        // jobs waiting in the coordinator
	waiting    []queued        // jobs taken, waiting for a slot
	waits      []time.Duration // arrival -> on a slot, per job placed
	observed   Observed        // handed to Decide
	nextID     int

	created, removed int
	peakTotal        int
	removals         []Removal
	last             Decision
}

type queued struct {
	d  time.Duration
	at time.Time
}

type runningJob struct {
	id  string
	end time.Time
}

var t0 = time.Date(2026, 1, 7, 10, 0, 0, 0, time.UTC) // a Wednesday

func newFleet(t *testing.T, p *Policy, boot time.Duration) *simFleet {
	t.Helper()
	return &simFleet{t: t, p: p, clk: clock.NewFake(t0), boot: boot, removedAt: map[string]time.Time{}}
}

func (f *simFleet) demand() Demand { return Demand{Waiting: len(f.waiting), Observed: f.observed} }

// submit queues n jobs of duration d in the coordinator.
func (f *simFleet) submit(n int, d time.Duration) {
	for range n {
		f.queue = append(f.queue, queued{d: d, at: f.clk.Now()})
	}
}

// place puts a job on a free slot (the newest ready instance with one,
// as GitLab Runner picks machines), reporting whether there was one.
func (f *simFleet) place(q queued) bool {
	now := f.clk.Now()
	capacity := f.p.capacity()
	for i := len(f.inst) - 1; i >= 0; i-- {
		in := &f.inst[i]
		if (in.State != StateIdle && in.State != StateBusy) || f.p.usable(in, capacity) == 0 {
			continue
		}
		in.Acquired++
		in.UseCount++
		in.State = StateBusy
		f.jobs = append(f.jobs, runningJob{id: in.ID, end: now.Add(q.d)})
		f.waits = append(f.waits, now.Sub(q.at))
		return true
	}
	return false
}

func (f *simFleet) find(id string) *Instance {
	for i := range f.inst {
		if f.inst[i].ID == id {
			return &f.inst[i]
		}
	}
	return nil
}

func (f *simFleet) step() Decision {
	f.t.Helper()
	now := f.clk.Now()
	// Boot and disappear.
	kept := f.inst[:0]
	for _, in := range f.inst {
		if in.State == StateCreating && !now.Before(in.Created.Add(f.boot)) {
			in.State, in.Ready = StateIdle, now
		}
		if in.State == StateRemoving && !now.Before(f.removedAt[in.ID].Add(f.removeTime)) {
			continue
		}
		kept = append(kept, in)
	}
	f.inst = kept
	// End jobs.
	running := f.jobs[:0]
	for _, j := range f.jobs {
		if now.Before(j.end) {
			running = append(running, j)
			continue
		}
		in := f.find(j.id)
		in.Acquired--
		in.LastUsed = now
		if in.Acquired == 0 {
			in.State = StateIdle
		}
	}
	f.jobs = running
	f.placeWaiting()
	// Take jobs from the coordinator while a slot may be reserved; a
	// taken job goes on a slot at once or waits.
	for len(f.queue) > 0 && CanReserve(f.p, now, f.inst, f.demand()) {
		d := f.queue[0]
		f.queue = f.queue[1:]
		if !f.place(d) {
			f.waiting = append(f.waiting, d)
		}
	}
	dec := Decide(f.p, now, f.inst, f.demand())
	f.last = dec
	for _, r := range dec.Remove {
		in := f.find(r.ID)
		if in == nil || in.State != StateIdle {
			f.t.Fatalf("%s: removal of %s in state %v: %+v", now.Format(time.TimeOnly), r.ID, in, r)
		}
		in.State = StateRemoving
		f.removedAt[in.ID] = now
		f.removed++
		f.removals = append(f.removals, r)
	}
	for range dec.Create {
		f.nextID++
		f.inst = append(f.inst, Instance{ID: fmt.Sprintf("i%03d", f.nextID), State: StateCreating, Created: now})
		f.created++
	}
	f.check()
	return dec
}

func (f *simFleet) placeWaiting() {
	for len(f.waiting) > 0 && f.place(f.waiting[0]) {
		f.waiting = f.waiting[1:]
	}
}

func (f *simFleet) check() {
	f.t.Helper()
	c := f.counts()
	if f.p.MaxInstances > 0 && c.total > f.p.MaxInstances {
		f.t.Fatalf("%s: %d instances in all states > limit %d (%+v)", f.clk.Now().Format(time.TimeOnly), c.total, f.p.MaxInstances, c)
	}
	if f.p.MaxGrowthRate > 0 && c.creating > f.p.MaxGrowthRate {
		f.t.Fatalf("%s: %d creating > MaxGrowthRate %d", f.clk.Now().Format(time.TimeOnly), c.creating, f.p.MaxGrowthRate)
	}
	f.peakTotal = max(f.peakTotal, c.total)
}

// run steps every second for d.
func (f *simFleet) run(d time.Duration) {
	f.t.Helper()
	for end := f.clk.Now().Add(d); f.clk.Now().Before(end); f.clk.Advance(time.Second) {
		f.step()
	}
}

type counts struct{ creating, idle, busy, removing, total, acquired int }

func (f *simFleet) counts() counts {
	var c counts
	for _, in := range f.inst {
		switch in.State {
		case StateCreating:
			c.creating++
		case StateIdle:
			c.idle++
		case StateBusy:
			c.busy++
		case StateRemoving:
			c.removing++
		}
		c.acquired += in.Acquired
	}
	c.total = len(f.inst)
	return c
}

// live is the instances not being removed.
func (c counts) live() int { return c.creating + c.idle + c.busy }
