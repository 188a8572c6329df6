package simulate_test

import (
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/drover-ci/drover/internal/autoscale"
	"github.com/drover-ci/drover/internal/autoscale/simulate"
)

func readTrace(t *testing.T, s string) []simulate.Job {
	t.Helper()
	jobs, err := simulate.ReadTrace(strings.NewReader(s), "t.csv")
	if err != nil {
		t.Fatalf("ReadTrace = %v", err)
	}
	return jobs
}

func TestRunPreemptiveHandcrafted(t *testing.T) {
	// idle_count 1 slot, 30 s boots, capacity 1. Instance 1 is ready at
	// 30 s. Job A (60 s, runs 120 s) takes it; the pool starts instance 2
	// at once to restore the idle slot. Job B (61 s) cannot reserve
	// (preemptive) until instance 2 is ready at 90 s, seen at the 91 s
	// update (updates every 2 s while expecting, from 61 s): B waits 30 s.
	// B taking instance 2 starts instance 3. After the jobs, the idle time
	// of 10 m removes instances 3 and 2 and keeps one.
	pol := &autoscale.Policy{Dialect: autoscale.DialectAutoscaler, CapacityPerInstance: 1,
		Base: autoscale.Schedule{IdleCount: 1, IdleTime: 10 * time.Minute, Preemptive: true}}
	res, err := simulate.Run(t.Context(), simulate.Options{Policy: pol, BootTime: 30 * time.Second, Duration: time.Hour},
		readTrace(t, "arrival_s,duration_s\n60,120\n61,60\n"))
	if err != nil {
		t.Fatalf("Run = %v", err)
	}
	want := simulate.Report{
		Jobs: 2, WaitP50: 0, WaitP95: 30, WaitP99: 30, WaitMax: 30,
		BusyInstanceS: 180, PeakInstances: 3, FinalInstances: 1, Created: 3, Removed: 2,
	}
	got := res.Report
	idle := got.IdleInstanceS
	// Per-second billing bills the instances' whole lives, each rounded
	// up to the second; a removal ends the bill when the cloud has
	// deleted the instance (at once here), before the pool sees it gone.
	lives := got.BusyInstanceS + got.IdleInstanceS + got.CreatingInstanceS
	if got.BilledInstanceS < lives || got.BilledInstanceS > lives+got.RemovingInstanceS+3 {
		t.Errorf("billed %v s, want the %v s the 3 instances lived (+ %v s removing), rounded up to the second", got.BilledInstanceS, lives, got.RemovingInstanceS)
	}
	got.IdleInstanceS, got.CreatingInstanceS, got.RemovingInstanceS, got.BilledInstanceS = 0, 0, 0, 0
	if got != want {
		t.Errorf("report\n got %+v\nwant %+v", got, want)
	}
	// Instance 1 idle 30-60 s and 180-3600 s; instances 2 and 3 idle from
	// 151 s and 121 s for the 10 min idle time plus at most a minute to
	// the next scaling pass.
	if lo, hi := 30+3420+2*600.0, 30+3420+2*660.0+30; idle < lo || idle > hi {
		t.Errorf("idle_instance_s = %v, want in [%v, %v]", idle, lo, hi)
	}
	// The same run billed per started hour: three started hours, all in
	// the first hour of the day.
	hourly := autoscale.Billing{Increment: time.Hour}
	res, err = simulate.Run(t.Context(), simulate.Options{Policy: pol, BootTime: 30 * time.Second, Duration: time.Hour, Billing: &hourly},
		readTrace(t, "arrival_s,duration_s\n60,120\n61,60\n"))
	if err != nil {
		t.Fatalf("Run = %v", err)
	}
	if res.BilledInstanceS != 3*3600 || len(res.Hours) != 1 || res.Hours[0].BilledS != 3*3600 {
		t.Errorf("per started hour: billed %v s (first hour %v s), want 10800", res.BilledInstanceS, res.Hours[0].BilledS)
	}
}

func TestRunOnDemand(t *testing.T) {
	// IdleCount 0 (machine dialect): nothing idle; the job is taken at
	// once (non-preemptive), its instance created then, ready after 30 s.
	pol := &autoscale.Policy{Dialect: autoscale.DialectMachine, CapacityPerInstance: 1,
		Base: autoscale.Schedule{IdleTime: 5 * time.Minute}}
	res, err := simulate.Run(t.Context(), simulate.Options{Policy: pol, BootTime: 30 * time.Second, Duration: time.Hour},
		readTrace(t, "10,100\n"))
	if err != nil {
		t.Fatalf("Run = %v", err)
	}
	r := res.Report
	if r.WaitMax != 30 || r.BusyInstanceS != 100 || r.Created != 1 || r.Removed != 1 || r.FinalInstances != 0 || r.PeakInstances != 1 {
		t.Errorf("report %+v: want wait 30 s, busy 100 s, 1 created and removed, none left", r)
	}
	if r.IdleInstanceS < 300 || r.IdleInstanceS > 360 {
		t.Errorf("idle_instance_s = %v, want 300..360 (IdleTime 5 m + up to one update interval)", r.IdleInstanceS)
	}
}

