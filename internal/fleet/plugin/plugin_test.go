package plugin_test

import (
	"context"
	"errors"
	"log/slog"
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
	"github.com/drover-ci/drover/internal/fleet/fleettest"
	"github.com/drover-ci/drover/internal/fleet/plugin"
	"github.com/drover-ci/drover/internal/fleet/static/sshdtest"
)

// builds holds the plugin programs built once per test binary.
type builds struct {
	mu   sync.Mutex
	dir  string
	done map[string]string
}

var built = &builds{done: map[string]string{}}

// TestMain removes the plugins built for the tests.
func TestMain(m *testing.M) {
	code := m.Run()
	if built.dir != "" {
		os.RemoveAll(built.dir)
	}
	os.Exit(code)
}

// build compiles pkg (a path in drover's module graph) once per test
// binary and returns the program's path.
func build(t *testing.T, name, pkg string) string {
	t.Helper()
	built.mu.Lock()
	defer built.mu.Unlock()
	if p, ok := built.done[pkg]; ok {
		return p
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("go not found: %v", err)
	}
	if built.dir == "" {
		if built.dir, err = os.MkdirTemp("", "fleet-plugin-test"); err != nil {
			t.Fatal(err)
		}
	}
	out := filepath.Join(built.dir, name)
	cmd := exec.Command(goBin, "build", "-o", out, pkg)
	cmd.Dir = filepath.Join("..", "..", "..")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, b)
	}
	built.done[pkg] = out
	return out
}

func fakeCloud(t *testing.T) string {
	return build(t, "fleeting-plugin-fakecloud", "./examples/fleet-plugin-fakecloud")
}

// dummy is GitLab's own test plugin, from the fleeting module drover
// depends on, built unchanged.
func dummy(t *testing.T) string {
	return build(t, "fleeting-plugin-dummy", "gitlab.com/gitlab-org/fleeting/fleeting/plugin/fleeting-plugin-dummy/cmd/fleeting-plugin-dummy")
}

// records is an slog handler that keeps every record and tells waiters
// about the messages they wait for.
type records struct {
	mu   sync.Mutex
	recs []slog.Record
	wake chan struct{}
}

func newRecords() *records { return &records{wake: make(chan struct{}, 1)} }

func (r *records) Enabled(context.Context, slog.Level) bool { return true }
func (r *records) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	r.recs = append(r.recs, rec.Clone())
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
	return nil
}
func (r *records) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *records) WithGroup(string) slog.Handler      { return r }

// wait returns the first record with msg, waiting for it as long as ctx
// lives.
func (r *records) wait(ctx context.Context, msg string) (slog.Record, bool) {
	for {
		r.mu.Lock()
		for _, rec := range r.recs {
			if rec.Message == msg {
				r.mu.Unlock()
				return rec, true
			}
		}
		r.mu.Unlock()
		select {
		case <-ctx.Done():
			return slog.Record{}, false
		case <-r.wake:
		}
	}
}

func attr(rec slog.Record, key string) string {
	var v string
	rec.Attrs(func(a slog.Attr) bool {
		if a.Key == key {
			v = a.Value.String()
			return false
		}
		return true
	})
	return v
}

func start(t *testing.T, log *slog.Logger, path string, cfg map[string]any, conn fleet.ConnectorConfig) *plugin.Provider {
	t.Helper()
	p, err := plugin.New(log, plugin.Config{Path: path})
	if err != nil {
		t.Fatalf("New = %v", err)
	}
	t.Cleanup(func() { _ = p.Shutdown(context.Background()) })
	if _, err := p.Init(t.Context(), fleet.Settings{Name: "runner-x", Config: cfg, Connector: conn}); err != nil {
		t.Fatalf("Init = %v", err)
	}
	return p
}

