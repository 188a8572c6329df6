package custom

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/clock"
	"github.com/drover-ci/drover/internal/executor"
	"github.com/drover-ci/drover/internal/executor/executortest"
)

// newExec returns an executor over cfg and options for it.
func newExec(t *testing.T, cfg Config, clk clock.Clock) (*Executor, executor.PrepareOptions, *executortest.Trace) {
	t.Helper()
	p, err := NewProvider(Options{Lookup: func(executor.Settings) (Config, error) { return cfg, nil }, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	tr := &executortest.Trace{}
	job := &api.JobResponse{ID: 42, Token: "jt", JobInfo: api.JobInfo{ProjectFullPath: "group/proj"},
		Variables: api.Variables{{Key: "CI_JOB_ID", Value: "42"}, {Key: "MY_VAR", Value: "a b"}},
		Services:  []api.Image{{Name: "postgres:16", Alias: "db,pg", Variables: api.Variables{{Key: "P", Value: "1"}}}},
	}
	opts := executor.PrepareOptions{Job: job, Trace: tr, Settings: executor.Settings{
		ShortToken: "abcdefghi", ConcurrentID: 3, BuildsDir: "/runner/builds", CacheDir: "/runner/cache",
	}}
	return p.Create().(*Executor), opts, tr
}

// TestStagesAndEnvironment: config_exec's output sets the directories,
// shell and job_env; every call gets the job's variables as CUSTOM_ENV_*
// and the protocol's variables; run_exec gets the script and GitLab's
// stage name; cleanup_exec runs last and the temporary directory goes.
func TestStagesAndEnvironment(t *testing.T) {
	dir := t.TempDir()
	calls := filepath.Join(dir, "calls")
	rec := `echo "$(basename "$0") $*" >>` + calls + `
for v in CUSTOM_ENV_CI_JOB_ID CUSTOM_ENV_MY_VAR CUSTOM_ENV_CI_PROJECT_DIR CUSTOM_ENV_CI_BUILDS_DIR CUSTOM_ENV_CI_JOB_SERVICES \
	BUILD_FAILURE_EXIT_CODE SYSTEM_FAILURE_EXIT_CODE FROM_CONFIG; do
	eval "echo \"  $v=\${$v-unset}\"" >>` + calls + `
done
echo "  TMPDIR is cwd: $([ "$TMPDIR" = "$(pwd)" ] && echo yes)" >>` + calls + `
echo "  exit code file in TMPDIR: $([ "$(dirname "$BUILD_EXIT_CODE_FILE")" = "$TMPDIR" ] && echo yes)" >>` + calls + `
echo "  job response: $(grep -c '"id":42' "$JOB_RESPONSE_FILE")" >>` + calls + `
`
	cfg := Config{
		ConfigExec: script(t, dir, "config", rec+`echo "config stderr" >&2
echo '{"builds_dir": "/vm/builds", "cache_dir": "/vm/cache", "shell": "sh", "hostname": "vm", "driver": {"name": "rec", "version": "1.0"}, "job_env": {"FROM_CONFIG": "yes"}}'
`),
		ConfigArgs:  []string{"c1"},
		PrepareExec: script(t, dir, "prepare", rec+"echo prepared\n"),
		RunExec:     script(t, dir, "run", rec+`shift 2; echo "script: $(head -c 11 "$1")"; echo "stage $2"`+"\n"),
		RunArgs:     []string{"r1", "r2"},
		CleanupExec: script(t, dir, "cleanup", rec),
	}
	e, opts, tr := newExec(t, cfg, nil)
	ctx := t.Context()
	if err := e.Prepare(ctx, opts); err != nil {
		t.Fatalf("Prepare = %v\n%s", err, tr)
	}
	tmp := e.tmpDir
	if got, want := e.Paths(), (executor.Paths{BuildsDir: "/vm/builds", CacheDir: "/vm/cache", ProjectDir: "/vm/builds/group/proj"}); got != want {
		t.Errorf("Paths() = %+v, want %+v", got, want)
	}
	if e.Shell() != "sh" {
		t.Errorf("Shell() = %q, want sh (config_exec's)", e.Shell())
	}
	for _, stage := range []executor.Stage{executor.StagePrepareScript, executor.StageStepScript, "step_release", executor.StageAfterScript} {
		if err := e.Run(ctx, executor.Command{Stage: stage, Script: "echo hello " + string(stage)}); err != nil {
			t.Fatalf("Run(%s) = %v", stage, err)
		}
	}
	e.Cleanup(ctx)
	if _, err := os.Stat(tmp); !os.IsNotExist(err) {
		t.Errorf("temporary directory %s after Cleanup: %v", tmp, err)
	}
	for _, want := range []string{"config stderr\n", "Using Custom executor with driver rec 1.0...\n", "prepared\n",
		"script: echo hello \nstage prepare_script\n", "stage build_script\n", "stage step_release\n", "stage after_script\n"} {
		if !strings.Contains(tr.String(), want) {
			t.Errorf("trace lacks %q:\n%s", want, tr)
		}
	}
	b, err := os.ReadFile(calls)
	if err != nil {
		t.Fatal(err)
	}
	services := `[{"name":"postgres:16","alias":"db","entrypoint":null,"command":null,"variables":{"P":"1"}}]`
	common := func(project, builds, fromConfig string) string {
		return "  CUSTOM_ENV_CI_JOB_ID=42\n  CUSTOM_ENV_MY_VAR=a b\n  CUSTOM_ENV_CI_PROJECT_DIR=" + project + "\n  CUSTOM_ENV_CI_BUILDS_DIR=" + builds +
			"\n  CUSTOM_ENV_CI_JOB_SERVICES=" + services + "\n  BUILD_FAILURE_EXIT_CODE=1\n  SYSTEM_FAILURE_EXIT_CODE=2\n  FROM_CONFIG=" + fromConfig +
			"\n  TMPDIR is cwd: yes\n  exit code file in TMPDIR: yes\n  job response: 1\n"
	}
	after := common("/vm/builds/group/proj", "/vm/builds", "yes")
	var want strings.Builder
	want.WriteString("config c1\n" + common("", "/runner/builds", "unset"))
	want.WriteString("prepare \n" + after)
	for i, st := range []string{"prepare_script", "build_script", "step_release", "after_script"} {
		want.WriteString("run r1 r2 " + filepath.Join(tmp, "script-00"+string(rune('1'+i))) + " " + st + "\n" + after)
	}
	want.WriteString("cleanup \n" + after)
	if diff := cmp.Diff(want.String(), string(b)); diff != "" {
		t.Errorf("call log (-want +got):\n%s", diff)
	}
}

// TestExitCodes: run_exec's exit codes map as GitLab Runner maps them.
func TestExitCodes(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		build      int    // a *BuildError with this exit code; 0 = none
		err        string // else an error with this text; "" = nil
	}{
		{"success", "exit 0", 0, ""},
		{"build failure", `exit "$BUILD_FAILURE_EXIT_CODE"`, 1, ""},
		{"build failure with the script's code", `echo 42 >"$BUILD_EXIT_CODE_FILE"; exit "$BUILD_FAILURE_EXIT_CODE"`, 42, ""},
		{"build failure, garbage code", `echo forty >"$BUILD_EXIT_CODE_FILE"; exit "$BUILD_FAILURE_EXIT_CODE"`, 0, `BUILD_EXIT_CODE_FILE holds "forty", not an integer`},
		{"system failure", `exit "$SYSTEM_FAILURE_EXIT_CODE"`, 0, "run_exec: the driver reported a system failure (exit code 2, SYSTEM_FAILURE_EXIT_CODE)"},
		{"unknown code", "exit 7", 0, "run_exec: unknown custom executor exit code 7"},
		{"killed", "kill -KILL $$", 0, "run_exec: the driver was killed by a signal"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			e, opts, _ := newExec(t, Config{RunExec: script(t, dir, "run", tc.body+"\n")}, nil)
			if err := e.Prepare(t.Context(), opts); err != nil {
				t.Fatal(err)
			}
			defer e.Cleanup(t.Context())
			err := e.Run(t.Context(), executor.Command{Stage: executor.StageStepScript, Script: "true"})
			var be *executor.BuildError
			switch {
			case tc.build != 0:
				if !errors.As(err, &be) || be.ExitCode != tc.build || be.Reason != "" {
					t.Errorf("Run = %v, want a script failure with exit code %d", err, tc.build)
				}
			case tc.err != "":
				if err == nil || errors.As(err, &be) || !strings.Contains(err.Error(), tc.err) {
					t.Errorf("Run = %v, want a system failure with %q", err, tc.err)
				}
			case err != nil:
				t.Errorf("Run = %v, want nil", err)
			}
		})
	}
}

