// Package cron is the 5-field cron expression of the autoscaler's
// periods and of pipeline schedules: parsing, whether a time matches, and
// the next matching time in a time zone.
package cron

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	// Schedules name IANA time zones; the binary carries the database,
	// so that hosts (and containers) without one resolve them too.
	_ "time/tzdata"
)

// Expr is a 5-field unix cron expression: "min hour dom month dow", as
// [[runners.autoscaler.policy]] periods and pipeline schedules use it. Each field is "*", a number, a
// name (jan-dec, sun-sat, case-insensitive), a range "a-b", a step "*/n",
// "a-b/n" or "a/n" (a up to the field's end), or a comma list of these.
// Day of week is 0-7 with both 0 and 7 meaning Sunday. As in Vixie cron,
// when both day of month and day of week are restricted (do not cover
// every value), a day matching either counts. A time is in the period when its minute matches.
type Expr struct {
	minute, hour, dom, month, dow uint64 // bit i set = value i allowed
	domStar, dowStar              bool
}

type cronField struct {
	name     string
	min, max int
	names    []string // names[i] is value min+i
}

var (
	cronMonths = []string{"jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"}
	cronDays   = []string{"sun", "mon", "tue", "wed", "thu", "fri", "sat"}
)

func fields5() [5]cronField {
	return [5]cronField{
		{name: "minute", min: 0, max: 59},
		{name: "hour", min: 0, max: 23},
		{name: "day of month", min: 1, max: 31},
		{name: "month", min: 1, max: 12, names: cronMonths},
		{name: "day of week", min: 0, max: 7, names: cronDays},
	}
}

// Parse parses a 5-field cron expression; see Expr.
func Parse(s string) (*Expr, error) {
	parts := strings.Fields(s)
	if len(parts) != 5 {
		return nil, fmt.Errorf("cron %q: want 5 fields (minute hour day-of-month month day-of-week), got %d", s, len(parts))
	}
	fields := fields5()
	var bits [5]uint64
	for i, f := range fields {
		b, err := parseCronField(parts[i], f)
		if err != nil {
			return nil, fmt.Errorf("cron %q: %s field %q: %w", s, f.name, parts[i], err)
		}
		bits[i] = b
	}
	c := &Expr{minute: bits[0], hour: bits[1], dom: bits[2], month: bits[3], dow: bits[4]}
	if c.dow&(1<<7) != 0 {
		c.dow |= 1 << 0
	}
	c.dow &^= 1 << 7
	c.domStar = c.dom == fullMask(fields[2])
	c.dowStar = c.dow == fullMask(cronField{min: 0, max: 6})
	return c, nil
}

func fullMask(f cronField) uint64 {
	var m uint64
	for v := f.min; v <= f.max; v++ {
		m |= 1 << v
	}
	return m
}

func parseCronField(s string, f cronField) (uint64, error) {
	var bits uint64
	for item := range strings.SplitSeq(s, ",") {
		if item == "" {
			return 0, fmt.Errorf("empty list item")
		}
		rng, stepStr, hasStep := strings.Cut(item, "/")
		step := 1
		if hasStep {
			n, err := strconv.Atoi(stepStr)
			if err != nil || n < 1 || n > f.max-f.min+1 {
				return 0, fmt.Errorf("step %q must be a number from 1 to %d", stepStr, f.max-f.min+1)
			}
			step = n
		}
		lo, hi := f.min, f.max
		if rng != "*" {
			a, b, isRange := strings.Cut(rng, "-")
			var err error
			if lo, err = cronValue(a, f); err != nil {
				return 0, err
			}
			switch {
			case isRange:
				if hi, err = cronValue(b, f); err != nil {
					return 0, err
				}
				if hi < lo {
					return 0, fmt.Errorf("range %q runs backwards", rng)
				}
			case !hasStep:
				hi = lo
			}
		}
		for v := lo; v <= hi; v += step {
			bits |= 1 << v
		}
	}
	return bits, nil
}

