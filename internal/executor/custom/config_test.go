package custom

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/drover-ci/drover/internal/config"
	"github.com/drover-ci/drover/internal/executor"
)

// script writes an executable shell script named name in dir.
func script(t testing.TB, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestParseConfig(t *testing.T) {
	dir := t.TempDir()
	run := script(t, dir, "run", "exit 0\n")
	cfgExec := script(t, dir, "config", "echo {}\n")
	plain := filepath.Join(dir, "plain")
	if err := os.WriteFile(plain, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	head := "[[runners]]\n  name = \"c\"\n  url = \"http://x\"\n  token = \"glrt-abc\"\n  executor = \"custom\"\n"
	dirs := "  builds_dir = \"/b\"\n  cache_dir = \"/c\"\n"
	for _, tc := range []struct {
		name, body string
		want       Config
		err        string // the whole error; "" = none
	}{
		{"run_exec alone", dirs + "  [runners.custom]\n    run_exec = \"" + run + "\"\n", Config{RunExec: run}, ""},
		{"every key", "  [runners.custom]\n" +
			"    config_exec = \"" + cfgExec + "\"\n    config_args = [\"a\"]\n    config_exec_timeout = 5\n" +
			"    prepare_exec = \"" + run + "\"\n    prepare_args = [\"p\", \"q\"]\n    prepare_exec_timeout = 6\n" +
			"    run_exec = \"" + run + "\"\n    run_args = [\"r\"]\n" +
			"    cleanup_exec = \"" + run + "\"\n    cleanup_args = []\n    cleanup_exec_timeout = 7\n" +
			"    resume_exec = \"" + run + "\"\n    resume_args = [\"s\"]\n" +
			"    graceful_kill_timeout = 8\n    force_kill_timeout = 9\n",
			Config{
				ConfigExec: cfgExec, ConfigArgs: []string{"a"}, ConfigExecTimeout: 5 * time.Second,
				PrepareExec: run, PrepareArgs: []string{"p", "q"}, PrepareExecTimeout: 6 * time.Second,
				RunExec: run, RunArgs: []string{"r"},
				CleanupExec: run, CleanupArgs: []string{}, CleanupExecTimeout: 7 * time.Second,
				ResumeExec: run, ResumeArgs: []string{"s"},
				GracefulKillTimeout: 8 * time.Second, ForceKillTimeout: 9 * time.Second,
			}, ""},
		{"a driver on PATH", dirs + "  [runners.custom]\n    run_exec = \"sh\"\n", Config{RunExec: "sh"}, ""},
		{"no table", dirs, Config{}, `config.toml:5: runners[0].executor: executor "custom" needs a [runners.custom] table with at least run_exec`},
		{"no run_exec", dirs + "  [runners.custom]\n    config_exec = \"" + cfgExec + "\"\n", Config{}, "config.toml:8: runners[0].custom: run_exec is required: the driver that runs each stage script"},
		{"unknown key", dirs + "  [runners.custom]\n    run_exec = \"" + run + "\"\n    run_exex = \"x\"\n", Config{}, "config.toml:10: runners[0].custom.run_exex: unknown key (known: " + configKeys + ")"},
		{"missing driver", dirs + "  [runners.custom]\n    run_exec = \"" + run + "\"\n    cleanup_exec = \"" + dir + "/nope\"\n", Config{},
			"config.toml:10: runners[0].custom.cleanup_exec: driver " + dir + "/nope: no such file or directory"},
		{"driver not executable", dirs + "  [runners.custom]\n    run_exec = \"" + plain + "\"\n", Config{},
			"config.toml:9: runners[0].custom.run_exec: driver " + plain + ": permission denied"},
		{"driver not on PATH", dirs + "  [runners.custom]\n    run_exec = \"no-such-driver-x\"\n", Config{},
			"config.toml:9: runners[0].custom.run_exec: driver no-such-driver-x: executable file not found in $PATH"},
		{"timeout not a number", dirs + "  [runners.custom]\n    run_exec = \"" + run + "\"\n    prepare_exec_timeout = \"1h\"\n", Config{},
			"config.toml:10: runners[0].custom.prepare_exec_timeout: must be an integer, not a string"},
		{"zero timeout", dirs + "  [runners.custom]\n    run_exec = \"" + run + "\"\n    graceful_kill_timeout = 0\n", Config{},
			"config.toml:10: runners[0].custom.graceful_kill_timeout: must be at least 1 (seconds)"},
		{"args not a list", dirs + "  [runners.custom]\n    run_exec = \"" + run + "\"\n    run_args = \"-x\"\n", Config{},
			"config.toml:10: runners[0].custom.run_args: must be an array of strings, not a string"},
		{"no builds_dir without config_exec", "  [runners.custom]\n    run_exec = \"" + run + "\"\n", Config{},
			`config.toml:5: runners[0].executor: executor "custom" needs builds_dir in [[runners]] (or a config_exec that prints it)`},
		{"config_exec names the directories", "  [runners.custom]\n    config_exec = \"" + cfgExec + "\"\n    run_exec = \"" + run + "\"\n", Config{ConfigExec: cfgExec, RunExec: run}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, _, err := config.Parse("config.toml", []byte(head+tc.body))
			if err != nil {
				t.Fatalf("config.Parse = %v", err)
			}
			got, err := ParseConfig("config.toml", &cfg.Runners[0])
			if tc.err != "" {
				var ce *config.Error
				if err == nil || err.Error() != tc.err || !errors.As(err, &ce) {
					t.Fatalf("ParseConfig = %v, want *config.Error %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseConfig = %v", err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("ParseConfig (-want +got):\n%s", diff)
			}
		})
	}
}

func TestConfigDefaults(t *testing.T) {
	got := Config{PrepareExecTimeout: time.Second}.withDefaults()
	want := Config{ConfigExecTimeout: time.Hour, PrepareExecTimeout: time.Second, CleanupExecTimeout: time.Hour,
		GracefulKillTimeout: 10 * time.Minute, ForceKillTimeout: 10 * time.Second}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("withDefaults (-want +got):\n%s", diff)
	}
}

func TestRunnersApplyAndLookup(t *testing.T) {
	run := script(t, t.TempDir(), "run", "exit 0\n")
	src := "[[runners]]\n  url = \"http://x\"\n  token = \"glrt-abcdefghij\"\n  executor = \"custom\"\n  builds_dir = \"/b\"\n  cache_dir = \"/c\"\n" +
		"  [runners.custom]\n    run_exec = \"" + run + "\"\n" +
		"[[runners]]\n  url = \"http://x\"\n  token = \"glrt-zzzzzzzzzz\"\n  executor = \"shell\"\n"
	cfg, _, err := config.Parse("config.toml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	var rs Runners
	if err := rs.Apply("config.toml", cfg); err != nil {
		t.Fatalf("Apply = %v", err)
	}
	c, err := rs.Lookup(executor.Settings{ShortToken: "abcdefghi"})
	if err != nil || c.RunExec != run {
		t.Errorf("Lookup(custom runner) = %+v, %v", c, err)
	}
	if _, err := rs.Lookup(executor.Settings{ShortToken: "zzzzzzzzz"}); !errors.Is(err, ErrUnknownRunner) {
		t.Errorf("Lookup(shell runner) = %v, want ErrUnknownRunner", err)
	}
	if !strings.HasPrefix(configKeys, "cleanup_args") {
		t.Error("configKeys should be sorted")
	}
}