// TestConfigExecInvalidOutput: output that is not a configuration fails
// the job with runner_system_failure, its first lines in the log, and
// cleanup_exec still runs.
func TestConfigExecInvalidOutput(t *testing.T) {
	dir := t.TempDir()
	cleaned := filepath.Join(dir, "cleaned")
	e, opts, tr := newExec(t, Config{
		ConfigExec:  script(t, dir, "config", "echo 'builds_dir: /x'\necho 'line two'\n"),
		RunExec:     script(t, dir, "run", "exit 0\n"),
		CleanupExec: script(t, dir, "cleanup", "touch "+cleaned+"\n"),
	}, nil)
	err := e.Prepare(t.Context(), opts)
	var be *executor.BuildError
	if !errors.As(err, &be) || be.Reason != api.RunnerSystemFailure {
		t.Fatalf("Prepare = %v, want a *BuildError with reason runner_system_failure", err)
	}
	for _, want := range []string{"ERROR: config_exec printed no valid configuration: not a JSON object", "builds_dir: /x\nline two\n"} {
		if !strings.Contains(tr.String(), want) {
			t.Errorf("trace lacks %q:\n%s", want, tr)
		}
	}
	e.Cleanup(t.Context())
	if _, err := os.Stat(cleaned); err != nil {
		t.Errorf("cleanup_exec did not run after a failed config_exec: %v", err)
	}
}

