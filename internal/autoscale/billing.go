package autoscale

import (
	"fmt"
	"time"
)

// Billing is how the cloud rounds an instance's lifetime into what it
// bills: from the creation request to the confirmation of its deletion,
// booting and deleting included, rounded up to a whole number of
// Increments and never less than Minimum. The zero value is per-second
// billing without a minimum (DefaultBillingIncrement); AWS and GCP bill
// per second with a one-minute minimum, Hetzner Cloud and others per
// started hour.
type Billing struct {
	Increment time.Duration // billing_increment; 0 = DefaultBillingIncrement
	Minimum   time.Duration // billing_minimum; 0 = none
}

// DefaultBillingIncrement is billing_increment when config.toml does not
// set it: per-second billing.
const DefaultBillingIncrement = time.Second

// MaxBillingStep bounds billing_increment and billing_minimum: a day is
// more than any cloud's step.
const MaxBillingStep = 24 * time.Hour

// Check reports what is wrong with b, naming the key ("billing_increment
// must be ..."); nil when b is usable.
func (b Billing) Check() error {
	switch {
	case b.Increment < 0:
		return fmt.Errorf("billing_increment must not be negative (got %s)", b.Increment)
	case b.Increment > MaxBillingStep:
		return fmt.Errorf("billing_increment %s is more than %s", b.Increment, MaxBillingStep)
	case b.Minimum < 0:
		return fmt.Errorf("billing_minimum must not be negative (got %s)", b.Minimum)
	case b.Minimum > MaxBillingStep:
		return fmt.Errorf("billing_minimum %s is more than %s", b.Minimum, MaxBillingStep)
	}
	return nil
}

// increment is the step in force.
func (b Billing) increment() time.Duration {
	if b.Increment <= 0 {
		return DefaultBillingIncrement
	}
	return b.Increment
}

// String describes b as config.toml writes it.
func (b Billing) String() string {
	s := "billing_increment " + b.increment().String()
	if b.Minimum > 0 {
		s += ", billing_minimum " + b.Minimum.String()
	}
	return s
}

// charge is what n started increments cost (0 for none): n increments,
// at least the minimum.
func (b Billing) charge(n int64) time.Duration {
	if n <= 0 {
		return 0
	}
	return max(time.Duration(n)*b.increment(), b.Minimum)
}

// ceilDiv is ⌈a/b⌉ for a >= 0, b > 0.
func ceilDiv(a, b time.Duration) int64 { return int64((a + b - 1) / b) }

// Billed is what an instance that lived for life (creation requested to
// deletion confirmed) is billed: life rounded up to whole increments, at
// least one increment (an instance deleted the moment it was created is
// still a started one) and at least the minimum.
func (b Billing) Billed(life time.Duration) time.Duration {
	return b.charge(max(ceilDiv(max(life, 0), b.increment()), 1))
}

// BilledWithin is the part of the bill of an instance created at created
// and gone at gone (zero: alive) that falls in [from, to): every
// increment is billed when it starts, the first one with the minimum, so
// that the parts of consecutive windows add up to Billed(gone − created)
// and an instance still alive at to pays for the increment it is in.
func (b Billing) BilledWithin(created, gone, from, to time.Time) time.Duration {
	return b.startedBefore(created, gone, to) - b.startedBefore(created, gone, from)
}

// startedBefore is the charge of the increments of the instance that
// started before t.
func (b Billing) startedBefore(created, gone, t time.Time) time.Duration {
	if !t.After(created) {
		return 0
	}
	n := ceilDiv(t.Sub(created), b.increment())
	if !gone.IsZero() {
		n = min(n, max(ceilDiv(max(gone.Sub(created), 0), b.increment()), 1))
	}
	return b.charge(n)
}

// PaidUntil is the end of what an instance created at created has been
// billed for at now: the end of the increment now falls in (an increment
// starts billed), or of the minimum.
func (b Billing) PaidUntil(created, now time.Time) time.Time {
	inc := b.increment()
	n := int64(0)
	if now.After(created) {
		n = int64(now.Sub(created) / inc)
	}
	return created.Add(b.charge(n + 1))
}
