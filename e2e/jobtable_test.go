package e2e

import (
	"context"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/client"
)

// jobWant is what a finished job must show: its status and failure reason,
// its exit code (0: not checked), and what its log must and must not
// contain.
type jobWant struct {
	status, reason string
	exit           int
	has, hasNot    []string
}

// jobCase is a job written as drover's API takes it, and what it must
// show once finished.
type jobCase struct {
	name string
	spec map[string]any
	want jobWant
}

// runJobCases submits every case at once (named after the case, with a job
// timeout of timeout seconds unless its spec sets one), then checks each in
// a subtest once it has finished; left checks that the job left nothing
// behind.
func runJobCases(t *testing.T, c *coordinator, timeout int, cases []jobCase, left func(testing.TB, int64)) {
	t.Helper()
	cl := c.client()
	ids := make([]int64, len(cases))
	for i, tc := range cases {
		ids[i] = submitNamed(t, c, tc.name, timeout, tc.spec)
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			j := waitJob(t, cl, ids[i], 3*time.Minute, finished)
			log := trace(t, cl, ids[i])
			if j.Status != tc.want.status || j.FailureReason != tc.want.reason {
				t.Errorf("status = %s %q, want %s %q\nlog:\n%s", j.Status, j.FailureReason, tc.want.status, tc.want.reason, log)
			}
			if tc.want.exit != 0 && (j.ExitCode == nil || *j.ExitCode != tc.want.exit) {
				t.Errorf("exit code = %v, want %d", j.ExitCode, tc.want.exit)
			}
			for _, s := range tc.want.has {
				if !strings.Contains(log, s) {
					t.Errorf("log lacks %q:\n%s", s, log)
				}
			}
			for _, s := range tc.want.hasNot {
				if strings.Contains(log, s) {
					t.Errorf("log has %q:\n%s", s, log)
				}
			}
			left(t, ids[i])
		})
	}
}

// submitNamed submits spec (as submitJSON) named name, with a job timeout
// of timeout seconds unless spec sets one.
func submitNamed(t testing.TB, c *coordinator, name string, timeout int, spec map[string]any) int64 {
	t.Helper()
	full := map[string]any{"name": name, "timeout": timeout}
	maps.Copy(full, spec)
	return submitJSON(t, c, full)
}

// testCancelAndTimeout runs, as a subtest, a job canceled while it runs
// (its after_script must still run) and one that times out after timeout
// seconds; started is how long the first may take to start. left checks
// that each job left nothing behind.
func testCancelAndTimeout(t *testing.T, c *coordinator, timeout int, started time.Duration, left func(testing.TB, int64)) {
	t.Helper()
	cl := c.client()
	t.Run("cancel and timeout leave nothing", func(t *testing.T) {
		cancelID := submitJSON(t, c, map[string]any{"name": "to cancel", "script": []string{"echo started-sleeping", "sleep 300"},
			"after_script": []string{"echo after-script-ran"}})
		timeoutID := submitJSON(t, c, map[string]any{"name": "to time out", "timeout": timeout, "script": []string{"sleep 300"}})
		waitJob(t, cl, cancelID, started, func(j *client.Job) bool {
			return j.Status == "running" && strings.Contains(trace(t, cl, cancelID), "started-sleeping")
		})
		if _, err := cl.Cancel(context.Background(), cancelID); err != nil {
			t.Fatalf("Cancel: %v", err)
		}
		for _, id := range []int64{cancelID, timeoutID} {
			j := waitJob(t, cl, id, 2*time.Minute, finished)
			log := trace(t, cl, id)
			switch id {
			case cancelID:
				if j.Status != "canceled" && j.Status != "failed" {
					t.Errorf("canceled job = %s %s", j.Status, j.FailureReason)
				}
				if !strings.Contains(log, "after-script-ran") {
					t.Errorf("after_script did not run after the cancel:\n%s", log)
				}
			case timeoutID:
				if j.FailureReason != "job_execution_timeout" {
					t.Errorf("timed-out job = %s %s\n%s", j.Status, j.FailureReason, log)
				}
			}
			left(t, id)
		}
	})
}
