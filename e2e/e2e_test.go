package e2e

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/client"
)

// TestRegisterRunSubmit goes through the whole public surface: a
// coordinator process, `drover register` with a glrt- token, `drover run`,
// and `drover submit --wait` for a job that clones a real repository, one
// with a masked and a file variable, and one that fails.
func TestRegisterRunSubmit(t *testing.T) {
	dir := t.TempDir()
	c := startCoordinator(t, filepath.Join(dir, "coord"))
	token := c.runnerToken(t)
	cfg := filepath.Join(dir, "config.toml")

	out, code := runCLI(t, dir, nil, "register", "--config", cfg, "--url", c.url, "--token", token, "--executor", "shell", "--name", "e2e", "--builds-dir", filepath.Join(dir, "builds"))
	if code != 0 {
		t.Fatalf("register = exit %d:\n%s", code, out)
	}
	if _, err := os.Stat(filepath.Join(dir, ".runner_system_id")); err != nil {
		t.Errorf("register wrote no .runner_system_id: %v", err)
	}
	m := start(t, dir, "run", "--config", cfg)
	m.waitLog("runner manager started", 10*time.Second)

	repo, shas := gitRepo(t)
	common := []string{"--url", c.url, "--token", c.token}

	t.Run("git", func(t *testing.T) {
		args := append([]string{"submit", "--name", "git", "--wait",
			"--git-url", "file://" + repo, "--git-ref", "main", "--git-sha", shas[1], "--git-depth", "1",
			"--script", "cat file.txt", "--script", "git log -1 --format=%s", "--script", "echo depth=$(git rev-list --count HEAD)"}, common...)
		out, code := runCLI(t, dir, nil, args...)
		if code != 0 {
			t.Fatalf("submit --wait = exit %d:\n%s", code, out)
		}
		for _, want := range []string{"version 2", "second commit", "depth=1", "Job succeeded"} {
			if !strings.Contains(out, want) {
				t.Errorf("log lacks %q:\n%s", want, out)
			}
		}
		// Not a terminal: no section markers, no colours.
		if strings.Contains(out, "section_start:") || strings.Contains(out, "\x1b[") {
			t.Errorf("submit --wait into a pipe kept terminal escapes:\n%q", out)
		}
		// No --git-sha (the README's example): submit resolves the ref, the
		// job checks out its tip and CI_COMMIT_SHA is the real commit.
		args = append([]string{"submit", "--name", "git-ref", "--wait",
			"--git-url", "file://" + repo, "--git-ref", "main",
			"--script", "cat file.txt", "--script", "echo sha=$CI_COMMIT_SHA"}, common...)
		out, code = runCLI(t, dir, nil, args...)
		if code != 0 || !strings.Contains(out, "version 2") || !strings.Contains(out, "sha="+shas[1]) {
			t.Errorf("submit with --git-ref only = exit %d (want the tip, sha=%s):\n%s", code, shas[1], out)
		}
		// A full clone can check out an older commit.
		args = append([]string{"submit", "--name", "git-old", "--wait",
			"--git-url", "file://" + repo, "--git-ref", "main", "--git-sha", shas[0],
			"--script", "cat file.txt", "--script", "echo depth=$(git rev-list --count HEAD)"}, common...)
		out, code = runCLI(t, dir, nil, args...)
		if code != 0 || !strings.Contains(out, "version 1") || !strings.Contains(out, "depth=1") {
			t.Errorf("full clone at the first commit = exit %d:\n%s", code, out)
		}
	})

	t.Run("variables", func(t *testing.T) {
		secret := "hunter2-very-secret"
		args := append([]string{"submit", "--name", "vars", "--wait",
			"--masked-var", "SECRET=" + secret, "--file-var", "CONF=line1", "--var", "PLAIN=plain-value",
			"--script", "echo secret:$SECRET", "--script", "echo conf:$(cat $CONF)", "--script", "echo plain:$PLAIN"}, common...)
		out, code := runCLI(t, dir, nil, args...)
		if code != 0 {
			t.Fatalf("submit --wait = exit %d:\n%s", code, out)
		}
		if strings.Contains(out, secret) {
			t.Errorf("masked value leaked into the log:\n%s", out)
		}
		for _, want := range []string{"secret:[MASKED]", "conf:line1", "plain:plain-value"} {
			if !strings.Contains(out, want) {
				t.Errorf("log lacks %q:\n%s", want, out)
			}
		}
	})

	t.Run("failure", func(t *testing.T) {
		args := append([]string{"submit", "--name", "fail", "--wait", "--script", "echo before", "--script", "exit 7", "--after-script", "echo after:$CI_JOB_STATUS"}, common...)
		out, code := runCLI(t, dir, nil, args...)
		if code != 1 {
			t.Fatalf("submit --wait of a failing job = exit %d, want 1:\n%s", code, out)
		}
		if !strings.Contains(out, "after:failed") {
			t.Errorf("after_script did not run or saw the wrong status:\n%s", out)
		}
		jobs, err := c.client().Jobs(context.Background(), "failed", 10)
		if err != nil || len(jobs) != 1 {
			t.Fatalf("Jobs(failed) = %v, %v; want one job", jobs, err)
		}
		j := jobs[0]
		if j.FailureReason != "script_failure" || j.ExitCode == nil || *j.ExitCode != 7 {
			t.Errorf("failed job = reason %q exit %v, want script_failure 7", j.FailureReason, j.ExitCode)
		}
	})

	t.Run("jobs and logs commands", func(t *testing.T) {
		out, code := runCLI(t, dir, nil, append([]string{"jobs"}, common...)...)
		if code != 0 || !strings.Contains(out, "success") || !strings.Contains(out, "failed") {
			t.Errorf("jobs = exit %d:\n%s", code, out)
		}
		out, code = runCLI(t, dir, nil, append([]string{"logs", "1"}, common...)...)
		if code != 0 || !strings.Contains(out, "second commit") {
			t.Errorf("logs 1 = exit %d:\n%s", code, out)
		}
		_, code = runCLI(t, dir, nil, append([]string{"logs", "999"}, common...)...)
		if code == 0 {
			t.Errorf("logs of an unknown job exited 0")
		}
	})
}

