package autoscale

import (
	"cmp"
	"slices"
	"time"
)

// The pool keeps the jobs it served — when each arrived and how long it
// held its slot — so that the runner manager can replay its own traffic
// in the simulator under another policy (the fleet page's "what if").
// A job is recorded when its slot is released; jobs that never got a
// slot, or whose slot was claimed after a restart (their arrival is
// unknown), are not.

const (
	// JobLogWindow is how far back JobTrace goes, by arrival.
	JobLogWindow = 24 * time.Hour
	// DefaultJobLogSize is the most jobs a pool keeps when
	// PoolOptions.JobLogSize is 0: the oldest recorded are dropped first.
	DefaultJobLogSize = 100_000
)

// JobRecord is one job a pool served.
type JobRecord struct {
	// Arrival is when the job was queued: the reservation's SetQueuedAt
	// or SetTimeInQueue when told, else its first acquire.
	Arrival time.Time
	// Duration is how long the job held its slot (acquire to release).
	Duration time.Duration
}

// JobTrace is the pool's recent traffic and what the simulator needs to
// replay it as the pool runs.
type JobTrace struct {
	Now    time.Time
	Policy *Policy // in force now; not to be changed
	// BootTime is the mean creation-to-ready time observed (0 = no
	// instance became ready yet).
	BootTime time.Duration
	// Jobs arrived within JobLogWindow before Now, by arrival.
	Jobs []JobRecord
}

// jobLog is a ring of the last size jobs recorded, in release order.
type jobLog struct {
	size  int
	buf   []JobRecord
	start int // oldest, once buf is full
}

func (l *jobLog) add(r JobRecord) {
	if l.size <= 0 {
		return
	}
	if len(l.buf) < l.size {
		l.buf = append(l.buf, r)
		return
	}
	l.buf[l.start] = r
	l.start = (l.start + 1) % l.size
}

// since returns the jobs that arrived at or after t, by arrival (stable:
// release order on ties).
func (l *jobLog) since(t time.Time) []JobRecord {
	out := make([]JobRecord, 0, len(l.buf))
	for i := range l.buf {
		if r := l.buf[(l.start+i)%len(l.buf)]; !r.Arrival.Before(t) {
			out = append(out, r)
		}
	}
	slices.SortStableFunc(out, func(a, b JobRecord) int { return cmp.Compare(a.Arrival.UnixNano(), b.Arrival.UnixNano()) })
	return out
}

// recordJobLocked keeps the job of a, released at now.
func (p *Pool) recordJobLocked(a *Acquisition, now time.Time) {
	if a.arrival.IsZero() {
		return
	}
	p.jobs.add(JobRecord{Arrival: a.arrival, Duration: max(now.Sub(a.start), 0)})
}

// JobTrace returns the jobs the pool served that arrived in the last
// JobLogWindow, with its policy and observed boot time.
func (p *Pool) JobTrace() JobTrace {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.clk.Now()
	return JobTrace{
		Now: now, Policy: p.pol, BootTime: time.Duration(p.meanBoot * float64(time.Second)),
		Jobs: p.jobs.since(now.Add(-JobLogWindow)),
	}
}
