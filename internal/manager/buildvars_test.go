package manager

import (
	"slices"
	"strings"
	"testing"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/config"
	"github.com/drover-ci/drover/internal/executor/shell"
)

// TestDebugTraceUploads: a job with CI_DEBUG_TRACE has its commands
// traced and its log uploaded as a debug trace (PATCH
// ?debug_trace=true), as GitLab Runner's; a runner with
// debug_trace_disabled does neither and says so in the log.
func TestDebugTraceUploads(t *testing.T) {
	for _, tc := range []struct {
		name     string
		value    string
		disabled bool
		debug    string
	}{
		{"on", "true", false, "true"},
		{"off", "", false, "false"},
		{"disabled on the runner", "true", true, "false"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeCoordinator(t)
			j := testJob(41, []string{"echo traced-line"}, nil)
			if tc.value != "" {
				j.Variables = append(j.Variables, api.Variable{Key: "CI_DEBUG_TRACE", Value: tc.value})
			}
			f.addJob(j)
			startManagerWith(t, f.srv.URL, shell.NewProvider(), func(c *config.Config) {
				c.Runners[0].DebugTraceDisabled = tc.disabled
			})
			if u := waitFinal(t, f); u.State != api.StateSuccess {
				t.Fatalf("final update = %+v, want success", u)
			}
			tr := f.traceOf(41)
			if traced := strings.Contains(tr, "+ echo traced-line\n"); traced != (tc.debug == "true") {
				t.Errorf("commands traced: %v, want %v:\n%s", traced, tc.debug == "true", tr)
			}
			if warned := strings.Contains(tr, "CI_DEBUG_TRACE: usage is disabled on this Runner"); warned != tc.disabled {
				t.Errorf("disabled warning: %v, want %v", warned, tc.disabled)
			}
			f.mu.Lock()
			defer f.mu.Unlock()
			if len(f.debugTraces) == 0 || slices.ContainsFunc(f.debugTraces, func(s string) bool { return s != tc.debug }) {
				t.Errorf("debug_trace of the PATCHes = %v, want all %s", f.debugTraces, tc.debug)
			}
		})
	}
}

// TestGetSourcesTimeoutFromConfig: get_sources_timeout of config.toml
// bounds get_sources: a job whose get_sources outlasts it fails with
// job_execution_timeout, saying so.
func TestGetSourcesTimeoutFromConfig(t *testing.T) {
	f := newFakeCoordinator(t)
	j := testJob(42, []string{"echo script-ran"}, []string{"echo after-ran"})
	j.Variables = slices.DeleteFunc(j.Variables, func(v api.Variable) bool { return v.Key == "GIT_STRATEGY" })
	j.GitInfo = api.GitInfo{RepoURL: "file:///nonexistent/repo.git", Ref: "main", Sha: strings.Repeat("a", 40), RefType: "branch"}
	f.addJob(j)
	cfg, _, err := config.Parse("config.toml", []byte(`
[[runners]]
  name = "t"
  url = "`+f.srv.URL+`"
  token = "glrt-testtoken123"
  executor = "shell"
  pre_get_sources_script = "sleep 600"
  get_sources_timeout = "1s"
`))
	if err != nil {
		t.Fatal(err)
	}
	startManagerWith(t, f.srv.URL, shell.NewProvider(), func(c *config.Config) {
		r := cfg.Runners[0]
		r.BuildsDir = c.Runners[0].BuildsDir
		c.Runners[0] = r
	})
	u := waitFinal(t, f)
	if u.State != api.StateFailed || u.FailureReason != api.JobExecutionTimeout {
		t.Errorf("final update = %+v, want failed with job_execution_timeout", u)
	}
	tr := f.traceOf(42)
	if !strings.Contains(tr, "ERROR: Job failed: get sources timeout: exceeded timeout of 1s") || strings.Contains(tr, "script-ran") || strings.Contains(tr, "after-ran") {
		t.Errorf("trace:\n%s", tr)
	}
}
