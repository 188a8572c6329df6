package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/client"
)

// TestCoordinatorOutagePastRetryBudget: jobs finish while the coordinator
// is down (SIGKILL), for longer than the manager's final-update retry
// budget (one round here). With a file store, the manager keeps each
// job's final state and unsent log tail and delivers them when the
// coordinator is back: every job ends as it really ended (success, or
// failed with its exit code) with its complete log, each line once.
func TestCoordinatorOutagePastRetryBudget(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "coord")
	addr := freeAddr(t)
	c := startCoordinator(t, data, "--listen", addr)
	cl := c.client()
	gate := filepath.Join(dir, "gate")
	cfg := writeConfig(t, dir, c.url, c.runnerToken(t), 4,
		"  job_status_final_update_retry_limit = 1\n"+fileStore(filepath.Join(dir, "store")))
	m := start(t, dir, "run", "--config", cfg)
	m.waitLog("runner manager started", 30*time.Second)

	// Each job prints its first half, waits for the gate (opened while
	// the coordinator is down), prints the second half and exits.
	const lines = 40
	type want struct {
		id     int64
		name   string
		status string
		code   int
	}
	var jobs []want
	for i, code := range []int{0, 0, 3, 0} {
		name := fmt.Sprintf("outage%d", i)
		script := fmt.Sprintf(`for i in $(seq 1 %d); do echo "%s line $i"; done; while [ ! -e %q ]; do sleep 0.05; done; for i in $(seq %d %d); do echo "%s line $i"; done; exit %d`,
			lines/2, name, gate, lines/2+1, lines, name, code)
		j, err := cl.Submit(t.Context(), client.JobSpec{Name: name, Script: []string{script}})
		if err != nil {
			t.Fatal(err)
		}
		status := "success"
		if code != 0 {
			status = "failed"
		}
		jobs = append(jobs, want{j.ID, name, status, code})
	}
	for _, j := range jobs {
		waitJob(t, cl, j.id, 60*time.Second, func(g *client.Job) bool {
			return g.Status == "running" && strings.Contains(trace(t, cl, j.id), j.name+" line 1\n")
		})
	}

	c.signal(syscall.SIGKILL)
	c.wait(10 * time.Second)
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	// Past the budget: every job's final update was given to the store.
	for strings.Count(m.log.String(), "final update not delivered within the retry budget") < len(jobs) {
		select {
		case <-m.done:
			t.Fatalf("manager exited during the outage:\n%s", m.log.String())
		case <-time.After(50 * time.Millisecond):
		}
	}

	c2 := startCoordinator(t, data, "--listen", addr)
	cl2 := c2.client()
	for _, j := range jobs {
		got := waitJob(t, cl2, j.id, 3*time.Minute, finished)
		if got.Status != j.status {
			t.Errorf("job %d (%s) = %s %s, want %s", j.id, j.name, got.Status, got.FailureReason, j.status)
		}
		if j.code != 0 && (got.ExitCode == nil || *got.ExitCode != j.code) {
			t.Errorf("job %d (%s) exit code = %v, want %d", j.id, j.name, got.ExitCode, j.code)
		}
		checkLines(t, trace(t, cl2, j.id), j.name, lines)
	}
	t.Logf("manager on final updates:\n%s", grepLog(m.log.String(), "final update"))
	if strings.Contains(m.log.String(), "given up") {
		t.Errorf("manager gave a final update up:\n%s", m.log.String())
	}
}
