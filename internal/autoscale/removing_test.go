package autoscale

import (
	"testing"
	"time"
)

// An instance being removed (or removed by the same pass) must not push a
// good idle instance over max_instances in the slot dialect: after a
// restart that deletes a stray instance, the re-adopted ones stay.
func TestSlotsRemovingDoesNotEvictGoodInstances(t *testing.T) {
	now := time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC)
	p := &Policy{Dialect: DialectAutoscaler, CapacityPerInstance: 1, MaxInstances: 2, Base: Schedule{IdleCount: 1, IdleTime: time.Hour}}
	if err := p.Compile(); err != nil {
		t.Fatal(err)
	}
	in := []Instance{
		{ID: "stray", State: StateRemoving, Created: now},
		{ID: "a", State: StateIdle, Created: now, Ready: now, UseCount: 1},
		{ID: "b", State: StateIdle, Created: now, Ready: now, UseCount: 1},
	}
	dec := Decide(p, now, in, Demand{Reserved: 1})
	if len(dec.Remove) != 0 {
		t.Errorf("removed %+v; want none (2 instances kept, max_instances 2)", dec.Remove)
	}
	if dec.Create != 0 {
		t.Errorf("create %d, want 0 (the removing one still counts toward max_instances)", dec.Create)
	}
	// A lowered max_instances still trims the good ones beyond it.
	p.MaxInstances = 1
	dec = Decide(p, now, in, Demand{})
	if len(dec.Remove) != 1 || dec.Remove[0].ID != "b" {
		t.Errorf("max_instances 1: removed %+v, want b", dec.Remove)
	}
}

// On demand (not preemptive, idle_count 0), a job request in flight is
// not a job: it creates no instance; a job received and waiting does.
func TestSlotsOnDemandCreatesForJobsNotRequests(t *testing.T) {
	now := time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC)
	p := &Policy{Dialect: DialectAutoscaler, CapacityPerInstance: 1, MaxInstances: 3, Base: Schedule{IdleTime: time.Minute}}
	if err := p.Compile(); err != nil {
		t.Fatal(err)
	}
	if !CanReserve(p, now, nil, Demand{}) {
		t.Fatal("on demand: CanReserve with room for instances = false")
	}
	if dec := Decide(p, now, nil, Demand{Reserved: 2}); dec.Create != 0 {
		t.Errorf("2 requests in flight, no job: create %d, want 0", dec.Create)
	}
	if dec := Decide(p, now, nil, Demand{Reserved: 1, Waiting: 2}); dec.Create != 2 {
		t.Errorf("2 jobs waiting: create %d, want 2", dec.Create)
	}
	// Preemptive: the request holds a ready slot, the idle target comes on
	// top.
	p.Base.IdleCount, p.Base.Preemptive = 1, true
	idle := []Instance{{ID: "a", State: StateIdle, Created: now, Ready: now}}
	if dec := Decide(p, now, idle, Demand{Reserved: 1}); dec.Create != 1 {
		t.Errorf("preemptive, 1 request on the only idle slot: create %d, want 1", dec.Create)
	}
}