// TestCancelRunsAfterScriptAndKillsProcesses cancels a running job: its
// after_script runs, its processes are gone and it ends canceled.
func TestCancelRunsAfterScriptAndKillsProcesses(t *testing.T) {
	dir := t.TempDir()
	c := startCoordinator(t, filepath.Join(dir, "coord"))
	cfg := writeConfig(t, dir, c.url, c.runnerToken(t), 2, "")
	m := start(t, dir, "run", "--config", cfg)
	m.waitLog("runner manager started", 10*time.Second)

	pidFile := filepath.Join(dir, "pid")
	marker := filepath.Join(dir, "after")
	j, err := c.client().Submit(context.Background(), client.JobSpec{
		Name:        "long",
		Script:      []string{"sleep 300 & echo $! > " + pidFile, "echo started", "wait"},
		AfterScript: []string{"echo after-ran > " + marker},
	})
	if err != nil {
		t.Fatal(err)
	}
	waitJob(t, c.client(), j.ID, 20*time.Second, func(j *client.Job) bool { return j.Status == "running" })
	var pid int
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if b, err := os.ReadFile(pidFile); err == nil && len(b) > 1 {
			pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
			break
		}
	}
	if pid == 0 || !pidAlive(pid) {
		t.Fatalf("job's background process not running (pid %d)", pid)
	}
	out, code := runCLI(t, dir, nil, "cancel", strconv.FormatInt(j.ID, 10), "--url", c.url, "--token", c.token)
	if code != 0 {
		t.Fatalf("cancel = exit %d: %s", code, out)
	}
	got := waitJob(t, c.client(), j.ID, 30*time.Second, finished)
	if got.Status != "canceled" {
		t.Errorf("status = %q, want canceled", got.Status)
	}
	if b, err := os.ReadFile(marker); err != nil || !strings.Contains(string(b), "after-ran") {
		t.Errorf("after_script did not run on cancel: %v", err)
	}
	for deadline := time.Now().Add(15 * time.Second); pidAlive(pid) && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
	}
	if pidAlive(pid) {
		t.Errorf("process %d of the canceled job is still alive", pid)
	}
}

