package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/client"
)

// startSlowManager starts `drover run` whose jobs spend delay provisioning
// (DROVER_TEST_PREPARE_DELAY, fault injection for tests).
func startSlowManager(t testing.TB, dir, url, token string, delay string) *proc {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := writeConfig(t, dir, url, token, 1, "")
	// Each manager gets a system id of its own, as on separate machines.
	if err := os.WriteFile(filepath.Join(dir, ".runner_system_id"), []byte("s_"+filepath.Base(dir)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	os.Setenv("DROVER_TEST_PREPARE_DELAY", delay)
	defer os.Unsetenv("DROVER_TEST_PREPARE_DELAY")
	m := start(t, dir, "run", "--config", cfg)
	m.waitLog("runner manager started", 10*time.Second)
	return m
}

// TestManagerKilledWhileProvisioning: a manager takes a job and is killed
// with SIGKILL before it accepts; the job is back in the queue within
// ack_timeout and succeeds on another manager.
func TestManagerKilledWhileProvisioning(t *testing.T) {
	dir := t.TempDir()
	const ack = 3 * time.Second
	c := startCoordinator(t, filepath.Join(dir, "coord"), "--ack-timeout", ack.String())
	cl := c.client()
	slow := startSlowManager(t, filepath.Join(dir, "slow"), c.url, c.runnerToken(t), "1h")

	j := submit(t, cl, client.JobSpec{Name: "survivor", Script: []string{"echo ran-on-the-second-manager"}})
	waitJob(t, cl, j.ID, 20*time.Second, func(j *client.Job) bool { return j.Status == "waiting_for_runner_ack" })
	slow.signal(syscall.SIGKILL)
	killed := time.Now()
	slow.wait(10 * time.Second)

	back := waitJob(t, cl, j.ID, 2*ack+5*time.Second, func(j *client.Job) bool { return j.Status == "pending" })
	if since := time.Since(killed); since > ack+ack/5+time.Second {
		t.Errorf("job back in the queue %v after the kill, want within ack_timeout (%v) plus the reaper's step", since, ack)
	}
	if back.RunnerID != nil && *back.RunnerID != 0 {
		t.Logf("runner id after return: %d", *back.RunnerID)
	}
	startSlowManager(t, filepath.Join(dir, "fast"), c.url, c.runnerToken(t), "0s")
	got := waitJob(t, cl, j.ID, 30*time.Second, finished)
	if got.Status != "success" {
		t.Fatalf("job = %s/%s, want success on the second manager", got.Status, got.FailureReason)
	}
	if tr := trace(t, cl, j.ID); !contains(tr, "ran-on-the-second-manager") {
		t.Errorf("log:\n%s", tr)
	}
}

// TestKeepAliveHoldsSlowProvisioning: a provisioning that takes several
// ack timeouts is kept alive and the job runs on that manager.
func TestKeepAliveHoldsSlowProvisioning(t *testing.T) {
	dir := t.TempDir()
	c := startCoordinator(t, filepath.Join(dir, "coord"), "--ack-timeout", "2s")
	cl := c.client()
	startSlowManager(t, filepath.Join(dir, "slow"), c.url, c.runnerToken(t), "7s")
	j := submit(t, cl, client.JobSpec{Name: "slow-provisioning", Script: []string{"echo provisioned"}})
	got := waitJob(t, cl, j.ID, 40*time.Second, finished)
	if got.Status != "success" {
		t.Fatalf("job = %s/%s, want success", got.Status, got.FailureReason)
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

// BenchmarkRequeueAfterRunnerDeath: ack_timeout = 5 s; a manager takes a
// job and dies (SIGKILL) before accepting; the figure is the time from the
// kill until the job is handed to the other, already polling, manager.
func BenchmarkRequeueAfterRunnerDeath(b *testing.B) {
	for range b.N {
		b.StopTimer()
		dir := b.TempDir()
		c := startCoordinator(b, filepath.Join(dir, "coord"), "--ack-timeout", "5s")
		cl := c.client()
		slow := startSlowManager(b, filepath.Join(dir, "slow"), c.url, c.runnerToken(b), "1h")
		j, err := cl.Submit(context.Background(), client.JobSpec{Name: "requeue", Script: []string{"true"}})
		if err != nil {
			b.Fatal(err)
		}
		waitJob(b, cl, j.ID, 20*time.Second, func(j *client.Job) bool { return j.Status == "waiting_for_runner_ack" })
		startSlowManager(b, filepath.Join(dir, "other"), c.url, c.runnerToken(b), "0s")
		b.StartTimer()
		slow.signal(syscall.SIGKILL)
		killed := time.Now()
		waitJob(b, cl, j.ID, 30*time.Second, func(j *client.Job) bool {
			return j.RunnerSystemID == "s_other" && j.Status != "pending"
		})
		el := time.Since(killed)
		b.StopTimer()
		b.ReportMetric(el.Seconds(), "s-to-rehandout")
		waitJob(b, cl, j.ID, 30*time.Second, finished)
	}
}