// TestEndToEnd drives the example plugin (written with GitLab's fleeting
// SDK) through the whole lifecycle; its instances all point at one real
// sshd, which the test logs into with the key the connector sent.
func TestEndToEnd(t *testing.T) {
	srv := sshdtest.Start(t)
	ctx := t.Context()
	recs := newRecords()
	p := start(t, slog.New(recs), fakeCloud(t), map[string]any{
		"name": "runner-x", "boot_time": "300ms", "max_size": int64(3), "address": srv.Addr,
	}, fleet.ConnectorConfig{Username: srv.User, KeyPath: srv.KeyPath})
	st := p.Status()
	if st.Info.ID != "fakecloud/runner-x" || st.Info.Version != "0.1.0" || st.Info.BuildInfo != "example" || st.Info.MaxSize != 3 {
		t.Errorf("Status().Info = %+v, want the fake cloud's Init answer", st.Info)
	}
	// The plugin's own hclog line reaches drover's log, marked as its.
	rec, ok := recs.wait(ctx, "group ready")
	if !ok || attr(rec, "from") != "plugin" || attr(rec, "name") != "runner-x" {
		t.Errorf("plugin's log line = %v %q, want it in the provider's log with from=plugin", ok, rec.Message)
	}

	n, err := p.Increase(ctx, 2)
	if n != 2 || err != nil {
		t.Fatalf("Increase(2) = %d, %v", n, err)
	}
	want := map[string]fleet.State{"fake-runner-x-1": fleet.StateCreating, "fake-runner-x-2": fleet.StateCreating}
	if diff := cmp.Diff(want, fleettest.States(t, p)); diff != "" {
		t.Errorf("Update while booting (-want +got):\n%s", diff)
	}
	if err := p.Heartbeat(ctx, "fake-runner-x-1"); err == nil {
		t.Error("Heartbeat while booting = nil, want an error")
	}
	time.Sleep(350 * time.Millisecond) // the plugin's boot time, on its own clock
	want = map[string]fleet.State{"fake-runner-x-1": fleet.StateRunning, "fake-runner-x-2": fleet.StateRunning}
	if diff := cmp.Diff(want, fleettest.States(t, p)); diff != "" {
		t.Errorf("Update after boot (-want +got):\n%s", diff)
	}

	ci, err := p.ConnectInfo(ctx, "fake-runner-x-2")
	if err != nil {
		t.Fatalf("ConnectInfo = %v", err)
	}
	if ci.Addr(false) != srv.Addr || ci.Username != srv.User || ci.Protocol != "ssh" {
		t.Errorf("ConnectInfo = %s as %s over %s, want %s as %s over ssh", ci.Addr(false), ci.Username, ci.Protocol, srv.Addr, srv.User)
	}
	// The key went to the plugin as bytes (read from key_path, as GitLab
	// Runner does) and came back in ConnectInfo.
	out, err := sshdtest.Run(ci.Addr(false), ci.Username, ci.Key, "echo hello")
	if err != nil || out != "hello\n" {
		t.Errorf("ssh with the plugin's ConnectInfo: echo hello = %q, %v", out, err)
	}
	if err := p.Heartbeat(ctx, "fake-runner-x-2"); err != nil {
		t.Errorf("Heartbeat = %v", err)
	}
	if _, err := p.ConnectInfo(ctx, "nope"); err == nil || !strings.Contains(err.Error(), "instance not found") {
		t.Errorf("ConnectInfo(unknown) = %v, want the plugin's not-found", err)
	}
	if _, err := p.Decrease(ctx, []string{"fake-runner-x-1"}); err != nil {
		t.Errorf("Decrease = %v", err)
	}
	want = map[string]fleet.State{"fake-runner-x-1": fleet.StateDeleted, "fake-runner-x-2": fleet.StateRunning}
	if diff := cmp.Diff(want, fleettest.States(t, p)); diff != "" {
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

// TestGitLabDummyPlugin runs GitLab's fleeting-plugin-dummy, built from
// the fleeting module unchanged, through every call.
func TestGitLabDummyPlugin(t *testing.T) {
	ctx := t.Context()
	p := start(t, nil, dummy(t), map[string]any{"MaxSize": int64(4)}, fleet.ConnectorConfig{Username: "u", Password: "pw", UseStaticCredentials: true})
	st := p.Status()
	if st.Info.ID != "dummy/dummy" || st.Info.MaxSize != 4 || st.Info.Version != "dummy version" {
		t.Errorf("Init = %+v, want the dummy's answer with MaxSize from plugin_config", st.Info)
	}
	if n, err := p.Increase(ctx, 2); n != 2 || err != nil {
		t.Fatalf("Increase(2) = %d, %v", n, err)
	}
	// The dummy reports creating, and moves them to running as the next
	// Update starts.
	got := fleettest.States(t, p)
	if len(got) != 2 {
		t.Fatalf("Update = %v, want 2 instances", got)
	}
	var ids []string
	for id, s := range got {
		ids = append(ids, id)
		if s != fleet.StateRunning && s != fleet.StateCreating {
			t.Errorf("instance %s is %s, want creating or running", id, s)
		}
	}
	for id, s := range fleettest.States(t, p) {
		if s != fleet.StateRunning {
			t.Errorf("instance %s is %s on the second Update, want running", id, s)
		}
	}
	ci, err := p.ConnectInfo(ctx, ids[0])
	if err != nil || ci.ID != ids[0] || ci.Username != "u" || ci.Password != "pw" {
		t.Errorf("ConnectInfo(%s) = %+v, %v; want the connector's static credentials", ids[0], ci, err)
	}
	if err := p.Heartbeat(ctx, ids[0]); err != nil {
		t.Errorf("Heartbeat = %v", err)
	}
	done, err := p.Decrease(ctx, ids[:1])
	if err != nil || !cmp.Equal(done, ids[:1]) {
		t.Errorf("Decrease = %v, %v; want %v", done, err, ids[:1])
	}
	got = fleettest.States(t, p)
	if got[ids[0]] != fleet.StateDeleting && got[ids[0]] != fleet.StateDeleted {
		t.Errorf("after Decrease %s is %s, want deleting or deleted", ids[0], got[ids[0]])
	}
	if err := p.Shutdown(ctx); err != nil {
		t.Errorf("Shutdown = %v", err)
	}
}

// TestPluginCrashRestarts kills the plugin process: the call that finds
// it gone fails and names the plugin, the next one starts it again with
// the same Init.
func TestPluginCrashRestarts(t *testing.T) {
	recs := newRecords()
	p := start(t, slog.New(recs), fakeCloud(t), map[string]any{"name": "c"}, fleet.ConnectorConfig{})
	pid := runningPID(t, p)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill plugin %d: %v", pid, err)
	}
	// go-plugin notices the exit and says so.
	if _, ok := recs.wait(t.Context(), "plugin process exited"); !ok {
		t.Fatal("no 'plugin process exited' in the log")
	}
	ctx := t.Context()
	err := p.Update(ctx, func(string, fleet.State) {})
	if err == nil || !strings.Contains(err.Error(), "fleet plugin") || !strings.Contains(err.Error(), "started again") {
		t.Fatalf("Update after the plugin died = %v, want an error naming the plugin and the restart", err)
	}
	if n, err := p.Increase(ctx, 1); n != 1 || err != nil {
		t.Fatalf("Increase after the restart = %d, %v", n, err)
	}
	st := p.Status()
	if st.Restarts != 1 || st.PID == 0 || st.PID == pid {
		t.Errorf("Status() = %+v, want 1 restart and a new pid (old %d)", st, pid)
	}
	if st.Info.ID != "fakecloud/c" {
		t.Errorf("restarted plugin's Init answer = %+v, want the same settings' answer", st.Info)
	}
}

// TestPluginHangIsCut stops the plugin process (SIGSTOP): a call waits
// no longer than CallTimeout, the hung process is killed, and the next
// call runs on a new one.
func TestPluginHangIsCut(t *testing.T) {
	p, err := plugin.New(nil, plugin.Config{Path: fakeCloud(t), CallTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Init(t.Context(), fleet.Settings{Config: map[string]any{"name": "h"}}); err != nil {
		t.Fatal(err)
	}
	pid := runningPID(t, p)
	// A failure below must not leave the cleanup's Shutdown waiting on
	// the stopped process: its Shutdown call is bounded too.
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = p.Shutdown(ctx)
	})
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	// The signal is delivered when a thread of the process next runs; on
	// a loaded machine the process can still answer a call before that.
	for !stopped(pid) {
		time.Sleep(5 * time.Millisecond)
	}
	err = p.Update(t.Context(), func(string, fleet.State) {})
	if err == nil || !strings.Contains(err.Error(), "no answer within 300ms") {
		t.Fatalf("Update on a stopped plugin = %v, want it cut by the deadline", err)
	}
	// The next call runs on a new process. On a loaded machine that new
	// process may itself miss the short deadline (and be cut in turn), so
	// a few tries are allowed: each must fail by the deadline, never hang.
	for try := 1; ; try++ {
		err = p.Update(t.Context(), func(string, fleet.State) {})
		if err == nil {
			break
		}
		if try == 5 || !strings.Contains(err.Error(), "no answer within 300ms") {
			t.Fatalf("Update after the cut (try %d) = %v, want a new process answering", try, err)
		}
	}
	if st := p.Status(); st.PID == pid || st.Restarts < 1 {
		t.Errorf("Status() = %+v, want a new process (old %d)", st, pid)
	}
	// Killed and reaped; the test's own timeout bounds the wait.
	for alive(pid) {
		time.Sleep(20 * time.Millisecond)
	}
}

func TestInitErrorFromPlugin(t *testing.T) {
	p, err := plugin.New(nil, plugin.Config{Path: fakeCloud(t), ConfigSource: "config.toml:12: runners[0].autoscaler.plugin_config"})
	if err != nil {
		t.Fatalf("New = %v", err)
	}
	_, err = p.Init(t.Context(), fleet.Settings{Name: "x", Config: map[string]any{"boot_time": "soon"}})
	for _, want := range []string{`boot_time "soon"`, "config.toml:12: runners[0].autoscaler.plugin_config"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Init with a bad boot_time = %v, want it to say %q", err, want)
		}
	}
	if pid := p.PID(); pid != 0 {
		t.Errorf("PID() = %d after a failed Init, want 0 (killed)", pid)
	}
}

