package autoscale

import (
	"math"
	"time"
)

// dispersionBucket is the length of the intervals in which arrivals are
// counted to measure how bursty they are. A pipeline's fan-out reaches the
// runner within a few polls, so within one bucket.
const dispersionBucket = 10 * time.Second

// dispersionWindow is the time constant of the dispersion's moments: an
// hour, since counts of pipeline fan-outs are heavy-tailed and a shorter
// window made the buffer swing with every large pipeline.
const dispersionWindow = time.Hour

// dispersionEstimator measures the index of dispersion of job arrivals,
// Var(N)/E(N) of the count N of arrivals per dispersionBucket, with
// exponentially weighted moments over about dispersionWindow (each
// bucket, empty ones included, weighs dispersionBucket/dispersionWindow). Poisson
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
	const alpha = float64(dispersionBucket) / float64(dispersionWindow)
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

// Feedback from the waits jobs got to the adaptive buffer. The buffer's
// spread σ is multiplied by a gain g; each job that waited longer than the
// target raises ln g by feedbackStep·(1 − goal), each one served within it
// lowers ln g by feedbackStep·goal, so that at equilibrium the share goal
// of the jobs misses the target. The goal is 4.2 %, 0.8 points inside the
// p95, as margin for the loop's lag. The loop corrects what the model
// gets wrong on the load at hand (a lumpy low load needs more than the
// normal approximation says, a steady high one less).
const (
	feedbackStep    = 0.005 // change of ln(gain) per job, times (miss − goal)
	feedbackGoal    = 0.042 // share of jobs allowed to wait longer than the target
	feedbackMaxGain = 32    // the gain stays within [1/32, 32]
)

// waitFeedback is the state of that loop: ln of the gain.
type waitFeedback struct {
	logGain float64
}

// note feeds one job's queue wait against the target in force.
func (f *waitFeedback) note(wait, target time.Duration) {
	if target <= 0 {
		target = DefaultTargetWait
	}
	miss := 0.0
	if wait > target {
		miss = 1
	}
	f.logGain += feedbackStep * (miss - feedbackGoal)
	lim := math.Log(feedbackMaxGain)
	f.logGain = min(max(f.logGain, -lim), lim)
}

// gain is the current gain, 1 before any feedback.
func (f *waitFeedback) gain() float64 { return math.Exp(f.logGain) }
