package autoscale

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/drover-ci/drover/internal/fleet"
)

// ClaimGrace is how long a restarted pool keeps the slots that jobs held
// before the restart (the state file lists them) for Claim: a slot not
// claimed by then is free again.
const ClaimGrace = 10 * time.Minute

// ErrSlotGone is returned (wrapped) by Claim when the instance is gone or
// being removed, or the slot is not one it has.
var ErrSlotGone = errors.New("instance slot gone")

// claimPoll bounds the wait between checks while Claim waits for the
// instance to be re-adopted and ready.
const claimPoll = time.Second

// takenSlots lists the slots held now (for the state file).
func (in *poolInstance) takenSlots() []int {
	var out []int
	for i, t := range in.slots {
		if t {
			out = append(out, i)
		}
	}
	return out
}

// takenJobs lists the jobs of takenSlots (0 where not told).
func (in *poolInstance) takenJobs() []int64 {
	var out []int64
	known := false
	for i, t := range in.slots {
		if t {
			var id int64
			if i < len(in.slotJobs) {
				id = in.slotJobs[i]
			}
			known = known || id != 0
			out = append(out, id)
		}
	}
	if !known {
		return nil
	}
	return out
}

// holdLocked marks the slots a restored instance's jobs held as taken,
// waiting for Claim; a slot whose job the manager will not resume
// (KeepHeld) is free at once.
func (p *Pool) holdLocked(in *poolInstance, slots []int, jobs []int64, now time.Time) {
	for i, s := range slots {
		if s < 0 || s >= len(in.slots) || in.slots[s] {
			continue
		}
		var job int64
		if i < len(jobs) {
			job = jobs[i]
		}
		if job != 0 && p.keep != nil && !p.keep(job) {
			p.log.Info("slot of a job that will not be resumed: free", "instance", in.id, "slot", s, "job_id", job)
			continue
		}
		if in.held == nil {
			in.held = make([]bool, len(in.slots))
		}
		in.slots[s], in.held[s] = true, true
		in.setJobLocked(s, job)
		in.acquired++
		in.heldUntil = now.Add(ClaimGrace)
	}
}

func (in *poolInstance) setJobLocked(slot int, job int64) {
	if in.slotJobs == nil {
		in.slotJobs = make([]int64, len(in.slots))
	}
	if slot < len(in.slotJobs) {
		in.slotJobs[slot] = job
	}
}

// SetJob records which job holds a (written to the state file, so that a
// restarted pool knows which held slots to keep: KeepHeld).
func (p *Pool) SetJob(a *Acquisition, job int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if in := p.byID[a.InstanceID]; in != nil && !a.released {
		in.setJobLocked(a.Slot, job)
		p.dirty = true
	}
}

// KeepHeld tells the pool which jobs the restarted manager will resume:
// slots that the state file shows held by other jobs are freed now (and,
// for instances not re-adopted yet, when they are), instead of after
// ClaimGrace. Slots whose job is not known stay held until then.
func (p *Pool) KeepHeld(keep func(jobID int64) bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.keep = keep
	for _, in := range p.insts {
		freed := false
		for s, h := range in.held {
			if !h || s >= len(in.slotJobs) || in.slotJobs[s] == 0 || keep(in.slotJobs[s]) {
				continue
			}
			in.held[s], in.slots[s], in.slotJobs[s] = false, false, 0
			in.acquired--
			freed = true
			p.log.Info("slot of a job that will not be resumed: free", "instance", in.id, "slot", s)
		}
		if freed {
			if in.acquired == 0 && in.state == StateBusy {
				in.state = StateIdle
			}
			p.dirty = true
			p.signalSlotsLocked()
		}
	}
}

// expireHeldLocked frees held slots nobody claimed in time.
func (p *Pool) expireHeldLocked(now time.Time) {
	for _, in := range p.insts {
		if !slices.Contains(in.held, true) || now.Before(in.heldUntil) {
			continue
		}
		for s, h := range in.held {
			if h {
				in.held[s], in.slots[s] = false, false
				in.setJobLocked(s, 0)
				in.acquired--
				p.log.Warn("slot held for a job of the previous process was not claimed; freed", "instance", in.id, "slot", s)
			}
		}
		if in.acquired == 0 && in.state == StateBusy {
			in.state = StateIdle
		}
		p.dirty = true
		p.signalSlotsLocked()
	}
}

// Claim takes slot of instance id for a job resumed after a restart: the
// slot its job held before (kept since the state file listed it), or the
// same slot if it is free. It waits, within ctx, until the pool has
// re-adopted the instance and made it ready. It fails with ErrSlotGone
// when the instance is gone or being removed or has no such slot, and
// when another job holds the slot.
func (p *Pool) Claim(ctx context.Context, id string, slot int) (*Acquisition, error) {
	for {
		p.mu.Lock()
		ch := p.slotFree
		a, done, err := p.claimLocked(id, slot)
		p.mu.Unlock()
		if done {
			return a, err
		}
		select {
		case <-ch:
		case <-p.clk.After(claimPoll):
		case <-ctx.Done():
			return nil, fmt.Errorf("claim slot %d of instance %s: %w", slot, id, ctx.Err())
		case <-p.closedCh:
			return nil, ErrPoolClosed
		}
	}
}

func (p *Pool) claimLocked(id string, slot int) (*Acquisition, bool, error) {
	if p.closed {
		return nil, true, ErrPoolClosed
	}
	in := p.byID[id]
	switch {
	case in == nil && p.started:
		return nil, true, fmt.Errorf("instance %s: %w", id, ErrSlotGone)
	case in == nil, in.state == StateCreating:
		return nil, false, nil // not re-adopted or not ready yet
	case in.state == StateRemoving:
		return nil, true, fmt.Errorf("instance %s is being removed (%s): %w", id, in.reason, ErrSlotGone)
	case slot < 0 || slot >= len(in.slots):
		return nil, true, fmt.Errorf("instance %s has no slot %d: %w", id, slot, ErrSlotGone)
	}
	now := p.clk.Now()
	switch {
	case in.held != nil && in.held[slot]:
		in.held[slot] = false
	case !in.slots[slot]:
		// The state file did not record this job's acquisition (the
		// manager died before it was written): its use was not counted
		// either, and max_use_count must see it.
		in.slots[slot] = true
		in.acquired++
		in.useCount++
	default:
		return nil, true, fmt.Errorf("instance %s: slot %d is held by another job: %w", id, slot, ErrSlotGone)
	}
	in.state = StateBusy
	p.dirty = true
	return &Acquisition{InstanceID: in.id, Slot: slot, Info: in.info, Lost: in.lost, start: now}, true, nil
}

// MarkBroken removes instance id because it no longer works for jobs
// (its engine stopped answering): the jobs on it see Lost, and the
// policy replaces it. An unknown instance is ignored.
func (p *Pool) MarkBroken(id, why string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if in := p.byID[id]; in != nil && in.state != StateRemoving {
		p.markRemovingLocked(in, PoolReasonBroken, why)
		p.poke()
	}
}

// Ready returns the connect info of every instance that takes jobs now
// (idle or busy): for callers that must reach each instance, e.g. to
// remove what a job left on one it no longer runs on.
func (p *Pool) Ready() []fleet.ConnectInfo {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []fleet.ConnectInfo
	for _, in := range p.insts {
		if in.state == StateIdle || in.state == StateBusy {
			info := in.info
			if info.ID == "" {
				info.ID = in.id
			}
			out = append(out, info)
		}
	}
	return out
}
