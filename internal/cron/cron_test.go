package cron

import (
	"testing"
	"time"
)

func TestNext(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	utc := func(mo time.Month, d, hh, mm int) time.Time { return time.Date(2026, mo, d, hh, mm, 0, 0, time.UTC) }
	ber := func(mo time.Month, d, hh, mm int) time.Time { return time.Date(2026, mo, d, hh, mm, 0, 0, berlin) }
	for _, tc := range []struct {
		expr     string
		loc      *time.Location
		after    time.Time
		want     time.Time
		wantZero bool
	}{
		{"* * * * *", nil, utc(1, 5, 10, 0), utc(1, 5, 10, 1), false},
		{"* * * * *", nil, utc(1, 5, 10, 0).Add(30 * time.Second), utc(1, 5, 10, 1), false},
		{"0 3 * * *", nil, utc(1, 5, 10, 0), utc(1, 6, 3, 0), false},
		{"0 3 * * *", nil, utc(1, 5, 3, 0), utc(1, 6, 3, 0), false}, // strictly after
		{"*/15 * * * *", nil, utc(1, 5, 10, 7), utc(1, 5, 10, 15), false},
		{"0 0 1 * *", nil, utc(1, 5, 10, 0), utc(2, 1, 0, 0), false},
		{"0 0 * * mon", nil, utc(1, 5, 10, 0), utc(1, 12, 0, 0), false}, // Jan 5 2026 is a Monday
		{"30 23 31 12 *", nil, utc(1, 5, 10, 0), utc(12, 31, 23, 30), false},
		{"0 9 1 * mon", nil, utc(1, 5, 10, 0), utc(1, 12, 9, 0), false}, // dom or dow
		// In a zone: 03:00 Berlin is 02:00 UTC in winter, 01:00 in summer.
		{"0 3 * * *", berlin, utc(1, 5, 10, 0), ber(1, 6, 3, 0), false},
		{"0 3 * * *", berlin, utc(7, 5, 10, 0), ber(7, 6, 3, 0), false},
		// 02:30 does not exist on 29 March 2026 in Berlin: the next day's.
		{"30 2 * * *", berlin, ber(3, 28, 12, 0), ber(3, 30, 2, 30), false},
		// Every hour across the spring change: 01:00, then 03:00.
		{"0 * * * *", berlin, ber(3, 29, 1, 0), ber(3, 29, 3, 0), false},
		{"0 0 30 2 *", nil, utc(1, 1, 0, 0), time.Time{}, true},
	} {
		e, err := Parse(tc.expr)
		if err != nil {
			t.Fatalf("Parse(%q) = %v", tc.expr, err)
		}
		got := e.Next(tc.after, tc.loc)
		if tc.wantZero {
			if !got.IsZero() {
				t.Errorf("%q.Next(%v) = %v, want none", tc.expr, tc.after, got)
			}
			continue
		}
		if !got.Equal(tc.want) {
			t.Errorf("%q.Next(%v) in %v = %v, want %v", tc.expr, tc.after, tc.loc, got, tc.want)
		}
		if !e.Contains(got) {
			t.Errorf("%q: Next gave %v, which it does not contain", tc.expr, got)
		}
	}
}

// FuzzNext: Next of any expression Parse accepts is after the time given,
// on a whole minute, and matches.
func FuzzNext(f *testing.F) {
	for _, s := range []string{"* * * * *", "0 3 * * *", "*/7 1-5 * * mon-fri", "0 0 29 2 *", "15 2 * 3 sun", "0 0 31 * *", "5/20 * 1 jan 7"} {
		f.Add(s, int64(1767225600)) // 2026-01-01
	}
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, s string, unix int64) {
		e, err := Parse(s)
		if err != nil {
			return
		}
		from := time.Unix(unix%(1<<34), 0)
		for _, loc := range []*time.Location{time.UTC, berlin} {
			n := e.Next(from, loc)
			if n.IsZero() {
				continue
			}
			if !n.After(from) || n.Second() != 0 || !e.Contains(n.In(loc)) {
				t.Errorf("%q.Next(%v) in %v = %v", s, from, loc, n)
			}
		}
	})
}
