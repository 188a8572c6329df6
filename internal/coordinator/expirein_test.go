package coordinator

import (
	"testing"
	"time"
)

func TestParseExpireIn(t *testing.T) {
	t.Parallel()
	day := 24 * time.Hour
	for _, tc := range []struct {
		in    string
		want  time.Duration
		never bool
		bad   bool
	}{
		{in: "1 week", want: 7 * day},
		{in: "3 days", want: 3 * day},
		{in: "30 mins", want: 30 * time.Minute},
		{in: "never", never: true},
		{in: " Never ", never: true},
		{in: "1 hour 30 minutes", want: 90 * time.Minute},
		{in: "2 hours and 20 minutes", want: 140 * time.Minute},
		{in: "1h30m", want: 90 * time.Minute},
		{in: "1d, 2h", want: 26 * time.Hour},
		{in: "3600", want: time.Hour},
		{in: "90 sec", want: 90 * time.Second},
		{in: "1.5 days", want: 36 * time.Hour},
		{in: "1 month", want: 30 * day},
		{in: "1 yr", want: 8766 * time.Hour},
		{in: "2 WEEKS", want: 14 * day},
		{in: "", bad: true},
		{in: "soon", bad: true},
		{in: "3 fortnights", bad: true},
		{in: "0", bad: true},
		{in: "0 days", bad: true},
		{in: "and 3 days", bad: true},
		{in: "1..2 days", bad: true},
		{in: "-1 day", bad: true},
		{in: "200 years", bad: true},
		{in: "99999999999999999999999 days", bad: true},
	} {
		d, never, err := parseExpireIn(tc.in)
		if tc.bad {
			if err == nil {
				t.Errorf("parseExpireIn(%q) = %v, %v, nil; want an error", tc.in, d, never)
			}
			continue
		}
		if err != nil || d != tc.want || never != tc.never {
			t.Errorf("parseExpireIn(%q) = %v, %v, %v; want %v, %v, nil", tc.in, d, never, err, tc.want, tc.never)
		}
	}
}

func FuzzExpireIn(f *testing.F) {
	for _, s := range []string{"1 week", "3 days", "30 mins", "never", "1h30m", "3600", "1.5 days", "2 hours and 20 minutes", "", "1e308 years"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, never, err := parseExpireIn(s)
		switch {
		case err != nil:
			if d != 0 || never {
				t.Fatalf("parseExpireIn(%q) = %v, %v with error %v", s, d, never, err)
			}
		case never:
			if d != 0 {
				t.Fatalf("parseExpireIn(%q) = %v, never", s, d)
			}
		case d < time.Second || d > maxExpireIn:
			t.Fatalf("parseExpireIn(%q) = %v, out of [1s, %v]", s, d, maxExpireIn)
		}
	})
}
