package autoscale

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gorhill/cronexpr"
)

// period is one compiled entry of a schedule's Periods.
type period interface {
	contains(t time.Time) bool
}

// Cron5 is a 5-field unix cron expression as [[runners.autoscaler.policy]]
// periods use it: "min hour dom month dow". Each field is "*", a number, a
// name (jan-dec, sun-sat, case-insensitive), a range "a-b", a step "*/n",
// "a-b/n" or "a/n" (a up to the field's end), or a comma list of these.
// Day of week is 0-7 with both 0 and 7 meaning Sunday. As in Vixie cron,
// when both day of month and day of week are restricted (do not cover
// every value), a day matching either counts. A time is in the period when its minute matches.
type Cron5 struct {
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

func cron5Fields() [5]cronField {
	return [5]cronField{
		{name: "minute", min: 0, max: 59},
		{name: "hour", min: 0, max: 23},
		{name: "day of month", min: 1, max: 31},
		{name: "month", min: 1, max: 12, names: cronMonths},
		{name: "day of week", min: 0, max: 7, names: cronDays},
	}
}

// ParseCron5 parses a 5-field cron expression; see Cron5.
func ParseCron5(s string) (*Cron5, error) {
	parts := strings.Fields(s)
	if len(parts) != 5 {
		return nil, fmt.Errorf("cron %q: want 5 fields (minute hour day-of-month month day-of-week), got %d", s, len(parts))
	}
	fields := cron5Fields()
	var bits [5]uint64
	for i, f := range fields {
		b, err := parseCronField(parts[i], f)
		if err != nil {
			return nil, fmt.Errorf("cron %q: %s field %q: %w", s, f.name, parts[i], err)
		}
		bits[i] = b
	}
	c := &Cron5{minute: bits[0], hour: bits[1], dom: bits[2], month: bits[3], dow: bits[4]}
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
func (c *Cron5) Contains(t time.Time) bool {
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

// String returns the expression in a canonical form that ParseCron5 reads
// back to the same schedule: "*" for unrestricted fields, else a comma
// list of numbers and ranges.
func (c *Cron5) String() string {
	f := cron5Fields()
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

func (c *Cron5) contains(t time.Time) bool { return c.Contains(t) }

// Cron7 is a [[runners.machine.autoscaling]] period: a cron expression in
// the syntax of github.com/gorhill/cronexpr, normally 7 fields "sec min hour
// dom month dow year". It is in force at t when the expression's next match
// after t is within one second of t, exactly as GitLab Runner decides it.
// Consequence (GitLab Runner issue 2170): the last second of a period's last
// minute is outside it ("* * 9-17 * * mon-fri *" covers 08:59:59 up to
// 17:59:58), and with 5 or 6 fields the seconds are {0}, so such a period
// only matches around second 0 of each minute.
type Cron7 struct {
	expr   string
	fields int
	mu     sync.Mutex // cronexpr's Next writes into the expression
	e      *cronexpr.Expression
}

// ParseCron7 parses a period with gorhill/cronexpr.
func ParseCron7(s string) (c *Cron7, err error) {
	defer func() {
		// The parser is third-party code fed outside input: never let it
		// take the process down.
		if r := recover(); r != nil {
			c, err = nil, fmt.Errorf("cron %q: invalid expression", s)
		}
	}()
	e, err := cronexpr.Parse(s)
	if err != nil {
		return nil, fmt.Errorf("cron %q: %v", s, err)
	}
	return &Cron7{expr: strings.Join(strings.Fields(s), " "), fields: len(strings.Fields(s)), e: e}, nil
}

// String returns the expression with its fields separated by single
// spaces.
func (c *Cron7) String() string { return c.expr }

// Contains reports whether t (in its own location) is in the period.
func (c *Cron7) Contains(t time.Time) (in bool) {
	if t.IsZero() {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	defer func() {
		if recover() != nil {
			in = false
		}
	}()
	next := c.e.Next(t)
	if next.IsZero() {
		return false
	}
	d := t.Sub(next)
	return d >= -time.Second && d <= time.Second
}

func (c *Cron7) contains(t time.Time) bool { return c.Contains(t) }
