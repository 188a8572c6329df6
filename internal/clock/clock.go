// Package clock is the time source of every policy that depends on time
// (timeouts, reapers, keep-alives, pacing), so tests can drive time
// explicitly instead of sleeping.
package clock

import (
	"context"
	"sort"
	"sync"
	"time"
)

// Clock tells the time and makes timers. A nil Clock in a Config means Real.
type Clock interface {
	Now() time.Time
	// After returns a channel that receives once d has passed.
	After(d time.Duration) <-chan time.Time
	// NewTimer returns a timer that fires once after d.
	NewTimer(d time.Duration) Timer
}

// Timer is a stoppable one-shot timer.
type Timer interface {
	C() <-chan time.Time
	Stop() bool
	Reset(d time.Duration) bool
}

// Every calls fn every d on c (d after the previous call returned) until
// ctx is done.
func Every(ctx context.Context, c Clock, d time.Duration, fn func(context.Context)) {
	t := c.NewTimer(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
			fn(ctx)
			t.Reset(d)
		}
	}
}

// Real is the wall clock.
type Real struct{}

// Now returns time.Now.
func (Real) Now() time.Time { return time.Now() }

// After wraps time.After.
func (Real) After(d time.Duration) <-chan time.Time { return time.After(d) }

// NewTimer wraps time.NewTimer.
func (Real) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }

type realTimer struct{ t *time.Timer }

func (r realTimer) C() <-chan time.Time        { return r.t.C }
func (r realTimer) Stop() bool                 { return r.t.Stop() }
func (r realTimer) Reset(d time.Duration) bool { return r.t.Reset(d) }

// OrReal returns c, or Real when c is nil.
func OrReal(c Clock) Clock {
	if c == nil {
		return Real{}
	}
	return c
}

// Fake is a manually advanced clock for tests. Timers fire during Advance.
type Fake struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer
}

// NewFake returns a Fake clock set to start.
func NewFake(start time.Time) *Fake { return &Fake{now: start} }

// Now returns the fake time.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// After returns a channel that fires when the clock has been advanced by d.
func (f *Fake) After(d time.Duration) <-chan time.Time { return f.NewTimer(d).C() }

// NewTimer returns a fake timer.
func (f *Fake) NewTimer(d time.Duration) Timer {
	f.mu.Lock()
	defer f.mu.Unlock()
	t := &fakeTimer{f: f, c: make(chan time.Time, 1), at: f.now.Add(d), active: true}
	f.timers = append(f.timers, t)
	f.fireLocked()
	return t
}

// Advance moves the clock forward by d and fires due timers in order.
func (f *Fake) Advance(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = f.now.Add(d)
	f.fireLocked()
}

// Pending returns the number of active timers, so tests can wait until a
// goroutine has started waiting before advancing.
func (f *Fake) Pending() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, t := range f.timers {
		if t.active {
			n++
		}
	}
	return n
}

func (f *Fake) fireLocked() {
	sort.SliceStable(f.timers, func(i, j int) bool { return f.timers[i].at.Before(f.timers[j].at) })
	kept := f.timers[:0]
	for _, t := range f.timers {
		if t.active && !t.at.After(f.now) {
			t.active = false
			select {
			case t.c <- f.now:
			default:
			}
			continue
		}
		if t.active {
			kept = append(kept, t)
		}
	}
	f.timers = kept
}

type fakeTimer struct {
	f      *Fake
	c      chan time.Time
	at     time.Time
	active bool
}

func (t *fakeTimer) C() <-chan time.Time { return t.c }

func (t *fakeTimer) Stop() bool {
	t.f.mu.Lock()
	defer t.f.mu.Unlock()
	was := t.active
	t.active = false
	return was
}

func (t *fakeTimer) Reset(d time.Duration) bool {
	t.f.mu.Lock()
	defer t.f.mu.Unlock()
	was := t.active
	t.at = t.f.now.Add(d)
	if !was {
		t.active = true
		t.f.timers = append(t.f.timers, t)
	}
	t.f.fireLocked()
	return was
}
