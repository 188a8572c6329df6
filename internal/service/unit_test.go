package service

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// directives parses a unit's text into section -> key -> values (a key
// may repeat), failing on a line that is none of comment, section, blank
// or key=value.
func directives(t *testing.T, text string) map[string]map[string][]string {
	t.Helper()
	out := map[string]map[string][]string{}
	section := ""
	for i, line := range strings.Split(text, "\n") {
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]"):
			section = strings.Trim(line, "[]")
			out[section] = map[string][]string{}
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok || section == "" {
				t.Fatalf("line %d %q: not key=value in a section", i+1, line)
			}
			out[section][k] = append(out[section][k], v)
		}
	}
	return out
}

func TestRenderRunnerAndCoordinatorUnits(t *testing.T) {
	runner := RunnerOptions{
		Executable: "/usr/bin/drover", User: "ci", Group: "ci",
		WorkingDirectory: "/home/ci", Config: "/etc/drover/config.toml",
		StopTimeout: DefaultRunnerStopTimeout, Hardening: true,
	}
	coord := CoordinatorOptions{
		Executable: "/usr/bin/drover", User: "drover", Group: "drover",
		Data: "/var/lib/drover-coordinator", Listen: "0.0.0.0:8080",
		Extra:       []string{"--public-url", "http://ci.example.com:8080"},
		StopTimeout: DefaultCoordinatorStopTimeout, Hardening: true,
	}
	// absent: the directive must not be there.
	const absent = "<absent>"
	for _, tc := range []struct {
		name string
		unit Unit
		want map[string]map[string]string
	}{
		{
			name: "runner, hardened, as a user",
			unit: RunnerUnit(runner),
			want: map[string]map[string]string{
				"Unit": {"Description": "drover runner manager (drover)", "After": "network-online.target", "Wants": "network-online.target", "StartLimitIntervalSec": "0"},
				"Service": {
					"Type":                  "simple",
					"ExecStart":             "/usr/bin/drover run --config /etc/drover/config.toml --working-directory /home/ci",
					"ExecReload":            "/bin/kill -HUP $MAINPID",
					"User":                  "ci",
					"Group":                 "ci",
					"WorkingDirectory":      "/home/ci",
					"KillSignal":            "SIGQUIT",
					"KillMode":              "mixed",
					"TimeoutStopSec":        "7200s",
					"Restart":               "always",
					"RestartSec":            "5s",
					"EnvironmentFile":       absent,
					"NoNewPrivileges":       "yes",
					"ProtectSystem":         "full",
					"ProtectHome":           "read-only",
					"ReadWritePaths":        "/home/ci /etc/drover",
					"PrivateTmp":            "yes",
					"PrivateDevices":        absent,
					"RestrictNamespaces":    absent,
					"ProtectKernelTunables": "yes",
					"ProtectKernelModules":  "yes",
					"ProtectKernelLogs":     "yes",
					"ProtectControlGroups":  "yes",
					"ProtectClock":          "yes",
					"RestrictSUIDSGID":      "yes",
					"RestrictRealtime":      "yes",
					"LockPersonality":       "yes",
					"CapabilityBoundingSet": "",
					"AmbientCapabilities":   absent,
				},
				"Install": {"WantedBy": "multi-user.target"},
			},
		},
		{
			name: "runner, not hardened, as root, no stop timeout, custom name",
			unit: RunnerUnit(RunnerOptions{Name: "drover-2", Executable: "/opt/drover bin/drover", WorkingDirectory: "/srv/ci", Config: "/srv/ci/config.toml", KeepJobs: true}),
			want: map[string]map[string]string{
				"Unit": {"Description": "drover runner manager (drover-2)"},
				"Service": {
					"ExecStart":             `"/opt/drover bin/drover" run --config /srv/ci/config.toml --working-directory /srv/ci`,
					"User":                  absent,
					"Group":                 absent,
					"KillSignal":            "SIGQUIT",
					"TimeoutStopSec":        "infinity",
					"NoNewPrivileges":       absent,
					"ProtectSystem":         absent,
					"ProtectHome":           absent,
					"ReadWritePaths":        absent,
					"PrivateTmp":            absent,
					"CapabilityBoundingSet": absent,
				},
			},
		},
		{
			name: "coordinator, hardened",
			unit: CoordinatorUnit(coord),
			want: map[string]map[string]string{
				"Unit": {"Description": "drover coordinator (drover-coordinator)"},
				"Service": {
					"ExecStart":             "/usr/bin/drover coordinator --data /var/lib/drover-coordinator --listen 0.0.0.0:8080 --public-url http://ci.example.com:8080",
					"User":                  "drover",
					"WorkingDirectory":      "/var/lib/drover-coordinator",
					"EnvironmentFile":       "-/etc/default/drover-coordinator",
					"KillSignal":            "SIGTERM",
					"KillMode":              "mixed",
					"TimeoutStopSec":        "60s",
					"Restart":               "always",
					"ProtectSystem":         "strict",
					"ProtectHome":           "read-only",
					"ReadWritePaths":        "/var/lib/drover-coordinator",
					"PrivateDevices":        "yes",
					"RestrictNamespaces":    "yes",
					"NoNewPrivileges":       "yes",
					"CapabilityBoundingSet": "",
					"AmbientCapabilities":   absent,
				},
			},
		},
		{
			name: "coordinator on port 443 keeps CAP_NET_BIND_SERVICE",
			unit: CoordinatorUnit(CoordinatorOptions{Executable: "/usr/bin/drover", User: "drover", Data: "/d", Listen: ":443", Hardening: true}),
			want: map[string]map[string]string{
				"Service": {
					"AmbientCapabilities":   "CAP_NET_BIND_SERVICE",
					"CapabilityBoundingSet": "CAP_NET_BIND_SERVICE",
					"TimeoutStopSec":        "infinity",
				},
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := directives(t, tc.unit.Render())
			for section, keys := range tc.want {
				for k, want := range keys {
					vals := got[section][k]
					switch {
					case want == absent && len(vals) > 0:
						t.Errorf("[%s] %s = %q, want it absent", section, k, vals)
					case want != absent && (len(vals) != 1 || vals[0] != want):
						t.Errorf("[%s] %s = %q, want exactly %q", section, k, vals, want)
					}
				}
			}
		})
	}
}

