package simulate_test

import (
	"bytes"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/autoscale"
	"github.com/drover-ci/drover/internal/autoscale/simulate"
	"github.com/drover-ci/drover/internal/autoscale/tracegen"
)

// A job queued ten seconds before the hour boots its instance across the
// boundary: the booting time is split between the hours, the job counts
// in the hour it arrived, its busy and idle time in the hour they fell.
func TestRunHoursHandcrafted(t *testing.T) {
	pol := &autoscale.Policy{Dialect: autoscale.DialectMachine, CapacityPerInstance: 1,
		Base: autoscale.Schedule{IdleTime: 5 * time.Minute}}
	res, err := simulate.Run(t.Context(), simulate.Options{Policy: pol, BootTime: 30 * time.Second, Duration: 3 * time.Hour, LateAfter: 20 * time.Second},
		readTrace(t, "3590,100\n7300,50\n"))
	if err != nil {
		t.Fatalf("Run = %v", err)
	}
	if len(res.Hours) != 3 {
		t.Fatalf("%d hours, want 3", len(res.Hours))
	}
	type want struct {
		start             time.Duration
		jobs, late        int
		p95, creat, busy  float64
		idleLow, idleHigh float64
	}
	for i, w := range []want{
		{0, 1, 1, 30, 10, 0, 0, 0},
		{time.Hour, 0, 0, 0, 20, 100, 300, 360},
		{2 * time.Hour, 1, 1, 30, 30, 50, 300, 360},
	} {
		h := res.Hours[i]
		if h.Start != w.start || h.Jobs != w.jobs || h.Late != w.late || h.WaitP95 != w.p95 || h.CreatingS != w.creat || h.BusyS != w.busy || h.IdleS < w.idleLow || h.IdleS > w.idleHigh {
			t.Errorf("hour %d = %+v, want start %v, %d jobs, %d late, p95 %v s, creating %v s, busy %v s, idle %v..%v s",
				i, h, w.start, w.jobs, w.late, w.p95, w.creat, w.busy, w.idleLow, w.idleHigh)
		}
	}
}

// Over a generated day after a warm-up day, the hours add up to the
// report exactly: the same instance time, every job of the day once (none
// of the warm-up's), the late ones those whose wait exceeds LateAfter, and
// each hour's p95 is that of the waits of its own jobs.
func TestRunHoursAddUp(t *testing.T) {
	tr, err := tracegen.Generate(tracegen.Options{Seed: 7, Jobs: 3000, Span: 6 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	warm, err := tracegen.Generate(tracegen.Options{Seed: 8, Jobs: 2000})
	if err != nil {
		t.Fatal(err)
	}
	pol := &autoscale.Policy{Dialect: autoscale.DialectAutoscaler, CapacityPerInstance: 1, MaxInstances: 200,
		Base: autoscale.Schedule{IdleCount: 3, IdleTime: time.Minute}}
	o := simulate.Options{Policy: pol, BootTime: 40 * time.Second, BootSpread: 10 * time.Second, Duration: 7 * time.Hour,
		PollInterval: 3 * time.Second, WarmUp: warm, Samples: -1, LateAfter: 15 * time.Second}
	res, err := simulate.Run(t.Context(), o, tr)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Hours) != 7 {
		t.Fatalf("%d hours, want 7", len(res.Hours))
	}
	var busy, idle, creat float64
	jobs, late := 0, 0
	for _, h := range res.Hours {
		busy += h.BusyS
		idle += h.IdleS
		creat += h.CreatingS
		jobs += h.Jobs
		late += h.Late
	}
	near := func(a, b float64) bool { return math.Abs(a-b) <= 1e-6*math.Max(1, math.Abs(b)) }
	if !near(busy, res.BusyInstanceS) || !near(idle, res.IdleInstanceS) || !near(creat, res.CreatingInstanceS) {
		t.Errorf("hours add up to busy %v idle %v creating %v s, the report says %v, %v, %v",
			busy, idle, creat, res.BusyInstanceS, res.IdleInstanceS, res.CreatingInstanceS)
	}
	wantLate := 0
	per := make([][]float64, 7)
	for i, w := range res.Waits {
		if w > 15 {
			wantLate++
		}
		h := int(tr[i].Arrival / time.Hour)
		per[h] = append(per[h], w)
	}
	if jobs != res.Jobs || jobs != len(tr) || late != wantLate || late == 0 {
		t.Errorf("hours count %d jobs, %d late; want %d jobs (the report %d), %d late (and some)", jobs, late, len(tr), res.Jobs, wantLate)
	}
	for h, ws := range per {
		slices.Sort(ws)
		want := 0.0
		if len(ws) > 0 {
			want = ws[int(math.Ceil(0.95*float64(len(ws))))-1]
		}
		if res.Hours[h].WaitP95 != want || res.Hours[h].Jobs != len(ws) {
			t.Errorf("hour %d: p95 %v s over %d jobs, want %v s over %d", h, res.Hours[h].WaitP95, res.Hours[h].Jobs, want, len(ws))
		}
	}
}

func TestWriteHoursText(t *testing.T) {
	hours := []simulate.Hour{
		{Start: 0, Jobs: 95, Late: 18, WaitP95: 62.3, BusyS: 36000, IdleS: 3600 * 6.9, CreatingS: 3600 * 5},
		{Start: 25 * time.Hour, Jobs: 0},
	}
	var b bytes.Buffer
	if err := simulate.WriteHoursText(&b, hours); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	if len(lines) != 3 || strings.Join(strings.Fields(lines[0]), " ") != "hour jobs late p95_wait busy idle booting" ||
		strings.Join(strings.Fields(lines[1]), " ") != "00:00 95 18 1m2.3s 10.0 6.9 5.0" ||
		strings.Join(strings.Fields(lines[2]), " ") != "25:00 0 0 0s 0.0 0.0 0.0" {
		t.Errorf("hours text:\n%s", b.String())
	}

	b.Reset()
	a := []simulate.Hour{{Jobs: 10, Late: 2, IdleS: 3600 * 7, CreatingS: 3600 * 3}, {Start: time.Hour, Jobs: 1, IdleS: 3600}}
	s := []simulate.Hour{{Jobs: 10, Late: 0, IdleS: 3600 * 10, CreatingS: 3600}, {Start: time.Hour, Jobs: 1}}
	if err := simulate.WriteHoursComparisonText(&b, "adaptive", a, "best static", s); err != nil {
		t.Fatal(err)
	}
	lines = strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	if len(lines) != 4 || !strings.Contains(lines[0], "adaptive") || !strings.Contains(lines[0], "best static") ||
		strings.Join(strings.Fields(lines[2]), " ") != "00:00 10 | 2 7.0 3.0 | 0 10.0 1.0 | 0.70" ||
		strings.Join(strings.Fields(lines[3]), " ") != "01:00 1 | 0 1.0 0.0 | 0 0.0 0.0 | -" {
		t.Errorf("hours comparison:\n%s", b.String())
	}
}
