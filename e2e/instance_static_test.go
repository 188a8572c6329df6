package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/client"
	"github.com/drover-ci/drover/internal/sshx/sshxtest"
)

// TestInstanceExecutorStatic runs jobs with the static provider on a real
// sshd on loopback (no Docker needed), then reloads config.toml with
// SIGHUP: a policy change keeps the pool, jobs keep running.
func TestInstanceExecutorStatic(t *testing.T) {
	srv := sshxtest.Start(t)
	dir := t.TempDir()
	keyPath := filepath.Join(dir, "id_ed25519")
	if err := os.WriteFile(keyPath, srv.Key, 0o600); err != nil {
		t.Fatal(err)
	}
	c := startCoordinator(t, filepath.Join(dir, "coord"))
	token := c.runnerToken(t)
	path := filepath.Join(dir, "config.toml")
	write := func(maxUse int) {
		body := fmt.Sprintf(`concurrent = 2
check_interval = 1
shutdown_timeout = 10

[[runners]]
  name = "e2e-static"
  url = %q
  token = %q
  executor = "instance"
  shell = "bash"
  builds_dir = %q
  [runners.autoscaler]
    plugin = "static"
    capacity_per_instance = 2
    max_use_count = %d
    update_interval = "1s"
    update_interval_when_expecting = "200ms"
    [runners.autoscaler.plugin_config]
      hosts = [%q]
    [runners.autoscaler.connector_config]
      username = %q
      key_path = %q
    [[runners.autoscaler.policy]]
      idle_count = 1
      idle_time = "1m"
`, c.url, token, filepath.Join(dir, "builds"), maxUse, srv.Addr, srv.User, keyPath)
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(0)
	m := start(t, dir, "run", "--config", path)
	m.waitLog("autoscaler pool started", 10*time.Second)
	cl := c.client()
	submit := func(name string) int64 {
		j, err := cl.Submit(context.Background(), client.JobSpec{
			Name:      name,
			Script:    []string{"echo ssh=${SSH_CONNECTION%% *}", "echo job-$CI_JOB_ID > out.txt", "cat out.txt"},
			Variables: []client.Variable{{Key: "GIT_STRATEGY", Value: "none"}},
		})
		if err != nil {
			t.Fatal(err)
		}
		return j.ID
	}
	check := func(id int64) {
		t.Helper()
		j := waitJob(t, cl, id, 30*time.Second, finished)
		log := trace(t, cl, id)
		if j.Status != "success" {
			t.Fatalf("job %d = %s (%s):\n%s", id, j.Status, j.FailureReason, log)
		}
		for _, want := range []string{"ssh=127.0.0.1", fmt.Sprintf("job-%d", id), "Acquired slot"} {
			if !strings.Contains(log, want) {
				t.Errorf("job %d log lacks %q:\n%s", id, want, log)
			}
		}
	}
	// The static host is this machine: the jobs' files are in builds_dir,
	// under <short token>/<instance slot>/<project path>.
	written := func() []string {
		files, _ := filepath.Glob(filepath.Join(dir, "builds", "*", "*", "*", "*", "out.txt"))
		return files
	}
	a, b := submit("one"), submit("two")
	check(a)
	check(b)
	if files := written(); len(files) == 0 {
		t.Errorf("no out.txt under %s/builds", dir)
	}

	write(5) // a policy change only: the pool stays
	m.signal(syscall.SIGHUP)
	m.waitLog("configuration reloaded", 10*time.Second)
	if strings.Contains(m.log.String(), "replacing its pool") {
		t.Error("a policy change replaced the pool")
	}
	check(submit("three"))

	m.signal(syscall.SIGTERM)
	if code := m.wait(20 * time.Second); code != 0 {
		t.Errorf("exit code %d after SIGTERM", code)
	}
}

// TestRegisterInstanceExecutor: `drover register --executor instance` is
// accepted and says what is still missing; `drover run` then refuses the
// runner until it has a [runners.autoscaler] table, naming file and line.
func TestRegisterInstanceExecutor(t *testing.T) {
	dir := t.TempDir()
	c := startCoordinator(t, filepath.Join(dir, "coord"))
	cfg := filepath.Join(dir, "config.toml")
	out, code := runCLI(t, dir, nil, "register", "--config", cfg, "--url", c.url, "--token", c.runnerToken(t), "--executor", "instance", "--name", "inst")
	if code != 0 {
		t.Fatalf("register = exit %d:\n%s", code, out)
	}
	if !strings.Contains(out, `needs a [runners.autoscaler] table`) {
		t.Errorf("register output lacks the hint:\n%s", out)
	}
	b, err := os.ReadFile(cfg)
	if err != nil || !strings.Contains(string(b), `executor = "instance"`) {
		t.Fatalf("config.toml (%v):\n%s", err, b)
	}
	out, code = runCLI(t, dir, nil, "run", "--config", cfg)
	if code != 2 || !strings.Contains(out, cfg+":") || !strings.Contains(out, `.executor: executor "instance" needs a [runners.autoscaler] table`) {
		t.Errorf("run = exit %d, want 2 naming the executor line:\n%s", code, out)
	}
}
