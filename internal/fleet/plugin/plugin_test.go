package plugin_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/drover-ci/drover/internal/fleet"
	"github.com/drover-ci/drover/internal/fleet/plugin"
	"github.com/drover-ci/drover/internal/fleet/static/sshdtest"
)

var (
	buildOnce sync.Once
	buildDir  string
	buildPath string
	buildErr  error
)

// TestMain removes the example plugin built for the tests.
func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// fakeCloud builds examples/fleet-plugin-fakecloud once per test binary
// and returns its path.
func fakeCloud(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		goBin, err := exec.LookPath("go")
		if err != nil {
			buildErr = err
			return
		}
		if buildDir, buildErr = os.MkdirTemp("", "fleet-plugin-test"); buildErr != nil {
			return
		}
		buildPath = filepath.Join(buildDir, "drover-fleet-fakecloud")
		cmd := exec.Command(goBin, "build", "-o", buildPath, "./examples/fleet-plugin-fakecloud")
		cmd.Dir = filepath.Join("..", "..", "..")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = errors.New("go build: " + err.Error() + "\n" + string(out))
		}
	})
	if buildErr != nil {
		t.Fatalf("build the example plugin: %v", buildErr)
	}
	return buildPath
}

func start(t *testing.T, cfg map[string]any, conn fleet.ConnectorConfig) *plugin.Provider {
	t.Helper()
	p, err := plugin.New(nil, plugin.Config{Path: fakeCloud(t)})
	if err != nil {
		t.Fatalf("New = %v", err)
	}
	t.Cleanup(func() { _ = p.Shutdown(context.Background()) })
	info, err := p.Init(t.Context(), fleet.Settings{Name: "runner-x", Config: cfg, Connector: conn})
	if err != nil {
		t.Fatalf("Init = %v", err)
	}
	if info.ID != "fakecloud/runner-x" || info.Version != "0.1.0" {
		t.Errorf("Init = %+v, want the fake cloud's info", info)
	}
	return p
}

func update(t *testing.T, p fleet.Provider) map[string]fleet.State {
	t.Helper()
	got := map[string]fleet.State{}
	if err := p.Update(t.Context(), func(id string, st fleet.State) { got[id] = st }); err != nil {
		t.Fatalf("Update = %v", err)
	}
	return got
}

// TestEndToEnd drives the example plugin through the whole lifecycle; its
// instances all point at one real sshd, which the test logs into.
func TestEndToEnd(t *testing.T) {
	srv := sshdtest.Start(t)
	ctx := t.Context()
	p := start(t, map[string]any{
		"boot_time": "300ms", "max_size": int64(3), "address": srv.Addr,
	}, fleet.ConnectorConfig{Username: srv.User, KeyPath: srv.KeyPath})

	n, err := p.Increase(ctx, 2)
	if n != 2 || err != nil {
		t.Fatalf("Increase(2) = %d, %v", n, err)
	}
	want := map[string]fleet.State{"fake-runner-x-1": fleet.StateCreating, "fake-runner-x-2": fleet.StateCreating}
	if diff := cmp.Diff(want, update(t, p)); diff != "" {
		t.Errorf("Update while booting (-want +got):\n%s", diff)
	}
	if err := p.Heartbeat(ctx, "fake-runner-x-1"); err == nil {
		t.Error("Heartbeat while booting = nil, want an error")
	}
	time.Sleep(350 * time.Millisecond) // the plugin's boot time, on its own clock
	want = map[string]fleet.State{"fake-runner-x-1": fleet.StateRunning, "fake-runner-x-2": fleet.StateRunning}
	if diff := cmp.Diff(want, update(t, p)); diff != "" {
		t.Errorf("Update after boot (-want +got):\n%s", diff)
	}

	ci, err := p.ConnectInfo(ctx, "fake-runner-x-2")
	if err != nil {
		t.Fatalf("ConnectInfo = %v", err)
	}
	if ci.Addr(false) != srv.Addr || ci.Username != srv.User {
		t.Errorf("ConnectInfo = %s as %s, want %s as %s", ci.Addr(false), ci.Username, srv.Addr, srv.User)
	}
	out, err := sshdtest.Run(ci.Addr(false), ci.Username, ci.Key, "echo hello")
	if err != nil || out != "hello\n" {
		t.Errorf("ssh with the plugin's ConnectInfo: echo hello = %q, %v", out, err)
	}
	if err := p.Heartbeat(ctx, "fake-runner-x-2"); err != nil {
		t.Errorf("Heartbeat = %v", err)
	}

	// Not-found crosses the process boundary as fleet.ErrNotFound.
	if _, err := p.ConnectInfo(ctx, "nope"); !errors.Is(err, fleet.ErrNotFound) {
		t.Errorf("ConnectInfo(unknown) = %v, want ErrNotFound", err)
	}
	done, err := p.Decrease(ctx, []string{"fake-runner-x-1", "nope"})
	if !cmp.Equal(done, []string{"fake-runner-x-1"}) || !errors.Is(err, fleet.ErrNotFound) {
		t.Errorf("Decrease = %v, %v; want [fake-runner-x-1], ErrNotFound", done, err)
	}
	want = map[string]fleet.State{"fake-runner-x-1": fleet.StateDeleted, "fake-runner-x-2": fleet.StateRunning}
	if diff := cmp.Diff(want, update(t, p)); diff != "" {
		t.Errorf("Update after Decrease (-want +got):\n%s", diff)
	}
	if n, _ := p.Increase(ctx, 5); n != 2 {
		t.Errorf("Increase(5) at 1 of max 3 = %d, want 2", n)
	}

	pid := p.PID()
	if pid == 0 {
		t.Fatal("PID() = 0 for a running plugin")
	}
	if err := p.Shutdown(ctx); err != nil {
		t.Errorf("Shutdown = %v", err)
	}
	if alive(pid) {
		t.Errorf("plugin process %d still alive after Shutdown", pid)
	}
	if _, err := p.Increase(ctx, 1); !errors.Is(err, plugin.ErrNotStarted) {
		t.Errorf("Increase after Shutdown = %v, want ErrNotStarted", err)
	}
	if err := p.Shutdown(ctx); err != nil {
		t.Errorf("second Shutdown = %v, want nil", err)
	}
}