func TestRunMaxInstancesQueues(t *testing.T) {
	// One instance at most, jobs of 100 s arriving together: they run one
	// after another, waits 30 (boot), 130, 230.
	pol := &autoscale.Policy{Dialect: autoscale.DialectAutoscaler, CapacityPerInstance: 1, MaxInstances: 1,
		Base: autoscale.Schedule{IdleTime: time.Hour}}
	res, err := simulate.Run(t.Context(), simulate.Options{Policy: pol, BootTime: 30 * time.Second, Duration: time.Hour},
		readTrace(t, "0,100\n0,100\n0,100\n"))
	if err != nil {
		t.Fatalf("Run = %v", err)
	}
	if r := res.Report; r.WaitP50 != 130 || r.WaitMax != 230 || r.Created != 1 || r.BusyInstanceS != 300 {
		t.Errorf("report %+v: want waits 30/130/230, one instance, 300 busy seconds", r)
	}
}

func TestRunCutsAtDuration(t *testing.T) {
	pol := &autoscale.Policy{Dialect: autoscale.DialectAutoscaler, CapacityPerInstance: 1, MaxInstances: 1}
	res, err := simulate.Run(t.Context(), simulate.Options{Policy: pol, BootTime: time.Minute, Duration: 10 * time.Minute},
		readTrace(t, "0,3600\n60,10\n700,1\n"))
	if err != nil {
		t.Fatalf("Run = %v", err)
	}
	if r := res.Report; r.Jobs != 2 || r.Unstarted != 1 || r.WaitMax != 540 {
		t.Errorf("report %+v: want 2 jobs in the span, 1 never started, waiting 540 s at the end", r)
	}
}

func TestRunCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := simulate.Run(ctx, simulate.Options{Policy: dayPolicy()}, dayTrace(t, 100))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Run(cancelled) = %v, want context.Canceled", err)
	}
}

func TestWriteSVG(t *testing.T) {
	res, err := simulate.Run(t.Context(), simulate.Options{Policy: dayPolicy(), BootTime: 30 * time.Second, Samples: 200}, dayTrace(t, 2000))
	if err != nil {
		t.Fatalf("Run = %v", err)
	}
	if len(res.Timeline) != 200 {
		t.Errorf("timeline has %d samples, want 200", len(res.Timeline))
	}
	var b bytes.Buffer
	if err := simulate.WriteSVG(&b, res); err != nil {
		t.Fatalf("WriteSVG = %v", err)
	}
	dec := xml.NewDecoder(&b)
	var texts []string
	for {
		tok, err := dec.Token()
		if err != nil {
			if err.Error() != "EOF" {
				t.Fatalf("plot is not well-formed XML: %v", err)
			}
			break
		}
		if cd, ok := tok.(xml.CharData); ok {
			texts = append(texts, string(cd))
		}
	}
	all := strings.Join(texts, "|")
	for _, want := range []string{"instances", "queued jobs", "hours since start", "busy", "idle", "creating", "removing"} {
		if !strings.Contains(all, want) {
			t.Errorf("plot lacks label %q", want)
		}
	}
}

func TestReportText(t *testing.T) {
	r := simulate.Report{Jobs: 3, WaitP50: 1, WaitP95: 2.5, WaitP99: 3, WaitMax: 4, BusyInstanceS: 7200, IdleInstanceS: 3600, PeakInstances: 2, Created: 2, Removed: 1, FinalInstances: 1}
	var b bytes.Buffer
	if err := r.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"jobs              3", "p95 2.5s", "busy 2.0 h", "idle 1.0 h", "peak 2", "created 2", "removed 1"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("text report lacks %q:\n%s", want, b.String())
		}
	}
}

