package autoscale

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// randomAdaptiveCase draws an adaptive policy, a pool and a demand: any
// capacity, max_instances (0 = unlimited), MaxGrowthRate, idle_count
// floor, preemptive mode and observations, the gain over its whole range.
func randomAdaptiveCase(rng *rand.Rand) (*Policy, []Instance, Demand) {
	capacity := 1 + rng.IntN(4)
	maxInst := 0
	if rng.IntN(4) > 0 {
		maxInst = 1 + rng.IntN(40)
	}
	s := Schedule{
		Adaptive:   true,
		IdleCount:  rng.IntN(11),
		TargetWait: time.Duration(5+rng.IntN(120)) * time.Second,
		IdleTime:   time.Duration(rng.IntN(1200)) * time.Second,
		Preemptive: rng.IntN(2) == 0,
	}
	p := slotPolicy(capacity, maxInst, rng.IntN(3), s)
	if rng.IntN(2) == 0 {
		p.MaxGrowthRate = 1 + rng.IntN(5)
	}
	var insts []Instance
	for i := range rng.IntN(50) {
		in := Instance{ID: fmt.Sprint("i", i), Created: t0.Add(-time.Duration(rng.IntN(7200)) * time.Second)}
		switch rng.IntN(4) {
		case 0:
			in.State = StateCreating
		case 1:
			in.State, in.Ready = StateIdle, in.Created.Add(time.Minute)
			if rng.IntN(2) == 0 {
				in.LastUsed, in.UseCount = t0.Add(-time.Duration(rng.IntN(1800))*time.Second), 1+rng.IntN(3)
			}
		case 2:
			in.State, in.Ready, in.Acquired, in.UseCount = StateBusy, in.Created.Add(time.Minute), 1+rng.IntN(capacity), 1+rng.IntN(3)
		default:
			in.State = StateRemoving
		}
		insts = append(insts, in)
	}
	d := Demand{Reserved: rng.IntN(6), Waiting: rng.IntN(6), Observed: Observed{
		ArrivalRate:       rng.Float64() * 5,
		MeanDuration:      time.Duration(rng.IntN(3600)) * time.Second,
		BootTime:          time.Duration(rng.IntN(300)) * time.Second,
		ArrivalDispersion: rng.Float64() * 30,
		BufferGain:        1.0 / 32 * float64(1+rng.IntN(32*32)),
	}}
	return p, insts, d
}

// Decide with an adaptive schedule, on thousands of random pools: it never
// asks for more than max_instances in every state nor more than
// MaxGrowthRate creating, its idle target never falls below the
// idle_count floor (as far as max_instances leaves room), removing idle
// instances it does not need never leaves fewer free slots than the
// demand and that target want, and the same inputs give the same
// decision.
func TestAdaptiveDecideProperties(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3, 4} {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 19))
			for n := range 2000 {
				p, insts, d := randomAdaptiveCase(rng)
				dec := Decide(p, t0, insts, d)
				fail := func(format string, args ...any) {
					t.Helper()
					t.Fatalf("case %d: %s\npolicy %+v\ninstances %+v\ndemand %+v\ndecision %+v", n, fmt.Sprintf(format, args...), p, insts, d, dec)
				}
				creating, acquired := 0, 0
				for _, in := range insts {
					if in.State == StateCreating {
						creating++
					}
					if in.State != StateRemoving {
						acquired += in.Acquired
					}
				}
				if dec.Create < 0 {
					fail("negative creation")
				}
				if p.MaxInstances > 0 && dec.Create > 0 && len(insts)+dec.Create > p.MaxInstances {
					fail("%d instances + %d created > max_instances %d", len(insts), dec.Create, p.MaxInstances)
				}
				if p.MaxGrowthRate > 0 && dec.Create > 0 && creating+dec.Create > p.MaxGrowthRate {
					fail("%d creating + %d created > MaxGrowthRate %d", creating, dec.Create, p.MaxGrowthRate)
				}
				floor := p.Base.IdleCount
				if p.MaxInstances > 0 {
					floor = min(floor, max(p.MaxInstances*p.capacity()-acquired, 0))
				}
				if dec.IdleTarget < floor {
					fail("idle target %d below the idle_count floor %d", dec.IdleTarget, floor)
				}
				checkKeptFree(t, p, insts, d, dec, fail)
				if again := Decide(p, t0, insts, d); !cmp.Equal(dec, again, cmpopts.EquateEmpty()) {
					fail("same inputs, another decision: %+v", again)
				}
			}
		})
	}
}

// checkKeptFree: when Decide removes idle instances as not needed, the
// free slots of the instances it keeps (idle, booting and busy, as it
// counts them) still cover the reservations (preemptive), the waiting
// jobs and the idle target.
func checkKeptFree(t *testing.T, p *Policy, insts []Instance, d Demand, dec Decision, fail func(string, ...any)) {
	t.Helper()
	gone := map[string]bool{}
	idleRemoval := false
	for _, r := range dec.Remove {
		gone[r.ID] = true
		idleRemoval = idleRemoval || strings.Contains(r.Reason, "not needed")
	}
	if !idleRemoval {
		return
	}
	free := 0
	for i := range insts {
		in := &insts[i]
		if in.State != StateRemoving && !gone[in.ID] {
			free += p.usable(in, p.capacity())
		}
	}
	need := d.Waiting + dec.IdleTarget
	if p.Base.Preemptive {
		need += d.Reserved
	}
	if free < need {
		fail("idle instances removed as not needed leave %d free slots, %d wanted", free, need)
	}
}

// TestAdaptiveBillingAwareProperties: with a billing step the adaptive
// scale-in never removes an instance with a job, never asks for more than
// max_instances, removes an idle instance as not needed only in the last
// margin of its paid period, and still leaves the free slots the demand
// and the idle target want.
func TestAdaptiveBillingAwareProperties(t *testing.T) {
	billings := []Billing{{Increment: time.Hour}, {Increment: time.Second, Minimum: time.Minute}, {Increment: time.Minute}}
	rng := rand.New(rand.NewPCG(38, 38))
	for n := range 4000 {
		p, insts, d := randomAdaptiveCase(rng)
		p.Billing = billings[rng.IntN(len(billings))]
		dec := Decide(p, t0, insts, d)
		fail := func(format string, args ...any) {
			t.Helper()
			t.Fatalf("case %d: %s\npolicy %+v\ninstances %+v\ndemand %+v\ndecision %+v", n, fmt.Sprintf(format, args...), p, insts, d, dec)
		}
		byID := map[string]Instance{}
		for _, in := range insts {
			byID[in.ID] = in
		}
		for _, r := range dec.Remove {
			in := byID[r.ID]
			if in.Acquired > 0 || in.State == StateBusy {
				fail("removes %s, which has %d jobs", in.ID, in.Acquired)
			}
			if strings.Contains(r.Reason, "not needed") && AdaptiveKeep(p.Billing, in.Created, t0) {
				fail("removes %s as not needed with its paid period ending at %s", in.ID, p.Billing.PaidUntil(in.Created, t0))
			}
		}
		if p.MaxInstances > 0 && dec.Create > 0 && len(insts)+dec.Create > p.MaxInstances {
			fail("%d instances + %d created > max_instances %d", len(insts), dec.Create, p.MaxInstances)
		}
		checkKeptFree(t, p, insts, d, dec, fail)
	}
}
