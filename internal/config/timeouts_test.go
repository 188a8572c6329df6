package config

import (
	"testing"
	"time"
)

// TestPhaseTimeouts: prepare_timeout and get_sources_timeout are read as
// durations; one not more than zero is a warning with its line (GitLab
// Runner ignores it: the job timeout applies), a wrong type an error.
func TestPhaseTimeouts(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name                string
		lines               []string
		prepare, getSources time.Duration
		warnings            []string
		err                 string
	}{
		{name: "unset"},
		{name: "set", lines: []string{`  prepare_timeout = "90s"`, `  get_sources_timeout = "10m"`},
			prepare: 90 * time.Second, getSources: 10 * time.Minute},
		{name: "zero and negative", lines: []string{`  prepare_timeout = "0s"`, `  get_sources_timeout = "-1m"`},
			warnings: []string{
				"config.toml:5: runners[0].prepare_timeout: must be more than 0; the job timeout applies",
				"config.toml:6: runners[0].get_sources_timeout: must be more than 0; the job timeout applies",
			}},
		{name: "not a duration", lines: []string{`  get_sources_timeout = "soon"`},
			err: `config.toml:5: runners[0].get_sources_timeout: "soon" is not a duration...`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, warnings, err := Parse("config.toml", []byte(runnerOf("shell", tc.lines...)))
			if tc.err != "" {
				if err == nil {
					t.Fatalf("Parse() = nil error, want %q", tc.err)
				}
				checkMessages(t, "error", []string{err.Error()}, []string{tc.err})
				return
			}
			if err != nil {
				t.Fatalf("Parse() = %v", err)
			}
			checkMessages(t, "warnings", warningStrings(warnings, ""), tc.warnings)
			r := &c.Runners[0]
			if r.PrepareTimeout() != tc.prepare || r.GetSourcesTimeout() != tc.getSources {
				t.Errorf("PrepareTimeout(), GetSourcesTimeout() = %v, %v; want %v, %v", r.PrepareTimeout(), r.GetSourcesTimeout(), tc.prepare, tc.getSources)
			}
		})
	}
}
