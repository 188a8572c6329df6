package runnerpool

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/drover-ci/drover/internal/config"
	"github.com/drover-ci/drover/internal/executor"
	"github.com/drover-ci/drover/internal/executor/instance"
)

func simConfig(t *testing.T, dir string, runners ...string) *config.Config {
	t.Helper()
	src := "concurrent = 4\n"
	for i, body := range runners {
		src += "[[runners]]\n  url = \"http://127.0.0.1:1\"\n  token = \"glrt-runner" + string(rune('a'+i)) + "xxxx\"\n  executor = \"instance\"\n" + body
	}
	file := filepath.Join(dir, "config.toml")
	cfg, _, err := config.Parse(file, []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

const simRunner = `  [runners.autoscaler]
    plugin = "sim"
#extra
    max_instances = 2
    update_interval = "50ms"
    update_interval_when_expecting = "10ms"
    delete_instances_on_shutdown = true
    [[runners.autoscaler.policy]]
      idle_count = 1
      idle_time = "1h"
`

func TestSetLifecycle(t *testing.T) {
	dir := t.TempDir()
	runners := &instance.Runners{}
	reg := prometheus.NewRegistry()
	set, err := New(Options{ConfigPath: filepath.Join(dir, "config.toml"), Registerer: reg, Runners: runners})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := set.Apply(ctx, simConfig(t, dir, simRunner, simRunner)); err != nil {
		t.Fatal(err)
	}
	a, b := executor.Settings{ShortToken: "runneraxx"}, executor.Settings{ShortToken: "runnerbxx"}
	ra, err := runners.Lookup(a)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := runners.Lookup(b); err != nil {
		t.Fatal(err)
	}

	// A job through the adapter: reserve, acquire on a sim instance, release.
	var res instance.Reservation
	waitFor(t, 5*time.Second, func() bool { res, err = ra.Slots.Reserve(); return err == nil })
	acq, err := ra.Slots.Acquire(ctx, res)
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	if acq.InstanceID() == "" {
		t.Error("acquired slot has no instance")
	}
	ra.Slots.Release(acq)
	ra.Slots.Unreserve(res) // used: a no-op

	// The state file is on by default and lists the instance.
	state := filepath.Join(dir, DefaultStateDir, "runneraxx", "state.json")
	waitFor(t, 5*time.Second, func() bool { _, err := os.Stat(state); return err == nil })

	stateB := filepath.Join(dir, DefaultStateDir, "runnerbxx", "state.json")
	waitFor(t, 5*time.Second, func() bool {
		b, err := os.ReadFile(stateB)
		return err == nil && strings.Contains(string(b), `"id"`)
	})

	// Reload: runner b leaves, runner a's policy changes in place.
	pa := set.Pool("runneraxx")
	next := simConfig(t, dir, strings.Replace(simRunner, "#extra", "    max_use_count = 1", 1))
	if err := set.Apply(ctx, next); err != nil {
		t.Fatal(err)
	}
	if set.Pool("runneraxx") != pa {
		t.Error("a policy change replaced the pool; want SetPolicy")
	}
	if inst, _ := pa.Snapshot(); len(inst) == 0 {
		t.Error("pool lost its instances")
	}
	if _, err := runners.Lookup(b); !errors.Is(err, instance.ErrUnknownRunner) {
		t.Errorf("removed runner still registered: %v", err)
	}
	// The removed runner had delete_instances_on_shutdown: its pool deletes
	// its idle instance in the background and records that.
	waitFor(t, 5*time.Second, func() bool {
		b, err := os.ReadFile(stateB)
		return err == nil && !strings.Contains(string(b), `"id"`)
	})
	// A provider change replaces the pool.
	if err := set.Apply(ctx, simConfig(t, dir, strings.Replace(simRunner, "#extra", "    plugin_config = { boot_time = \"10ms\" }", 1))); err != nil {
		t.Fatal(err)
	}
	if set.Pool("runneraxx") == pa {
		t.Error("a plugin_config change kept the pool")
	}
	// A bad config changes nothing.
	bad := simConfig(t, dir, "  [runners.autoscaler]\n    plugin = \"nope-nope\"\n")
	if err := set.Apply(ctx, bad); err == nil {
		t.Error("Apply accepted an unknown plugin")
	}
	if set.Pool("runneraxx") == nil {
		t.Error("a failed Apply removed a pool")
	}
	if err := set.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if _, err := runners.Lookup(a); err == nil {
		t.Error("runner still registered after Shutdown")
	}
	mfs, err := reg.Gather()
	if err != nil || len(mfs) == 0 {
		t.Errorf("no pool metrics in the registry: %v", err)
	}
}

func TestSlotsRefusalIsNilInterface(t *testing.T) {
	dir := t.TempDir()
	runners := &instance.Runners{}
	set, err := New(Options{ConfigPath: filepath.Join(dir, "config.toml"), Runners: runners})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// max_instances = 0 with nothing idle: no reservation is possible.
	body := "  [runners.autoscaler]\n    plugin = \"sim\"\n    max_instances = 1\n    capacity_per_instance = 1\n    instance_acquire_timeout = \"100ms\"\n    state_storage = { enabled = false }\n"
	if err := set.Apply(ctx, simConfig(t, dir, body)); err != nil {
		t.Fatal(err)
	}
	defer set.Shutdown(ctx)
	r, _ := runners.Lookup(executor.Settings{ShortToken: "runneraxx"})
	var first instance.Reservation
	waitFor(t, 5*time.Second, func() bool { first, err = r.Slots.Reserve(); return err == nil })
	second, err := r.Slots.Reserve()
	if err == nil {
		t.Fatal("second Reserve on a one-slot pool succeeded")
	}
	if second != nil {
		t.Errorf("refused Reserve returned a non-nil reservation %#v", second)
	}
	r.Slots.Unreserve(second) // nil: a no-op
	// Acquire with a cancelled context fails and gives the reservation
	// back; Unreserve afterwards must not count it twice.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	p := set.Pool("runneraxx")
	if _, err := r.Slots.Acquire(cctx, first); err == nil {
		// The sim instance may already be ready: give the slot back.
		t.Skip("slot acquired before the cancelled context was seen")
	}
	r.Slots.Unreserve(first)
	_, d := p.Snapshot()
	if d.Reserved != 0 || d.Waiting != 0 {
		t.Errorf("after a failed Acquire and Unreserve: reserved %d waiting %d, want 0 0", d.Reserved, d.Waiting)
	}
	if _, err := r.Slots.Acquire(ctx, "not a reservation"); err == nil {
		t.Error("Acquire accepted a foreign reservation")
	}
}

func waitFor(t *testing.T, d time.Duration, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if ok() {
			return
		}
	}
	t.Fatal("condition not met in time")
}

// A runner removed by one reload and added back by the next gets a new
// pool, started once the old one has shut down (they share the state
// file), and is registered again.
func TestSetRunnerComesBack(t *testing.T) {
	dir := t.TempDir()
	runners := &instance.Runners{}
	set, err := New(Options{ConfigPath: filepath.Join(dir, "config.toml"), Runners: runners})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	defer set.Shutdown(ctx)
	keep := strings.Replace(simRunner, "delete_instances_on_shutdown = true", "delete_instances_on_shutdown = false", 1)
	if err := set.Apply(ctx, simConfig(t, dir, keep)); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(dir, DefaultStateDir, "runneraxx", "state.json")
	waitFor(t, 5*time.Second, func() bool {
		b, err := os.ReadFile(state)
		return err == nil && strings.Contains(string(b), `"id"`)
	})
	first := set.Pool("runneraxx")
	if err := set.Apply(ctx, simConfig(t, dir)); err != nil {
		t.Fatal(err)
	}
	if err := set.Apply(ctx, simConfig(t, dir, keep)); err != nil {
		t.Fatal(err)
	}
	second := set.Pool("runneraxx")
	if second == nil || second == first {
		t.Fatalf("pool after coming back: %p (first %p)", second, first)
	}
	if _, err := runners.Lookup(executor.Settings{ShortToken: "runneraxx"}); err != nil {
		t.Errorf("runner not registered again: %v", err)
	}
}

// drover run's start and every reload log a warning for a pool that
// concurrent keeps from filling (Apply logs the runners' warnings).
func TestApplyLogsCapWarning(t *testing.T) {
	dir := t.TempDir()
	// slog's handler serialises its writes; the log is read once the
	// pools have stopped.
	var log strings.Builder
	logger := slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelWarn}))
	set, err := New(Options{ConfigPath: filepath.Join(dir, "config.toml"), Logger: logger, Runners: &instance.Runners{}})
	if err != nil {
		t.Fatal(err)
	}
	capped := strings.Replace(simRunner, "#extra\n    max_instances = 2\n", "    max_instances = 3\n    capacity_per_instance = 2\n", 1)
	for _, step := range []string{"start", "reload"} {
		if err := set.Apply(t.Context(), simConfig(t, dir, capped)); err != nil {
			t.Fatalf("Apply (%s): %v", step, err)
		}
	}
	if err := set.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	const warning = `level=WARN msg="` // then the file, line and key
	const text = `runs at most 4 jobs at once (concurrent = 4), fewer than the 6 slots of max_instances 3 × capacity_per_instance 2`
	var logged int
	for line := range strings.Lines(log.String()) {
		if strings.Contains(line, warning) && strings.Contains(line, "runners[0].autoscaler.max_instances: ") && strings.Contains(line, text) {
			logged++
		}
	}
	if logged != 2 {
		t.Errorf("the cap warning logged %d times, want 2 (start and reload):\n%s", logged, log.String())
	}
}