// waitTimers waits until clk has n active timers: the code under test is
// waiting on them.
func waitTimers(t *testing.T, clk *clock.Fake, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for clk.Pending() < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d timers pending, want %d", clk.Pending(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestHangingPrepareKilled: a prepare_exec that ignores SIGTERM gets it
// after prepare_exec_timeout, SIGKILL after graceful_kill_timeout, and
// cleanup_exec still runs; all on the fake clock.
func TestHangingPrepareKilled(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "log")
	clk := clock.NewFake(time.Unix(1e9, 0))
	e, opts, _ := newExec(t, Config{
		PrepareExec: script(t, dir, "prepare", `trap 'echo TERM >>`+log+`' TERM
echo started >>`+log+`
while :; do sleep 0.01; done
`),
		PrepareExecTimeout:  30 * time.Second,
		GracefulKillTimeout: 5 * time.Second,
		RunExec:             script(t, dir, "run", "exit 0\n"),
		CleanupExec:         script(t, dir, "cleanup", "echo cleanup >>"+log+"\n"),
	}, clk)
	errc := make(chan error, 1)
	go func() { errc <- e.Prepare(context.Background(), opts) }()

	waitFile := func(want string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			b, _ := os.ReadFile(log)
			if string(b) == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("log = %q, want %q", b, want)
			}
			time.Sleep(time.Millisecond)
		}
	}
	waitFile("started\n")
	waitTimers(t, clk, 1) // prepare_exec_timeout
	clk.Advance(29 * time.Second)
	select {
	case err := <-errc:
		t.Fatalf("Prepare = %v before its timeout", err)
	default:
	}
	clk.Advance(time.Second)
	waitFile("started\nTERM\n")
	waitTimers(t, clk, 1) // graceful_kill_timeout
	clk.Advance(5 * time.Second)
	err := <-errc
	if !errors.Is(err, errTimeout) || !strings.Contains(err.Error(), "prepare_exec: timed out after 30s") {
		t.Errorf("Prepare = %v, want prepare_exec timed out", err)
	}
	e.Cleanup(context.Background())
	waitFile("started\nTERM\ncleanup\n")
}

// TestCancelKillsProcessGroup: cancelling Run sends SIGTERM to the
// driver's whole process group, and a driver that exits on it ends Run
// at once with the cancellation.
func TestCancelKillsProcessGroup(t *testing.T) {
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "child")
	e, opts, _ := newExec(t, Config{RunExec: script(t, dir, "run", "sleep 600 & echo $! >"+pidFile+".tmp; mv "+pidFile+".tmp "+pidFile+"; wait\n")}, nil)
	if err := e.Prepare(t.Context(), opts); err != nil {
		t.Fatal(err)
	}
	defer e.Cleanup(t.Context())
	ctx, cancel := context.WithCancelCause(t.Context())
	errc := make(chan error, 1)
	go func() { errc <- e.Run(ctx, executor.Command{Stage: executor.StageStepScript, Script: "true"}) }()
	var pid string
	deadline := time.Now().Add(10 * time.Second)
	for pid == "" {
		b, _ := os.ReadFile(pidFile)
		pid = strings.TrimSpace(string(b))
		if time.Now().After(deadline) {
			t.Fatal("the driver's child did not start")
		}
		time.Sleep(time.Millisecond)
	}
	cause := errors.New("job canceled")
	cancel(cause)
	if err := <-errc; !errors.Is(err, cause) {
		t.Errorf("Run = %v, want the cancellation", err)
	}
	// The group's sleep got SIGTERM with its shell; it is gone or a zombie
	// about to be reaped by init.
	deadline = time.Now().Add(10 * time.Second)
	for {
		b, err := os.ReadFile("/proc/" + pid + "/stat")
		if err != nil || strings.Contains(string(b), ") Z ") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the driver's child %s still runs after the cancel", pid)
		}
		time.Sleep(time.Millisecond)
	}
}
