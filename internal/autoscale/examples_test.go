package autoscale

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/config"
)

// The worked examples of AUTOSCALING.md (from the seeds' docs), replayed
// on a fake clock.

func machinePolicy(limit, concurrent, growth int, idleCount int, idleTime time.Duration) *Policy {
	return &Policy{
		Dialect:             DialectMachine,
		CapacityPerInstance: 1,
		MaxInstances:        limit,
		MaxGrowthRate:       growth,
		Concurrent:          concurrent,
		Base:                Schedule{IdleCount: idleCount, IdleTime: idleTime},
	}
}

func wantCounts(t *testing.T, f *simFleet, what string, creating, idle, busy int) {
	t.Helper()
	c := f.counts()
	if c.creating != creating || c.idle != idle || c.busy != busy {
		t.Fatalf("%s: creating/idle/busy = %d/%d/%d, want %d/%d/%d (removing %d)",
			what, c.creating, c.idle, c.busy, creating, idle, busy, c.removing)
	}
}

// Example 1: limit=10, MaxGrowthRate=1, IdleCount=2, IdleTime=1800.
func TestExample1IdleCountGrowthRateIdleTime(t *testing.T) {
	f := newFleet(t, machinePolicy(10, 0, 1, 2, 1800*time.Second), 20*time.Second)
	f.run(time.Minute)
	wantCounts(t, f, "at start", 0, 2, 0)

	// 5 jobs; provisioning is faster than the jobs.
	f.submit(5, time.Hour)
	f.run(5 * time.Minute)
	wantCounts(t, f, "after 5 jobs", 0, 2, 5)
	if f.created != 7 || f.removed != 0 {
		t.Fatalf("created %d removed %d, want 7 and 0", f.created, f.removed)
	}

	// The jobs end; idle machines are kept while fewer than IdleTime has
	// passed since their last job...
	f.run(time.Hour)
	if c := f.counts(); c.busy != 0 || c.idle < 2 {
		t.Fatalf("after the jobs: %+v", c)
	}
	f.run(25 * time.Minute)
	if c := f.counts(); c.idle != 5 {
		// the two never-used machines were idle for over 30 minutes when
		// the jobs ended; the five used ones were not
		t.Fatalf("25 minutes after the jobs: %d idle, want 5 (%+v)", c.idle, c)
	}
	// ...and 30 minutes after the jobs ended it is back to 2 idle.
	f.run(10 * time.Minute)
	f.removeTime = 0
	f.run(2 * time.Second)
	wantCounts(t, f, "30 minutes after the jobs", 0, 2, 0)
	for _, r := range f.removals {
		if !strings.Contains(r.Reason, "too many idle machines") {
			t.Errorf("removal reason %q", r.Reason)
		}
	}
}

// Example 1, step by step: machines are created one at a time.
func TestExample1CreatesOneAtATime(t *testing.T) {
	f := newFleet(t, machinePolicy(10, 0, 1, 2, 1800*time.Second), 20*time.Second)
	for range 5 {
		dec := f.step()
		if dec.Create > 1 {
			t.Fatalf("created %d at once with MaxGrowthRate 1", dec.Create)
		}
		f.clk.Advance(time.Second)
	}
	if c := f.counts(); c.creating != 1 || c.total != 1 {
		t.Fatalf("after 5 s: %+v, want 1 creating", c)
	}
	if !strings.Contains(f.last.CreateReason, "MaxGrowthRate 1") {
		t.Errorf("blocked creation reason %q does not name MaxGrowthRate", f.last.CreateReason)
	}
}

// Example 2: concurrent=20, limit=40, IdleCount=10 → at most 30 machines.
func TestExample2ConcurrentBoundsMachines(t *testing.T) {
	f := newFleet(t, machinePolicy(40, 20, 0, 10, 1800*time.Second), 30*time.Second)
	f.submit(100, 2*time.Hour)
	f.run(10 * time.Minute)
	wantCounts(t, f, "under full load", 0, 10, 20)
	if f.peakTotal != 30 {
		t.Fatalf("peak %d machines, want 30", f.peakTotal)
	}
}