func cronValue(s string, f cronField) (int, error) {
	if n, err := strconv.Atoi(s); err == nil {
		if n < f.min || n > f.max {
			return 0, fmt.Errorf("%d is out of range %d-%d", n, f.min, f.max)
		}
		return n, nil
	}
	for i, name := range f.names {
		if strings.EqualFold(s, name) {
			return f.min + i, nil
		}
	}
	if f.names != nil {
		return 0, fmt.Errorf("%q is neither a number from %d to %d nor a name (%s)", s, f.min, f.max, strings.Join(f.names, ", "))
	}
	return 0, fmt.Errorf("%q is not a number from %d to %d", s, f.min, f.max)
}

// Contains reports whether t, in its own location, lies in the period:
// its minute, hour, month and day all match.
func (c *Expr) Contains(t time.Time) bool {
	if c.minute&(1<<t.Minute()) == 0 || c.hour&(1<<t.Hour()) == 0 || c.month&(1<<int(t.Month())) == 0 {
		return false
	}
	domOK := c.dom&(1<<t.Day()) != 0
	dowOK := c.dow&(1<<int(t.Weekday())) != 0
	if c.domStar || c.dowStar {
		return domOK && dowOK
	}
	return domOK || dowOK
}

// String returns the expression in a canonical form that Parse reads
// back to the same schedule: "*" for unrestricted fields, else a comma
// list of numbers and ranges.
func (c *Expr) String() string {
	f := fields5()
	dowField := f[4]
	dowField.max = 6
	dom, dow := formatCronField(c.dom, f[2]), formatCronField(c.dow, dowField)
	return strings.Join([]string{
		formatCronField(c.minute, f[0]), formatCronField(c.hour, f[1]), dom,
		formatCronField(c.month, f[3]), dow,
	}, " ")
}

func formatCronField(bits uint64, f cronField) string {
	if bits&fullMask(f) == fullMask(f) {
		return "*"
	}
	var parts []string
	for v := f.min; v <= f.max; v++ {
		if bits&(1<<v) == 0 {
			continue
		}
		end := v
		for end+1 <= f.max && bits&(1<<(end+1)) != 0 {
			end++
		}
		if end == v {
			parts = append(parts, strconv.Itoa(v))
		} else {
			parts = append(parts, strconv.Itoa(v)+"-"+strconv.Itoa(end))
		}
		v = end
	}
	return strings.Join(parts, ",")
}

// horizon bounds Next's search: an expression that matches no time in it
// (Feb 30) never matches.
const horizon = 5 * 366 * 24 * time.Hour

// Next returns the first time after t, on a whole minute, that matches e
// in loc (nil: UTC), or the zero time if none does within five years. A
// local time that a daylight-saving change skips does not occur (a
// schedule at 02:30 runs on the next day that has one); one it repeats
// matches at each occurrence.
func (e *Expr) Next(t time.Time, loc *time.Location) time.Time {
	if loc == nil {
		loc = time.UTC
	}
	t = t.In(loc).Truncate(time.Minute).Add(time.Minute)
	limit := t.Add(horizon)
	for t.Before(limit) {
		y, mo, d := t.Date()
		var n time.Time
		switch {
		case e.month&(1<<int(mo)) == 0:
			n = time.Date(y, mo+1, 1, 0, 0, 0, 0, loc)
		case !e.dayMatches(t):
			n = time.Date(y, mo, d+1, 0, 0, 0, 0, loc)
		case e.hour&(1<<t.Hour()) == 0:
			n = time.Date(y, mo, d, t.Hour()+1, 0, 0, 0, loc)
		case e.minute&(1<<t.Minute()) == 0:
			n = t.Add(time.Minute)
		default:
			return t
		}
		if !n.After(t) {
			// A repeated or skipped local hour: step on in absolute time.
			n = t.Add(time.Minute)
		}
		t = n
	}
	return time.Time{}
}

func (e *Expr) dayMatches(t time.Time) bool {
	domOK := e.dom&(1<<t.Day()) != 0
	dowOK := e.dow&(1<<int(t.Weekday())) != 0
	if e.domStar || e.dowStar {
		return domOK && dowOK
	}
	return domOK || dowOK
}