func TestPluginCrashIsAnError(t *testing.T) {
	p := start(t, map[string]any{}, fleet.ConnectorConfig{})
	pid := p.PID()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill plugin %d: %v", pid, err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for alive(pid) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	ctx := t.Context()
	calls := map[string]func() error{
		"Update":      func() error { return p.Update(ctx, func(string, fleet.State) {}) },
		"Increase":    func() error { _, err := p.Increase(ctx, 1); return err },
		"Decrease":    func() error { _, err := p.Decrease(ctx, []string{"a"}); return err },
		"ConnectInfo": func() error { _, err := p.ConnectInfo(ctx, "a"); return err },
		"Heartbeat":   func() error { return p.Heartbeat(ctx, "a") },
	}
	for name, call := range calls {
		err := call()
		if err == nil {
			t.Errorf("%s after the plugin died = nil, want an error", name)
			continue
		}
		if !strings.Contains(err.Error(), "fleet plugin") {
			t.Errorf("%s after the plugin died = %v, want it to name the plugin", name, err)
		}
	}
	if err := p.Shutdown(ctx); err != nil {
		t.Errorf("Shutdown after the plugin died = %v, want nil", err)
	}
}

func TestInitErrorFromPlugin(t *testing.T) {
	p, err := plugin.New(nil, plugin.Config{Path: fakeCloud(t)})
	if err != nil {
		t.Fatalf("New = %v", err)
	}
	_, err = p.Init(t.Context(), fleet.Settings{Name: "x", Config: map[string]any{"boot_time": "soon"}})
	if err == nil || !strings.Contains(err.Error(), `boot_time "soon"`) {
		t.Fatalf("Init with a bad boot_time = %v, want the plugin's error", err)
	}
	if pid := p.PID(); pid != 0 {
		t.Errorf("PID() = %d after a failed Init, want 0 (killed)", pid)
	}
}

func TestResolve(t *testing.T) {
	dir := t.TempDir()
	exe := filepath.Join(dir, "drover-fleet-mycloud")
	if err := os.WriteFile(exe, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	noexec := filepath.Join(dir, "plain")
	if err := os.WriteFile(noexec, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir)
	tests := []struct {
		name, want, wantErr string
	}{
		{exe, exe, ""},
		{"mycloud", exe, ""},
		{"drover-fleet-mycloud", exe, ""},
		{"nocloud", "", `fleet plugin "nocloud": not found in PATH (looked for nocloud and drover-fleet-nocloud)`},
		{filepath.Join(dir, "missing"), "", "no such file"},
		{noexec, "", "not an executable file"},
		{dir + "/", "", "not an executable file"},
		{"", "", "no program named"},
	}
	for _, tt := range tests {
		got, err := plugin.Resolve(tt.name)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("Resolve(%q) = %q, %v; want error containing %q", tt.name, got, err, tt.wantErr)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("Resolve(%q) = %q, %v; want %q", tt.name, got, err, tt.want)
		}
	}
	if _, err := plugin.New(nil, plugin.Config{Path: "nocloud"}); err == nil {
		t.Error("New with an unknown plugin = nil error")
	}
}

func TestNotAPlugin(t *testing.T) {
	// A program that is not a plugin fails the handshake with an error.
	// (It lingers a moment: one that exits at once trips a data race
	// inside go-plugin v1.7.0's Start under -race.)
	prog := filepath.Join(t.TempDir(), "not-a-plugin")
	if err := os.WriteFile(prog, []byte("#!/bin/sh\necho hello, I am no plugin\nsleep 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	p, err := plugin.New(nil, plugin.Config{Path: prog, StartTimeout: 5 * time.Second})
	if err != nil {
		t.Fatalf("New = %v", err)
	}
	_, err = p.Init(t.Context(), fleet.Settings{Name: "x"})
	if err == nil || !strings.Contains(err.Error(), "Unrecognized remote plugin message") {
		t.Errorf("Init of a non-plugin = %v, want a handshake error", err)
	}
}

// alive tells whether pid is a live process (a zombie counts as dead).
func alive(pid int) bool {
	data, err := os.ReadFile("/proc/" + itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// The state is the field after the parenthesised command name.
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

func itoa(n int) string { return strconv.Itoa(n) }