func TestSweepIdleCount(t *testing.T) {
	tr := dayTrace(t, 3000)
	o := simulate.Options{Policy: dayPolicy(), BootTime: 30 * time.Second}
	best, all, err := simulate.SweepIdleCount(t.Context(), o, tr, []int{0, 2, 4, 8, 16}, 30*time.Second)
	if err != nil {
		t.Fatalf("SweepIdleCount = %v", err)
	}
	if len(all) != 5 {
		t.Fatalf("%d results, want 5", len(all))
	}
	if best == nil {
		t.Fatal("no idle count meets p95 30 s")
	}
	for _, r := range all {
		if r.Report.WaitP95 <= 30 && r.Report.IdleInstanceS < best.Report.IdleInstanceS {
			t.Errorf("idle_count %d meets the target with less idle time than the best %d", r.IdleCount, best.IdleCount)
		}
	}
	if all[0].Report.IdleInstanceS >= all[4].Report.IdleInstanceS {
		t.Errorf("idle time with idle_count 0 (%v) not below idle_count 16 (%v)", all[0].Report.IdleInstanceS, all[4].Report.IdleInstanceS)
	}
	if dayPolicy().Base.IdleCount != 20 {
		t.Error("sweep changed the caller's policy")
	}
}

func TestRunSeedExampleMachineGrowth(t *testing.T) {
	// Seed 000's worked example: limit 10, MaxGrowthRate 1, IdleCount 2,
	// IdleTime 1800 s. Start: 2 idle. 5 jobs arrive: machines are created
	// one at a time until 5 are busy and 2 idle (7). After the jobs end
	// and IdleTime passes: back to 2 idle.
	pol := &autoscale.Policy{Dialect: autoscale.DialectMachine, CapacityPerInstance: 1, MaxInstances: 10, MaxGrowthRate: 1,
		Base: autoscale.Schedule{IdleCount: 2, IdleTime: 1800 * time.Second, Preemptive: true}}
	res, err := simulate.Run(t.Context(), simulate.Options{Policy: pol, BootTime: 30 * time.Second, Duration: 3 * time.Hour, Samples: 3 * 3600},
		readTrace(t, "300,3600\n300,3600\n300,3600\n300,3600\n300,3600\n"))
	if err != nil {
		t.Fatalf("Run = %v", err)
	}
	var sawFull bool
	for _, s := range res.Timeline {
		if s.Creating > 1 {
			t.Fatalf("at %s: %d machines creating, MaxGrowthRate is 1", s.At, s.Creating)
		}
		if total := s.Creating + s.Idle + s.Busy + s.Removing; total > 10 {
			t.Fatalf("at %s: %d machines, limit 10", s.At, total)
		}
		if s.At == 200*time.Second && (s.Idle != 2 || s.Busy != 0) {
			t.Errorf("at start: %+v, want 2 idle", s)
		}
		if s.Busy == 5 && s.Idle == 2 && s.Creating == 0 {
			sawFull = true
		}
		// The machines the jobs used stay for IdleTime after the jobs end
		// (never-used idle machines may go earlier: their idle time runs
		// from when they became ready).
		if s.At > 4200*time.Second && s.At < 5600*time.Second && s.Idle < 5 { // jobs end 3900-4100 s
			t.Fatalf("at %s: %+v: used machines removed before IdleTime", s.At, s)
		}
		if s.At > 3*time.Hour-10*time.Minute && (s.Idle != 2 || s.Creating+s.Busy+s.Removing != 0) {
			t.Fatalf("at %s: %+v, want back to 2 idle", s.At, s)
		}
	}
	if !sawFull {
		t.Error("never 5 busy + 2 idle machines")
	}
	if r := res.Report; r.FinalInstances != 2 || r.PeakInstances != 7 || r.Created != 7 || r.Removed != 5 {
		t.Errorf("report %+v: want peak 7, back to 2 (7 created, 5 removed)", r)
	}
}