// TestSignals checks SIGQUIT (drain: running job finishes, no new job is
// taken) and SIGTERM (abort: job fails with runner_interrupted).
func TestSignals(t *testing.T) {
	t.Run("SIGQUIT drains", func(t *testing.T) {
		dir := t.TempDir()
		c := startCoordinator(t, filepath.Join(dir, "coord"))
		cfg := writeConfig(t, dir, c.url, c.runnerToken(t), 2, "")
		m := start(t, dir, "run", "--config", cfg)
		m.waitLog("runner manager started", 10*time.Second)
		cl := c.client()
		j := submit(t, cl, client.JobSpec{Name: "slow", Script: []string{"sleep 2", "echo done"}})
		waitJob(t, cl, j.ID, 20*time.Second, func(j *client.Job) bool { return j.Status == "running" })
		m.signal(syscall.SIGQUIT)
		time.Sleep(200 * time.Millisecond)
		late := submit(t, cl, client.JobSpec{Name: "late", Script: []string{"true"}})
		if code := m.wait(30 * time.Second); code != 0 {
			t.Errorf("manager exit code after drain = %d, want 0", code)
		}
		if got := waitJob(t, cl, j.ID, 5*time.Second, finished); got.Status != "success" {
			t.Errorf("running job after drain = %s, want success", got.Status)
		}
		// A request already held when the drain began may still bring the
		// late job (it is then run, never dropped); otherwise it stays queued.
		if got, _ := cl.Job(context.Background(), late.ID); got.Status != "pending" && got.Status != "success" {
			t.Errorf("job submitted during drain = %s, want pending or success (never lost)", got.Status)
		}
		after := submit(t, cl, client.JobSpec{Name: "after", Script: []string{"true"}})
		time.Sleep(500 * time.Millisecond)
		if got, _ := cl.Job(context.Background(), after.ID); got.Status != "pending" {
			t.Errorf("job submitted after the drained manager exited = %s, want pending", got.Status)
		}
	})
	t.Run("SIGQUIT with nothing running exits at once", func(t *testing.T) {
		dir := t.TempDir()
		// Held requests would keep a drain waiting up to two minutes.
		c := startCoordinator(t, filepath.Join(dir, "coord"), "--long-poll-timeout", "2m")
		cfg := writeConfig(t, dir, c.url, c.runnerToken(t), 2, "")
		m := start(t, dir, "run", "--config", cfg)
		m.waitLog("runner manager started", 10*time.Second)
		waitFor(t, 30*time.Second, "the manager's request to be held", func() bool {
			n, ok := metricValue(c.url, "drover_coordinator_long_poll_waiters")
			return ok && n >= 1
		})
		m.signal(syscall.SIGQUIT)
		if code := m.wait(30 * time.Second); code != 0 {
			t.Errorf("exit code = %d, want 0", code)
		}
		if !strings.Contains(m.log.String(), "draining") {
			t.Errorf("no log line about the drain:\n%s", m.log.String())
		}
		// Nothing was lost: a job submitted now is there for the next manager.
		j := submit(t, c.client(), client.JobSpec{Name: "next", Script: []string{"true"}})
		m2 := start(t, dir, "run", "--config", cfg)
		m2.waitLog("runner manager started", 10*time.Second)
		if got := waitJob(t, c.client(), j.ID, 30*time.Second, finished); got.Status != "success" {
			t.Errorf("job after the drained manager = %s", got.Status)
		}
		m2.signal(syscall.SIGTERM)
		m2.wait(30 * time.Second)
	})
	t.Run("SIGTERM interrupts", func(t *testing.T) {
		dir := t.TempDir()
		c := startCoordinator(t, filepath.Join(dir, "coord"))
		cfg := writeConfig(t, dir, c.url, c.runnerToken(t), 2, "")
		m := start(t, dir, "run", "--config", cfg)
		m.waitLog("runner manager started", 10*time.Second)
		cl := c.client()
		j := submit(t, cl, client.JobSpec{Name: "slow", Script: []string{"echo working", "sleep 120"}})
		waitJob(t, cl, j.ID, 20*time.Second, func(j *client.Job) bool { return j.Status == "running" && j.TraceSize > 0 })
		for deadline := time.Now().Add(10 * time.Second); !strings.Contains(trace(t, cl, j.ID), "working") && time.Now().Before(deadline); {
			time.Sleep(50 * time.Millisecond)
		}
		m.signal(syscall.SIGTERM)
		m.wait(30 * time.Second)
		got := waitJob(t, cl, j.ID, 5*time.Second, finished)
		if got.Status != "failed" || got.FailureReason != "runner_interrupted" {
			t.Errorf("job = %s/%s, want failed/runner_interrupted", got.Status, got.FailureReason)
		}
		if tr := trace(t, cl, j.ID); !strings.Contains(tr, "working") {
			t.Errorf("log lost the output before the interrupt:\n%s", tr)
		}
	})
}

