// Package sim is a simulated fleet.Provider: virtual instances on an
// injected clock, for the autoscaling simulator and for tests. It is the
// one fake the design allows, standing in for a cloud API that cannot run
// here.
//
// An instance is "creating" for its boot time after Increase (BootTime
// plus a uniform spread drawn from a seeded generator, so a run is
// deterministic for a seed), then "running"; Decrease makes it "deleting"
// for DeleteTime, after which one Update reports it "deleted" and later
// Updates leave it out. Failures are injected with FailCreate,
// FailDelete, FailHeartbeat and Vanish. It works the same with clock.Fake
// and the real clock, because every state is computed from Now when asked.
package sim

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/drover-ci/drover/internal/clock"
	"github.com/drover-ci/drover/internal/fleet"
)

// ErrInjected is the cause of every injected failure.
var ErrInjected = errors.New("sim: injected failure")

// Options configure a Provider. Zero values are usable: instant boots and
// deletions on the real clock.
type Options struct {
	Clock clock.Clock
	// BootTime is the mean time from Increase to running.
	BootTime time.Duration
	// BootSpread spreads boot times uniformly over BootTime ± BootSpread
	// (never below zero).
	BootSpread time.Duration
	// DeleteTime is how long an instance stays "deleting".
	DeleteTime time.Duration
	// Seed seeds the boot time spread.
	Seed uint64
	// MaxSize is reported in Info; Increase beyond it fails. 0 = no limit.
	MaxSize int
}

type instance struct {
	id       string
	created  time.Time
	readyAt  time.Time
	deleteAt time.Time // zero until Decrease
	reported bool      // deleted state reported once
	hbFail   int
}

// Provider is a simulated instance group. It is safe for concurrent use.
type Provider struct {
	mu      sync.Mutex
	o       Options
	clk     clock.Clock
	rng     *rand.Rand
	name    string
	seq     int
	insts   []*instance // creation order
	all     []*instance // every instance ever created, for Lifetimes
	byID    map[string]*instance
	created int
	removed int

	failCreate, failDelete int
}

var _ fleet.Provider = (*Provider)(nil)

// New returns a Provider with no instances.
func New(o Options) *Provider {
	return &Provider{
		o:    o,
		clk:  clock.OrReal(o.Clock),
		rng:  rand.New(rand.NewPCG(o.Seed, o.Seed^0x9e3779b97f4a7c15)),
		name: "sim",
		byID: map[string]*instance{},
	}
}

// Init records the group name (used in instance ids).
func (p *Provider) Init(_ context.Context, s fleet.Settings) (fleet.Info, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if s.Name != "" {
		p.name = s.Name
	}
	return fleet.Info{ID: "sim/" + p.name, MaxSize: p.o.MaxSize, Version: "sim"}, nil
}

func (p *Provider) stateLocked(in *instance, now time.Time) fleet.State {
	switch {
	case !in.deleteAt.IsZero() && !now.Before(in.deleteAt):
		return fleet.StateDeleted
	case !in.deleteAt.IsZero():
		return fleet.StateDeleting
	case now.Before(in.readyAt):
		return fleet.StateCreating
	}
	return fleet.StateRunning
}

// Update reports every instance in creation order; a deleted instance is
// reported once.
func (p *Provider) Update(ctx context.Context, fn func(id string, st fleet.State)) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	p.mu.Lock()
	now := p.clk.Now()
	type rep struct {
		id string
		st fleet.State
	}
	reps := make([]rep, 0, len(p.insts))
	kept := p.insts[:0]
	for _, in := range p.insts {
		st := p.stateLocked(in, now)
		if st == fleet.StateDeleted {
			if in.reported {
				delete(p.byID, in.id)
				continue
			}
			in.reported = true
		}
		kept = append(kept, in)
		reps = append(reps, rep{in.id, st})
	}
	clear(p.insts[len(kept):])
	p.insts = kept
	p.mu.Unlock()
	for _, r := range reps {
		fn(r.id, r.st)
	}
	return nil
}

// Increase creates n instances, fewer when failures are injected or
// MaxSize is reached.
func (p *Provider) Increase(ctx context.Context, n int) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.clk.Now()
	for i := range n {
		if p.failCreate > 0 {
			p.failCreate--
			return i, fmt.Errorf("sim: create instance %d of %d: %w", i+1, n, ErrInjected)
		}
		if p.o.MaxSize > 0 && p.liveLocked(now) >= p.o.MaxSize {
			return i, fmt.Errorf("sim: create instance: group is at its max size %d", p.o.MaxSize)
		}
		p.seq++
		boot := p.o.BootTime
		if p.o.BootSpread > 0 {
			boot += time.Duration((p.rng.Float64()*2 - 1) * float64(p.o.BootSpread))
		}
		in := &instance{id: fmt.Sprintf("%s-%06d", p.name, p.seq), created: now, readyAt: now.Add(max(0, boot))}
		p.insts = append(p.insts, in)
		p.all = append(p.all, in)
		p.byID[in.id] = in
		p.created++
	}
	return n, nil
}