// Example 3: concurrent=20, limit=25, IdleCount=10 → at most 25
// machines, only 5 idle under full load.
func TestExample3LimitBoundsIdle(t *testing.T) {
	f := newFleet(t, machinePolicy(25, 20, 0, 10, 1800*time.Second), 30*time.Second)
	f.submit(100, 2*time.Hour)
	f.run(10 * time.Minute)
	wantCounts(t, f, "under full load", 0, 5, 20)
	if f.peakTotal != 25 {
		t.Fatalf("peak %d machines, want 25", f.peakTotal)
	}
	if !strings.Contains(f.last.CreateReason, "limit 25") {
		t.Errorf("reason %q does not say that limit holds creation back", f.last.CreateReason)
	}
}

// Example 4: IdleCount=100, IdleCountMin=10, IdleScaleFactor=1.1.
func TestExample4IdleScaleFactor(t *testing.T) {
	p := machinePolicy(200, 200, 0, 100, 30*time.Minute)
	p.Base.IdleCountMin, p.Base.ScaleFactor = 10, 1.1
	now := t0
	mk := func(idle, busy int) []Instance {
		var in []Instance
		for i := range busy {
			in = append(in, Instance{ID: "b" + strconv.Itoa(i), State: StateBusy, Created: now, Ready: now, Acquired: 1, UseCount: 1})
		}
		for i := range idle {
			in = append(in, Instance{ID: "i" + strconv.Itoa(i), State: StateIdle, Created: now, Ready: now})
		}
		return in
	}
	for _, tc := range []struct {
		idle, busy, target, create int
	}{
		{idle: 5, busy: 10, target: 11, create: 6},     // "So 6 more are created"
		{idle: 90, busy: 100, target: 100, create: 10}, // capped by IdleCount
		{idle: 22, busy: 20, target: 22, create: 0},
		{idle: 0, busy: 0, target: 10, create: 10}, // IdleCountMin
	} {
		dec := Decide(p, now, mk(tc.idle, tc.busy), Demand{})
		if dec.IdleTarget != tc.target || dec.Create != tc.create {
			t.Errorf("%d idle, %d in use: target %d create %d, want %d and %d", tc.idle, tc.busy, dec.IdleTarget, dec.Create, tc.target, tc.create)
		}
	}

	// In the harness: 100 in use with 100 idle, then down to 20 in use:
	// machines go slowly (only after IdleTime) down to 22 idle, then with
	// nothing in use down to 10.
	f := newFleet(t, p, 30*time.Second)
	f.submit(100, time.Hour)
	f.run(20 * time.Minute)
	wantCounts(t, f, "100 in use", 0, 100, 100)
	f.jobs = f.jobs[:20] // 80 jobs end now
	for i := range f.inst {
		in := &f.inst[i]
		if in.State == StateBusy && !f.running(in.ID) {
			in.State, in.Acquired, in.LastUsed = StateIdle, 0, f.clk.Now()
		}
	}
	// The 100 never-used machines have been idle since they booted, the 80
	// just released ones only since now: nothing goes for a while, then
	// the old ones, then the released ones down to 22, never below.
	f.run(5 * time.Minute)
	if c := f.counts(); c.busy != 20 || c.idle != 180 {
		t.Fatalf("5 minutes after 80 jobs ended: %+v, want 180 idle", c)
	}
	for range 30 * 60 {
		f.step()
		f.clk.Advance(time.Second)
		if c := f.counts(); c.idle < 22 {
			t.Fatalf("%d idle with 20 in use, want at least 22", c.idle)
		}
	}
	if c := f.counts(); c.busy != 20 || c.idle != 22 {
		t.Fatalf("after IdleTime with 20 in use: %+v, want 22 idle", c)
	}
	// The last 20 jobs end: down to IdleCountMin = 10, only after IdleTime.
	f.run(30 * time.Minute)
	if c := f.counts(); c.busy != 0 || c.idle < 20 { // the 20 released ones stay
		t.Fatalf("jobs ended: %+v", c)
	}
	f.run(30 * time.Minute)
	wantCounts(t, f, "0 in use", 0, 10, 0)
}

func (f *simFleet) running(id string) bool {
	for _, j := range f.jobs {
		if j.id == id {
			return true
		}
	}
	return false
}

