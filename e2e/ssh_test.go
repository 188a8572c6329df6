package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/drover-ci/drover/internal/client"
	"github.com/drover-ci/drover/internal/sshx/sshxtest"
)

// sshRunner writes a config.toml for one ssh runner on srv, with the
// given lines of [runners.ssh] after host, port, user and identity_file.
func sshRunner(t *testing.T, dir, url, token string, srv *sshxtest.Server, extra string) string {
	t.Helper()
	key := filepath.Join(dir, "id_ed25519")
	if err := os.WriteFile(key, srv.Key, 0o600); err != nil {
		t.Fatal(err)
	}
	host, port, _ := strings.Cut(srv.Addr, ":")
	return writeRunnerConfig(t, dir, url, token, 2, "ssh", fmt.Sprintf(`  builds_dir = %q
  [runners.ssh]
    host = %q
    port = %q
    user = %q
    identity_file = %q
%s`, filepath.Join(dir, "builds"), host, port, srv.User, key, extra))
}

// knownHosts writes a known_hosts file trusting key for srv.
func knownHosts(t *testing.T, dir string, srv *sshxtest.Server, key ssh.PublicKey) string {
	t.Helper()
	path := filepath.Join(dir, "known_hosts")
	if err := os.WriteFile(path, []byte(knownhosts.Line([]string{knownhosts.Normalize(srv.Addr)}, key)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestSSHExecutor runs jobs with executor = "ssh" on a real sshd, through
// a real coordinator and drover run: success, a script failure, a cancel
// that kills the stage's processes on the host.
func TestSSHExecutor(t *testing.T) {
	srv := sshxtest.Start(t)
	dir := t.TempDir()
	c := startCoordinator(t, filepath.Join(dir, "coord"))
	kh := knownHosts(t, dir, srv, srv.HostKey)
	cfg := sshRunner(t, dir, c.url, c.runnerToken(t), srv, fmt.Sprintf("    known_hosts_file = %q\n", kh))
	m := start(t, dir, "run", "--config", cfg)
	m.waitLog("runner manager started", 10*time.Second)
	cl := c.client()
	submit := func(script ...string) int64 {
		j, err := cl.Submit(context.Background(), client.JobSpec{
			Name: "ssh", Script: script, Variables: []client.Variable{{Key: "GIT_STRATEGY", Value: "none"}},
		})
		if err != nil {
			t.Fatal(err)
		}
		return j.ID
	}

	// As GitLab Runner's ssh executor: a login shell.
	ok := submit("echo ssh=${SSH_CONNECTION%% *}", "echo job-$CI_JOB_ID > out.txt", "cat out.txt",
		"shopt -q login_shell && echo login-shell=yes || echo login-shell=no")
	j := waitJob(t, cl, ok, 60*time.Second, finished)
	log := trace(t, cl, ok)
	if j.Status != "success" {
		t.Fatalf("job = %s (%s):\n%s", j.Status, j.FailureReason, log)
	}
	for _, want := range []string{`Preparing the "ssh" executor`, "Using SSH (bash) executor on", "ssh=127.0.0.1", fmt.Sprintf("job-%d", ok), "login-shell=yes"} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %q:\n%s", want, log)
		}
	}
	if files, _ := filepath.Glob(filepath.Join(dir, "builds", "*", "*", "*", "*", "out.txt")); len(files) != 1 {
		t.Errorf("out.txt under builds_dir: %v, want one (<short token>/<concurrent id>/<project>)", files)
	}

	bad := submit("echo before", "exit 3")
	j = waitJob(t, cl, bad, 60*time.Second, finished)
	if log := trace(t, cl, bad); j.Status != "failed" || j.FailureReason != "script_failure" || !strings.Contains(log, "exit status 3") {
		t.Errorf("failing job = %s (%s), want failed (script_failure) with exit status 3:\n%s", j.Status, j.FailureReason, log)
	}

	pidFile := filepath.Join(dir, "sleeper.pid")
	long := submit(fmt.Sprintf("sleep 600 & echo $! > %s; wait", pidFile))
	var pid int
	waitFor(t, 60*time.Second, "the job's sleep started", func() bool {
		b, err := os.ReadFile(pidFile)
		pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil && pid > 0
	})
	if _, err := cl.Cancel(context.Background(), long); err != nil {
		t.Fatal(err)
	}
	j = waitJob(t, cl, long, 60*time.Second, finished)
	if j.Status != "canceled" {
		t.Errorf("canceled job = %s (%s)", j.Status, j.FailureReason)
	}
	waitFor(t, 30*time.Second, "the stage's sleep killed on the host", func() bool { return !pidAlive(pid) })

	m.signal(syscall.SIGTERM)
	if code := m.wait(20 * time.Second); code != 0 {
		t.Errorf("exit code %d after SIGTERM", code)
	}
}

// TestSSHExecutorHostKeys: an unknown host is refused (strict checking,
// GitLab's default) with the key's fingerprint and the ssh-keyscan line,
// a changed key with both fingerprints; with
// strict checking off the first key is written to the manager's host key
// file and a different key is refused after a restart.
func TestSSHExecutorHostKeys(t *testing.T) {
	srv := sshxtest.Start(t)
	dir := t.TempDir()
	c := startCoordinator(t, filepath.Join(dir, "coord"))
	token := c.runnerToken(t)
	cl := c.client()
	// runJob runs one job with the given [runners.ssh] lines and returns
	// it with its log. A job whose executor cannot be prepared is declined
	// (the two-phase start gives it back for another runner), so for a
	// refused host the log is the manager's decline line.
	runJob := func(extra string, refused bool) (*client.Job, string) {
		t.Helper()
		cfg := sshRunner(t, dir, c.url, token, srv, extra)
		m := start(t, dir, "run", "--config", cfg)
		defer func() {
			m.signal(syscall.SIGTERM)
			m.wait(20 * time.Second)
		}()
		j, err := cl.Submit(context.Background(), client.JobSpec{
			Name: "hk", Script: []string{"echo hello"}, Variables: []client.Variable{{Key: "GIT_STRATEGY", Value: "none"}},
		})
		if err != nil {
			t.Fatal(err)
		}
		if refused {
			line := m.waitLog(fmt.Sprintf(`job declined +job_id=%d .*`, j.ID), 60*time.Second)
			if _, err := cl.Cancel(context.Background(), j.ID); err != nil {
				t.Fatal(err)
			}
			return j, line
		}
		got := waitJob(t, cl, j.ID, 60*time.Second, finished)
		return got, trace(t, cl, j.ID)
	}
	want := func(j *client.Job, log, status string, texts ...string) {
		t.Helper()
		if status != "" && j.Status != status {
			t.Errorf("job = %s (%s), want %s:\n%s", j.Status, j.FailureReason, status, log)
		}
		for _, s := range texts {
			if !strings.Contains(log, s) {
				t.Errorf("log lacks %q:\n%s", s, log)
			}
		}
	}
	real := ssh.FingerprintSHA256(srv.HostKey)

	empty := filepath.Join(dir, "empty_known_hosts")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	j, log := runJob(fmt.Sprintf("    known_hosts_file = %q\n", empty), true)
	want(j, log, "", "runner_system_failure", "is not in "+empty, real, "ssh-keyscan")

	pub := sshxtest.NewPublicKey(t)
	wrong := knownHosts(t, dir, srv, pub)
	j, log = runJob(fmt.Sprintf("    known_hosts_file = %q\n", wrong), true)
	want(j, log, "", real, ssh.FingerprintSHA256(pub), "host key mismatch")

	relaxed := fmt.Sprintf("    known_hosts_file = %q\n    disable_strict_host_key_checking = true\n", empty)
	j, log = runJob(relaxed, false)
	want(j, log, "success", "hello")
	tofu := filepath.Join(dir, ".drover-ssh-host-keys")
	b, err := os.ReadFile(tofu)
	if err != nil || !strings.Contains(string(b), strings.TrimSpace(string(ssh.MarshalAuthorizedKey(srv.HostKey)))) {
		t.Fatalf("host key file %s (%v):\n%s", tofu, err, b)
	}
	// Another key in the file: as if the host's key changed since.
	id, _, _ := strings.Cut(string(b), " ")
	if err := os.WriteFile(tofu, []byte(id+" "+string(ssh.MarshalAuthorizedKey(pub))), 0o600); err != nil {
		t.Fatal(err)
	}
	j, log = runJob(relaxed, true)
	want(j, log, "", "host key mismatch", real, ssh.FingerprintSHA256(pub))
}

// waitFor polls cond until it holds; d only bounds a test that would
// otherwise hang.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestRegisterSSHExecutor: `drover register --executor ssh` writes the
// [runners.ssh] its --ssh-* flags give and says what is missing; drover
// run refuses the runner without a host, naming file, line and key.
func TestRegisterSSHExecutor(t *testing.T) {
	dir := t.TempDir()
	c := startCoordinator(t, filepath.Join(dir, "coord"))
	cfg := filepath.Join(dir, "config.toml")
	out, code := runCLI(t, dir, nil, "register", "--config", cfg, "--url", c.url, "--token", c.runnerToken(t),
		"--executor", "ssh", "--name", "s", "--ssh-user", "ci", "--ssh-port", "2222")
	if code != 0 {
		t.Fatalf("register = exit %d:\n%s", code, out)
	}
	for _, want := range []string{`needs host in the [runners.ssh] table`, "ssh-keyscan"} {
		if !strings.Contains(out, want) {
			t.Errorf("register output lacks %q:\n%s", want, out)
		}
	}
	b, err := os.ReadFile(cfg)
	if err != nil || !strings.Contains(string(b), `executor = "ssh"`) || !strings.Contains(string(b), "[runners.ssh]") ||
		!strings.Contains(string(b), `user = "ci"`) || !strings.Contains(string(b), `port = "2222"`) {
		t.Fatalf("config.toml (%v):\n%s", err, b)
	}
	out, code = runCLI(t, dir, nil, "run", "--config", cfg)
	if code != 2 || !strings.Contains(out, cfg+":") || !strings.Contains(out, "runners[0].ssh: host is required") {
		t.Errorf("run = exit %d, want 2 naming the missing host:\n%s", code, out)
	}
}