func TestQuote(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"/usr/bin/drover", "/usr/bin/drover"},
		{"a b", `"a b"`},
		{`say "hi"`, `"say \"hi\""`},
		{`back\slash`, `"back\\slash"`},
		{"100%", "100%%"},
		{"$HOME", "$$HOME"},
		{"", `""`},
		{"semi;colon", `"semi;colon"`},
	} {
		if got := Quote(tc.in); got != tc.want {
			t.Errorf("Quote(%q) = %s, want %s", tc.in, got, tc.want)
		}
	}
}

func TestCheckName(t *testing.T) {
	for _, tc := range []struct{ in, want, err string }{
		{"drover", "drover", ""},
		{"drover.service", "drover", ""},
		{"drover-coordinator@a", "drover-coordinator@a", ""},
		{"", "", "service name"},
		{"../x", "", "service name"},
		{"a b", "", "service name"},
	} {
		got, err := CheckName(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("CheckName(%q) = %q, %v; want an error with %q", tc.in, got, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("CheckName(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

func TestStatusSummaryAndExitCode(t *testing.T) {
	for _, tc := range []struct {
		name, show, line string
		code             int
	}{
		{"running", "LoadState=loaded\nActiveState=active\nSubState=running\nUnitFileState=enabled\nMainPID=42\nActiveEnterTimestamp=Sat 2026-11-28 12:00:00 UTC\n",
			"drover.service: active (running) since Sat 2026-11-28 12:00:00 UTC, pid 42, enabled", 0},
		{"stopped", "LoadState=loaded\nActiveState=inactive\nSubState=dead\nUnitFileState=enabled\nMainPID=0\nActiveEnterTimestamp=\n",
			"drover.service: inactive (dead), enabled", 3},
		{"failed", "LoadState=loaded\nActiveState=failed\nSubState=failed\nUnitFileState=disabled\nMainPID=0\n",
			"drover.service: failed (failed), disabled", 3},
		{"draining", "LoadState=loaded\nActiveState=deactivating\nSubState=stop-sigterm\nMainPID=7\n",
			"drover.service: deactivating (stop-sigterm), pid 7", 3},
		{"not installed", "LoadState=not-found\nActiveState=inactive\nSubState=dead\n",
			"drover.service: not installed", 4},
	} {
		st := parseShow("drover", tc.show)
		if st.String() != tc.line || st.ExitCode() != tc.code {
			t.Errorf("%s: %q, exit %d; want %q, exit %d", tc.name, st.String(), st.ExitCode(), tc.line, tc.code)
		}
	}
}

func TestCheckHost(t *testing.T) {
	dir := t.TempDir()
	if err := CheckHost(dir, 0, true); err != nil {
		t.Errorf("CheckHost(systemd, root) = %v, want nil", err)
	}
	if err := CheckHost(dir, 1000, false); err != nil {
		t.Errorf("CheckHost(systemd, user, root not needed) = %v, want nil", err)
	}
	err := CheckHost(dir, 1000, true)
	if err == nil || !strings.Contains(err.Error(), "must be run as root") || strings.Contains(err.Error(), "init system") {
		t.Errorf("CheckHost(systemd, user) = %v, want only that root is needed", err)
	}
	err = CheckHost(filepath.Join(dir, "missing"), 1000, true)
	if err == nil || !strings.Contains(err.Error(), "systemd is not the init system here") || !strings.Contains(err.Error(), "root") {
		t.Errorf("CheckHost(no systemd, user) = %v, want both", err)
	}
}

// recorder is a stand-in for systemctl (the real one is driven by the
// e2e test in a systemd container): it records the commands.
type recorder struct{ calls []string }

func (r *recorder) run(_ context.Context, args ...string) (string, error) {
	r.calls = append(r.calls, strings.Join(args, " "))
	return "", nil
}

func TestInstallRefusesAnExistingUnitUnlessForced(t *testing.T) {
	dir := t.TempDir()
	rec := &recorder{}
	m := &Manager{UnitDir: dir, Systemctl: rec.run}
	u := RunnerUnit(RunnerOptions{Executable: "/usr/bin/drover", WorkingDirectory: "/w", Config: "/etc/drover/config.toml", StopTimeout: time.Hour})
	path, err := m.Install(t.Context(), u, false)
	if err != nil {
		t.Fatalf("Install = %v", err)
	}
	if want := []string{"daemon-reload", "enable drover.service"}; !slices.Equal(rec.calls, want) {
		t.Errorf("systemctl calls = %q, want %q", rec.calls, want)
	}
	text, err := os.ReadFile(path)
	if err != nil || string(text) != u.Render() {
		t.Fatalf("unit file = %q, %v; want the rendered unit", text, err)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o644 {
		t.Errorf("unit file mode = %v, want 0644", fi.Mode().Perm())
	}
	u2 := u
	u2.StopTimeout = 2 * time.Hour
	rec.calls = nil
	_, err = m.Install(t.Context(), u2, false)
	if !errors.Is(err, ErrExists) || !strings.Contains(err.Error(), path) || len(rec.calls) != 0 {
		t.Fatalf("Install over it = %v (systemctl %q), want ErrExists naming %s and no systemctl", err, rec.calls, path)
	}
	if text, _ := os.ReadFile(path); string(text) != u.Render() {
		t.Errorf("refused Install changed the file")
	}
	if _, err := m.Install(t.Context(), u2, true); err != nil {
		t.Fatalf("Install --force = %v", err)
	}
	if text, _ := os.ReadFile(path); string(text) != u2.Render() {
		t.Errorf("Install --force did not replace the file")
	}
	rec.calls = nil
	if _, err := m.Uninstall(t.Context(), "drover"); err != nil {
		t.Fatalf("Uninstall = %v", err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("unit file after Uninstall: %v, want gone", err)
	}
	if want := []string{"stop drover.service", "disable drover.service", "daemon-reload", "reset-failed drover.service"}; !slices.Equal(rec.calls, want) {
		t.Errorf("systemctl calls = %q, want %q", rec.calls, want)
	}
	if _, err := m.Uninstall(t.Context(), "drover"); err == nil || !strings.Contains(err.Error(), "not installed") {
		t.Errorf("second Uninstall = %v, want not installed", err)
	}
}