// TestConcurrentLimit: with concurrent = 2, four 1 s jobs never run more
// than two at a time, and all succeed.
func TestConcurrentLimit(t *testing.T) {
	dir := t.TempDir()
	c := startCoordinator(t, filepath.Join(dir, "coord"))
	cfg := writeConfig(t, dir, c.url, c.runnerToken(t), 2, "  request_concurrency = 2\n")
	m := start(t, dir, "run", "--config", cfg)
	m.waitLog("runner manager started", 10*time.Second)
	cl := c.client()
	stamp := filepath.Join(dir, "stamps")
	var ids []int64
	for i := range 4 {
		j, err := cl.Submit(context.Background(), client.JobSpec{Name: "job" + strconv.Itoa(i), Script: []string{
			"echo start $(date +%s.%N) >> " + stamp, "sleep 1", "echo end $(date +%s.%N) >> " + stamp,
		}})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, j.ID)
	}
	for _, id := range ids {
		if got := waitJob(t, cl, id, 60*time.Second, finished); got.Status != "success" {
			t.Errorf("job %d = %s", id, got.Status)
		}
	}
	b, _ := os.ReadFile(stamp)
	running, peak := 0, 0
	type ev struct {
		at    float64
		delta int
	}
	var evs []ev
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(line)
		at, _ := strconv.ParseFloat(f[1], 64)
		d := 1
		if f[0] == "end" {
			d = -1
		}
		evs = append(evs, ev{at, d})
	}
	for i := range evs {
		for j := i + 1; j < len(evs); j++ {
			if evs[j].at < evs[i].at {
				evs[i], evs[j] = evs[j], evs[i]
			}
		}
	}
	for _, e := range evs {
		running += e.delta
		peak = max(peak, running)
	}
	if peak != 2 {
		t.Errorf("peak concurrent jobs = %d, want 2 (concurrent = 2)", peak)
	}
}

