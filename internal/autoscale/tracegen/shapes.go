package tracegen

import (
	"fmt"
	"strings"

	"github.com/drover-ci/drover/internal/autoscale/simulate"
)

// A Shape is a named kind of day, the trace options without a seed. The
// shapes are the days the adaptive policy is measured on against the best
// static configuration (docs/BENCHMARKS.md): each seed gives another day
// of the same kind.
type Shape struct {
	Name    string
	Summary string
	Options Options // Seed left 0: set it per day
}

// shapes lists the named day shapes, in the order reports show them.
func shapes() []Shape {
	return []Shape{
		{"steady", "20,000 jobs, load ×1.5 peak/trough, pipelines of 4 jobs on average",
			Options{Jobs: 20_000, PeakRatio: 1.5, Fanout: 4}},
		{"diurnal", "20,000 jobs, load ×20 peak/trough (quiet nights, busy noon), pipelines of 4",
			Options{Jobs: 20_000, PeakRatio: 20, Fanout: 4}},
		{"bursty", "20,000 jobs, load ×6, pipelines of 12 jobs on average arriving at once",
			Options{Jobs: 20_000, PeakRatio: 6, Fanout: 12}},
		{"weekend", "3,000 jobs, load ×3, pipelines of 3 (a quiet day)",
			Options{Jobs: 3_000, PeakRatio: 3, Fanout: 3}},
	}
}

// Shapes returns the named day shapes.
func Shapes() []Shape { return shapes() }

// ShapeNamed returns the shape called name.
func ShapeNamed(name string) (Shape, error) {
	var names []string
	for _, s := range shapes() {
		if s.Name == name {
			return s, nil
		}
		names = append(names, s.Name)
	}
	return Shape{}, fmt.Errorf("tracegen: unknown day shape %q (want one of %s)", name, strings.Join(names, ", "))
}

// Day generates the day of shape name with the given seed.
func Day(name string, seed uint64) ([]simulate.Job, error) {
	s, err := ShapeNamed(name)
	if err != nil {
		return nil, err
	}
	o := s.Options
	o.Seed = seed
	return Generate(o)
}
