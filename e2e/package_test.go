package e2e

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/drover-ci/drover/internal/client"
	"github.com/drover-ci/drover/internal/systemdtest"
)

// buildPackages runs scripts/package.sh for version into a directory of
// the test and returns the paths of the .deb and the .rpm.
func buildPackages(t *testing.T, version string) (deb, rpm string) {
	t.Helper()
	out := t.TempDir()
	cmd := exec.Command("../scripts/package.sh", "--version", version, "--out", out)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("scripts/package.sh --version %s: %v\n%s", version, err, b)
	}
	debs, _ := filepath.Glob(filepath.Join(out, "*.deb"))
	rpms, _ := filepath.Glob(filepath.Join(out, "*.rpm"))
	if len(debs) != 1 || len(rpms) != 1 {
		t.Fatalf("scripts/package.sh made %q and %q, want one .deb and one .rpm", debs, rpms)
	}
	return debs[0], rpms[0]
}

// TestPackageDebSystemd builds the .deb twice (versions 1.0.0 and 1.0.1)
// with scripts/package.sh and installs it in a clean Debian container
// where systemd is PID 1: the service drover is enabled and running as
// the user drover; drover register (as root, to the default
// /etc/drover/config.toml) adds a runner and a job runs; the upgrade keeps
// config.toml, restarts the service and drover version says 1.0.1; a job
// runs again; dpkg --remove stops and removes the service, --purge
// /etc/drover. It also reads the .rpm's file list and scripts with rpm.
func TestPackageDebSystemd(t *testing.T) {
	deb1, rpm1 := buildPackages(t, "1.0.0")
	deb2, _ := buildPackages(t, "1.0.1")
	// No drover of the test's in it: the package brings its own.
	s := sd{Container: systemdtest.Start(t), t: t}
	ctx := t.Context()

	checkRPM(t, rpm1)

	if err := s.CopyFile(ctx, deb1, "/root/drover_1.0.0.deb", 0o644); err != nil {
		t.Fatal(err)
	}
	if err := s.CopyFile(ctx, deb2, "/root/drover_1.0.1.deb", 0o644); err != nil {
		t.Fatal(err)
	}
	s.run("dpkg", "-i", "/root/drover_1.0.0.deb")
	if out := s.run("systemctl", "is-enabled", "drover.service"); strings.TrimSpace(out) != "enabled" {
		t.Errorf("after dpkg -i: drover.service %q, want enabled", out)
	}
	if st := s.activeState("drover.service"); st != "active" {
		t.Errorf("after dpkg -i: drover.service %s, want active", st)
	}
	if out := s.run("stat", "-c", "%U %a", "/etc/drover", "/etc/drover/config.toml", "/var/lib/drover"); out != "drover 700\ndrover 600\ndrover 750\n" {
		t.Errorf("owners and modes of /etc/drover, its config.toml, /var/lib/drover = %q", out)
	}
	if out := s.run("ps", "-o", "user=,args=", "-C", "drover"); !strings.Contains(out, "drover   /usr/bin/drover run --config /etc/drover/config.toml --working-directory /var/lib/drover") {
		t.Errorf("processes named drover:\n%s\nwant drover run as the user drover", out)
	}
	if out := s.run("drover", "version"); !strings.Contains(out, "drover 1.0.0\n") {
		t.Errorf("drover version = %q, want 1.0.0", out)
	}

	cl := s.installCoordinator()
	// root's default config is the package's /etc/drover/config.toml.
	s.run("drover", "register", "--url", "http://127.0.0.1:8080", "--token", runnerTokenOf(t, cl), "--executor", "shell", "--name", "pkg")
	runHello := func(want string) {
		t.Helper()
		j, err := cl.Submit(ctx, client.JobSpec{Name: "hello", Script: []string{"echo hello from $(id -un) in $PWD"}})
		if err != nil {
			t.Fatal(err)
		}
		j = waitJobOf(t, cl, j.ID, finished)
		if tr := trace(t, cl, j.ID); j.Status != "success" || !strings.Contains(tr, want) {
			t.Fatalf("job %d: %s, want success with %q; trace:\n%s", j.ID, j.Status, want, tr)
		}
	}
	runHello("hello from drover in /var/lib/drover/builds/")

	cfgBefore, err := s.ReadFile(ctx, "/etc/drover/config.toml")
	if err != nil {
		t.Fatal(err)
	}
	pidBefore := strings.TrimSpace(s.run("systemctl", "show", "--property=MainPID", "--value", "drover.service"))
	out := s.run("dpkg", "-i", "/root/drover_1.0.1.deb")
	if !strings.Contains(out, "restarting drover.service") {
		t.Errorf("the upgrade's output does not say it restarted the service:\n%s", out)
	}
	cfgAfter, err := s.ReadFile(ctx, "/etc/drover/config.toml")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(cfgBefore, cfgAfter) || !bytes.Contains(cfgAfter, []byte(`name = "pkg"`)) {
		t.Errorf("config.toml changed in the upgrade:\nbefore:\n%s\nafter:\n%s", cfgBefore, cfgAfter)
	}
	pidAfter := strings.TrimSpace(s.run("systemctl", "show", "--property=MainPID", "--value", "drover.service"))
	if pidAfter == pidBefore || pidAfter == "0" || s.activeState("drover.service") != "active" {
		t.Errorf("after the upgrade: main pid %s (was %s), %s; want a new running process", pidAfter, pidBefore, s.activeState("drover.service"))
	}
	if out := s.run("drover", "version"); !strings.Contains(out, "drover 1.0.1\n") {
		t.Errorf("drover version after the upgrade = %q, want 1.0.1", out)
	}
	if out := s.run("journalctl", "--no-pager", "-u", "drover.service"); !strings.Contains(out, "draining") {
		t.Errorf("the runner's journal does not show the restart's drain:\n%s", out)
	}
	runHello("hello from drover")

	s.run("dpkg", "--remove", "drover")
	for _, f := range []string{"/usr/bin/drover", "/etc/systemd/system/drover.service", "/etc/systemd/system/multi-user.target.wants/drover.service"} {
		if _, code := s.try("", "test", "-e", f); code == 0 {
			t.Errorf("%s is still there after dpkg --remove", f)
		}
	}
	if out, code := s.try("", "pgrep", "-f", "drover run"); code != 1 {
		t.Errorf("pgrep -f 'drover run' after dpkg --remove = exit %d, %q; want no process", code, out)
	}
	if _, code := s.try("", "test", "-e", "/etc/drover/config.toml"); code != 0 {
		t.Errorf("dpkg --remove removed config.toml; only --purge should")
	}
	s.run("dpkg", "--purge", "drover")
	if _, code := s.try("", "test", "-e", "/etc/drover"); code == 0 {
		t.Errorf("/etc/drover is still there after dpkg --purge")
	}
}