// TestConfigErrorExitCode: a bad config.toml exits 2 naming file, line and key.
func TestConfigErrorExitCode(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(cfg, []byte("check_interval = 3\nconcurrent = 0\n\n[[runners]]\n  name = \"x\"\n  url = \"http://127.0.0.1:1\"\n  token = \"glrt-x\"\n  executor = \"shell\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, code := runCLI(t, dir, nil, "run", "--config", cfg)
	if code != 2 {
		t.Errorf("run with concurrent = 0: exit %d, want 2:\n%s", code, out)
	}
	if !strings.Contains(out, "config.toml:2: concurrent:") {
		t.Errorf("error does not name file:line: key:\n%s", out)
	}
	if err := os.WriteFile(cfg, []byte("concurrent = 1\n[[runners]]\n  name = \"x\"\n  url = \"http://127.0.0.1:1\"\n  token = \"glrt-x\"\n  executor = \"docker+machine\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, code = runCLI(t, dir, nil, "run", "--config", cfg)
	if code != 2 || !strings.Contains(out, "runners[0].executor") {
		t.Errorf("unsupported executor: exit %d, want 2 naming runners[0].executor:\n%s", code, out)
	}
}

// TestCoordinatorSurvivesKill9: jobs acknowledged before a SIGKILL are all
// there after a restart on the same data directory, and then run.
func TestCoordinatorSurvivesKill9(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "coord")
	c := startCoordinator(t, data)
	cl := c.client()
	var ids []int64
	for i := range 50 {
		j := submit(t, cl, client.JobSpec{Name: "n" + strconv.Itoa(i), Script: []string{"echo " + strconv.Itoa(i)}})
		ids = append(ids, j.ID)
	}
	c.signal(syscall.SIGKILL)
	c.wait(10 * time.Second)
	c2 := startCoordinator(t, data)
	cl2 := c2.client()
	jobs, err := cl2.Jobs(context.Background(), "", 1000)
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != len(ids) {
		t.Fatalf("after kill -9: %d jobs, want %d", len(jobs), len(ids))
	}
	cfg := writeConfig(t, dir, c2.url, c2.runnerToken(t), 4, "")
	m := start(t, dir, "run", "--config", cfg)
	m.waitLog("runner manager started", 10*time.Second)
	for i, id := range ids {
		got := waitJob(t, cl2, id, 60*time.Second, finished)
		if got.Status != "success" {
			t.Errorf("job %d = %s", id, got.Status)
		}
		if tr := trace(t, cl2, id); !strings.Contains(tr, "\n"+strconv.Itoa(i)+"\n") {
			t.Errorf("job %d log lacks its output", id)
		}
	}
}

// TestLocal runs the README's main command.
func TestLocal(t *testing.T) {
	out, code := runCLI(t, "..", nil, "local", "--quiet")
	if code != 0 {
		t.Fatalf("drover local = exit %d:\n%s", code, out)
	}
	for _, want := range []string{"every job ended as expected", "fails-on-purpose", "ok (failed as expected)", "times-out", "git-checkout"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

// TestSIGHUPReloads: SIGHUP applies a changed config.toml and keeps the old
// one, with a clear log line, when the new one is broken.
func TestSIGHUPReloads(t *testing.T) {
	dir := t.TempDir()
	c := startCoordinator(t, filepath.Join(dir, "coord"))
	token := c.runnerToken(t)
	cfg := writeConfig(t, dir, c.url, token, 1, "")
	m := start(t, dir, "run", "--config", cfg)
	m.waitLog("runner manager started", 10*time.Second)

	writeConfig(t, dir, c.url, token, 3, "")
	m.signal(syscall.SIGHUP)
	m.waitLog(`configuration reloaded.*concurrent=3`, 10*time.Second)

	// listen_address added by a reload is served at once.
	addr := "127.0.0.1:" + freePort(t)
	body, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf("listen_address = %q\n%s", addr, body)), 0o600); err != nil {
		t.Fatal(err)
	}
	m.signal(syscall.SIGHUP)
	m.waitLog(`metrics and health listening.*addr=`+regexp.QuoteMeta(addr), 10*time.Second)
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("/metrics after listen_address was added by a reload: %v, %v", resp, err)
	}
	resp.Body.Close()

	if err := os.WriteFile(cfg, []byte("concurrent = 1\n[[runners]]\n  url = 12\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	m.signal(syscall.SIGHUP)
	m.waitLog(`configuration not reloaded.*config.toml:[0-9]+: runners\[0\]\.`, 10*time.Second)

	// The manager still works with the configuration it kept.
	j := submit(t, c.client(), client.JobSpec{Name: "after-reload", Script: []string{"echo still-here"}})
	if got := waitJob(t, c.client(), j.ID, 30*time.Second, finished); got.Status != "success" {
		t.Errorf("job after a failed reload = %s", got.Status)
	}
}

// TestCoordinatorPortTaken: a coordinator whose address is taken exits
// with code 2 naming the address, and never says it is ready.
func TestCoordinatorPortTaken(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	dir := t.TempDir()
	out, code := runCLI(t, dir, nil, "coordinator", "--listen", l.Addr().String(), "--data", filepath.Join(dir, "d"))
	if code != 2 || !strings.Contains(out, l.Addr().String()) || strings.Contains(out, "coordinator ready") {
		t.Fatalf("exit code %d (want 2), output (want the address, no \"coordinator ready\"):\n%s", code, out)
	}
}

// TestManagerRestartEndsLostJobs: a runner manager without a job store is
// killed with a job running; started again (same system_id), it tells the
// coordinator, which fails the lost job at once with a clear line instead
// of waiting for the silent-runner reaper (10 minutes here).
func TestManagerRestartEndsLostJobs(t *testing.T) {
	dir := t.TempDir()
	c := startCoordinator(t, filepath.Join(dir, "coord"), "--stale-timeout", "10m")
	cfg := writeConfig(t, dir, c.url, c.runnerToken(t), 1, "")
	m := start(t, dir, "run", "--config", cfg)
	m.waitLog("runner manager started", 10*time.Second)
	cl := c.client()
	j := submit(t, cl, client.JobSpec{Name: "long", Script: []string{"echo started", "sleep 300"}})
	waitJob(t, cl, j.ID, 30*time.Second, func(j *client.Job) bool { return j.Status == "running" })
	m.signal(syscall.SIGKILL)
	m.wait(10 * time.Second)
	// The clock-skew margin (15 s) keeps a restart right after the hand-out
	// from ending it; a real restart comes later than that.
	time.Sleep(16 * time.Second)
	m2 := start(t, dir, "run", "--config", cfg)
	m2.waitLog("runner manager started", 10*time.Second)
	got := waitJob(t, cl, j.ID, 30*time.Second, finished)
	if got.Status != "failed" || got.FailureReason != "runner_system_failure" {
		t.Fatalf("lost job = %s (%s), want failed runner_system_failure", got.Status, got.FailureReason)
	}
	if log := trace(t, cl, j.ID); !strings.Contains(log, "restarted and, without a job store, cannot resume it") {
		t.Errorf("the log does not say why:\n%s", log)
	}
	m2.signal(syscall.SIGTERM)
	m2.wait(30 * time.Second)
}
