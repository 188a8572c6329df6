package shell

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/executor"
	"github.com/drover-ci/drover/internal/executor/executortest"
)

// helperEnv, when set, makes the test binary a "manager" process: it runs
// one stage with a shell executor and saves checkpoints, until the test
// kills it with SIGKILL.
const helperEnv = "DROVER_SHELL_TEST_MANAGER"

// TestMain runs the manager helper process when asked to, else the tests
// with an empty HOME: stages are login shells, which read the user's
// profile, and what this machine's profile does (slow tool set-ups, PATH
// changes) is no part of the tests; TestLoginShell sets HOME of its own.
func TestMain(m *testing.M) {
	if cfg := os.Getenv(helperEnv); cfg != "" {
		if err := runManager(cfg); err != nil {
			fmt.Fprintln(os.Stderr, "manager helper:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(executortest.RunWithEmptyHome(m))
}

// managerConfig is what the helper process gets.
type managerConfig struct {
	Dir    string         `json:"dir"` // trace and checkpoint files
	Builds string         `json:"builds"`
	Stage  executor.Stage `json:"stage"`
	Script string         `json:"script"`
	// OnlyBeforeRun: save a checkpoint only before Run (as if the manager
	// died right after starting the stage, before saving again).
	OnlyBeforeRun bool `json:"only_before_run"`
}

// checkpoint is what the helper saves, as a manager saves it in its store:
// the executor's state, the stage running and its output offset, and the
// size of the trace that matches them (the "acknowledged" trace).
type checkpoint struct {
	State     json.RawMessage `json:"state"`
	Stage     executor.Stage  `json:"stage"`
	From      int64           `json:"from"`
	TraceSize int64           `json:"trace_size"`
}

func runManager(cfgText string) error {
	var cfg managerConfig
	if err := json.Unmarshal([]byte(cfgText), &cfg); err != nil {
		return err
	}
	trace, err := os.OpenFile(filepath.Join(cfg.Dir, "trace"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	ctx := context.Background()
	e := (&Provider{GracePeriod: time.Second}).Create().(*Executor)
	err = e.Prepare(ctx, executor.PrepareOptions{Job: testJob(), Trace: trace,
		Settings: executor.Settings{Shell: "bash", ShortToken: "abcdefghi", Resumable: true, BuildsDir: cfg.Builds, CacheDir: filepath.Join(cfg.Builds, "cache")}})
	if err != nil {
		return err
	}
	save := func() error {
		var cp checkpoint
		err := e.OutputCheckpoint(func(state json.RawMessage, stage executor.Stage, offset int64) {
			st, err := trace.Stat()
			if err != nil {
				panic(err)
			}
			cp = checkpoint{State: state, Stage: stage, From: offset, TraceSize: st.Size()}
		})
		if err != nil {
			return err
		}
		b, err := json.Marshal(cp)
		if err != nil {
			return err
		}
		tmp := filepath.Join(cfg.Dir, "checkpoint.tmp")
		if err := os.WriteFile(tmp, b, 0o600); err != nil {
			return err
		}
		return os.Rename(tmp, filepath.Join(cfg.Dir, "checkpoint.json"))
	}
	if err := save(); err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx, executor.Command{Stage: cfg.Stage, Script: cfg.Script}) }()
	for {
		select {
		case err := <-done:
			return fmt.Errorf("the stage ended before the test killed the manager: %v", err)
		case <-time.After(20 * time.Millisecond):
		}
		if !cfg.OnlyBeforeRun {
			if err := save(); err != nil {
				return err
			}
		}
	}
}

// manager is a helper process running a stage.
type manager struct {
	cmd *exec.Cmd
	dir string
}

func startManager(t *testing.T, cfg managerConfig) *manager {
	t.Helper()
	b, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+string(b))
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start manager helper: %v", err)
	}
	m := &manager{cmd: cmd, dir: cfg.Dir}
	t.Cleanup(m.kill)
	return m
}

// kill kills the manager with SIGKILL, as a crash would.
func (m *manager) kill() {
	_ = m.cmd.Process.Signal(syscall.SIGKILL)
	_ = m.cmd.Wait()
}

func (m *manager) checkpoint(t *testing.T) checkpoint {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(m.dir, "checkpoint.json"))
	if err != nil {
		t.Fatalf("read checkpoint: %v", err)
	}
	var cp checkpoint
	if err := json.Unmarshal(b, &cp); err != nil {
		t.Fatalf("checkpoint: %v", err)
	}
	return cp
}

