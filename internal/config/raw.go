package config

import (
	"fmt"
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
