package autoscale

import (
	"math"
	"time"
)

// adaptiveQuantile is the share of jobs whose wait must stay within the
// target: the target is a p95.
const adaptiveQuantile = 0.95

// maxAdaptiveSlots bounds the sizing search, whatever the observations.
const maxAdaptiveSlots = 1 << 20

// ErlangC returns the probability that a job arriving at an M/M/c queue
// with c servers and offered load a (Erlangs: arrival rate × mean service
// time) has to wait. It is 1 when c <= a (the queue grows without bound)
// and 0 when a <= 0. It uses the stable Erlang B recursion
// B(0) = 1, B(k) = a·B(k-1) / (k + a·B(k-1)), then C = c·B / (c − a(1 − B)).
func ErlangC(c int, a float64) float64 {
	if a <= 0 || math.IsNaN(a) {
		return 0
	}
	if float64(c) <= a {
		return 1
	}
	b := 1.0
	for k := 1; k <= c; k++ {
		b = a * b / (float64(k) + a*b)
	}
	return erlangCFromB(c, a, b)
}

func erlangCFromB(c int, a, b float64) float64 {
	return float64(c) * b / (float64(c) - a*(1-b))
}

// WaitTail returns P(wait > t) in an M/M/c queue with offered load a and
// mean service time d: ErlangC(c, a) · exp(−(c − a)·t/d).
func WaitTail(c int, a float64, d, t time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	pc := ErlangC(c, a)
	if pc >= 1 {
		return 1
	}
	return pc * math.Exp(-(float64(c)-a)*t.Seconds()/d.Seconds())
}

// AdaptiveSlots is the number of job slots (busy and idle together) the
// adaptive policy wants for the observed load so that the p95 queue wait
// stays within targetWait; see the package documentation for the model.
// It is 0 without observed arrivals or durations.
func AdaptiveSlots(o Observed, targetWait time.Duration) int {
	lambda, dur := o.ArrivalRate, o.MeanDuration.Seconds()
	if !(lambda > 0) || !(dur > 0) || math.IsInf(lambda, 0) {
		return 0
	}
	if targetWait <= 0 {
		targetWait = 0
	}
	// A job that finds no free slot waits about one boot. When that is
	// well within the target (half of it: boot times spread, and the pool
	// notices demand only at its next update), nothing needs to be held
	// ahead.
	if o.BootTime > 0 && o.BootTime <= targetWait/2 {
		return 0
	}
	return min(queueSlots(o, targetWait)+BurstSlots(o), maxAdaptiveSlots)
}

// queueSlots is the Erlang-C part: the least c with P(wait > targetWait)
// <= 5% in an M/M/c queue.
func queueSlots(o Observed, targetWait time.Duration) int {
	a := o.ArrivalRate * o.MeanDuration.Seconds()
	if a >= maxAdaptiveSlots {
		return maxAdaptiveSlots
	}
	mu := 1 / o.MeanDuration.Seconds()
	tw := targetWait.Seconds()
	// Walk c upwards from ⌊a⌋+1 (square-root staffing puts the answer at
	// about a + β√a, a few √a above the start), carrying Erlang B along.
	b := 1.0
	c := 0
	for ; float64(c+1) <= a; c++ {
		b = a * b / (float64(c+1) + a*b)
	}
	for c < maxAdaptiveSlots {
		c++
		b = a * b / (float64(c) + a*b)
		tail := erlangCFromB(c, a, b) * math.Exp(-(float64(c)-a)*mu*tw)
		if tail <= 1-adaptiveQuantile {
			return c
		}
	}
	return c
}

// BurstSlots is the burst term: how far the arrivals during one boot time
// may run above their mean, the 95% quantile of a Poisson count with mean
// ArrivalRate × BootTime minus that mean (rounded up). Capacity asked for
// when a burst starts arrives one boot later; these slots bridge the gap.
func BurstSlots(o Observed) int {
	m := o.ArrivalRate * o.BootTime.Seconds()
	if !(m > 0) {
		return 0
	}
	return max(PoissonQuantile(m, adaptiveQuantile)-int(math.Ceil(m)), 0)
}

// PoissonQuantile returns the least k with P(X <= k) >= q for X Poisson
// with mean m (a normal approximation with continuity correction above a
// mean of 500).
func PoissonQuantile(m, q float64) int {
	if !(m > 0) {
		return 0
	}
	if m > 500 {
		z := normalQuantile(q)
		return int(math.Ceil(m + z*math.Sqrt(m) - 0.5))
	}
	p := math.Exp(-m)
	cdf := p
	k := 0
	for cdf < q && k < maxAdaptiveSlots {
		k++
		p *= m / float64(k)
		cdf += p
	}
	return k
}

// normalQuantile is the standard normal quantile (Acklam's rational
// approximation, relative error < 1.2e-9).
func normalQuantile(p float64) float64 {
	const (
		a1, a2, a3, a4, a5, a6 = -3.969683028665376e+01, 2.209460984245205e+02, -2.759285104469687e+02, 1.383577518672690e+02, -3.066479806614716e+01, 2.506628277459239e+00
		b1, b2, b3, b4, b5     = -5.447609879822406e+01, 1.615858368580409e+02, -1.556989798598866e+02, 6.680131188771972e+01, -1.328068155288572e+01
		c1, c2, c3, c4, c5, c6 = -7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e+00, -2.549732539343734e+00, 4.374664141464968e+00, 2.938163982698783e+00
		d1, d2, d3, d4         = 7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e+00, 3.754408661907416e+00
		low                    = 0.02425
	)
	switch {
	case p <= 0:
		return math.Inf(-1)
	case p >= 1:
		return math.Inf(1)
	case p < low:
		q := math.Sqrt(-2 * math.Log(p))
		return (((((c1*q+c2)*q+c3)*q+c4)*q+c5)*q + c6) / ((((d1*q+d2)*q+d3)*q+d4)*q + 1)
	case p > 1-low:
		q := math.Sqrt(-2 * math.Log(1-p))
		return -(((((c1*q+c2)*q+c3)*q+c4)*q+c5)*q + c6) / ((((d1*q+d2)*q+d3)*q+d4)*q + 1)
	}
	q := p - 0.5
	r := q * q
	return (((((a1*r+a2)*r+a3)*r+a4)*r+a5)*r + a6) * q / (((((b1*r+b2)*r+b3)*r+b4)*r+b5)*r + 1)
}

// AdaptiveIdleSlots is the adaptive idle slot target with busy slots in
// use: AdaptiveSlots − busy, at least 0.
func AdaptiveIdleSlots(o Observed, targetWait time.Duration, busy int) int {
	if targetWait <= 0 {
		targetWait = DefaultTargetWait
	}
	return max(AdaptiveSlots(o, targetWait)-busy, 0)
}
