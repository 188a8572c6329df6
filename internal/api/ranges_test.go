package api

import (
	"fmt"
	"math"
	"testing"
)

func TestParseContentRange(t *testing.T) {
	for _, tc := range []struct {
		in         string
		start, end int64
		wantErr    bool
	}{
		{in: "0-0", start: 0, end: 0},
		{in: "0-99", start: 0, end: 99},
		{in: "100-1048675", start: 100, end: 1048675},
		{in: "bytes 5-10", start: 5, end: 10},
		{in: "007-8", start: 7, end: 8},
		{in: "9223372036854775806-9223372036854775807", start: math.MaxInt64 - 1, end: math.MaxInt64},
		{in: "", wantErr: true},
		{in: "-", wantErr: true},
		{in: "5", wantErr: true},
		{in: "5-", wantErr: true},
		{in: "-5", wantErr: true},
		{in: "-5-10", wantErr: true},
		{in: "5--10", wantErr: true},
		{in: "+5-10", wantErr: true},
		{in: "5-+10", wantErr: true},
		{in: "10-5", wantErr: true},
		{in: "1-2-3", wantErr: true},
		{in: " 1-2", wantErr: true},
		{in: "1-2 ", wantErr: true},
		{in: "1 - 2", wantErr: true},
		{in: "bytes=1-2", wantErr: true},
		{in: "bytes 1-2/3", wantErr: true},
		{in: "bytes  1-2", wantErr: true},
		{in: "0x1-0x2", wantErr: true},
		{in: "1_0-20", wantErr: true},
		{in: "a-b", wantErr: true},
		{in: "1-٣", wantErr: true},
		{in: "0-9223372036854775808", wantErr: true},
		{in: "99999999999999999999-99999999999999999999", wantErr: true},
	} {
		start, end, err := ParseContentRange(tc.in)
		if tc.wantErr {
			if err == nil {
				t.Errorf("ParseContentRange(%q) = %d, %d; want an error", tc.in, start, end)
			}
			continue
		}
		if err != nil || start != tc.start || end != tc.end {
			t.Errorf("ParseContentRange(%q) = %d, %d, %v; want %d, %d", tc.in, start, end, err, tc.start, tc.end)
		}
	}
}

func TestRange(t *testing.T) {
	for _, n := range []int64{0, 1, 1 << 20, math.MaxInt64} {
		s := FormatRange(n)
		if want := fmt.Sprintf("0-%d", n); s != want {
			t.Errorf("FormatRange(%d) = %q, want %q", n, s, want)
		}
		got, err := ParseRange(s)
		if err != nil || got != n {
			t.Errorf("ParseRange(%q) = %d, %v; want %d", s, got, err, n)
		}
	}
	for _, tc := range []struct {
		in      string
		want    int64
		wantErr bool
	}{
		{in: "0-42", want: 42},
		{in: "bytes=0-42", want: 42},
		{in: "bytes 0-42", want: 42},
		{in: "1-42", wantErr: true},
		{in: "0--1", wantErr: true},
		{in: "-1", wantErr: true},
		{in: "42", wantErr: true},
		{in: "", wantErr: true},
		{in: "0-", wantErr: true},
		{in: "0-42/100", wantErr: true},
		{in: "0-99999999999999999999", wantErr: true},
	} {
		got, err := ParseRange(tc.in)
		if tc.wantErr {
			if err == nil {
				t.Errorf("ParseRange(%q) = %d; want an error", tc.in, got)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ParseRange(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
}

func FuzzParseContentRange(f *testing.F) {
	for _, s := range []string{"0-0", "0-1048575", "bytes 10-20", "-1-5", "5-4", "9223372036854775807-9223372036854775807", "1-9223372036854775808", "x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		start, end, err := ParseContentRange(s)
		if err != nil {
			if start != 0 || end != 0 {
				t.Errorf("ParseContentRange(%q) failed with %d, %d", s, start, end)
			}
			return
		}
		if start < 0 || end < start {
			t.Fatalf("ParseContentRange(%q) accepted %d, %d", s, start, end)
		}
		// What it accepts formats back to a range it parses the same.
		for _, again := range []string{fmt.Sprintf("%d-%d", start, end), fmt.Sprintf("bytes %d-%d", start, end)} {
			s2, e2, err := ParseContentRange(again)
			if err != nil || s2 != start || e2 != end {
				t.Fatalf("ParseContentRange(%q) = %d, %d, %v; want %d, %d (from %q)", again, s2, e2, err, start, end, s)
			}
		}
		if start == 0 {
			if n, err := ParseRange(FormatRange(end)); err != nil || n != end {
				t.Fatalf("ParseRange(FormatRange(%d)) = %d, %v", end, n, err)
			}
		}
	})
}