func TestResolve(t *testing.T) {
	dir := t.TempDir()
	exe := filepath.Join(dir, "fleeting-plugin-mycloud")
	if err := os.WriteFile(exe, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	// A program named like a cloud's CLI is never taken for its plugin.
	if err := os.WriteFile(filepath.Join(dir, "aws"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	noexec := filepath.Join(dir, "plain")
	if err := os.WriteFile(noexec, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	// An installed plugin, in the layout `fleeting install` writes.
	inst := t.TempDir()
	installed := filepath.Join(inst, "registry.gitlab.com", "gitlab-org", "fleeting", "plugins", "aws", "1.2.3", "plugin")
	if err := os.MkdirAll(filepath.Dir(installed), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(installed, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir)
	tests := []struct {
		name, want, wantErr string
	}{
		{exe, exe, ""},
		{"mycloud", exe, ""},
		{"fleeting-plugin-mycloud", exe, ""},
		{"aws", installed, ""},
		{"aws:1", installed, ""},
		{"aws:1.2.3", installed, ""},
		{"aws:2", "", "installed: 1.2.3"},
		{"aws:2", "", inst},
		{"nocloud", "", "no fleeting-plugin-nocloud in PATH"},
		{"nocloud", "", "drover fleeting install"},
		{filepath.Join(dir, "missing"), "", "no such file"},
		{noexec, "", "not an executable file"},
		{dir + "/", "", "not an executable file"},
		{"", "", "no program named"},
	}
	for _, tt := range tests {
		got, err := plugin.Resolve(tt.name, inst)
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
	if _, err := plugin.New(nil, plugin.Config{Path: noexec}); err == nil {
		t.Error("New with a file that is not executable = nil error")
	}
}

func TestNotAPlugin(t *testing.T) {
	// A program that is not a plugin fails the handshake with an error
	// naming it. (It lingers a moment: one that exits at once trips a
	// data race inside go-plugin's Start under -race.)
	prog := filepath.Join(t.TempDir(), "not-a-plugin")
	if err := os.WriteFile(prog, []byte("#!/bin/sh\necho hello, I am no plugin\nsleep 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	p, err := plugin.New(nil, plugin.Config{Path: prog})
	if err != nil {
		t.Fatalf("New = %v", err)
	}
	_, err = p.Init(t.Context(), fleet.Settings{Name: "x"})
	for _, want := range []string{prog, "Unrecognized remote plugin message", "FLEETING_INSTANCE_GROUP_PLUGIN"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Init of a non-plugin = %v, want it to say %q", err, want)
		}
	}
}

// stopped says whether the process is in the stopped state (T).
func stopped(pid int) bool { return procState(pid) == 'T' }

// alive says whether the process exists and is not a zombie.
func alive(pid int) bool {
	st := procState(pid)
	return st != 0 && st != 'Z'
}

// procState is the process's state letter from /proc, 0 when it is gone.
func procState(pid int) byte {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	// The state is the field after the parenthesised command name.
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return '?'
	}
	return s[i+2]
}

// TestLeftoverPluginKilled: a plugin a dead manager left running (here:
// a provider never shut down) is killed by the next start that uses the
// same PID file; an unrelated process named in it is left alone.
func TestLeftoverPluginKilled(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "plugin.pid")
	cfg := plugin.Config{Path: fakeCloud(t), PIDFile: pidFile}
	old, err := plugin.New(nil, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = old.Shutdown(context.Background()) })
	if _, err := old.Init(t.Context(), fleet.Settings{Config: map[string]any{"name": "a"}}); err != nil {
		t.Fatal(err)
	}
	oldPID := old.PID()
	if b, _ := os.ReadFile(pidFile); strings.TrimSpace(string(b)) != strconv.Itoa(oldPID) {
		t.Fatalf("PID file holds %q, want %d", b, oldPID)
	}
	start(t, nil, cfg.Path, map[string]any{"name": "b"}, fleet.ConnectorConfig{}) // no PID file
	if !alive(oldPID) {
		t.Fatal("a provider without the PID file killed the old plugin")
	}
	next, err := plugin.New(nil, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = next.Shutdown(context.Background()) })
	if _, err := next.Init(t.Context(), fleet.Settings{Config: map[string]any{"name": "a"}}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); alive(oldPID) && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	if alive(oldPID) {
		t.Errorf("leftover plugin %d still runs after the next start", oldPID)
	}
	if b, _ := os.ReadFile(pidFile); strings.TrimSpace(string(b)) != strconv.Itoa(next.PID()) {
		t.Errorf("PID file holds %q, want the new plugin's %d", b, next.PID())
	}
	// A pid reused by another program is not killed.
	sleeper := exec.Command("sleep", "30")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sleeper.Process.Kill(); _ = sleeper.Wait() })
	if err := next.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(pidFile, []byte(strconv.Itoa(sleeper.Process.Pid)), 0o600); err != nil {
		t.Fatal(err)
	}
	if again, err := plugin.New(nil, cfg); err == nil {
		t.Cleanup(func() { _ = again.Shutdown(context.Background()) })
		if _, err := again.Init(t.Context(), fleet.Settings{Config: map[string]any{"name": "a"}}); err != nil {
			t.Fatal(err)
		}
	}
	if !alive(sleeper.Process.Pid) {
		t.Error("a process that is not the plugin was killed")
	}
}

// runningPID is the plugin's process id, the test failed when there is
// none: a signal to pid 0 would go to the test's whole process group
// (go test and the script that runs it included).
func runningPID(t *testing.T, p *plugin.Provider) int {
	t.Helper()
	pid := p.PID()
	if pid <= 0 {
		t.Fatalf("PID() = %d for a running plugin (status %+v)", pid, p.Status())
	}
	return pid
}
