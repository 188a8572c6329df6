package config

import (
	"slices"
	"strconv"
	"strings"
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
		{key: "clone_url", runner: true, why: "drover does not rewrite the clone URL yet; jobs fetch from the repository URL GitLab sends"},
	}
}

// actedOnFeatureFlags are the GitLab Runner feature flags whose behaviour
// drover has whatever they say: a network per job (the docker executor
// makes one for every job, or per concurrency slot when the job has no
// services), and a fast archiver (drover's own, parallel, is used for
// every cache and artifact). Any other flag set to true in
// runners[].feature_flags or runners[].environment draws a warning; one
// set to GitLab Runner's default (false, but for the flags of
// defaultOnFeatureFlags) asks for nothing and draws none.
func actedOnFeatureFlags() []string { return []string{"FF_NETWORK_PER_BUILD", "FF_USE_FASTZIP"} }

// defaultOnFeatureFlags are GitLab Runner's feature flags that are on
// unless set to false.
func defaultOnFeatureFlags() []string { return []string{"FF_USE_ADAPTIVE_REQUEST_CONCURRENCY"} }

// askedFlag reports whether feature flag name set to value asks for
// something else than GitLab Runner's default (a value that is no bool
// does).
func askedFlag(name, value string) bool {
	on, err := strconv.ParseBool(value)
	return err != nil || on != slices.Contains(defaultOnFeatureFlags(), name)
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
		if askedFlag(name, strconv.FormatBool(r.FeatureFlags[name])) && !slices.Contains(actedOnFeatureFlags(), name) {
			d.warn(p.key("feature_flags").key(name), "not acted on: drover does not implement this feature flag")
		}
	}
	for i, e := range r.Environment {
		name, val, isVar := strings.Cut(e, "=")
		if isVar && strings.HasPrefix(name, "FF_") && askedFlag(name, val) && !slices.Contains(actedOnFeatureFlags(), name) {
			d.warn(p.key("environment").index(i), "%s: not acted on: drover does not implement this feature flag (the job still gets the variable)", name)
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
