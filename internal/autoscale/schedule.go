package autoscale

import (
	"fmt"
	"strings"
	"time"
	// Periods name IANA time zones; embed the database so that they
	// resolve on hosts without /usr/share/zoneinfo too.
	_ "time/tzdata"
)

// Schedule is one set of idle values: the top-level ones (Policy.Base) or
// one period entry ([[runners.machine.autoscaling]] or
// [[runners.autoscaler.policy]]).
type Schedule struct {
	Periods          []string // as written
	Timezone         string
	IdleCount        int // slots (autoscaler dialect) or machines (machine dialect)
	IdleCountMin     int // machine dialect
	IdleTime         time.Duration
	ScaleFactor      float64
	ScaleFactorLimit int
	Preemptive       bool
	Adaptive         bool
	TargetWait       time.Duration // adaptive: p95 queue wait target

	// compiled periods and location (Compile); nil when the Schedule was
	// built by hand and not compiled, in which case Periods are parsed on
	// every use.
	compiled []period
	loc      *time.Location
}

// DefaultTargetWait is the adaptive policy's p95 wait target when
// target_wait is not set.
const DefaultTargetWait = 30 * time.Second

// Compile parses the periods and time zones of every schedule once, so that
// Active does not parse on each call. FromRunner returns compiled policies;
// call Compile on a Policy built by hand (it reports the first bad period
// or time zone).
func (p *Policy) Compile() error {
	for i := range p.Schedules {
		s := &p.Schedules[i]
		compiled, loc, err := compilePeriods(s.Periods, s.Timezone, p.Dialect)
		if err != nil {
			return fmt.Errorf("schedule %d: %w", i, err)
		}
		s.compiled, s.loc = compiled, loc
	}
	return nil
}

// loadLocation resolves a Timezone value: empty and "Local" are the host's
// zone.
func loadLocation(tz string) (*time.Location, error) {
	if tz == "" || tz == "Local" {
		return time.Local, nil
	}
	loc, err := time.LoadLocation(tz)
	if err != nil {
		return nil, fmt.Errorf("unknown time zone %q", tz)
	}
	return loc, nil
}

func compilePeriods(periods []string, tz string, d Dialect) ([]period, *time.Location, error) {
	loc, err := loadLocation(tz)
	if err != nil {
		return nil, nil, err
	}
	if len(periods) == 0 && d == DialectAutoscaler {
		periods = []string{"* * * * *"}
	}
	out := make([]period, 0, len(periods))
	for _, s := range periods {
		var pr period
		var err error
		if d == DialectMachine {
			pr, err = ParseCron7(s)
		} else {
			pr, err = ParseCron5(s)
		}
		if err != nil {
			return nil, nil, err
		}
		out = append(out, pr)
	}
	return out, loc, nil
}

// in reports whether the schedule's periods cover now. A machine-dialect
// entry without periods never applies; an autoscaler policy without
// periods always does ("* * * * *").
func (s *Schedule) in(now time.Time, d Dialect) bool {
	compiled, loc := s.compiled, s.loc
	if compiled == nil {
		var err error
		if compiled, loc, err = compilePeriods(s.Periods, s.Timezone, d); err != nil {
			return false
		}
	}
	t := now.In(loc)
	for _, pr := range compiled {
		if pr.contains(t) {
			return true
		}
	}
	return false
}

// String describes the schedule for logs: its periods and time zone, or
// "top-level" for a schedule without periods.
func (s *Schedule) String() string {
	if s == nil || len(s.Periods) == 0 {
		return "top-level"
	}
	tz := s.Timezone
	if tz == "" {
		tz = "Local"
	}
	return fmt.Sprintf("periods %s (%s)", strings.Join(s.Periods, " | "), tz)
}
