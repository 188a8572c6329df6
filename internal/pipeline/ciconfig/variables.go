package ciconfig

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode"
)

// Variable is a CI/CD variable of the configuration (global or a job's).
type Variable struct {
	Key   string
	Value string
	// Raw is expand: false: the runner does not expand $references in
	// the value.
	Raw bool
	// Description and Options are a global variable's prefill for manual
	// runs.
	Description string
	Options     []string
	Pos         Pos
}

var variableKeyRE = regexp.MustCompile(`^[A-Za-z0-9_]+$`)

// parseVariables reads a variables: hash. Values are scalars (numbers and
// booleans read as their text), null (empty) or a hash of value:,
// description:, expand:, options:.
func parseVariables(v *Value, path string, d *diag) []Variable {
	if v.IsNull() {
		return nil
	}
	if v.Kind != Map {
		d.errorf(v.Pos, path, "config should be a hash of key value pairs, found %s", v.Kind)
		return nil
	}
	var out []Variable
	for _, f := range v.Map {
		if !variableKeyRE.MatchString(f.Key) {
			d.errorf(f.KeyPos, path, "variable name %q may contain only letters, digits and _", f.Key)
			continue
		}
		vr := Variable{Key: f.Key, Pos: f.KeyPos}
		switch f.Val.Kind {
		case Null:
		case Scalar:
			vr.Value = f.Val.Str
		case Map:
			ok := true
			for _, vf := range f.Val.Map {
				switch vf.Key {
				case "value":
					if vf.Val.Kind == Null {
						continue
					}
					if !vf.Val.isScalar() {
						d.errorf(vf.Val.Pos, path+":"+f.Key, "value must be a string")
						ok = false
					}
					vr.Value = vf.Val.Str
				case "description":
					if !vf.Val.isScalar() {
						d.errorf(vf.Val.Pos, path+":"+f.Key, "description must be a string")
						ok = false
					}
					vr.Description = vf.Val.Str
				case "expand":
					b, isBool := vf.Val.boolValue()
					if !isBool {
						d.errorf(vf.Val.Pos, path+":"+f.Key, "expand must be true or false")
						ok = false
					}
					vr.Raw = !b
				case "options":
					vr.Options, _ = stringList(vf.Val, path+":"+f.Key+":options", d)
				default:
					d.errorf(vf.KeyPos, path+":"+f.Key, "unknown key %q (value, description, expand, options)", vf.Key)
					ok = false
				}
			}
			if !ok {
				continue
			}
			if len(vr.Options) > 0 && vr.Value != "" && !contains(vr.Options, vr.Value) {
				d.errorf(f.Val.Pos, path+":"+f.Key, "value %q is not one of its options", vr.Value)
			}
		default:
			d.errorf(f.Val.Pos, path+":"+f.Key, "a variable's value must be a string, a number or a hash, not %s", f.Val.Kind)
			continue
		}
		out = append(out, vr)
	}
	return out
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// expand replaces $NAME and ${NAME} in s with their values (undefined:
// empty); $$ is a literal $.
func expand(s string, vars func(string) (string, bool)) string {
	if !strings.Contains(s, "$") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '$' || i+1 == len(s) {
			b.WriteByte(c)
			continue
		}
		switch n := s[i+1]; {
		case n == '$':
			b.WriteByte('$')
			i++
		case n == '{':
			end := strings.IndexByte(s[i+2:], '}')
			if end < 0 {
				b.WriteByte(c)
				continue
			}
			name := s[i+2 : i+2+end]
			if vars != nil {
				v, _ := vars(name)
				b.WriteString(v)
			}
			i += end + 2
		case isNameByte(n):
			j := i + 1
			for j < len(s) && isNameByte(s[j]) {
				j++
			}
			if vars != nil {
				v, _ := vars(s[i+1 : j])
				b.WriteString(v)
			}
			i = j - 1
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

func isNameByte(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// parseDuration reads GitLab's human durations: a number of seconds, or
// amounts with units ("1h 30m", "3 days", "2 weeks", "1 hour and 30
// minutes", "90 seconds", "1.5h").
func parseDuration(v *Value) (time.Duration, error) {
	if !v.isScalar() {
		return 0, fmt.Errorf("want a duration like \"30 minutes\", found %s", v.Kind)
	}
	return ParseDuration(v.Str)
}

// ParseDuration reads one of GitLab's human durations.
func ParseDuration(s string) (time.Duration, error) {
	in := strings.TrimSpace(strings.ToLower(s))
	if in == "" {
		return 0, fmt.Errorf("empty duration")
	}
	if n, err := strconv.ParseFloat(in, 64); err == nil {
		if n < 0 {
			return 0, fmt.Errorf("duration %q is negative", s)
		}
		return time.Duration(n * float64(time.Second)), nil
	}
	units := map[string]time.Duration{
		"s": time.Second, "sec": time.Second, "secs": time.Second, "second": time.Second, "seconds": time.Second,
		"m": time.Minute, "min": time.Minute, "mins": time.Minute, "minute": time.Minute, "minutes": time.Minute,
		"h": time.Hour, "hr": time.Hour, "hrs": time.Hour, "hour": time.Hour, "hours": time.Hour,
		"d": 24 * time.Hour, "day": 24 * time.Hour, "days": 24 * time.Hour,
		"w": 7 * 24 * time.Hour, "wk": 7 * 24 * time.Hour, "week": 7 * 24 * time.Hour, "weeks": 7 * 24 * time.Hour,
		"mo": 30 * 24 * time.Hour, "month": 30 * 24 * time.Hour, "months": 30 * 24 * time.Hour,
		"y": 365 * 24 * time.Hour, "yr": 365 * 24 * time.Hour, "year": 365 * 24 * time.Hour, "years": 365 * 24 * time.Hour,
	}
	var total time.Duration
	rest := in
	seen := false
	for {
		rest = strings.TrimLeftFunc(rest, func(r rune) bool { return unicode.IsSpace(r) || r == ',' })
		rest = strings.TrimPrefix(rest, "and ")
		rest = strings.TrimLeftFunc(rest, unicode.IsSpace)
		if rest == "" {
			break
		}
		i := 0
		for i < len(rest) && (rest[i] >= '0' && rest[i] <= '9' || rest[i] == '.') {
			i++
		}
		if i == 0 {
			return 0, fmt.Errorf("duration %q: want a number at %q", s, rest)
		}
		n, err := strconv.ParseFloat(rest[:i], 64)
		if err != nil {
			return 0, fmt.Errorf("duration %q: %v", s, err)
		}
		rest = strings.TrimLeft(rest[i:], " ")
		j := 0
		for j < len(rest) && rest[j] >= 'a' && rest[j] <= 'z' {
			j++
		}
		u, ok := units[rest[:j]]
		if !ok {
			return 0, fmt.Errorf("duration %q: unknown unit %q", s, rest[:j])
		}
		total += time.Duration(n * float64(u))
		if total < 0 || total > 100*365*24*time.Hour {
			return 0, fmt.Errorf("duration %q is out of range", s)
		}
		rest = rest[j:]
		seen = true
	}
	if !seen {
		return 0, fmt.Errorf("duration %q has no amount", s)
	}
	return total, nil
}
