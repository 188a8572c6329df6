package config

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/drover-ci/drover/internal/featureflags"
)

// GitLab Runner settings that drover reads and keeps (Save writes them
// back) but does not act on draw a warning with their line, so that a
// config.toml written for GitLab Runner does not silently lose behaviour.
// When drover implements one of them, drop its entry here.

// notActedOn is a key drover does not act on yet. key is a top-level key,
// or with runner set a key of every [[runners]] entry.
type notActedOn struct {
	key    string
	runner bool
	why    string
}

// notActedOnKeys lists the keys that warn whenever they hold a value (an
// empty string, or a table holding only empty tables, does not count:
// GitLab Runner's register writes such placeholders).
func notActedOnKeys() []notActedOn {
	return []notActedOn{
		{key: "session_server", why: "drover has no session server (interactive web terminal) yet"},
		{key: "sentry_dsn", why: "drover does not send its errors to Sentry; they are in its log and in the gitlab_runner_errors_total metric"},
		{key: "referees", runner: true, why: "drover has no metrics referee: it queries no Prometheus and uploads no metrics_referee artifact"},
	}
}

// flagWarning returns what to say about feature flag name set to value
// in runners[].feature_flags (inTable) or runners[].environment, "" for
// nothing: a flag drover does not honour at that value says what
// differs (package featureflags classifies GitLab Runner's flags); in
// the table, a name GitLab Runner does not have is a warning too.
func flagWarning(name, value string, inTable bool) string {
	f, known := featureflags.Lookup(name)
	if !known {
		if inTable {
			return "GitLab Runner 19.3 has no such feature flag: nothing reads it"
		}
		return ""
	}
	on, err := featureflags.Parse(value)
	if err != nil {
		return fmt.Sprintf("%q is not a boolean: the flag keeps its default (%t)", value, f.Default)
	}
	if why := f.NotHonoured(on); why != "" {
		return "not honoured: " + why
	}
	return ""
}

// sectionReaders returns the executors that read the executor-specific
// runner sub-table section ([runners.docker], ...), or nil when section is
// not executor-specific. A runner with another executor draws a warning
// for the table. [runners.machine] and [runners.autoscaler] are both read
// by every autoscaled executor (which one wins is internal/autoscale's
// business, and it warns about the loser).
func sectionReaders(section string) []string {
	switch section {
	case "docker":
		return []string{"docker", "docker+machine", "docker-autoscaler"}
	case "machine", "autoscaler", "instance":
		return []string{"docker+machine", "docker-autoscaler", "instance"}
	case "custom", "kubernetes", "parallels", "qemu", "virtualbox":
		return []string{section}
	case "ssh":
		return []string{"parallels", "qemu", "ssh", "virtualbox"}
	}
	return nil
}

// warnNotActedOn warns about the keys of notActedOnKeys in the table m at
// p: the top level (p empty, runner false) or a [[runners]] entry. set
// tells which keys had the right type (a wrong one is an error already).
func (d *decoder) warnNotActedOn(p keyPath, runner bool, m map[string]any, set map[string]bool) {
	for _, n := range notActedOnKeys() {
		if v, present := m[n.key]; n.runner == runner && present && set[n.key] && holdsValue(v) {
			d.warn(p.key(n.key), "not acted on: %s", n.why)
		}
	}
}

// warnRunnerNotActedOn warns about the keys of the runner at p (its
// table m, decoded into r) that drover does not act on: the keys of
// notActedOnKeys, sub-tables for other executors than r's and feature
// flags drover does not implement. set tells which keys had the right
// type.
func (d *decoder) warnRunnerNotActedOn(p keyPath, m map[string]any, r *RunnerConfig, set map[string]bool) {
	d.warnNotActedOn(p, true, m, set)
	for _, name := range SortedKeys(r.FeatureFlags) {
		if w := flagWarning(name, strconv.FormatBool(r.FeatureFlags[name]), true); w != "" {
			d.warn(p.key("feature_flags").key(name), "%s", w)
		}
	}
	for i, e := range r.Environment {
		if name, val, isVar := strings.Cut(e, "="); isVar {
			if w := flagWarning(name, val, false); w != "" {
				d.warn(p.key("environment").index(i), "%s: %s (the job still gets the variable)", name, w)
			}
		}
	}
	// With an executor this build lacks the runner is an error already.
	if !slices.Contains(Executors(), r.Executor) {
		return
	}
	for _, section := range SortedKeys(m) {
		readers := sectionReaders(section)
		if readers == nil || slices.Contains(readers, r.Executor) || !set[section] || !holdsValue(m[section]) {
			continue
		}
		d.warn(p.key(section), "ignored: executor %q does not use [runners.%s]; %s", r.Executor, section, readersNote(readers))
	}
}

// readersNote says which executors read a sub-table, and whether this
// build has them.
func readersNote(readers []string) string {
	var have []string
	for _, e := range readers {
		if slices.Contains(Executors(), e) {
			have = append(have, e)
		}
	}
	if len(have) == 0 {
		return "it is for " + andList(readers) + ", which this build of drover does not have"
	}
	if len(have) == 1 {
		return "only " + have[0] + " does"
	}
	return andList(have) + " do"
}

// andList joins names as "a", "a and b", "a, b and c".
func andList(names []string) string {
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
}

// holdsValue reports whether v sets anything: a non-empty string, a table
// with a key that holds a value, or any other value.
func holdsValue(v any) bool {
	switch t := v.(type) {
	case string:
		return t != ""
	case map[string]any:
		for _, e := range t {
			if holdsValue(e) {
				return true
			}
		}
		return false
	case []map[string]any:
		for _, e := range t {
			if holdsValue(e) {
				return true
			}
		}
		return false
	}
	return true
}
