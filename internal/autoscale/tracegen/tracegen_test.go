package tracegen

import (
	"math"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/drover-ci/drover/internal/autoscale/simulate"
)

func TestGenerateDeterministic(t *testing.T) {
	o := Options{Seed: 42, Jobs: 5000}
	a, err := Generate(o)
	if err != nil {
		t.Fatalf("Generate = %v", err)
	}
	b, _ := Generate(o)
	if d := cmp.Diff(a, b); d != "" {
		t.Fatalf("same seed, different traces:\n%s", d)
	}
	o.Seed = 43
	c, _ := Generate(o)
	if cmp.Equal(a, c) {
		t.Fatal("different seeds gave the same trace")
	}
}

func TestGenerateShape(t *testing.T) {
	jobs, err := Generate(Options{Seed: 1, Jobs: 20000, Fanout: 4, PeakRatio: 6, MedianDuration: 5 * time.Minute})
	if err != nil {
		t.Fatalf("Generate = %v", err)
	}
	if len(jobs) != 20000 {
		t.Fatalf("%d jobs, want 20000", len(jobs))
	}
	if !slices.IsSortedFunc(jobs, func(x, y simulate.Job) int { return int(x.Arrival - y.Arrival) }) {
		t.Fatal("not sorted by arrival")
	}
	// Diurnal: the two hours around noon see several times the arrivals of
	// the two hours around midnight (ratio 6 in rate).
	var night, noon int
	for _, j := range jobs {
		h := j.Arrival.Hours()
		switch {
		case h < 1 || h >= 23:
			night++
		case h >= 11 && h < 13:
			noon++
		}
	}
	if r := float64(noon) / float64(night); r < 3.5 || r > 9 {
		t.Errorf("noon/midnight arrivals = %d/%d = %.1f, want about 6", noon, night, r)
	}
	// Fan-out: jobs come in bursts sharing an arrival instant, 4 on average.
	groups := 1
	for i := 1; i < len(jobs); i++ {
		if jobs[i].Arrival != jobs[i-1].Arrival {
			groups++
		}
	}
	if f := float64(len(jobs)) / float64(groups); f < 3.5 || f > 4.5 {
		t.Errorf("mean burst size %.2f, want about 4", f)
	}
	// Log-normal durations: median about 5 m.
	d := make([]float64, len(jobs))
	for i, j := range jobs {
		d[i] = j.Duration.Minutes()
	}
	slices.Sort(d)
	if med := d[len(d)/2]; math.Abs(med-5) > 0.3 {
		t.Errorf("median duration %.2f m, want about 5", med)
	}
}

func TestGenerateErrors(t *testing.T) {
	for _, o := range []Options{{Jobs: 0}, {Jobs: 1, Fanout: 0.5}, {Jobs: 1, PeakRatio: 0.5}, {Jobs: 1, Span: time.Millisecond}, {Jobs: 1, Sigma: -1}} {
		if _, err := Generate(o); err == nil {
			t.Errorf("Generate(%+v) = nil error", o)
		}
	}
}

// Each named shape gives its number of jobs, the same day for the same
// seed, and another day for another seed.
func TestShapes(t *testing.T) {
	for _, s := range Shapes() {
		t.Run(s.Name, func(t *testing.T) {
			a, err := Day(s.Name, 7)
			if err != nil {
				t.Fatalf("Day(%q, 7) = %v", s.Name, err)
			}
			if len(a) != s.Options.Jobs {
				t.Errorf("%d jobs, want %d", len(a), s.Options.Jobs)
			}
			b, _ := Day(s.Name, 7)
			if !cmp.Equal(a, b) {
				t.Error("same seed, different days")
			}
			if c, _ := Day(s.Name, 8); cmp.Equal(a, c) {
				t.Error("different seeds, same day")
			}
		})
	}
	if _, err := Day("holiday", 1); err == nil {
		t.Error(`Day("holiday") = nil error, want unknown shape`)
	}
}
