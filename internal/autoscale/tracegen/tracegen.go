// Package tracegen generates synthetic job traces for the autoscaling
// simulator: a diurnal arrival rate (a sinusoid over 24 hours, lowest at
// midnight, highest at noon), pipelines that each spawn a burst of jobs at
// the same instant (fan-out), and log-normal job durations. The same
// Options (seed included) always give the same trace.
package tracegen

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/drover-ci/drover/internal/autoscale/simulate"
)

// Options shape a trace. Zero values mean the defaults in brackets.
type Options struct {
	Seed uint64
	Jobs int           // total jobs (required, > 0)
	Span time.Duration // trace length [24h]
	// Fanout is the mean number of jobs a pipeline spawns at once; the
	// count is 1 + a geometric variate [4]. 1 = no bursts.
	Fanout float64
	// PeakRatio is the peak-to-trough ratio of the arrival rate [6]; 1 =
	// constant rate.
	PeakRatio float64
	// MedianDuration is the median job duration [5m].
	MedianDuration time.Duration
	// Sigma is the log-normal shape of durations [0.8].
	Sigma float64
	// MaxDuration caps durations [3h].
	MaxDuration time.Duration
}

// Generate returns Jobs jobs sorted by arrival.
func Generate(o Options) ([]simulate.Job, error) {
	if o.Jobs <= 0 {
		return nil, errors.New("tracegen: jobs must be positive")
	}
	if o.Jobs > 10_000_000 {
		return nil, fmt.Errorf("tracegen: %d jobs is too many (at most 10,000,000)", o.Jobs)
	}
	if o.Span == 0 {
		o.Span = 24 * time.Hour
	}
	if o.Fanout == 0 {
		o.Fanout = 4
	}
	if o.PeakRatio == 0 {
		o.PeakRatio = 6
	}
	if o.MedianDuration == 0 {
		o.MedianDuration = 5 * time.Minute
	}
	if o.Sigma == 0 {
		o.Sigma = 0.8
	}
	if o.MaxDuration == 0 {
		o.MaxDuration = 3 * time.Hour
	}
	switch {
	case o.Span < time.Second:
		return nil, errors.New("tracegen: span must be at least a second")
	case o.Fanout < 1 || math.IsNaN(o.Fanout):
		return nil, errors.New("tracegen: fanout must be at least 1")
	case o.PeakRatio < 1 || math.IsNaN(o.PeakRatio) || math.IsInf(o.PeakRatio, 0):
		return nil, errors.New("tracegen: peak ratio must be at least 1")
	case o.MedianDuration < 0 || o.Sigma < 0 || math.IsNaN(o.Sigma) || o.MaxDuration < 0:
		return nil, errors.New("tracegen: durations must not be negative")
	}
	rng := rand.New(rand.NewPCG(o.Seed, 0x5eed_da7a))
	// rate(t) ∝ 1 − a·cos(2πt/24h): trough at midnight, peak at noon,
	// peak/trough = (1+a)/(1−a) = PeakRatio.
	a := (o.PeakRatio - 1) / (o.PeakRatio + 1)
	arrival := func() time.Duration {
		for {
			t := rng.Float64() * float64(o.Span)
			phase := 2 * math.Pi * t / float64(24*time.Hour)
			if rng.Float64()*(1+a) <= 1-a*math.Cos(phase) {
				return time.Duration(t).Round(time.Millisecond)
			}
		}
	}
	p := 1 / o.Fanout // geometric: mean (1−p)/p = Fanout − 1 extra jobs
	jobs := make([]simulate.Job, 0, o.Jobs)
	for len(jobs) < o.Jobs {
		k := 1
		for p < 1 && rng.Float64() > p {
			k++
		}
		at := arrival()
		for range min(k, o.Jobs-len(jobs)) {
			d := time.Duration(float64(o.MedianDuration) * math.Exp(o.Sigma*rng.NormFloat64()))
			d = min(max(d, time.Second), o.MaxDuration).Round(time.Millisecond)
			jobs = append(jobs, simulate.Job{Arrival: at, Duration: d})
		}
	}
	slices.SortStableFunc(jobs, func(x, y simulate.Job) int { return cmp.Compare(x.Arrival, y.Arrival) })
	return jobs, nil
}