// checkRPM reads the .rpm's file list and scripts with rpm (the rpm
// package of Debian; scripts/test.sh installs it).
func checkRPM(t *testing.T, path string) {
	t.Helper()
	if _, err := exec.LookPath("rpm"); err != nil {
		t.Errorf("no rpm to read %s with (apt-get install rpm): %v", filepath.Base(path), err)
		return
	}
	out, err := exec.Command("rpm", "-qpl", path).CombinedOutput()
	if err != nil {
		t.Fatalf("rpm -qpl: %v\n%s", err, out)
	}
	if got, want := strings.TrimSpace(string(out)), "/etc/drover\n/usr/bin/drover\n/var/lib/drover"; got != want {
		t.Errorf("rpm -qpl = %q, want %q", got, want)
	}
	out, err = exec.Command("rpm", "-qp", "--scripts", path).CombinedOutput()
	if err != nil {
		t.Fatalf("rpm -qp --scripts: %v\n%s", err, out)
	}
	for _, want := range []string{
		"preinstall scriptlet", "useradd --system --gid drover --home-dir /var/lib/drover",
		"postinstall scriptlet", "/usr/bin/drover install --user drover --working-directory /var/lib/drover",
		"preuninstall scriptlet", "/usr/bin/drover uninstall",
		"postuninstall scriptlet",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("rpm -qp --scripts lacks %q:\n%s", want, out)
		}
	}
	out, err = exec.Command("rpm", "-qp", "--queryformat", "%{NAME} %{VERSION} [%{REQUIRENAME} ]", path).CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "drover 1.0.0 ") || !strings.Contains(string(out), "shadow-utils") {
		t.Errorf("rpm -qp --queryformat NAME VERSION REQUIRENAME = %q, %v; want drover 1.0.0 requiring shadow-utils", out, err)
	}
}
