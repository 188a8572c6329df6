package api

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// ParseContentRange parses the Content-Range of a trace PATCH: "start-end",
// both offsets in bytes, end inclusive, no unit. A leading "bytes " is
// tolerated. It fails on negative numbers, end < start, numbers that do not
// fit an int64, and anything else that is not of that form.
func ParseContentRange(s string) (start, end int64, err error) {
	start, end, err = parseRange(strings.TrimPrefix(s, "bytes "))
	if err != nil {
		return 0, 0, fmt.Errorf("content range %q: %w", s, err)
	}
	return start, end, nil
}

// FormatRange returns "0-n", the Range header of a coordinator's 416 and
// 202 answers to trace PATCHes: the log holds n bytes.
func FormatRange(n int64) string {
	return "0-" + strconv.FormatInt(n, 10)
}

// ParseRange parses a Range header "0-n", as FormatRange makes it, and
// returns n. A leading "bytes=" or "bytes " is tolerated.
func ParseRange(s string) (int64, error) {
	t := strings.TrimPrefix(s, "bytes=")
	if t == s {
		t = strings.TrimPrefix(s, "bytes ")
	}
	start, n, err := parseRange(t)
	if err == nil && start != 0 {
		err = errors.New("does not start at 0")
	}
	if err != nil {
		return 0, fmt.Errorf("range %q: %w", s, err)
	}
	return n, nil
}

// parseRange parses "a-b" with a and b decimal numbers without sign and
// a <= b.
func parseRange(s string) (a, b int64, err error) {
	as, bs, ok := strings.Cut(s, "-")
	if !ok {
		return 0, 0, errors.New(`want "start-end"`)
	}
	if a, err = parseOffset(as); err != nil {
		return 0, 0, err
	}
	if b, err = parseOffset(bs); err != nil {
		return 0, 0, err
	}
	if b < a {
		return 0, 0, errors.New("end before start")
	}
	return a, b, nil
}

// parseOffset parses a decimal number of digits only: no sign, no spaces.
func parseOffset(s string) (int64, error) {
	if s == "" {
		return 0, errors.New("missing number")
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, fmt.Errorf("%q is not a number", s)
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%q is out of range", s)
	}
	return n, nil
}
