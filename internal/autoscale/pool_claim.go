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

// holdLocked marks the slots a restored instance's jobs held as taken,
// waiting for Claim.
func (p *Pool) holdLocked(in *poolInstance, slots []int, now time.Time) {
	for _, s := range slots {
		if s < 0 || s >= len(in.slots) || in.slots[s] {
			continue
		}
		if in.held == nil {
			in.held = make([]bool, len(in.slots))
		}
		in.slots[s], in.held[s] = true, true
		in.acquired++
		in.heldUntil = now.Add(ClaimGrace)
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
		in.slots[slot] = true
		in.acquired++
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
