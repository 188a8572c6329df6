package hcloudtest

import (
	"fmt"
	"slices"
	"strings"
)

// selector is a parsed label_selector: requirements that must all hold.
// The syntax is Hetzner's: k=v, k==v, k!=v, k (present), !k (absent),
// k in (v1,v2), k notin (v1,v2), joined by commas.
type selector []requirement

type requirement struct {
	key    string
	op     string // "=", "!=", "exists", "!exists", "in", "notin"
	values []string
}

func parseSelector(s string) (selector, error) {
	var sel selector
	for _, term := range splitTerms(s) {
		term = strings.TrimSpace(term)
		if term == "" {
			return nil, fmt.Errorf("label_selector %q: empty requirement", s)
		}
		r, err := parseRequirement(term)
		if err != nil {
			return nil, fmt.Errorf("label_selector %q: %w", s, err)
		}
		sel = append(sel, r)
	}
	return sel, nil
}

// splitTerms splits at the commas outside parentheses.
func splitTerms(s string) []string {
	if strings.TrimSpace(s) == "" {
		return nil
	}
	var terms []string
	depth, start := 0, 0
	for i, c := range s {
		switch c {
		case '(':
			depth++
		case ')':
			depth--
		case ',':
			if depth == 0 {
				terms = append(terms, s[start:i])
				start = i + 1
			}
		}
	}
	return append(terms, s[start:])
}

func parseRequirement(t string) (requirement, error) {
	if k, ok := strings.CutPrefix(t, "!"); ok {
		return requirement{key: strings.TrimSpace(k), op: "!exists"}, checkKey(k)
	}
	if k, v, ok := strings.Cut(t, "!="); ok {
		return requirement{key: strings.TrimSpace(k), op: "!=", values: []string{strings.TrimSpace(v)}}, checkKey(k)
	}
	if k, v, ok := strings.Cut(t, "=="); ok {
		return requirement{key: strings.TrimSpace(k), op: "=", values: []string{strings.TrimSpace(v)}}, checkKey(k)
	}
	if k, v, ok := strings.Cut(t, "="); ok {
		return requirement{key: strings.TrimSpace(k), op: "=", values: []string{strings.TrimSpace(v)}}, checkKey(k)
	}
	for _, op := range []string{" notin ", " in "} {
		k, rest, ok := strings.Cut(t, op)
		if !ok {
			continue
		}
		rest = strings.TrimSpace(rest)
		if !strings.HasPrefix(rest, "(") || !strings.HasSuffix(rest, ")") {
			return requirement{}, fmt.Errorf("%q: want %s(v1,v2,...)", t, op)
		}
		var values []string
		for v := range strings.SplitSeq(rest[1:len(rest)-1], ",") {
			values = append(values, strings.TrimSpace(v))
		}
		return requirement{key: strings.TrimSpace(k), op: strings.TrimSpace(op), values: values}, checkKey(k)
	}
	return requirement{key: t, op: "exists"}, checkKey(t)
}

func checkKey(k string) error {
	k = strings.TrimSpace(k)
	if k == "" || strings.ContainsAny(k, " ()!=,") {
		return fmt.Errorf("invalid label key %q", k)
	}
	return nil
}

func (sel selector) matches(labels map[string]string) bool {
	for _, r := range sel {
		v, has := labels[r.key]
		var ok bool
		switch r.op {
		case "exists":
			ok = has
		case "!exists":
			ok = !has
		case "=":
			ok = has && v == r.values[0]
		case "!=":
			ok = !has || v != r.values[0]
		case "in":
			ok = has && slices.Contains(r.values, v)
		case "notin":
			ok = !has || !slices.Contains(r.values, v)
		}
		if !ok {
			return false
		}
	}
	return true
}
