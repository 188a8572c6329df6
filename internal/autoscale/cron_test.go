package autoscale

import (
	"testing"
	"time"
)

func TestCron5(t *testing.T) {
	at := func(d, hh, mm int) time.Time { return time.Date(2026, 1, d, hh, mm, 0, 0, time.UTC) } // Jan 5 2026 is a Monday
	for _, tc := range []struct {
		expr string
		at   time.Time
		want bool
	}{
		{"* * * * *", at(5, 0, 0), true},
		{"* 8-15 * * mon-fri", at(5, 8, 0), true},
		{"* 8-15 * * mon-fri", at(5, 15, 59), true},
		{"* 8-15 * * mon-fri", at(5, 16, 0), false},
		{"* 8-15 * * mon-fri", at(5, 7, 59), false},
		{"* 8-15 * * mon-fri", at(10, 12, 0), false}, // Saturday
		{"* 8-15 * * MON-FRI", at(9, 12, 0), true},   // Friday
		{"* * * * 0", at(11, 12, 0), true},           // Sunday as 0
		{"* * * * 7", at(11, 12, 0), true},           // Sunday as 7
		{"* * * * 7", at(10, 12, 0), false},
		{"* * * * sat,sun", at(10, 12, 0), true},
		{"* * * * 1-7", at(11, 12, 0), true},
		{"*/15 * * * *", at(5, 3, 30), true},
		{"*/15 * * * *", at(5, 3, 31), false},
		{"30-59/10 9 * * *", at(5, 9, 50), true},
		{"30-59/10 9 * * *", at(5, 9, 45), false},
		{"5/20 * * * *", at(5, 9, 45), true},
		{"* * 1 jan *", at(1, 12, 0), true},
		{"* * 1 feb *", at(1, 12, 0), false},
		// day of month and day of week both restricted: either matches
		{"* * 1 * mon", at(5, 12, 0), true},
		{"* * 1 * mon", at(1, 12, 0), true},
		{"* * 1 * mon", at(6, 12, 0), false},
		// one of them "*": both must match
		{"* * * * mon", at(6, 12, 0), false},
		{"* * 6 * *", at(6, 12, 0), true},
	} {
		c, err := ParseCron5(tc.expr)
		if err != nil {
			t.Fatalf("%q: %v", tc.expr, err)
		}
		if got := c.Contains(tc.at); got != tc.want {
			t.Errorf("%q at %s: %v, want %v", tc.expr, tc.at.Format("Mon Jan 2 15:04"), got, tc.want)
		}
		back, err := ParseCron5(c.String())
		if err != nil || *back != *c {
			t.Errorf("%q: String %q does not read back (%v)", tc.expr, c.String(), err)
		}
	}
}

func TestCron5Errors(t *testing.T) {
	for _, expr := range []string{
		"", "* * * *", "* * * * * *", "60 * * * *", "* 24 * * *", "* * 0 * *", "* * 32 * *",
		"* * * 13 *", "* * * * 8", "5-1 * * * *", "*/0 * * * *", "*/61 * * * *", "a * * * *",
		"* * * foo *", "1,,2 * * * *", "-1 * * * *", "* * * * mon-", "1-2-3 * * * *",
	} {
		if c, err := ParseCron5(expr); err == nil {
			t.Errorf("%q: no error (%v)", expr, c)
		}
	}
}

// GitLab Runner's 7-field periods: in period when the next match is within
// ±1 s, which leaves the last second of the last minute outside.
func TestCron7Boundaries(t *testing.T) {
	c, err := ParseCron7("* * 9-17 * * mon-fri *")
	if err != nil {
		t.Fatal(err)
	}
	wed := func(hh, mm, ss, ms int) time.Time {
		return time.Date(2026, 1, 7, hh, mm, ss, ms*int(time.Millisecond), time.UTC)
	}
	for _, tc := range []struct {
		at   time.Time
		want bool
	}{
		{wed(8, 59, 58, 0), false},
		{wed(8, 59, 59, 0), true}, // one second early: the ±1 s window
		{wed(9, 0, 0, 0), true},
		{wed(12, 30, 30, 500), true},
		{wed(17, 59, 58, 0), true},
		{wed(17, 59, 58, 999), true},
		{wed(17, 59, 59, 0), false}, // "the 59th second of the last minute is not part of the period"
		{wed(17, 59, 59, 500), false},
		{wed(18, 0, 0, 0), false},
		{time.Date(2026, 1, 10, 12, 0, 0, 0, time.UTC), false}, // Saturday
		{time.Time{}, false},
	} {
		if got := c.Contains(tc.at); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.at.Format("Mon 15:04:05.000"), got, tc.want)
		}
	}
	if _, err := ParseCron7("* * 25 * * * *"); err == nil {
		t.Error("hour 25 accepted")
	}
}

