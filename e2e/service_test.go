package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/client"
	"github.com/drover-ci/drover/internal/systemdtest"
)

// staticDrover builds drover with CGO_ENABLED=0 (it runs on any glibc,
// as in a container of another Debian) once per test process.
var staticDrover = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "drover-static-")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "drover")
	cmd := exec.Command("go", "build", "-o", bin, "../cmd/drover")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("CGO_ENABLED=0 go build: %v\n%s", err, out)
	}
	return bin, nil
})

// sd is a systemd container with a test's helpers.
type sd struct {
	*systemdtest.Container
	t *testing.T
}

// run runs cmd as root and fails the test unless it exits with 0.
func (s sd) run(cmd ...string) string {
	s.t.Helper()
	out, stderr, err := s.Exec(s.t.Context(), cmd...)
	if err != nil {
		s.t.Fatalf("%s: %v\nstdout: %s\nstderr: %s", strings.Join(cmd, " "), err, out, stderr)
	}
	return out + stderr
}

// try runs cmd as user ("" root) and returns its output and exit code.
func (s sd) try(user string, cmd ...string) (string, int) {
	s.t.Helper()
	out, stderr, err := s.ExecAs(s.t.Context(), user, nil, cmd...)
	code := systemdtest.ExitCode(err)
	if code < 0 {
		s.t.Fatalf("%s: %v", strings.Join(cmd, " "), err)
	}
	return out + stderr, code
}

