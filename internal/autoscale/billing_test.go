package autoscale

import (
	"strings"
	"testing"
	"time"
)

var (
	perSecond   = Billing{}
	perSecond1m = Billing{Increment: time.Second, Minimum: time.Minute}
	perMinute   = Billing{Increment: time.Minute}
	perHour     = Billing{Increment: time.Hour}
)

func TestBillingBilled(t *testing.T) {
	for _, tc := range []struct {
		name string
		b    Billing
		life time.Duration
		want time.Duration
	}{
		{"per second, whole seconds", perSecond, 90 * time.Second, 90 * time.Second},
		{"per second, a started second is billed", perSecond, 90*time.Second + time.Millisecond, 91 * time.Second},
		{"per second, deleted in the second it was created", perSecond, 0, time.Second},
		{"per second, under a second", perSecond, 300 * time.Millisecond, time.Second},
		{"1 min minimum, short life", perSecond1m, 10 * time.Second, time.Minute},
		{"1 min minimum, deleted the moment it was created", perSecond1m, 0, time.Minute},
		{"1 min minimum, beyond it", perSecond1m, 61*time.Second + time.Millisecond, 62 * time.Second},
		{"per minute", perMinute, 61 * time.Second, 2 * time.Minute},
		{"per minute, exactly one", perMinute, time.Minute, time.Minute},
		{"per started hour, a minute", perHour, time.Minute, time.Hour},
		{"per started hour, an hour and a second", perHour, time.Hour + time.Second, 2 * time.Hour},
		{"per started hour, exactly an hour", perHour, time.Hour, time.Hour},
		{"per started hour, deleted the moment it was created", perHour, 0, time.Hour},
		{"minimum not a multiple of the increment", Billing{Increment: time.Minute, Minimum: 90 * time.Second}, 10 * time.Second, 90 * time.Second},
		{"minimum not a multiple, beyond it", Billing{Increment: time.Minute, Minimum: 90 * time.Second}, 100 * time.Second, 2 * time.Minute},
		{"negative life (clock skew) is a started increment", perHour, -time.Second, time.Hour},
	} {
		if got := tc.b.Billed(tc.life); got != tc.want {
			t.Errorf("%s: Billed(%s) = %s, want %s", tc.name, tc.life, got, tc.want)
		}
	}
}

// TestBillingWithinAddsUp: the windows of a day split an instance's bill
// without losing or doubling any of it, and an instance still alive pays
// for the increment it is in; a deletion that had to be retried is billed
// to the retry's confirmation, not to the first request.
func TestBillingWithinAddsUp(t *testing.T) {
	day := t0.Truncate(24 * time.Hour)
	for _, tc := range []struct {
		name           string
		b              Billing
		created, gone  time.Duration // since day; gone < 0: alive
		wantFirstHour  time.Duration // [day, day+1h)
		wantWholeDay   time.Duration // [day, day+24h)
		wantWholeTotal time.Duration // Billed(life), when gone
	}{
		{"per hour, lives 90 min across the hour", perHour, 30 * time.Minute, 2 * time.Hour, time.Hour, 2 * time.Hour, 2 * time.Hour},
		{"per hour, deleted in the second it was created", perHour, 10 * time.Minute, 10 * time.Minute, time.Hour, time.Hour, time.Hour},
		{"per second 1 min minimum, deleted after 10 s", perSecond1m, 0, 10 * time.Second, time.Minute, time.Minute, time.Minute},
		{"per second, created before the day", perSecond, -30 * time.Minute, 30 * time.Minute, 30 * time.Minute, 30 * time.Minute, time.Hour},
		{"per hour, alive at the end pays its started hour", perHour, 23*time.Hour + 30*time.Minute, -1, 0, time.Hour, 0},
		// Deletion asked at 20 min, refused, retried and confirmed at
		// 1 h 5 min: the bill runs to the confirmation.
		{"per hour, deletion retried past the hour", perHour, 0, 65 * time.Minute, time.Hour, 2 * time.Hour, 2 * time.Hour},
	} {
		created := day.Add(tc.created)
		var gone time.Time
		if tc.gone >= 0 {
			gone = day.Add(tc.gone)
		}
		if got := tc.b.BilledWithin(created, gone, day, day.Add(time.Hour)); got != tc.wantFirstHour {
			t.Errorf("%s: first hour %s, want %s", tc.name, got, tc.wantFirstHour)
		}
		var sum time.Duration
		for h := range 24 {
			sum += tc.b.BilledWithin(created, gone, day.Add(time.Duration(h)*time.Hour), day.Add(time.Duration(h+1)*time.Hour))
		}
		if sum != tc.wantWholeDay {
			t.Errorf("%s: hours of the day add up to %s, want %s", tc.name, sum, tc.wantWholeDay)
		}
		if tc.gone >= 0 {
			all := tc.b.BilledWithin(created, gone, created.Add(-time.Hour), gone.Add(time.Hour))
			if want := tc.b.Billed(gone.Sub(created)); all != want || all != tc.wantWholeTotal {
				t.Errorf("%s: whole life billed %s, want %s (= Billed %s)", tc.name, all, tc.wantWholeTotal, want)
			}
		}
	}
}

func TestBillingPaidUntil(t *testing.T) {
	for _, tc := range []struct {
		name string
		b    Billing
		age  time.Duration
		want time.Duration // since created
	}{
		{"per hour, just created", perHour, 0, time.Hour},
		{"per hour, 59 min", perHour, 59 * time.Minute, time.Hour},
		{"per hour, into the second hour", perHour, 61 * time.Minute, 2 * time.Hour},
		{"1 min minimum, 10 s", perSecond1m, 10 * time.Second, time.Minute},
		{"1 min minimum, past it", perSecond1m, 70*time.Second + time.Millisecond, 71 * time.Second},
		{"per second", perSecond, 5*time.Second + time.Millisecond, 6 * time.Second},
	} {
		if got := tc.b.PaidUntil(t0, t0.Add(tc.age)).Sub(t0); got != tc.want {
			t.Errorf("%s: paid until +%s, want +%s", tc.name, got, tc.want)
		}
	}
}

func TestBillingCheck(t *testing.T) {
	for _, tc := range []struct {
		b    Billing
		want string // "" = valid
	}{
		{Billing{}, ""},
		{perHour, ""},
		{perSecond1m, ""},
		{Billing{Increment: -time.Second}, "billing_increment"},
		{Billing{Increment: 48 * time.Hour}, "billing_increment"},
		{Billing{Minimum: -time.Minute}, "billing_minimum"},
		{Billing{Minimum: 25 * time.Hour}, "billing_minimum"},
	} {
		err := tc.b.Check()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%+v: %v, want valid", tc.b, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%+v: %v, want an error naming %s", tc.b, err, tc.want)
		}
	}
}
