package main

import (
	"os"
	"strings"
	"testing"
)

// TestServiceCommandsWithoutSystemd: on a machine not booted with systemd
// every service command but --print says what it needs and exits with 2,
// changing nothing. (With systemd it is e2e TestServiceInstallSystemd.)
func TestServiceCommandsWithoutSystemd(t *testing.T) {
	if _, err := os.Stat(systemdRunDir); err == nil {
		t.Skipf("%s exists: systemd is the init system here, and these commands would manage this machine's services", systemdRunDir)
	}
	for _, args := range [][]string{
		{"install"},
		{"install", "coordinator"},
		{"uninstall"},
		{"start"},
		{"stop", "--service", "drover-coordinator"},
		{"restart"},
		{"status"},
	} {
		out, code, err := drover(t, args...)
		if code != 2 || err == nil || !strings.Contains(err.Error(), "systemd is not the init system here (/run/systemd/system is missing)") {
			t.Errorf("drover %s = exit %d, %v (%q); want 2 saying systemd is not the init system", strings.Join(args, " "), code, err, out)
		}
	}
}

// TestInstallPrint: --print shows the unit and needs neither root nor
// systemd; the config path is made absolute, an unknown user is named.
func TestInstallPrint(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	out, code, err := drover(t, "install", "--print", "--user", "root", "--working-directory", "w", "--config", "c/config.toml", "--service", "ci-2.service")
	if code != 0 || err != nil {
		t.Fatalf("drover install --print = exit %d, %v: %s", code, err, out)
	}
	for _, want := range []string{
		"Description=drover runner manager (ci-2)\n",
		" run --config " + dir + "/c/config.toml --working-directory " + dir + "/w\n",
		"KillSignal=SIGQUIT\n", "TimeoutStopSec=7200s\n", "ReadWritePaths=" + dir + "/w " + dir + "/c\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("drover install --print lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "User=") {
		t.Errorf("--user root: the unit has a User= line:\n%s", out)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("drover install --print made files: %v", entries)
	}
	out, code, err = drover(t, "install", "--print", "--user", "no-such-user-drover")
	if code != 2 || err == nil || !strings.Contains(err.Error(), "--user no-such-user-drover: no such user") {
		t.Errorf("drover install --user no-such-user-drover = exit %d, %v (%q); want 2 naming the user", code, err, out)
	}
	out, code, err = drover(t, "install", "coordinator", "--print", "--user", "root", "--data", "d", "--listen", ":443", "--", "--public-url", "https://ci.example.com")
	if code != 0 || err != nil || !strings.Contains(out, " coordinator --data "+dir+"/d --listen :443 --public-url https://ci.example.com\n") || !strings.Contains(out, "KillSignal=SIGTERM\n") {
		t.Errorf("drover install coordinator --print = exit %d, %v:\n%s", code, err, out)
	}
}
