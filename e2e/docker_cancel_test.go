package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/client"
)

// TestDockerCancelStopsStage cancels two running container jobs that
// print nothing more: one in `sleep`, one whose script traps SIGTERM and
// goes on. Both end `canceled` and leave no container behind; the one that
// traps SIGTERM shows it got it (the stage's processes are signalled,
// not only the container), and its after_script runs.
func TestDockerCancelStopsStage(t *testing.T) {
	needDockerImages(t)
	c, cl := startDockerManager(t, 2)

	cases := []struct {
		name   string
		spec   map[string]any
		marker string // printed once the stage runs
		has    []string
	}{
		{"silent sleep", map[string]any{"script": []string{"echo sleeping-now", "sleep 600"}}, "sleeping-now", nil},
		{"traps SIGTERM", map[string]any{
			"script":       []string{`trap 'echo trapped-term' TERM; echo looping-now; while :; do sleep 1; done`},
			"after_script": []string{"echo after-script-ran"}},
			"looping-now", []string{"trapped-term", "after-script-ran"}},
	}
	ids := make([]int64, len(cases))
	for i, tc := range cases {
		ids[i] = submitNamed(t, c, tc.name, 3600, tc.spec)
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			id := ids[i]
			waitJob(t, cl, id, 2*time.Minute, func(j *client.Job) bool {
				return j.Status == "running" && strings.Contains(trace(t, cl, id), tc.marker)
			})
			if _, err := cl.Cancel(context.Background(), id); err != nil {
				t.Fatalf("Cancel(%d): %v", id, err)
			}
			j := waitJob(t, cl, id, 2*time.Minute, finished)
			log := trace(t, cl, id)
			if j.Status != "canceled" {
				t.Errorf("status = %s %s, want canceled\nlog:\n%s", j.Status, j.FailureReason, log)
			}
			for _, s := range tc.has {
				if !strings.Contains(log, s) {
					t.Errorf("log lacks %q:\n%s", s, log)
				}
			}
			waitNoResources(t, id)
		})
	}
}
