package config

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"time"
)

// Helpers for packages that interpret the raw sub-tables of a runner
// ([runners.autoscaler], [runners.store], ...) and report problems in the
// same words as Parse.

// TypeName names the TOML type of a decoded value for messages: "a
// string", "an integer", "a table", ...
func TypeName(v any) string {
	switch v.(type) {
	case string:
		return "a string"
	case int64:
		return "an integer"
	case float64:
		return "a float"
	case bool:
		return "a boolean"
	case time.Time:
		return "a datetime"
	case []map[string]any:
		return "an array of tables"
	case []any:
		return "an array"
	case map[string]any:
		return "a table"
	}
	return fmt.Sprintf("a %T", v)
}

// SortedKeys returns the keys of m in order, so that problems are reported
// in a stable order.
func SortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// SubKey joins a table's key path and a child key, quoting the child when
// TOML needs it ("machine" + "odd.key" = `machine."odd.key"`).
func SubKey(table, k string) string {
	if k == "" {
		return table + `.""`
	}
	for i := 0; i < len(k); i++ {
		if !isBare(k[i]) {
			return table + "." + strconv.Quote(k)
		}
	}
	return table + "." + k
}

// IndexKey is the key path of element i of an array: "periods[2]".
func IndexKey(key string, i int) string { return key + "[" + strconv.Itoa(i) + "]" }

// RawReader collects the problems found while reading a runner's raw
// sub-table, each located by Lines (a key relative to the runner, such as
// "autoscaler.max_instances", to its full path and line; RunnerConfig.KeyLine
// is one), and reads typed values, reporting the wrong ones.
type RawReader struct {
	File     string
	Lines    func(key string) (path string, line int)
	Errs     []*Error
	Warnings []Warning
}

// OK reports whether no error was found.
func (rd *RawReader) OK() bool { return len(rd.Errs) == 0 }

// Err returns the error with the lowest line (the same on every run,
// whatever the order a map was read in), or nil when there is none.
func (rd *RawReader) Err() error {
	if len(rd.Errs) == 0 {
		return nil
	}
	best := rd.Errs[0]
	for _, e := range rd.Errs[1:] {
		if e.Line < best.Line || (e.Line == best.Line && e.Key < best.Key) {
			best = e
		}
	}
	return best
}

// Fail records an error about key.
func (rd *RawReader) Fail(key, format string, args ...any) {
	path, line := rd.Lines(key)
	rd.Errs = append(rd.Errs, &Error{File: rd.File, Line: line, Key: path, Msg: fmt.Sprintf(format, args...)})
}

// Warn records a warning about key.
func (rd *RawReader) Warn(key, format string, args ...any) {
	path, line := rd.Lines(key)
	rd.Warnings = append(rd.Warnings, Warning{File: rd.File, Line: line, Key: path, Msg: fmt.Sprintf(format, args...)})
}

// Count reads a non-negative integer (0 after an error).
func (rd *RawReader) Count(key string, v any) int {
	n, ok := v.(int64)
	switch {
	case !ok:
		rd.Fail(key, "must be an integer, not %s", TypeName(v))
	case n < 0:
		rd.Fail(key, "must not be negative (got %d)", n)
	case n > math.MaxInt32:
		rd.Fail(key, "%d is too large", n)
	default:
		return int(n)
	}
	return 0
}

// Bool reads a boolean.
func (rd *RawReader) Bool(key string, v any) bool {
	b, ok := v.(bool)
	if !ok {
		rd.Fail(key, "must be a boolean, not %s", TypeName(v))
	}
	return b
}

// Str reads a string.
func (rd *RawReader) Str(key string, v any) string {
	s, ok := v.(string)
	if !ok {
		rd.Fail(key, "must be a string, not %s", TypeName(v))
	}
	return s
}

// StrList reads an array of strings; a wrong element is reported with its
// index and left out.
func (rd *RawReader) StrList(key string, v any) []string {
	a, ok := v.([]any)
	if !ok {
		rd.Fail(key, "must be an array of strings, not %s", TypeName(v))
		return nil
	}
	out := make([]string, 0, len(a))
	for i, e := range a {
		s, ok := e.(string)
		if !ok {
			rd.Fail(IndexKey(key, i), "must be a string, not %s", TypeName(e))
			continue
		}
		out = append(out, s)
	}
	return out
}
