package coordinator

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode"
)

// DefaultArtifactExpireIn is how long an artifact uploaded without
// expire_in (and whose job's spec says none) is kept: GitLab's default
// (the instance setting default_artifacts_expire_in, "30 days").
const DefaultArtifactExpireIn = 30 * 24 * time.Hour

// maxExpireIn bounds expire_in (longer is "never" in all but name) and
// keeps time arithmetic far from overflow.
const maxExpireIn = 100 * 365 * 24 * time.Hour

// expireUnits are the units of expire_in, as GitLab's parser
// (ChronicDuration) reads them: a month is 30 days, a year 365.25 days.
var expireUnits = map[string]time.Duration{
	"s": time.Second, "sec": time.Second, "secs": time.Second, "second": time.Second, "seconds": time.Second,
	"m": time.Minute, "min": time.Minute, "mins": time.Minute, "minute": time.Minute, "minutes": time.Minute,
	"h": time.Hour, "hr": time.Hour, "hrs": time.Hour, "hour": time.Hour, "hours": time.Hour,
	"d": 24 * time.Hour, "day": 24 * time.Hour, "days": 24 * time.Hour,
	"w": 7 * 24 * time.Hour, "wk": 7 * 24 * time.Hour, "wks": 7 * 24 * time.Hour, "week": 7 * 24 * time.Hour, "weeks": 7 * 24 * time.Hour,
	"mo": 30 * 24 * time.Hour, "mos": 30 * 24 * time.Hour, "month": 30 * 24 * time.Hour, "months": 30 * 24 * time.Hour,
	"y": 8766 * time.Hour, "yr": 8766 * time.Hour, "yrs": 8766 * time.Hour, "year": 8766 * time.Hour, "years": 8766 * time.Hour,
}

// parseExpireIn reads an artifacts expire_in as GitLab does: "never" (kept
// until deleted: never is true), or a sum of amounts with units — "1
// week", "3 days", "30 mins", "1h 30m", "2 hours and 20 minutes", "1.5
// days" — where a bare number is seconds ("3600"). The result is positive
// and at most 100 years.
func parseExpireIn(s string) (d time.Duration, never bool, err error) {
	s = strings.ToLower(strings.TrimSpace(s))
	switch s {
	case "":
		return 0, false, errors.New("expire_in is empty")
	case "never":
		return 0, true, nil
	}
	if len(s) > 100 {
		return 0, false, errors.New("expire_in is longer than 100 characters")
	}
	rest := strings.ReplaceAll(s, ",", " ")
	var total float64 // seconds
	terms := 0
	for {
		rest = strings.TrimLeftFunc(rest, unicode.IsSpace)
		if rest == "" {
			break
		}
		if w, ok := strings.CutPrefix(rest, "and"); ok && terms > 0 && (w == "" || unicode.IsSpace(rune(w[0]))) {
			rest = w
			continue
		}
		i := strings.IndexFunc(rest, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
		if i < 0 {
			i = len(rest)
		}
		if i == 0 {
			return 0, false, fmt.Errorf("expire_in %q: want a number before %q", s, firstWord(rest))
		}
		n, err := strconv.ParseFloat(rest[:i], 64)
		if err != nil {
			return 0, false, fmt.Errorf("expire_in %q: bad number %q", s, rest[:i])
		}
		rest = strings.TrimLeftFunc(rest[i:], unicode.IsSpace)
		j := strings.IndexFunc(rest, func(r rune) bool { return r < 'a' || r > 'z' })
		if j < 0 {
			j = len(rest)
		}
		unit := time.Second
		if j > 0 {
			u, ok := expireUnits[rest[:j]]
			if !ok {
				return 0, false, fmt.Errorf("expire_in %q: unknown unit %q (want seconds, minutes, hours, days, weeks, months or years)", s, rest[:j])
			}
			unit = u
			rest = rest[j:]
		}
		total += n * unit.Seconds()
		terms++
		if total > maxExpireIn.Seconds() || math.IsInf(total, 0) {
			return 0, false, fmt.Errorf("expire_in %q: longer than 100 years (use never)", s)
		}
	}
	d = time.Duration(total * float64(time.Second))
	if d < time.Second {
		return 0, false, fmt.Errorf("expire_in %q: want at least one second", s)
	}
	return d, false, nil
}

func firstWord(s string) string {
	if i := strings.IndexFunc(s, unicode.IsSpace); i >= 0 {
		return s[:i]
	}
	return s
}