// Example 5: IdleCount=0: machines on demand, none kept after IdleTime.
func TestExample5OnDemand(t *testing.T) {
	f := newFleet(t, machinePolicy(10, 10, 0, 0, 10*time.Minute), 30*time.Second)
	f.run(time.Minute)
	wantCounts(t, f, "no jobs", 0, 0, 0)
	f.submit(3, 5*time.Minute)
	f.step()
	if c := f.counts(); c.creating != 3 || len(f.waiting) != 3 {
		t.Fatalf("3 jobs: %+v, %d waiting, want 3 machines created for them", c, len(f.waiting))
	}
	f.run(time.Minute)
	wantCounts(t, f, "jobs running", 0, 0, 3)
	f.run(6 * time.Minute)
	wantCounts(t, f, "jobs done", 0, 3, 0)
	// A job within IdleTime reuses a machine.
	f.submit(1, time.Minute)
	f.run(2 * time.Minute)
	if f.created != 3 {
		t.Fatalf("created %d machines, want the 3 reused", f.created)
	}
	f.run(10 * time.Minute)
	if c := f.counts(); c.live() != 0 {
		t.Fatalf("after IdleTime: %+v, want no machines", c)
	}
}

// Example 6: periods, with the seed's configuration.
func TestExample6Periods(t *testing.T) {
	p := parsePolicy(t, `
concurrent = 50
[[runners]]
  url = "https://gitlab.example.com"
  token = "t"
  executor = "docker+machine"
  limit = 100
  [runners.machine]
    MachineName = "auto-scale-%s"
    MachineDriver = "google"
    IdleCount = 10
    IdleTime = 1800
    [[runners.machine.autoscaling]]
      Periods = ["* * 9-17 * * mon-fri *"]
      IdleCount = 50
      IdleTime = 3600
      Timezone = "UTC"
    [[runners.machine.autoscaling]]
      Periods = ["* * * * * sat,sun *"]
      IdleCount = 5
      IdleTime = 60
      Timezone = "UTC"
`)
	day := func(d int, hh, mm, ss int) time.Time { return time.Date(2026, 1, d, hh, mm, ss, 0, time.UTC) }
	for _, tc := range []struct {
		at       time.Time
		idle     int
		idleTime time.Duration
	}{
		{day(7, 12, 0, 0), 50, time.Hour},                               // Wednesday noon
		{day(7, 9, 0, 0), 50, time.Hour},                                // first second
		{day(7, 17, 59, 58), 50, time.Hour},                             // last second inside
		{day(7, 17, 59, 59), 10, 30 * time.Minute},                      // the 59th second of the last minute is outside
		{day(7, 18, 0, 0), 10, 30 * time.Minute},                        // after
		{day(7, 8, 0, 0), 10, 30 * time.Minute},                         // before
		{day(10, 12, 0, 0), 5, time.Minute},                             // Saturday
		{day(11, 23, 59, 30), 5, time.Minute},                           // Sunday night
		{day(12, 12, 0, 0), 50, time.Hour},                              // Monday
		{day(9, 17, 59, 58).Add(500 * time.Millisecond), 50, time.Hour}, // Friday, half a second before the last second
	} {
		s := p.Active(tc.at)
		if s.IdleCount != tc.idle || s.IdleTime != tc.idleTime {
			t.Errorf("%s: IdleCount %d IdleTime %s, want %d and %s", tc.at.Format("Mon 15:04:05.000"), s.IdleCount, s.IdleTime, tc.idle, tc.idleTime)
		}
		if dec := Decide(p, tc.at, nil, Demand{}); dec.IdleTarget != tc.idle || dec.Create != tc.idle {
			t.Errorf("%s: Decide target %d create %d, want %d", tc.at.Format("Mon 15:04:05"), dec.IdleTarget, dec.Create, tc.idle)
		}
	}
	if dec := Decide(p, day(7, 20, 0, 0), nil, Demand{}); dec.Schedule != nil {
		t.Errorf("outside all periods the decision names schedule %v", dec.Schedule)
	}
	if dec := Decide(p, day(7, 12, 0, 0), nil, Demand{}); dec.Schedule != &p.Schedules[0] {
		t.Errorf("weekday noon: schedule %v", dec.Schedule)
	}
}