func (p *Provider) liveLocked(now time.Time) int {
	n := 0
	for _, in := range p.insts {
		if p.stateLocked(in, now) != fleet.StateDeleted {
			n++
		}
	}
	return n
}

// Decrease starts deleting the given instances and returns the ids it
// accepted; unknown ids and injected failures are left out, with an error.
func (p *Provider) Decrease(ctx context.Context, ids []string) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.clk.Now()
	var ok []string
	var errs []error
	for _, id := range ids {
		in := p.byID[id]
		if in == nil || !in.deleteAt.IsZero() && !now.Before(in.deleteAt) {
			errs = append(errs, fmt.Errorf("sim: delete %s: %w", id, fleet.ErrNotFound))
			continue
		}
		if p.failDelete > 0 {
			p.failDelete--
			errs = append(errs, fmt.Errorf("sim: delete %s: %w", id, ErrInjected))
			continue
		}
		if in.deleteAt.IsZero() {
			in.deleteAt = now.Add(p.o.DeleteTime)
			p.removed++
		}
		ok = append(ok, id)
	}
	return ok, errors.Join(errs...)
}

// ConnectInfo returns a made-up address for a running instance.
func (p *Provider) ConnectInfo(_ context.Context, id string) (fleet.ConnectInfo, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	in := p.byID[id]
	if in == nil || p.stateLocked(in, p.clk.Now()) == fleet.StateDeleted {
		return fleet.ConnectInfo{}, fmt.Errorf("sim: connect info %s: %w", id, fleet.ErrNotFound)
	}
	return fleet.ConnectInfo{ID: id, OS: "linux", Arch: "amd64", Protocol: "ssh", Username: "sim", InternalAddr: id + ":22"}, nil
}

// Heartbeat fails for instances that are gone and for injected failures.
func (p *Provider) Heartbeat(_ context.Context, id string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	in := p.byID[id]
	if in == nil || p.stateLocked(in, p.clk.Now()) != fleet.StateRunning {
		return fmt.Errorf("sim: heartbeat %s: %w", id, fleet.ErrNotFound)
	}
	if in.hbFail > 0 {
		in.hbFail--
		return fmt.Errorf("sim: heartbeat %s: %w", id, ErrInjected)
	}
	return nil
}

// Shutdown does nothing: instances outlive the provider, as real ones do.
func (p *Provider) Shutdown(context.Context) error { return nil }

// Lifetimes calls fn with the life of every instance ever created, in
// creation order: when it was created and when its deletion completed
// (zero while it is not deleted yet), what a cloud bills.
func (p *Provider) Lifetimes(fn func(created, deleted time.Time)) {
	p.mu.Lock()
	now := p.clk.Now()
	type life struct{ c, d time.Time }
	lives := make([]life, len(p.all))
	for i, in := range p.all {
		lives[i].c = in.created
		if !in.deleteAt.IsZero() && !now.Before(in.deleteAt) {
			lives[i].d = in.deleteAt
		}
	}
	p.mu.Unlock()
	for _, l := range lives {
		fn(l.c, l.d)
	}
}

// FailCreate makes the next n instance creations fail.
func (p *Provider) FailCreate(n int) { p.mu.Lock(); p.failCreate += n; p.mu.Unlock() }

// FailDelete makes the next n deletion requests fail.
func (p *Provider) FailDelete(n int) { p.mu.Lock(); p.failDelete += n; p.mu.Unlock() }

// FailHeartbeat makes the next n heartbeats of instance id fail.
func (p *Provider) FailHeartbeat(id string, n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if in := p.byID[id]; in != nil {
		in.hbFail += n
	}
}

// Vanish makes an instance disappear without a trace, as a preempted
// cloud VM does: later Updates do not report it at all.
func (p *Provider) Vanish(id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, in := range p.insts {
		if in.id == id {
			p.insts = append(p.insts[:i], p.insts[i+1:]...)
			delete(p.byID, id)
			p.removed++
			return
		}
	}
}

// Counts returns how many instances were created and how many removals
// were started (or vanished) so far.
func (p *Provider) Counts() (created, removed int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.created, p.removed
}

// Live returns the ids of instances that are not deleted, in creation order.
func (p *Provider) Live() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.clk.Now()
	var ids []string
	for _, in := range p.insts {
		if p.stateLocked(in, now) != fleet.StateDeleted {
			ids = append(ids, in.id)
		}
	}
	return ids
}