func TestSweepIdleCountBothModes(t *testing.T) {
	tr := dayTrace(t, 2000)
	o := simulate.Options{Policy: dayPolicy(), BootTime: 30 * time.Second}
	best, all, err := simulate.SweepIdleCountBothModes(t.Context(), o, tr, []int{0, 2, 4}, 30*time.Second)
	if err != nil {
		t.Fatalf("SweepIdleCountBothModes = %v", err)
	}
	type key struct {
		count      int
		preemptive bool
	}
	want := []key{{0, false}, {2, false}, {2, true}, {4, false}, {4, true}}
	if len(all) != len(want) {
		t.Fatalf("%d results, want %d", len(all), len(want))
	}
	for i, r := range all {
		if (key{r.IdleCount, r.Preemptive}) != want[i] {
			t.Errorf("result %d is idle_count %d preemptive %v, want %+v", i, r.IdleCount, r.Preemptive, want[i])
		}
		if r.Report.Jobs != len(tr) {
			t.Errorf("result %d: %d jobs", i, r.Report.Jobs)
		}
	}
	if best == nil {
		t.Fatal("nothing meets p95 30 s")
	}
	for _, r := range all {
		if r.Report.WaitP95 <= 30 && r.Report.IdleInstanceS < best.Report.IdleInstanceS {
			t.Errorf("idle_count %d preemptive %v is cheaper than the best", r.IdleCount, r.Preemptive)
		}
	}
	// Same runs, same results: the parallel sweep is deterministic.
	_, again, err := simulate.SweepIdleCountBothModes(t.Context(), o, tr, []int{0, 2, 4}, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for i := range all {
		if d := cmp.Diff(all[i], again[i]); d != "" {
			t.Errorf("result %d differs between runs (-first +second):\n%s", i, d)
		}
	}
}

// With a poll interval the manager takes jobs only at poll times: a job
// queued between polls waits for the next one even with an idle slot.
func TestRunPollInterval(t *testing.T) {
	pol := &autoscale.Policy{Dialect: autoscale.DialectAutoscaler, CapacityPerInstance: 1,
		Base: autoscale.Schedule{IdleCount: 2, IdleTime: time.Hour}}
	trace := "arrival_s,duration_s\n100.5,10\n101,10\n200,10\n"
	for _, tc := range []struct {
		poll    time.Duration
		wantMax float64
		wantP50 float64
	}{
		{0, 0, 0},
		{3 * time.Second, 1.5, 1},  // polls at 99, 102, ..., 198, 201: waits 1.5, 1, 1
		{10 * time.Second, 9.5, 9}, // polls at 100, 110, ..., 200: waits 9.5, 9, 0
	} {
		res, err := simulate.Run(t.Context(), simulate.Options{Policy: pol, BootTime: 30 * time.Second, Duration: time.Hour, PollInterval: tc.poll, Samples: -1}, readTrace(t, trace))
		if err != nil {
			t.Fatalf("Run = %v", err)
		}
		if res.WaitMax != tc.wantMax || res.WaitP50 != tc.wantP50 {
			t.Errorf("poll %s: wait max %v p50 %v, want %v and %v", tc.poll, res.WaitMax, res.WaitP50, tc.wantMax, tc.wantP50)
		}
	}
}

// The simulation runs no more of the runner's jobs at once than the
// manager would: concurrent and the runner's limit (Policy.JobCap), even
// with room for more instances.
func TestRunHonoursJobCap(t *testing.T) {
	var trace strings.Builder
	trace.WriteString("arrival_s,duration_s\n")
	for range 12 {
		trace.WriteString("0,600\n")
	}
	jobs := readTrace(t, trace.String())
	for _, tc := range []struct {
		name              string
		concurrent, limit int
		wantPeakBusy      int
	}{
		{"no cap", 0, 0, 12},
		{"concurrent 4", 4, 0, 4},
		{"limit 3", 10, 3, 3},
	} {
		pol := &autoscale.Policy{Dialect: autoscale.DialectAutoscaler, CapacityPerInstance: 1, MaxInstances: 20,
			Concurrent: tc.concurrent, Limit: tc.limit, Base: autoscale.Schedule{IdleTime: time.Minute}}
		res, err := simulate.Run(t.Context(), simulate.Options{Policy: pol, BootTime: 30 * time.Second, Duration: 2 * time.Hour}, jobs)
		if err != nil {
			t.Fatalf("%s: Run = %v", tc.name, err)
		}
		peak := 0
		for _, s := range res.Timeline {
			peak = max(peak, s.Busy)
		}
		if peak != tc.wantPeakBusy || res.Unstarted != 0 {
			t.Errorf("%s: peak busy %d, %d jobs unstarted; want %d and 0", tc.name, peak, res.Unstarted, tc.wantPeakBusy)
		}
	}
}

// simulate's report and sweep's table write a wait the same way.
func TestReportsShareWaitFormat(t *testing.T) {
	r := simulate.Report{Jobs: 1, WaitP50: 0.04, WaitP95: 28.34, WaitP99: 90, WaitMax: 267.7}
	var sim, sw bytes.Buffer
	if err := r.WriteText(&sim); err != nil {
		t.Fatal(err)
	}
	all := []simulate.SweepResult{{IdleCount: 3, IdleTime: time.Minute, Report: r}}
	if err := simulate.WriteSweepText(&sw, all, &all[0]); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"p50 0s", "p95 28.3s", "p99 1m30s", "max 4m27.7s"} {
		if !strings.Contains(sim.String(), want) {
			t.Errorf("simulate report lacks %q:\n%s", want, sim.String())
		}
	}
	lines := strings.Split(strings.TrimSpace(sw.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("sweep table: %d lines, want header, one row, best:\n%s", len(lines), sw.String())
	}
	if got, want := strings.Fields(lines[1]), []string{"3", "1m0s", "off", "28.3s", "4m27.7s", "0.0", "0.0", "0.0", "0.0"}; strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("sweep row %q, want fields %q", lines[1], want)
	}
	if want := "best: idle_count 3, idle_time 1m0s, preemptive off (p95 wait 28.3s, idle 0.0 instance-hours)"; lines[2] != want {
		t.Errorf("sweep best line %q, want %q", lines[2], want)
	}
}