// Example 7: limit bounds machines in all states.
func TestExample7LimitAllStates(t *testing.T) {
	p := machinePolicy(10, 0, 0, 5, time.Hour)
	now := t0
	in := []Instance{
		{ID: "b1", State: StateBusy, Acquired: 1, Created: now},
		{ID: "b2", State: StateBusy, Acquired: 1, Created: now},
		{ID: "b3", State: StateBusy, Acquired: 1, Created: now},
		{ID: "r1", State: StateRemoving, Created: now},
		{ID: "r2", State: StateRemoving, Created: now},
		{ID: "r3", State: StateRemoving, Created: now},
		{ID: "c1", State: StateCreating, Created: now},
		{ID: "c2", State: StateCreating, Created: now},
		{ID: "i1", State: StateIdle, Created: now, Ready: now},
		{ID: "i2", State: StateIdle, Created: now, Ready: now},
	}
	if dec := Decide(p, now, in, Demand{}); dec.Create != 0 || len(dec.Remove) != 0 {
		t.Fatalf("at limit: %+v", dec)
	}
	p.MaxInstances = 12
	if dec := Decide(p, now, in, Demand{}); dec.Create != 1 {
		// available 4 (2 creating + 2 idle) < 5: one more, within 12
		t.Fatalf("limit 12: create %d, want 1", dec.Create)
	}
	p.MaxInstances, p.Base.IdleCount = 12, 9
	if dec := Decide(p, now, in, Demand{}); dec.Create != 2 {
		t.Fatalf("limit 12, IdleCount 9: create %d, want 2", dec.Create)
	}
	// A lowered limit removes idle machines beyond it, in list order.
	p.MaxInstances = 9
	dec := Decide(p, now, in, Demand{})
	if len(dec.Remove) != 1 || dec.Remove[0].ID != "i2" || !strings.Contains(dec.Remove[0].Reason, "too many machines") {
		t.Fatalf("limit 9: %+v", dec.Remove)
	}
	// No job may be reserved beyond the limit either (on demand): 5 busy,
	// 3 removing and 2 creating for 2 waiting jobs fill limit 10.
	p.MaxInstances, p.Base.IdleCount = 10, 0
	full := append([]Instance(nil), in...)
	full[8].State, full[8].Acquired = StateBusy, 1
	full[9].State, full[9].Acquired = StateBusy, 1
	if CanReserve(p, now, full, Demand{Waiting: 2}) {
		t.Errorf("CanReserve at limit 10 (5 busy, 3 removing, 2 creating for 2 waiting jobs): true")
	}
	if !CanReserve(p, now, full, Demand{Waiting: 1}) {
		t.Errorf("CanReserve with a creating machine nobody waits for: false")
	}
}

// Example 8: MaxBuilds=N: a machine is removed after its N-th job.
func TestExample8MaxBuilds(t *testing.T) {
	p := machinePolicy(5, 5, 0, 0, time.Hour)
	p.MaxUseCount = 3
	f := newFleet(t, p, 10*time.Second)
	for range 3 {
		f.submit(1, time.Minute)
		f.run(2 * time.Minute)
	}
	var retired []Removal
	for _, r := range f.removals {
		if strings.Contains(r.Reason, "too many builds") {
			retired = append(retired, r)
		}
	}
	if len(retired) != 1 || retired[0].ID != "i001" {
		t.Fatalf("removals %+v, want i001 retired after its 3rd job", f.removals)
	}
	for _, in := range f.inst {
		if in.UseCount > 3 {
			t.Fatalf("%s ran %d jobs", in.ID, in.UseCount)
		}
	}
	f.submit(1, time.Minute)
	f.run(2 * time.Minute)
	if f.created != 2 {
		t.Fatalf("created %d machines, want a second one for the 4th job", f.created)
	}
}

func parsePolicy(t *testing.T, src string) *Policy {
	t.Helper()
	c, warns, err := config.Parse("config.toml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range warns {
		t.Logf("config warning: %s", w)
	}
	p, err := FromRunner("config.toml", nil, c.Concurrent, &c.Runners[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range p.Warnings {
		t.Errorf("policy warning: %s", w)
	}
	return p
}
