package featureflags

import (
	"fmt"
	"sort"
	"strings"
)

// Source is where a flag's value came from.
type Source int

const (
	FromDefault     Source = iota // not set: the flag's Default
	FromConfig                    // the runner's [runners.feature_flags]
	FromEnvironment               // the runner's environment
	FromJob                       // the job's variables
)

// String names the source for messages.
func (s Source) String() string {
	switch s {
	case FromConfig:
		return "[runners.feature_flags]"
	case FromEnvironment:
		return "the runner's environment"
	case FromJob:
		return "the job's variables"
	}
	return "default"
}

// Value is a flag's value for one job.
type Value struct {
	Flag Flag
	On   bool
	From Source
}

// Set is the feature flags of one job.
type Set struct {
	values map[string]Value // the flags set somewhere, by name
}

// On reports whether flag name is on for the job: its value where it was
// set, else drover's default for it (false for a name GitLab Runner does
// not have).
func (s Set) On(name string) bool {
	if v, ok := s.values[name]; ok {
		return v.On
	}
	f, _ := Lookup(name)
	return f.Default
}

// Explicit returns the flags that were set (in the config, the runner's
// environment or the job's variables), sorted by name.
func (s Set) Explicit() []Value {
	out := make([]Value, 0, len(s.values))
	for _, v := range s.values {
		out = append(out, v)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Flag.Name < out[j].Flag.Name })
	return out
}

// Map returns the value of every flag that was set, by name: what
// executor.Settings.FeatureFlags carries to the executors.
func (s Set) Map() map[string]bool {
	m := make(map[string]bool, len(s.values))
	for name, v := range s.values {
		m[name] = v.On
	}
	return m
}

// Variable is one name and value of the runner's environment or of the
// job's variables, in their order (a later one wins).
type Variable struct{ Key, Value string }

// Resolve returns the flags of a job as GitLab Runner 19.3 resolves them:
// a flag in the runner's [runners.feature_flags] (config) has that value;
// else the last of the job's variables (job) of its name, else the last
// of the runner's environment ("NAME=value" entries); else its default.
// Names that are not GitLab Runner's flags are left out (they stay
// variables of the job). A value that does not parse as a boolean is
// reported in problems, in GitLab Runner's words, and the flag keeps its
// default.
func Resolve(config map[string]bool, environment []string, job []Variable) (s Set, problems []string) {
	s.values = map[string]Value{}
	var env []Variable
	for _, e := range environment {
		if k, v, ok := strings.Cut(e, "="); ok {
			env = append(env, Variable{k, v})
		}
	}
	last := func(vars []Variable, name string) (string, bool) {
		for i := len(vars) - 1; i >= 0; i-- {
			if vars[i].Key == name {
				return vars[i].Value, true
			}
		}
		return "", false
	}
	for _, f := range flags {
		if on, ok := config[f.Name]; ok {
			s.values[f.Name] = Value{Flag: f, On: on, From: FromConfig}
			continue
		}
		raw, from := "", FromDefault
		if v, ok := last(job, f.Name); ok {
			raw, from = v, FromJob
		} else if v, ok := last(env, f.Name); ok {
			raw, from = v, FromEnvironment
		}
		if from == FromDefault {
			continue
		}
		on, err := Parse(raw)
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: could not parse feature flag, expected bool, got %q (from %s); using %t", f.Name, raw, from, f.Default))
			continue
		}
		s.values[f.Name] = Value{Flag: f, On: on, From: from}
	}
	return s, problems
}
