package config

import "time"

// Keys of [[runners]] that bound phases of a job, kept in Extra as they
// are written.
const (
	keyPrepareTimeout    = "prepare_timeout"
	keyGetSourcesTimeout = "get_sources_timeout"
)

// PrepareTimeout returns the runner's prepare_timeout: how long the
// executor's preparation and prepare_script may take together. Zero when
// unset or not more than zero (Parse warned): the job timeout applies.
func (r *RunnerConfig) PrepareTimeout() time.Duration { return r.extraDuration(keyPrepareTimeout) }

// GetSourcesTimeout returns the runner's get_sources_timeout: how long
// get_sources may take, its attempts included. Zero when unset or not
// more than zero (Parse warned): the job timeout applies.
func (r *RunnerConfig) GetSourcesTimeout() time.Duration {
	return r.extraDuration(keyGetSourcesTimeout)
}

// extraDuration reads a duration Parse checked in Extra: a string such as
// "10m", or an integer of nanoseconds.
func (r *RunnerConfig) extraDuration(key string) time.Duration {
	return max(durationOf(r.Extra[key]), 0)
}

// durationOf is the duration of a value checked as a duration.
func durationOf(v any) time.Duration {
	switch t := v.(type) {
	case string:
		d, _ := time.ParseDuration(t)
		return d
	case int64:
		return time.Duration(t)
	}
	return 0
}

// checkPhaseTimeout warns about a phase timeout (prepare_timeout,
// get_sources_timeout) v at p, checked as a duration already, that
// GitLab Runner ignores: one not more than zero.
func (d *decoder) checkPhaseTimeout(p keyPath, key string, v any) {
	if (key == keyPrepareTimeout || key == keyGetSourcesTimeout) && durationOf(v) <= 0 {
		d.warn(p, "must be more than 0; the job timeout applies")
	}
}
