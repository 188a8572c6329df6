package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"
)

// TestManagerKilledAtAccept: a manager with a job store is killed with
// SIGKILL right before a two-phase job's accept, or right after it landed
// (DROVER_TEST_KILL_AT, fault injection for tests), and restarted on the
// same store. The job's record was saved before the accept, so the next
// manager resumes it, accepting it again: the job succeeds with every
// line of its log exactly once, and no process of it is left behind.
// Before the record was saved first, a kill after the accept left a job
// the coordinator ran and no runner had.
func TestManagerKilledAtAccept(t *testing.T) {
	for _, at := range []string{"before-accept", "after-accept"} {
		t.Run(at, func(t *testing.T) {
			dir := t.TempDir()
			c := startCoordinator(t, filepath.Join(dir, "coord"), "--ack-timeout", "60s")
			cl := c.client()
			cfg := writeConfig(t, dir, c.url, c.runnerToken(t), 1, fileStore(filepath.Join(dir, "store")))
			marker := fmt.Sprintf("killed-at-accept-%d", time.Now().UnixNano())
			const lines = 20
			j, err := cl.Submit(context.Background(), numberedJob("job00", marker, lines, "0.05"))
			if err != nil {
				t.Fatal(err)
			}

			t.Setenv("DROVER_TEST_KILL_AT", at)
			m := start(t, dir, "run", "--config", cfg)
			m.wait(time.Minute) // it kills itself at the job's accept
			if !contains(m.log.String(), "DROVER_TEST_KILL_AT: killing the manager") {
				t.Fatalf("the manager ended without reaching %s:\n%s", at, m.log.String())
			}

			t.Setenv("DROVER_TEST_KILL_AT", "")
			next := start(t, dir, "run", "--config", cfg)
			next.waitLog("runner manager started", 20*time.Second)
			checkChaosJobs(t, cl, []int64{j.ID}, lines, 90*time.Second)
			if !contains(next.log.String(), "resuming job") {
				t.Errorf("the next manager did not resume the job from its record:\n%s", next.log.String())
			}
			if ps := waitNoLeftovers(marker, 10*time.Second); len(ps) > 0 {
				t.Errorf("job processes left behind: %v", ps)
			}
		})
	}
}