// until polls cond (a state only systemd or a file in the container
// holds) every 100 ms; 2 minutes is a safety net only.
func (s sd) until(what string, cond func() bool) {
	s.t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			s.t.Fatalf("%s: not within 2 minutes", what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// activeState is systemd's ActiveState of unit.
func (s sd) activeState(unit string) string {
	out, _ := s.try("", "systemctl", "show", "--property=ActiveState", "--value", unit)
	return strings.TrimSpace(out)
}

// startSystemd starts the systemd container with a static drover in
// /usr/local/bin.
func startSystemd(t *testing.T) sd {
	t.Helper()
	c := systemdtest.Start(t)
	bin, err := staticDrover()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.CopyFile(t.Context(), bin, "/usr/local/bin/drover", 0o755); err != nil {
		t.Fatal(err)
	}
	return sd{Container: c, t: t}
}

// installCoordinator installs and starts the coordinator in the container
// as a service of user coord (drover install coordinator) listening on
// all its addresses, and returns an admin client reaching it from here
// over the engine's bridge.
func (s sd) installCoordinator() *client.Client {
	t := s.t
	s.run("useradd", "--system", "--no-create-home", "coord")
	out := s.run("drover", "install", "coordinator", "--user", "coord", "--data", "/var/lib/drover-coordinator",
		"--listen", "0.0.0.0:8080", "--", "--long-poll-timeout", "3s")
	if !strings.Contains(out, "installed /etc/systemd/system/drover-coordinator.service") {
		t.Errorf("drover install coordinator said %q", out)
	}
	s.run("drover", "start", "--service", "drover-coordinator")
	var token []byte
	s.until("the coordinator's admin token", func() bool {
		b, err := s.ReadFile(t.Context(), "/var/lib/drover-coordinator/admin-token")
		token = b
		return err == nil && len(strings.TrimSpace(string(b))) > 0
	})
	if out := s.run("stat", "-c", "%U", "/var/lib/drover-coordinator/admin-token"); strings.TrimSpace(out) != "coord" {
		t.Errorf("admin token owned by %q, want coord (the service's user)", out)
	}
	cl := client.New("http://"+s.IP+":8080", strings.TrimSpace(string(token)), nil)
	s.until("the coordinator answering from the host", func() bool {
		_, _, err := cl.JobList(t.Context(), client.JobQuery{})
		return err == nil
	})
	return cl
}

// runnerToken creates a runner on the coordinator and returns its token.
func runnerTokenOf(t *testing.T, cl *client.Client) string {
	t.Helper()
	yes := true
	r, err := cl.CreateRunner(t.Context(), client.RunnerSpec{Description: t.Name(), RunUntagged: &yes})
	if err != nil {
		t.Fatalf("CreateRunner: %v", err)
	}
	return r.Token
}

// waitJobOf waits for job id to satisfy ok (2 minutes: a safety net).
func waitJobOf(t *testing.T, cl *client.Client, id int64, ok func(*client.Job) bool) *client.Job {
	t.Helper()
	return waitJob(t, cl, id, 2*time.Minute, ok)
}

// TestServiceInstallSystemd installs the coordinator and the runner
// manager as systemd services in a container where systemd is PID 1,
// with drover install, and drives them with drover start|status|stop|
// uninstall: a job runs as the service's user, a job running when the
// service is stopped finishes before it stops (the drain) and reaches the
// coordinator as a success, and uninstall leaves nothing behind. The
// faults: not root, and a unit that exists without --force.
func TestServiceInstallSystemd(t *testing.T) {
	s := startSystemd(t)
	ctx := t.Context()
	s.run("useradd", "--create-home", "--shell", "/bin/bash", "ci")

	// Not root: exit 2, saying so.
	out, code := s.try("ci", "drover", "install", "--user", "ci")
	if code != 2 || !strings.Contains(out, "must be run as root") {
		t.Errorf("drover install as ci = exit %d, %q; want 2 and that root is needed", code, out)
	}
	// A user that does not exist.
	out, code = s.try("", "drover", "install", "--user", "nosuchuser")
	if code != 2 || !strings.Contains(out, "--user nosuchuser: no such user") {
		t.Errorf("drover install --user nosuchuser = exit %d, %q; want 2 naming the user", code, out)
	}

	cl := s.installCoordinator()

	// The runner manager: working directory in the user's home (writable
	// under ProtectHome=read-only), config.toml made by install, the
	// runner added by register once the service runs.
	out = s.run("drover", "install", "--user", "ci", "--working-directory", "/home/ci", "--config", "/etc/drover/config.toml")
	for _, want := range []string{"created /etc/drover (owner ci)", "wrote /etc/drover/config.toml without runners", "installed /etc/systemd/system/drover.service"} {
		if !strings.Contains(out, want) {
			t.Errorf("drover install said %q, want %q in it", out, want)
		}
	}
	out, code = s.try("", "drover", "install", "--user", "ci")
	if code != 2 || !strings.Contains(out, "/etc/systemd/system/drover.service") || !strings.Contains(out, "--force") {
		t.Errorf("second drover install = exit %d, %q; want 2 naming the unit file and --force", code, out)
	}
	if out := s.run("systemctl", "is-enabled", "drover.service"); strings.TrimSpace(out) != "enabled" {
		t.Errorf("systemctl is-enabled drover = %q", out)
	}
	s.run("drover", "start")
	out, code = s.try("", "drover", "status")
	if code != 0 || !strings.Contains(out, "drover.service: active (running)") || !strings.Contains(out, "enabled") {
		t.Errorf("drover status = exit %d, %q; want 0, active (running), enabled", code, out)
	}
	// status needs no root.
	if out, code := s.try("ci", "drover", "status"); code != 0 || !strings.Contains(out, "active (running)") {
		t.Errorf("drover status as ci = exit %d, %q", code, out)
	}
	s.run("drover", "register", "--config", "/etc/drover/config.toml", "--url", "http://127.0.0.1:8080",
		"--token", runnerTokenOf(t, cl), "--executor", "shell", "--name", "svc")
	// register ran as root; the files stay the service user's.
	if out := s.run("stat", "-c", "%U %a", "/etc/drover/config.toml", "/etc/drover/.runner_system_id"); out != "ci 600\nci 600\n" {
		t.Errorf("owners and modes of config.toml, .runner_system_id = %q, want ci 600 each", out)
	}

	// A job, picked up after the service rereads config.toml.
	j, err := cl.Submit(ctx, client.JobSpec{Name: "hello", Script: []string{"echo hello from $(id -un) in $PWD", "touch /var/tmp/job-wrote-var-tmp"}})
	if err != nil {
		t.Fatal(err)
	}
	j = waitJobOf(t, cl, j.ID, finished)
	tr := trace(t, cl, j.ID)
	if j.Status != "success" || !strings.Contains(tr, "hello from ci in /home/ci/builds/") {
		t.Fatalf("job %d: %s, want success with hello from ci; trace:\n%s", j.ID, j.Status, tr)
	}

	// The drain: a job waiting for a file is running when drover stop is
	// issued; the service stays deactivating until the job is let go, the
	// job succeeds, and only then is the service stopped.
	long, err := cl.Submit(ctx, client.JobSpec{Name: "long", Script: []string{
		"echo long job started", "while [ ! -e /home/ci/release ]; do sleep 0.2; done", "echo long job done"}})
	if err != nil {
		t.Fatal(err)
	}
	waitJobOf(t, cl, long.ID, func(j *client.Job) bool {
		return j.Status == "running" && strings.Contains(trace(t, cl, long.ID), "long job started")
	})
	stopped := make(chan string, 1)
	go func() {
		out, stderr, err := s.Exec(context.WithoutCancel(ctx), "drover", "stop")
		stopped <- fmt.Sprintf("%s%s%v", out, stderr, err)
	}()
	s.until("drover.service deactivating", func() bool { return s.activeState("drover.service") == "deactivating" })
	select {
	case out := <-stopped:
		t.Fatalf("drover stop returned while a job ran: %s", out)
	default:
	}
	if j, err := cl.Job(ctx, long.ID); err != nil || j.Status != "running" {
		t.Fatalf("long job while draining: %+v, %v; want running", j, err)
	}
	s.run("touch", "/home/ci/release")
	select {
	case out := <-stopped:
		if out != "<nil>" {
			t.Fatalf("drover stop: %s", out)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("drover stop did not return within 2 minutes of the job's release")
	}
	if j, err := cl.Job(ctx, long.ID); err != nil || j.Status != "success" {
		t.Fatalf("long job after the drain: %+v, %v; want success", j, err)
	}
	if tr := trace(t, cl, long.ID); !strings.Contains(tr, "long job done") {
		t.Errorf("long job's trace lacks its end:\n%s", tr)
	}
	out, code = s.try("", "drover", "status")
	if code != 3 || !strings.Contains(out, "drover.service: inactive (dead)") {
		t.Errorf("drover status after stop = exit %d, %q; want 3, inactive (dead)", code, out)
	}
	if out := s.run("journalctl", "--no-pager", "-u", "drover.service"); !strings.Contains(out, "draining") {
		t.Errorf("the runner's journal does not say it drained:\n%s", out)
	}

	// Uninstall: no unit file, no enabled symlink, no process.
	s.run("drover", "start")
	out = s.run("drover", "uninstall")
	if !strings.Contains(out, "removed /etc/systemd/system/drover.service") {
		t.Errorf("drover uninstall said %q", out)
	}
	for _, f := range []string{"/etc/systemd/system/drover.service", "/etc/systemd/system/multi-user.target.wants/drover.service"} {
		if _, code := s.try("", "test", "-e", f); code == 0 {
			t.Errorf("%s is still there after drover uninstall", f)
		}
	}
	if out, code := s.try("", "pgrep", "-f", "drover run"); code != 1 {
		t.Errorf("pgrep -f 'drover run' after uninstall = exit %d, %q; want no process", code, out)
	}
	out, code = s.try("", "drover", "status")
	if code != 4 || !strings.Contains(out, "drover.service: not installed") {
		t.Errorf("drover status after uninstall = exit %d, %q; want 4, not installed", code, out)
	}
	// The config stays.
	if out := s.run("grep", "-c", "svc", "/etc/drover/config.toml"); strings.TrimSpace(out) != "1" {
		t.Errorf("config.toml after uninstall: %q", out)
	}
	s.run("drover", "uninstall", "--service", "drover-coordinator")
	if out, code := s.try("", "pgrep", "-f", "drover coordinator"); code != 1 {
		t.Errorf("pgrep -f 'drover coordinator' after uninstall = exit %d, %q; want no process", code, out)
	}
}
