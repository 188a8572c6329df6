package autoscale

import (
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/gorhill/cronexpr"

	"github.com/drover-ci/drover/internal/cron"
)

// period is one compiled entry of a schedule's Periods.
type period interface {
	contains(t time.Time) bool
}

// Cron5 is a 5-field unix cron expression as [[runners.autoscaler.policy]]
// periods use it (package cron's Expr; see there for the syntax). A time
// is in the period when its minute matches.
type Cron5 cron.Expr

// ParseCron5 parses a 5-field cron expression; see cron.Expr.
func ParseCron5(s string) (*Cron5, error) {
	e, err := cron.Parse(s)
	if err != nil {
		return nil, err
	}
	return (*Cron5)(e), nil
}

// Contains reports whether t, in its own location, lies in the period.
func (c *Cron5) Contains(t time.Time) bool { return (*cron.Expr)(c).Contains(t) }

// String returns the expression in a canonical form ParseCron5 reads back.
func (c *Cron5) String() string { return (*cron.Expr)(c).String() }

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