// SweepGrid runs every idle count × idle time × preemptive mode, in that
// order (count 0 only non-preemptive), each with the idle_time it names,
// and picks the cheapest that meets the target.
func TestSweepGrid(t *testing.T) {
	tr := dayTrace(t, 1500)
	o := simulate.Options{Policy: dayPolicy(), BootTime: 30 * time.Second, PollInterval: 3 * time.Second}
	g := simulate.Grid{IdleCounts: []int{0, 3}, IdleTimes: []time.Duration{30 * time.Second, 10 * time.Minute}, Preemptive: simulate.PreemptiveBoth}
	best, all, err := simulate.SweepGrid(t.Context(), o, tr, g, time.Minute)
	if err != nil {
		t.Fatalf("SweepGrid = %v", err)
	}
	type key struct {
		count      int
		idleTime   time.Duration
		preemptive bool
	}
	want := []key{
		{0, 30 * time.Second, false}, {0, 10 * time.Minute, false},
		{3, 30 * time.Second, false}, {3, 30 * time.Second, true}, {3, 10 * time.Minute, false}, {3, 10 * time.Minute, true},
	}
	var got []key
	for _, r := range all {
		got = append(got, key{r.IdleCount, r.IdleTime, r.Preemptive})
	}
	if d := cmp.Diff(want, got, cmp.AllowUnexported(key{})); d != "" {
		t.Fatalf("grid order (-want +got):\n%s", d)
	}
	// A longer idle_time keeps more idle capacity with the same count.
	if all[0].Report.IdleInstanceS >= all[1].Report.IdleInstanceS {
		t.Errorf("idle_count 0: idle %v h with idle_time 30s, not below %v h with 10m", all[0].Report.IdleInstanceS/3600, all[1].Report.IdleInstanceS/3600)
	}
	if best == nil {
		t.Fatal("nothing meets p95 1 min")
	}
	for _, r := range all {
		if r.Report.WaitP95 <= 60 && r.Report.IdleInstanceS < best.Report.IdleInstanceS {
			t.Errorf("%s is cheaper than the best %s", r.Setting(), best.Setting())
		}
	}
	if pol := dayPolicy(); pol.Base.IdleTime != 20*time.Minute || pol.Base.IdleCount != 20 {
		t.Error("the sweep changed the caller's policy")
	}
}

func TestParsePreemptiveModes(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    simulate.PreemptiveModes
		wantErr bool
	}{
		{"default", simulate.PreemptiveDefault, false},
		{"off", simulate.PreemptiveOff, false},
		{"on", simulate.PreemptiveOn, false},
		{"both", simulate.PreemptiveBoth, false},
		{"sometimes", 0, true},
	} {
		got, err := simulate.ParsePreemptiveModes(tc.in)
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("ParsePreemptiveModes(%q) = %v, %v; want %v, error %v", tc.in, got, err, tc.want, tc.wantErr)
		}
	}
}

// The comparison's text puts the adaptive row beside the best static one,
// with the ratio of their idle time.
func TestWriteComparisonText(t *testing.T) {
	c := &simulate.Comparison{
		Policy:            simulate.Report{WaitP95: 29, IdleInstanceS: 3600 * 70},
		BestStatic:        &simulate.SweepResult{IdleCount: 2, IdleTime: time.Minute, Preemptive: true, Report: simulate.Report{WaitP95: 25, IdleInstanceS: 3600 * 100}},
		TargetP95:         30 * time.Second,
		PolicyMeetsTarget: true,
	}
	var b bytes.Buffer
	if err := simulate.WriteComparisonText(&b, c); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"adaptive  p95 wait 29s", "idle    70.0 h", "(idle_count 2, idle_time 1m0s, preemptive on)", "= 0.70 (adaptive meets p95 wait 30s)"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("comparison lacks %q:\n%s", want, b.String())
		}
	}
	if got := c.IdleRatio(); math.Abs(got-0.7) > 1e-9 {
		t.Errorf("IdleRatio() = %v, want 0.7", got)
	}
}
