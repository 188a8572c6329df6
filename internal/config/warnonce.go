package config

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
)

// WarnOnce remembers the warnings given about a config file, so that a
// reload repeats none of them unless what it is about changed: a warning
// is given once per key per version of the file.
//
// A warning is told from another by its file, its key, its message and
// the value its key holds in the file, not by its line (a comment added
// above it does not make it new). The key of a [[runners]] entry's
// setting counts with the entry's url and token rather than its index, so
// that adding or removing another runner repeats nothing either. A
// warning whose key was dropped from the file and comes back is new
// again, as is one whose value changed.
//
// The zero value is ready; a nil *WarnOnce lets every warning through.
// Its methods are safe for concurrent use.
type WarnOnce struct {
	mu       sync.Mutex
	cfg      *Config         // the reading whose warnings cur holds
	prev     map[string]bool // the warnings of the reading before it
	cur      map[string]bool
	prevKeys map[string]bool // file, key and message only, for a reading that did not parse
	curKeys  map[string]bool
}

// New returns those of warns that were not given yet and records them as
// given. warns are warnings about cfg, one reading of the file: those of
// Parse, and those of the packages that read its sub-tables, in as many
// calls as there are sources. A call with another cfg starts the next
// reading: what the reading before it warned about is not repeated. cfg
// is nil for a reading that did not parse: its warnings are checked
// against the last reading's by key and message only, and it does not
// start a new reading (the configuration in force did not change).
func (o *WarnOnce) New(cfg *Config, warns []Warning) []Warning {
	if o == nil {
		return warns
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if cfg != nil && cfg != o.cfg {
		o.cfg = cfg
		o.prev, o.cur = o.cur, map[string]bool{}
		o.prevKeys, o.curKeys = o.curKeys, map[string]bool{}
	}
	if o.cur == nil {
		o.cur, o.curKeys = map[string]bool{}, map[string]bool{}
	}
	var out []Warning
	for _, w := range warns {
		loose := strings.Join([]string{w.File, w.Key, w.Msg}, "\x00")
		full := strings.Join([]string{w.File, cfg.warningKey(w), w.Msg, cfg.valueOf(w.Key)}, "\x00")
		given := o.prev[full] || o.cur[full]
		if cfg == nil {
			given = o.prevKeys[loose] || o.curKeys[loose]
		}
		if !given {
			out = append(out, w)
		}
		if cfg != nil {
			o.cur[full] = true
		}
		o.curKeys[loose] = true
	}
	return out
}

// warningKey is w's key with a leading runners[i] replaced by the url and
// token that entry has in the file c was parsed from.
func (c *Config) warningKey(w Warning) string {
	rest, ok := strings.CutPrefix(w.Key, "runners[")
	if c == nil || !ok {
		return w.Key
	}
	idx, after, ok := strings.Cut(rest, "]")
	i, err := strconv.Atoi(idx)
	if !ok || err != nil {
		return w.Key
	}
	runners, _ := c.raw["runners"].([]map[string]any)
	if i < 0 || i >= len(runners) {
		return w.Key
	}
	return fmt.Sprintf("runners{%v %v}%s", runners[i]["url"], runners[i]["token"], after)
}

// valueOf renders the value key ("runners[0].docker.privileged") holds in
// the file c was parsed from, "" when it holds none (or c is nil).
func (c *Config) valueOf(key string) string {
	if c == nil || key == "" {
		return ""
	}
	var v any = c.raw
	for _, part := range splitKey(key) {
		switch t := v.(type) {
		case map[string]any:
			name := part
			if strings.HasPrefix(part, `"`) {
				if u, err := strconv.Unquote(part); err == nil {
					name = u
				}
			}
			v = t[name]
		case []map[string]any:
			v = element(t, part)
		case []any:
			v = element(t, part)
		default:
			return ""
		}
		if v == nil {
			return ""
		}
	}
	// fmt prints maps sorted by key: the same table renders the same.
	return fmt.Sprintf("%T %v", v, v)
}

// element returns a[i] for part "[i]", nil when there is none.
func element[T any](a []T, part string) any {
	i, err := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(part, "["), "]"))
	if err != nil || i < 0 || i >= len(a) {
		return nil
	}
	return a[i]
}