// A period in America/New_York follows its offset, DST included.
func TestPeriodTimezone(t *testing.T) {
	for _, tc := range []struct {
		name    string
		d       Dialect
		periods []string
	}{
		{"machine", DialectMachine, []string{"* * 9-17 * * mon-fri *"}},
		{"autoscaler", DialectAutoscaler, []string{"* 9-17 * * mon-fri"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &Policy{Dialect: tc.d, Base: Schedule{IdleCount: 1},
				Schedules: []Schedule{{Periods: tc.periods, Timezone: "America/New_York", IdleCount: 7}}}
			if err := p.Compile(); err != nil {
				t.Fatal(err)
			}
			for _, c := range []struct {
				at   time.Time
				want int
			}{
				{time.Date(2026, 1, 7, 13, 30, 0, 0, time.UTC), 1}, // 08:30 EST
				{time.Date(2026, 1, 7, 14, 30, 0, 0, time.UTC), 7}, // 09:30 EST
				{time.Date(2026, 1, 7, 22, 30, 0, 0, time.UTC), 7}, // 17:30 EST
				{time.Date(2026, 1, 7, 23, 30, 0, 0, time.UTC), 1}, // 18:30 EST
				{time.Date(2026, 7, 8, 13, 30, 0, 0, time.UTC), 7}, // 09:30 EDT
				{time.Date(2026, 7, 8, 12, 30, 0, 0, time.UTC), 1}, // 08:30 EDT
				{time.Date(2026, 1, 10, 3, 30, 0, 0, time.UTC), 1}, // Friday 22:30 EST, Saturday in UTC
				{time.Date(2026, 1, 10, 1, 0, 0, 0, time.UTC), 1},
				{time.Date(2026, 1, 9, 22, 0, 0, 0, time.UTC), 7}, // Friday 17:00 EST
			} {
				if got := p.Active(c.at).IdleCount; got != c.want {
					t.Errorf("%s: IdleCount %d, want %d", c.at, got, c.want)
				}
				// An uncompiled copy gives the same answers.
				q := *p
				q.Schedules = []Schedule{{Periods: tc.periods, Timezone: "America/New_York", IdleCount: 7}}
				if got := q.Active(c.at).IdleCount; got != c.want {
					t.Errorf("uncompiled, %s: IdleCount %d, want %d", c.at, got, c.want)
				}
			}
		})
	}
}

// The last active entry wins.
func TestLastMatchingScheduleWins(t *testing.T) {
	p := &Policy{Dialect: DialectAutoscaler, Schedules: []Schedule{
		{IdleCount: 1}, // always
		{Periods: []string{"* 9-17 * * *"}, IdleCount: 2}, // working hours
		{Periods: []string{"* 12 * * *"}, IdleCount: 3},   // lunch
	}}
	if err := p.Compile(); err != nil {
		t.Fatal(err)
	}
	for hh, want := range map[int]int{3: 1, 9: 2, 12: 3, 13: 2, 18: 1} {
		if got := p.Active(time.Date(2026, 1, 7, hh, 0, 0, 0, time.UTC)).IdleCount; got != want {
			t.Errorf("%02d:00: %d, want %d", hh, got, want)
		}
	}
	bad := &Policy{Dialect: DialectAutoscaler, Schedules: []Schedule{{Timezone: "Mars/Olympus"}}}
	if err := bad.Compile(); err == nil {
		t.Error("unknown zone compiled")
	}
}

// A compiled Policy is used by the pool and the simulator at once:
// cronexpr's Next writes into its expression, so Cron7 serialises it.
func TestActiveConcurrent(t *testing.T) {
	p := &Policy{Dialect: DialectMachine, Schedules: []Schedule{
		{Periods: []string{"* * 9-17 * * mon-fri *"}, Timezone: "UTC", IdleCount: 3},
	}}
	if err := p.Compile(); err != nil {
		t.Fatal(err)
	}
	done := make(chan bool)
	for g := range 4 {
		go func() {
			ok := true
			for i := range 200 {
				at := time.Date(2026, 1, 5+g, 8+i%12, i%60, 0, 0, time.UTC)
				want := 0
				if at.Hour() >= 9 && at.Hour() <= 17 {
					want = 3
				}
				ok = ok && p.Active(at).IdleCount == want
			}
			done <- ok
		}()
	}
	for range 4 {
		if !<-done {
			t.Error("wrong schedule under concurrent use")
		}
	}
}
