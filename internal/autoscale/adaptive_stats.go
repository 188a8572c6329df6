package autoscale

import (
	"math"
	"time"
)

// dispersionBucket is the length of the intervals in which arrivals are
// counted to measure how bursty they are. A pipeline's fan-out reaches the
// runner within a few polls, so within one bucket.
const dispersionBucket = 10 * time.Second

// dispersionEstimator measures the index of dispersion of job arrivals,
// Var(N)/E(N) of the count N of arrivals per dispersionBucket, with
// exponentially weighted moments over about poolStatsWindow (each bucket,
// empty ones included, weighs dispersionBucket/poolStatsWindow). Poisson
// arrivals give 1; arrivals in batches of size K give about E[K²]/E[K]
// (compound Poisson), which is the factor by which the variance of the
// arrivals over any window exceeds their mean.
type dispersionEstimator struct {
	start time.Time // current bucket's start; zero before the first arrival
	count float64   // arrivals in the current bucket
	m, s2 float64   // EWMA of N and N² over closed buckets
	have  bool      // a bucket was closed
}

func (e *dispersionEstimator) add(now time.Time) {
	e.roll(now)
	e.count++
}

// roll closes the buckets that ended by now.
func (e *dispersionEstimator) roll(now time.Time) {
	if e.start.IsZero() {
		e.start = now
		return
	}
	n := int64(now.Sub(e.start) / dispersionBucket)
	if n <= 0 {
		return
	}
	const alpha = float64(dispersionBucket) / float64(poolStatsWindow)
	if e.have {
		e.m += alpha * (e.count - e.m)
		e.s2 += alpha * (e.count*e.count - e.s2)
	} else {
		e.m, e.s2, e.have = e.count, e.count*e.count, true
	}
	if n > 1 {
		f := math.Pow(1-alpha, float64(n-1))
		e.m *= f
		e.s2 *= f
	}
	e.start = e.start.Add(time.Duration(n) * dispersionBucket)
	e.count = 0
}

// index is the measured index of dispersion, at least 1 (1 before there
// is anything to measure).
func (e *dispersionEstimator) index() float64 {
	if !e.have || !(e.m > 1e-9) {
		return 1
	}
	i := (e.s2 - e.m*e.m) / e.m
	if !(i > 1) || math.IsInf(i, 0) {
		return 1
	}
	return i
}