// waitOutput waits until the stage's output holds want.
func (m *manager) waitOutput(t *testing.T, want string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if b, _ := os.ReadFile(filepath.Join(m.dir, "trace")); strings.Contains(string(b), want) {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("the stage never printed %q", want)
}

// crash kills the manager and keeps of its trace what the last checkpoint
// says was acknowledged. It returns the checkpoint.
func (m *manager) crash(t *testing.T) checkpoint {
	t.Helper()
	m.kill()
	cp := m.checkpoint(t)
	if err := os.Truncate(filepath.Join(m.dir, "trace"), cp.TraceSize); err != nil {
		t.Fatal(err)
	}
	return cp
}

// restore builds executor B from the checkpoint, its trace appending to the
// manager's.
func (m *manager) restore(t *testing.T, cp checkpoint) (*Executor, *os.File) {
	t.Helper()
	trace, err := os.OpenFile(filepath.Join(m.dir, "trace"), os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { trace.Close() })
	e := (&Provider{GracePeriod: 300 * time.Millisecond}).Create().(*Executor)
	if err := e.Restore(t.Context(), executor.PrepareOptions{Job: testJob(), Trace: trace}, cp.State); err != nil {
		t.Fatalf("Restore() = %v, want nil", err)
	}
	t.Cleanup(func() { e.Cleanup(context.Background()) })
	return e, trace
}

func (m *manager) trace(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(m.dir, "trace"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// stagePID returns the wrapper pid (the process group) of the stage the
// checkpoint's state shows running.
func stagePID(t *testing.T, cp checkpoint) int {
	t.Helper()
	st, err := parseState(cp.State)
	if err != nil || st.Stage == nil {
		t.Fatalf("checkpoint state = %s, %v; want a running stage", cp.State, err)
	}
	return st.Stage.PID
}

// numbered prints "line 1" to "line n", one every 50ms, then exits with
// code.
func numbered(n, code int) string {
	return fmt.Sprintf("i=1\nwhile [ $i -le %d ]; do echo \"line $i\"; i=$((i+1)); sleep 0.05; done\nexit %d\n", n, code)
}

func lines(from, to int) string {
	var b strings.Builder
	for i := from; i <= to; i++ {
		fmt.Fprintf(&b, "line %d\n", i)
	}
	return b.String()
}

// stageOutput is the part of the trace from the stage's first line on.
func stageOutput(t *testing.T, trace string) string {
	t.Helper()
	i := strings.Index(trace, "line 1\n")
	if i < 0 {
		t.Fatalf("trace has no stage output:\n%q", trace)
	}
	return trace[i:]
}

func assertGroupGone(t *testing.T, pgid int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for groupAlive(pgid) {
		if time.Now().After(deadline) {
			t.Errorf("process group %d still has live processes", pgid)
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func newManager(t *testing.T, script string, onlyBeforeRun bool) *manager {
	t.Helper()
	dir := t.TempDir()
	m := startManager(t, managerConfig{Dir: dir, Builds: filepath.Join(dir, "builds"), Stage: executor.StageStepScript, Script: script, OnlyBeforeRun: onlyBeforeRun})
	t.Cleanup(func() { m.killStages() })
	return m
}

// killStages kills what is left of the stages the manager started, should
// a test have failed before it ended them: any live wrapper whose command
// line names the job's script directory.
func (m *manager) killStages() {
	b, err := os.ReadFile(filepath.Join(m.dir, "checkpoint.json"))
	if err != nil {
		return
	}
	var cp checkpoint
	if json.Unmarshal(b, &cp) != nil {
		return
	}
	st, err := parseState(cp.State)
	if err != nil {
		return
	}
	pids, _ := filepath.Glob(filepath.Join(st.ScriptDir, "*.pid"))
	for _, f := range pids {
		line, _ := readLine(f)
		pid, err := strconv.Atoi(line)
		if err != nil {
			continue
		}
		if cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); err == nil && strings.Contains(string(cmdline), st.ScriptDir) {
			_ = syscall.Kill(-pid, syscall.SIGKILL)
		}
	}
}

// TestResumeAfterManagerKill runs a stage in a manager process, kills that
// process with SIGKILL mid-stage, and resumes the stage here from the
// manager's last checkpoint: every line of the stage is in the trace
// exactly once and in order, its exit code comes through, and the next
// stage runs normally.
func TestResumeAfterManagerKill(t *testing.T) {
	for _, tc := range []struct {
		name string
		code int
	}{
		{"success", 0},
		{"exit code 3", 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m := newManager(t, numbered(40, tc.code), false)
			m.waitOutput(t, "line 8\n")
			cp := m.crash(t)
			if cp.Stage != executor.StageStepScript || cp.From == 0 {
				t.Fatalf("checkpoint = stage %q from %d; want step_script and some output", cp.Stage, cp.From)
			}
			pgid := stagePID(t, cp)
			if !groupAlive(pgid) {
				t.Fatalf("the stage (group %d) died with its manager", pgid)
			}
			e, _ := m.restore(t, cp)
			err := e.Resume(t.Context(), executor.Command{Stage: cp.Stage}, cp.From)
			var be *executor.BuildError
			switch {
			case tc.code == 0 && err != nil:
				t.Errorf("Resume() = %v, want nil", err)
			case tc.code != 0 && (!errors.As(err, &be) || be.ExitCode != tc.code):
				t.Errorf("Resume() = %v, want *BuildError with exit code %d", err, tc.code)
			}
			if got, want := stageOutput(t, m.trace(t)), lines(1, 40); got != want {
				t.Errorf("stage output in the trace:\n%q\nwant every line once:\n%q", got, want)
			}
			assertGroupGone(t, pgid)

			// The remaining stages run as usual.
			if err := e.Run(t.Context(), executor.Command{Stage: executor.StageAfterScript, Script: "echo after; pwd"}); err != nil {
				t.Errorf("Run(after_script) = %v, want nil", err)
			}
			if got, want := m.trace(t), "line 40\nafter\n"+e.Paths().ProjectDir+"\n"; !strings.HasSuffix(got, want) {
				t.Errorf("trace ends %q, want %q", got[max(0, len(got)-80):], want)
			}
		})
	}
}

// TestResumeFinishedWhileDown: the stage ended while no manager ran;
// Resume returns at once with its result and the output not yet copied.
func TestResumeFinishedWhileDown(t *testing.T) {
	t.Parallel()
	m := newManager(t, numbered(12, 4), false)
	m.waitOutput(t, "line 3\n")
	cp := m.crash(t)
	pgid := stagePID(t, cp)
	assertGroupGone(t, pgid) // waits for the stage's own end
	e, _ := m.restore(t, cp)
	start := time.Now()
	err := e.Resume(t.Context(), executor.Command{Stage: cp.Stage}, cp.From)
	if d := time.Since(start); d > time.Second {
		t.Errorf("Resume of a finished stage took %v", d)
	}
	var be *executor.BuildError
	if !errors.As(err, &be) || be.ExitCode != 4 {
		t.Errorf("Resume() = %v, want *BuildError with exit code 4", err)
	}
	if got, want := stageOutput(t, m.trace(t)), lines(1, 12); got != want {
		t.Errorf("stage output:\n%q\nwant:\n%q", got, want)
	}
}

// TestResumeVanished: the stage's processes were killed while no manager
// ran: Resume reports ErrStageVanished after copying what the stage wrote.
func TestResumeVanished(t *testing.T) {
	t.Parallel()
	m := newManager(t, numbered(100, 0), false)
	m.waitOutput(t, "line 5\n")
	cp := m.crash(t)
	pgid := stagePID(t, cp)
	if err := syscall.Kill(-pgid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill the stage's group: %v", err)
	}
	assertGroupGone(t, pgid)
	e, _ := m.restore(t, cp)
	err := e.Resume(t.Context(), executor.Command{Stage: cp.Stage}, cp.From)
	if !errors.Is(err, executor.ErrStageVanished) {
		t.Fatalf("Resume() = %v, want ErrStageVanished", err)
	}
	out := stageOutput(t, m.trace(t))
	n := strings.Count(out, "\n")
	if want := lines(1, n); out != want || n < 5 {
		t.Errorf("stage output:\n%q\nwant lines 1 to %d (at least 5) once each", out, n)
	}
}

// TestResumeCancel: cancelling Resume kills the stage's whole group.
func TestResumeCancel(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bg := filepath.Join(dir, "bgpid")
	m := newManager(t, "sleep 100 &\necho $! > "+bg+"\n"+numbered(1000, 0), false)
	m.waitOutput(t, "line 2\n")
	cp := m.crash(t)
	pgid := stagePID(t, cp)
	e, _ := m.restore(t, cp)
	ctx, cancel := context.WithCancel(t.Context())
	time.AfterFunc(300*time.Millisecond, cancel)
	err := e.Resume(ctx, executor.Command{Stage: cp.Stage}, cp.From)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Resume() after cancel = %v, want context.Canceled wrapped", err)
	}
	if groupAlive(pgid) {
		t.Errorf("process group %d still alive after Resume returned", pgid)
	}
	if pid := executortest.WaitFile(t, bg); executortest.Alive(t, pid) {
		t.Errorf("background sleep %s survived the cancel", pid)
	}
}

// TestResumeStageStartedAfterCheckpoint: the manager saved its state before
// starting the stage and died right after starting it. Resuming the next
// stage re-attaches to the one started instead of running it twice.
func TestResumeStageStartedAfterCheckpoint(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	marker := filepath.Join(dir, "starts")
	m := newManager(t, "echo started >> "+marker+"\n"+numbered(20, 0), true)
	m.waitOutput(t, "line 4\n")
	cp := m.crash(t)
	if cp.Stage != "" || cp.From != 0 {
		t.Fatalf("checkpoint = stage %q from %d; want none, 0", cp.Stage, cp.From)
	}
	e, _ := m.restore(t, cp)
	if err := e.Resume(t.Context(), executor.Command{Stage: executor.StageStepScript, Script: "echo started >> " + marker + "\n" + numbered(20, 0)}, 0); err != nil {
		t.Fatalf("Resume() = %v, want nil", err)
	}
	if got, want := stageOutput(t, m.trace(t)), lines(1, 20); got != want {
		t.Errorf("stage output:\n%q\nwant:\n%q", got, want)
	}
	if b, _ := os.ReadFile(marker); string(b) != "started\n" {
		t.Errorf("the stage started %d times, want once", strings.Count(string(b), "started"))
	}
	st, err := parseState(mustState(t, e))
	if err != nil || st.Runs != 1 {
		t.Fatalf("state after Resume = %+v, %v; want 1 run", st, err)
	}
	pid, _ := readLine(e.stageFiles(1, executor.StageStepScript).pid)
	pgid, _ := strconv.Atoi(pid)
	assertGroupGone(t, pgid)
}

// TestLostClaim: two starts of the same stage (a manager that died right
// after starting it, and its successor): only one runs the script, and the
// loser follows the winner.
func TestLostClaim(t *testing.T) {
	t.Parallel()
	e, trace := prepared(t, "bash", time.Second, true)
	dir := t.TempDir()
	marker := filepath.Join(dir, "starts")
	script := "echo started >> " + marker + "\necho winner\nsleep 0.3\nexit 6\n"
	files := e.stageFiles(1, executor.StageStepScript)
	if err := os.WriteFile(files.script, []byte(script), 0o600); err != nil {
		t.Fatal(err)
	}
	first, err := startStage(e.shPath, e.shellPath, e.paths.ProjectDir, files)
	if err != nil {
		t.Fatal(err)
	}
	executortest.WaitFile(t, files.pid)
	second, err := startStage(e.shPath, e.shellPath, e.paths.ProjectDir, files)
	if err != nil {
		t.Fatal(err)
	}
	err = e.follow(t.Context(), executor.StageStepScript, second, 1, 0)
	var be *executor.BuildError
	if !errors.As(err, &be) || be.ExitCode != 6 {
		t.Errorf("follow(the loser) = %v, want the winner's exit code 6", err)
	}
	<-first.ended
	if b, _ := os.ReadFile(marker); string(b) != "started\n" {
		t.Errorf("the script started %q, want once", b)
	}
	if got := strings.Count(trace.String(), "winner\n"); got != 1 {
		t.Errorf("trace holds the output %d times, want once:\n%s", got, trace)
	}
}

func TestStateRoundTrip(t *testing.T) {
	t.Parallel()
	e, _ := prepared(t, "sh", 0, true)
	if err := e.Run(t.Context(), executor.Command{Stage: executor.StageStepScript, Script: "true"}); err != nil {
		t.Fatal(err)
	}
	state, err := e.State()
	if err != nil {
		t.Fatalf("State() = %v, want nil", err)
	}
	var cpStage executor.Stage = "unset"
	if err := e.OutputCheckpoint(func(s json.RawMessage, stage executor.Stage, off int64) {
		if string(s) != string(state) || off != 0 {
			t.Errorf("checkpoint = %s, %d; want %s, 0", s, off, state)
		}
		cpStage = stage
	}); err != nil || cpStage != "" {
		t.Errorf("OutputCheckpoint between stages = stage %q, %v; want none, nil", cpStage, err)
	}
	b := (&Provider{}).Create().(*Executor)
	if err := b.Restore(t.Context(), executor.PrepareOptions{}, state); err != nil {
		t.Fatalf("Restore() = %v, want nil", err)
	}
	if b.Paths() != e.Paths() || b.Shell() != "sh" {
		t.Errorf("restored Paths(), Shell() = %+v, %q; want %+v, sh", b.Paths(), b.Shell(), e.Paths())
	}
	if got, err := b.State(); err != nil || string(got) != string(state) {
		t.Errorf("State() after Restore = %s, %v; want %s", got, err, state)
	}
	// Between stages, Resume starts the next stage.
	trace := &executortest.Trace{}
	b.trace = &executor.SyncWriter{W: trace}
	if err := b.Resume(t.Context(), executor.Command{Stage: executor.StageAfterScript, Script: "echo next"}, 0); err != nil || trace.String() != "next\n" {
		t.Errorf("Resume(next stage) = %v, trace %q; want nil, \"next\\n\"", err, trace)
	}
	if st, _ := parseState(mustState(t, b)); st.Runs != 2 {
		t.Errorf("runs after Resume = %d, want 2", st.Runs)
	}
}

func mustState(t *testing.T, e *Executor) json.RawMessage {
	t.Helper()
	s, err := e.State()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestResumeErrors(t *testing.T) {
	t.Parallel()
	if _, err := (&Provider{}).Create().(*Executor).State(); err == nil {
		t.Error("State() before Prepare = nil error, want one")
	}
	if a, _ := prepared(t, "sh", 0, false); a.OutputCheckpoint(func(json.RawMessage, executor.Stage, int64) {}) == nil {
		t.Error("OutputCheckpoint() of an executor not prepared resumable = nil error, want one")
	}
	e, _ := prepared(t, "sh", 0, true)
	st, err := parseState(mustState(t, e))
	if err != nil {
		t.Fatal(err)
	}
	st.Runs, st.Stage = 1, &stageState{Name: executor.StageStepScript, PID: 99999999}
	state, _ := json.Marshal(st)
	for _, tc := range []struct {
		name string
		cmd  executor.Stage
		from int64
		want error
	}{
		{"other stage", executor.StageAfterScript, 0, nil},
		{"negative offset", executor.StageStepScript, -1, nil},
		{"never started", executor.StageStepScript, 0, executor.ErrStageVanished},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := (&Provider{}).Create().(*Executor)
			if err := b.Restore(t.Context(), executor.PrepareOptions{}, state); err != nil {
				t.Fatalf("Restore() = %v", err)
			}
			if err := b.OutputCheckpoint(func(json.RawMessage, executor.Stage, int64) {}); err == nil {
				t.Error("OutputCheckpoint before Resume = nil, want an error")
			}
			err := b.Resume(t.Context(), executor.Command{Stage: tc.cmd}, tc.from)
			if err == nil || tc.want != nil && !errors.Is(err, tc.want) {
				t.Errorf("Resume(%s, %d) = %v, want an error (%v)", tc.cmd, tc.from, err, tc.want)
			}
		})
	}
	// Between stages, an offset in a stage not started is refused.
	b := (&Provider{}).Create().(*Executor)
	if err := b.Restore(t.Context(), executor.PrepareOptions{}, mustState(t, e)); err != nil {
		t.Fatal(err)
	}
	if err := b.Resume(t.Context(), executor.Command{Stage: executor.StageStepScript, Script: "true"}, 5); err == nil {
		t.Error("Resume(stage not started, from 5) = nil, want an error")
	}
}

func TestParseStateRejects(t *testing.T) {
	good := savedState{Version: 1, Shell: "bash", ShellPath: "/bin/bash", ShPath: "/bin/sh",
		Paths:     statePaths{BuildsDir: "/b", CacheDir: "/c", ProjectDir: "/b/p"},
		ScriptDir: "/s", OutputDir: "/o", Runs: 2, Stage: &stageState{Name: "step_script", PID: 42}}
	if _, err := parseState(mustJSON(t, good)); err != nil {
		t.Fatalf("parseState(good) = %v, want nil", err)
	}
	for name, mutate := range map[string]func(*savedState){
		"version":          func(s *savedState) { s.Version = 2 },
		"shell":            func(s *savedState) { s.Shell = "pwsh" },
		"relative dir":     func(s *savedState) { s.ScriptDir = "s" },
		"no project dir":   func(s *savedState) { s.Paths.ProjectDir = "" },
		"negative runs":    func(s *savedState) { s.Runs = -1 },
		"stage at run 0":   func(s *savedState) { s.Runs = 0 },
		"stage has noname": func(s *savedState) { s.Stage.Name = "" },
	} {
		s := good
		st := *good.Stage
		s.Stage = &st
		mutate(&s)
		if _, err := parseState(mustJSON(t, s)); err == nil {
			t.Errorf("parseState(%s) = nil error, want one", name)
		}
	}
	for _, raw := range []string{"", "{", "null", `{"version":"1"}`} {
		if _, err := parseState(json.RawMessage(raw)); err == nil {
			t.Errorf("parseState(%q) = nil error, want one", raw)
		}
	}
}

func mustJSON(t *testing.T, v any) json.RawMessage {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// FuzzParseState: a state read back from a job store is outside input.
func FuzzParseState(f *testing.F) {
	f.Add([]byte(`{"version":1,"shell":"bash","shell_path":"/bin/bash","sh_path":"/bin/sh","paths":{"builds_dir":"/b","project_dir":"/b/p"},"script_dir":"/s","output_dir":"/o","runs":1,"stage":{"name":"step_script","pid":4}}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		st, err := parseState(raw)
		if err != nil {
			return
		}
		if st.Version != stateVersion || st.Runs < 0 || (st.Stage != nil && (st.Runs < 1 || st.Stage.Name == "")) {
			t.Errorf("parseState(%q) accepted %+v", raw, st)
		}
		again, err := parseState(mustJSON(t, st))
		if err != nil || again.Runs != st.Runs {
			t.Errorf("parseState(State) = %+v, %v; want it back", again, err)
		}
	})
}

// TestFileName: step names come from the job.
func TestFileName(t *testing.T) {
	for in, want := range map[string]string{
		"step_script":           "step_script",
		"step_../../etc/pw":     "step_______etc_pw",
		strings.Repeat("a", 80): strings.Repeat("a", 64),
	} {
		if got := fileName(in); got != want {
			t.Errorf("fileName(%q) = %q, want %q", in, got, want)
		}
	}
}
