package autoscale

import (
	"fmt"
	"testing"
	"time"
)

// benchFleet is n instances in a mix of states, oldest first.
func benchFleet(n int, capacity int) []Instance {
	now := t0
	in := make([]Instance, n)
	for i := range in {
		created := now.Add(-time.Duration(n-i) * time.Second)
		in[i] = Instance{ID: fmt.Sprintf("i%05d", i), Created: created, Ready: created.Add(30 * time.Second), UseCount: i % 7}
		switch i % 10 {
		case 0:
			in[i].State = StateCreating
			in[i].Ready = time.Time{}
		case 1, 2, 3:
			in[i].State = StateIdle
			in[i].LastUsed = now.Add(-time.Duration(i%90) * time.Minute)
		case 9:
			in[i].State = StateRemoving
		default:
			in[i].State = StateBusy
			in[i].Acquired = 1 + i%capacity
		}
	}
	return in
}

// BenchmarkDecide10k: one decision over 10,000 instances (target <= 5 ms).
func BenchmarkDecide10k(b *testing.B) {
	for _, tc := range []struct {
		name string
		p    *Policy
	}{
		{"machine", &Policy{Dialect: DialectMachine, CapacityPerInstance: 1, MaxInstances: 12000, MaxGrowthRate: 50, MaxUseCount: 5,
			Base: Schedule{IdleCount: 500, IdleCountMin: 50, ScaleFactor: 0.5, IdleTime: 30 * time.Minute}}},
		{"autoscaler", &Policy{Dialect: DialectAutoscaler, CapacityPerInstance: 4, MaxInstances: 12000, MaxUseCount: 5, ReservationThrottling: true,
			Base: Schedule{IdleCount: 400, IdleTime: 30 * time.Minute, ScaleFactor: 0.2, ScaleFactorLimit: 1000}}},
		{"adaptive", &Policy{Dialect: DialectAutoscaler, CapacityPerInstance: 4, MaxInstances: 12000, ReservationThrottling: true,
			Base: Schedule{IdleTime: 30 * time.Minute, Adaptive: true, TargetWait: 30 * time.Second, Preemptive: true}}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			in := benchFleet(10000, tc.p.capacity())
			d := Demand{Reserved: 20, Waiting: 30, Observed: Observed{ArrivalRate: 10, MeanDuration: 10 * time.Minute, BootTime: time.Minute}}
			if err := tc.p.Compile(); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				Decide(tc.p, t0, in, d)
			}
		})
	}
}

// BenchmarkActive: picking the schedule among compiled periods.
func BenchmarkActive(b *testing.B) {
	p := &Policy{Dialect: DialectMachine, Schedules: []Schedule{
		{Periods: []string{"* * 9-17 * * mon-fri *"}, Timezone: "America/New_York"},
		{Periods: []string{"* * * * * sat,sun *"}, Timezone: "UTC"},
	}}
	if err := p.Compile(); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		p.Active(t0)
	}
}

func BenchmarkCanReserve10k(b *testing.B) {
	p := &Policy{Dialect: DialectAutoscaler, CapacityPerInstance: 4, MaxInstances: 12000, ReservationThrottling: true, Base: Schedule{IdleCount: 10, Preemptive: true}}
	in := benchFleet(10000, 4)
	b.ReportAllocs()
	for b.Loop() {
		CanReserve(p, t0, in, Demand{Reserved: 3})
	}
}
