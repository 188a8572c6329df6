package detached

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/executor"
)

// tool is a follower (and stop) and the target it runs on.
type tool struct {
	name    string
	tool    Tool
	busybox bool // on a target of busybox's commands alone
}

// tools are the followers every test runs with.
var tools = []tool{
	{"helper", Helper{Command: []string{"drover", "helper"}}, false},
	{"sh", Sh{}, false},
	{"busybox sh", Sh{}, true},
}

// job is one job's runner on a local target, its files in a temporary
// directory.
type job struct {
	dir    string // the job directory (stage files)
	work   string // the project directory
	target *localTarget
	trace  *notifyBuffer
	r      *Runner
}

func newJob(t *testing.T, tl tool) *job {
	d := t.TempDir()
	j := &job{dir: filepath.Join(d, "job"), work: filepath.Join(d, "project"), trace: newNotifyBuffer()}
	if tl.busybox {
		j.target = newBusybox(t, tl.tool)
	} else {
		j.target = newLocal(t, tl.tool)
	}
	if err := os.Mkdir(j.dir, 0o700); err != nil {
		t.Fatal(err)
	}
	j.r = j.runner(tl.tool, j.trace)
	return j
}

// runner is another manager's Runner of the same job.
func (j *job) runner(tool Tool, trace *notifyBuffer) *Runner {
	return New(Config{Dir: j.dir, Tool: tool, PIDGone: true, Grace: j.target.grace, Trace: trace})
}

func (j *job) stage(name executor.Stage, script string) Stage {
	return Stage{Name: name, Script: script, Where: "local", Dir: j.work}
}

// saved is a job's state as a manager saves it.
type saved struct {
	Runs  int    `json:"runs"`
	Stage *State `json:"stage,omitempty"`
}

func state(r *Runner) func() (json.RawMessage, error) {
	return func() (json.RawMessage, error) {
		runs, st := r.Export()
		return json.Marshal(saved{Runs: runs, Stage: st})
	}
}

// checkpoint takes r's checkpoint.
func checkpoint(t *testing.T, r *Runner) (saved, executor.Stage, int64) {
	t.Helper()
	var s saved
	var stage executor.Stage
	var off int64
	err := r.Checkpoint(state(r), func(st json.RawMessage, sg executor.Stage, o int64) {
		if err := json.Unmarshal(st, &s); err != nil {
			t.Error(err)
		}
		stage, off = sg, o
	})
	if err != nil {
		t.Fatal(err)
	}
	return s, stage, off
}

// restored is a new manager's Runner of j, from a saved state.
func (j *job) restored(t *testing.T, tool Tool, s saved) (*Runner, *notifyBuffer) {
	t.Helper()
	trace := newNotifyBuffer()
	r := j.runner(tool, trace)
	if err := r.Restore(s.Runs, s.Stage); err != nil {
		t.Fatalf("Restore(%+v) = %v", s, err)
	}
	return r, trace
}

// runAsync runs s in the background; the channel gets Run's result.
func runAsync(ctx context.Context, r *Runner, t Target, s Stage, mode Mode, from int64) <-chan error {
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx, t, s, mode, from) }()
	return done
}

// TestRun: a stage runs detached, its output goes to the trace byte for
// byte and its exit status is Run's result.
func TestRun(t *testing.T) {
	cases := []struct {
		name, script string
		want         string
		code         int
	}{
		{"success", `printf 'out\n'; printf 'err\n' >&2; printf 'no newline'`, "out\nerr\nno newline", 0},
		{"failure", `echo failing; exit 3`, "failing\n", 3},
		{"in the project directory", `pwd -P | sed 's|.*/||'`, "project\n", 0},
		{"stdin is empty", `cat; echo done`, "done\n", 0},
	}
	for _, tl := range tools {
		for _, tc := range cases {
			t.Run(tl.name+"/"+tc.name, func(t *testing.T) {
				t.Parallel()
				j := newJob(t, tl)
				err := j.r.Run(t.Context(), j.target, j.stage(executor.StageStepScript, tc.script), StartFresh, 0)
				checkResult(t, err, tc.code)
				if got := j.trace.String(); got != tc.want {
					t.Errorf("trace = %q, want %q", got, tc.want)
				}
				if runs, st := j.r.Export(); runs != 1 || st != nil {
					t.Errorf("Export() = %d, %+v; want 1 run, none running", runs, st)
				}
			})
		}
	}
}

// TestRunEntrypoint: a stage with an Entrypoint runs its shell under it
// (with the shell and the script as its arguments): what it prints comes
// first in the trace and what it exports reaches the script; quoting
// survives words with spaces and quotes.
func TestRunEntrypoint(t *testing.T) {
	for _, tl := range tools {
		t.Run(tl.name, func(t *testing.T) {
			t.Parallel()
			j := newJob(t, tl)
			s := j.stage(executor.StageStepScript, `echo "script sees $ENTRY"`)
			s.Entrypoint = []string{"sh", "-c", `echo "it's the entrypoint, $# args"; export ENTRY='set by it'; exec "$@"`, "entry point"}
			err := j.r.Run(t.Context(), j.target, s, StartFresh, 0)
			checkResult(t, err, 0)
			if got, want := j.trace.String(), "it's the entrypoint, 2 args\nscript sees set by it\n"; got != want {
				t.Errorf("trace = %q, want %q", got, want)
			}
		})
	}
}

func touch(t *testing.T, p string) {
	t.Helper()
	if err := os.WriteFile(p, nil, 0o600); err != nil {
		t.Fatal(err)
	}
}

func checkResult(t *testing.T, err error, code int) {
	t.Helper()
	var be *executor.BuildError
	switch {
	case code == 0 && err != nil:
		t.Errorf("Run = %v, want nil", err)
	case code != 0 && (!errors.As(err, &be) || be.ExitCode != code):
		t.Errorf("Run = %v, want exit code %d", err, code)
	}
}

// TestRunWriteStarter: a target that stores and starts in one call gets
// that call, once per run.
func TestRunWriteStarter(t *testing.T) {
	j := newJob(t, tools[0])
	o := &oneTrip{localTarget: j.target}
	err := j.r.Run(t.Context(), o, j.stage(executor.StageStepScript, "echo one trip; exit 2"), StartFresh, 0)
	checkResult(t, err, 2)
	if j.trace.String() != "one trip\n" || o.calls != 1 {
		t.Errorf("trace %q, %d WriteStart calls; want one", j.trace.String(), o.calls)
	}
}

// TestRunBadProjectDirectory: a project directory that cannot be entered
// fails the stage with status 1 and says so in the trace.
func TestRunBadProjectDirectory(t *testing.T) {
	j := newJob(t, tools[1])
	if err := os.WriteFile(j.work, []byte("a file"), 0o600); err != nil {
		t.Fatal(err)
	}
	err := j.r.Run(t.Context(), j.target, j.stage(executor.StageStepScript, "echo never"), StartFresh, 0)
	checkResult(t, err, 1)
	if got := j.trace.String(); !strings.Contains(got, "cannot enter the project directory "+j.work) || strings.Contains(got, "never") {
		t.Errorf("trace = %q", got)
	}
}

// TestResumeFromOffset: a manager dies while its stage runs; a new one
// restored from a checkpoint follows the same run from the checkpoint's
// byte (0 or in the middle): the trace up to the checkpoint and the new
// trace make the whole output, once; the stage ran once.
func TestResumeFromOffset(t *testing.T) {
	for _, tl := range tools {
		for _, mid := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/mid %v", tl.name, mid), func(t *testing.T) {
				t.Parallel()
				j := newJob(t, tl)
				gate1, gate2 := filepath.Join(j.dir, "gate1"), filepath.Join(j.dir, "gate2")
				script := fmt.Sprintf(`echo run >> %[1]s/count
while [ ! -e %[2]s ]; do sleep 0.01; done
for i in 1 2 3 4 5; do echo "first $i"; done
while [ ! -e %[3]s ]; do sleep 0.01; done
for i in 1 2 3 4 5; do echo "second $i"; done
exit 7`, Quote(j.dir), Quote(gate1), Quote(gate2))
				want := "first 1\nfirst 2\nfirst 3\nfirst 4\nfirst 5\nsecond 1\nsecond 2\nsecond 3\nsecond 4\nsecond 5\n"
				dead := &severable{Target: j.target, cut: make(chan struct{})}
				s := j.stage(executor.StageStepScript, script)
				done := runAsync(t.Context(), j.r, dead, s, StartFresh, 0)
				waitFile(t, j.dir+"/001.log") // the stage has begun
				var wantOff int64
				if mid {
					touch(t, gate1)
					j.trace.waitFor(t, "the first lines", func(s string) bool { return strings.HasSuffix(s, "first 5\n") })
					wantOff = int64(len("first 1\nfirst 2\nfirst 3\nfirst 4\nfirst 5\n"))
				}
				st, stage, off := checkpoint(t, j.r)
				if off != wantOff {
					t.Fatalf("checkpoint offset %d with trace %q, want %d", off, j.trace.String(), wantOff)
				}
				if stage != executor.StageStepScript || st.Stage == nil || st.Stage.N != 1 || st.Runs != 1 || st.Stage.Where != "local" {
					t.Fatalf("checkpoint = %+v %+v, stage %q", st, st.Stage, stage)
				}
				before := j.trace.String()[:off]
				close(dead.cut) // the manager dies
				if err := <-done; !errors.Is(err, executor.ErrStageVanished) {
					t.Errorf("the dead manager's Run = %v", err)
				}

				r2, trace2 := j.restored(t, tl.tool, st)
				mode, sv, err := r2.ResumeMode(executor.StageStepScript, off)
				if err != nil || mode != AttachSaved || sv == nil || sv.N != 1 || sv.Where != "local" {
					t.Fatalf("ResumeMode = %v, %+v, %v", mode, sv, err)
				}
				if runs, exp := r2.Export(); runs != 1 || exp == nil || exp.N != 1 {
					t.Errorf("restored Export() = %d, %+v", runs, exp)
				}
				resumed := runAsync(t.Context(), r2, j.target, s, mode, off)
				touch(t, gate1)
				touch(t, gate2)
				checkResult(t, <-resumed, 7)
				if got := before + trace2.String(); got != want {
					t.Errorf("trace before the checkpoint %q + after %q = %q, want %q", before, trace2.String(), got, want)
				}
				if b, _ := os.ReadFile(filepath.Join(j.dir, "count")); string(b) != "run\n" {
					t.Errorf("the stage ran %q", b)
				}
				if runs, exp := r2.Export(); runs != 1 || exp != nil {
					t.Errorf("Export() after the resumed stage = %d, %+v", runs, exp)
				}
			})
		}
	}
}

// TestClaimOnce: two managers start the same run at once: it runs once,
// and both follow it to its end.
func TestClaimOnce(t *testing.T) {
	for _, tl := range tools {
		t.Run(tl.name, func(t *testing.T) {
			t.Parallel()
			for i := range 5 {
				j := newJob(t, tl)
				script := fmt.Sprintf("echo run >> %s/count; echo output %d", Quote(j.dir), i)
				traces := []*notifyBuffer{j.trace, newNotifyBuffer()}
				runners := []*Runner{j.r, j.runner(tl.tool, traces[1])}
				var wg sync.WaitGroup
				errs := make([]error, 2)
				for k := range runners {
					wg.Go(func() {
						errs[k] = runners[k].Run(t.Context(), j.target, j.stage(executor.StageStepScript, script), StartFresh, 0)
					})
				}
				wg.Wait()
				want := fmt.Sprintf("output %d\n", i)
				for k := range runners {
					if errs[k] != nil || traces[k].String() != want {
						t.Errorf("round %d, starter %d: Run = %v, trace %q; want nil, %q", i, k, errs[k], traces[k].String(), want)
					}
				}
				if b, _ := os.ReadFile(filepath.Join(j.dir, "count")); string(b) != "run\n" {
					t.Errorf("round %d: the stage ran %q", i, b)
				}
			}
		})
	}
}

// TestAttachIfStarted: a checkpoint between stages; the next stage is
// resumed: started here when the dead manager had not started it (and a
// starter of the dead manager that comes late does nothing), followed
// from byte 0 when it had.
func TestAttachIfStarted(t *testing.T) {
	for _, tl := range tools {
		t.Run(tl.name+"/not started", func(t *testing.T) {
			t.Parallel()
			j := newJob(t, tl)
			script := fmt.Sprintf("echo run >> %s/count; echo hello", Quote(j.dir))
			s := j.stage(executor.StageGetSources, script)
			st, stage, off := checkpoint(t, j.r)
			if st.Runs != 0 || st.Stage != nil || stage != "" || off != 0 {
				t.Fatalf("checkpoint before any stage = %+v %q %d", st, stage, off)
			}
			r2, trace2 := j.restored(t, tl.tool, st)
			mode, sv, err := r2.ResumeMode(s.Name, 0)
			if err != nil || mode != AttachIfStarted || sv != nil {
				t.Fatalf("ResumeMode = %v, %v, %v", mode, sv, err)
			}
			if err := r2.Run(t.Context(), j.target, s, mode, 0); err != nil {
				t.Fatalf("Run(AttachIfStarted) = %v", err)
			}
			if trace2.String() != "hello\n" {
				t.Errorf("trace %q", trace2.String())
			}
			// The dead manager's starter comes late: the claim is taken.
			if err := j.r.Run(t.Context(), j.target, s, StartFresh, 0); err != nil {
				t.Errorf("late start = %v", err)
			}
			if b, _ := os.ReadFile(filepath.Join(j.dir, "count")); string(b) != "run\n" {
				t.Errorf("the stage ran %q", b)
			}
		})
		t.Run(tl.name+"/started", func(t *testing.T) {
			t.Parallel()
			j := newJob(t, tl)
			gate := filepath.Join(j.dir, "gate")
			script := fmt.Sprintf("echo run >> %s/count; echo one; while [ ! -e %s ]; do sleep 0.01; done; echo two; exit 4", Quote(j.dir), Quote(gate))
			s := j.stage(executor.StageGetSources, script)
			st, _, _ := checkpoint(t, j.r)
			// The dead manager started the stage after its checkpoint and
			// died before following it.
			dead := &severable{Target: j.target, cut: make(chan struct{})}
			close(dead.cut)
			if err := j.r.Run(t.Context(), dead, s, StartFresh, 0); !errors.Is(err, executor.ErrStageVanished) {
				t.Fatalf("the dead manager's Run = %v", err)
			}
			waitFile(t, j.dir+"/001.log")
			r2, trace2 := j.restored(t, tl.tool, st)
			mode, _, err := r2.ResumeMode(s.Name, 0)
			if err != nil || mode != AttachIfStarted {
				t.Fatalf("ResumeMode = %v, %v", mode, err)
			}
			done := runAsync(t.Context(), r2, j.target, s, mode, 0)
			trace2.waitFor(t, "the output so far", func(s string) bool { return s == "one\n" })
			touch(t, gate)
			checkResult(t, <-done, 4)
			if trace2.String() != "one\ntwo\n" {
				t.Errorf("trace %q, want the whole output", trace2.String())
			}
			if b, _ := os.ReadFile(filepath.Join(j.dir, "count")); string(b) != "run\n" {
				t.Errorf("the stage ran %q", b)
			}
		})
	}
}

// TestVanished: the stage's wrapper is killed (SIGKILL) and leaves no exit
// status: the stage vanished, told by its dead pid; or its place stops
// (a container) and the watcher's gone mark tells.
func TestVanished(t *testing.T) {
	for _, tl := range tools {
		t.Run(tl.name+"/pid", func(t *testing.T) {
			t.Parallel()
			j := newJob(t, tl)
			done := runAsync(t.Context(), j.r, j.target, j.stage(executor.StageStepScript, "echo started; sleep 1000"), StartFresh, 0)
			j.trace.waitFor(t, "the stage's start", func(s string) bool { return s == "started\n" })
			if err := syscallKill(readPID(t, j.dir+"/001.pid")); err != nil {
				t.Fatal(err)
			}
			if err := <-done; !errors.Is(err, executor.ErrStageVanished) {
				t.Errorf("Run = %v, want %v", err, executor.ErrStageVanished)
			}
			if _, err := os.Stat(j.dir + "/001.exit"); err == nil {
				t.Errorf("an exit file was written")
			}
		})
		t.Run(tl.name+"/place stopped", func(t *testing.T) {
			t.Parallel()
			j := newJob(t, tl)
			w := &watched{localTarget: j.target, stopped: make(chan struct{})}
			r := New(Config{Dir: j.dir, Tool: tl.tool, Trace: j.trace}) // no PIDGone: only the gone mark tells
			done := runAsync(t.Context(), r, w, j.stage(executor.StageStepScript, "echo started; sleep 1000"), StartFresh, 0)
			j.trace.waitFor(t, "the stage's start", func(s string) bool { return s == "started\n" })
			w.stopPlace()
			err := <-done
			if !errors.Is(err, executor.ErrStageVanished) || !strings.Contains(err.Error(), "the place stopped") {
				t.Errorf("Run = %v, want %v explained", err, executor.ErrStageVanished)
			}
			if _, err := os.Stat(j.dir + "/001.gone"); err != nil {
				t.Errorf("no gone mark: %v", err)
			}
		})
	}
}

// TestCancelStopsStage: cancelling Run's context stops every process of
// the stage (SIGTERM, then SIGKILL for one that ignores it, after the
// grace period); the wrapper writes the exit status; Run returns the
// context's error with the output the stage left.
func TestCancelStopsStage(t *testing.T) {
	for _, tl := range tools {
		t.Run(tl.name, func(t *testing.T) {
			t.Parallel()
			j := newJob(t, tl)
			script := fmt.Sprintf(`sleep 1000 & echo $! > %[1]s/bg
sh -c 'trap "" TERM; echo $$ > %[1]s/stubborn; while :; do sleep 0.05; done' &
while [ ! -s %[1]s/stubborn ]; do sleep 0.01; done
echo ready
wait`, j.dir)
			ctx, cancel := context.WithCancel(t.Context())
			done := runAsync(ctx, j.r, j.target, j.stage(executor.StageStepScript, script), StartFresh, 0)
			j.trace.waitFor(t, "the stage's start", func(s string) bool { return s == "ready\n" })
			pids := []int{readPID(t, j.dir+"/bg"), readPID(t, j.dir+"/stubborn")}
			cancel()
			if err := <-done; !errors.Is(err, context.Canceled) {
				t.Errorf("Run = %v, want %v", err, context.Canceled)
			}
			// Run returned after the stop: SIGKILL is sent, the
			// processes die at once.
			for _, pid := range pids {
				waitDead(t, pid, 10*time.Second)
			}
			if _, err := os.Stat(j.dir + "/001.exit"); err != nil {
				t.Errorf("no exit status: %v", err)
			}
		})
	}
}

// TestCheckpointConsistent: while a stage writes, every checkpoint's
// offset is exactly the stage's output in the trace.
func TestCheckpointConsistent(t *testing.T) {
	j := newJob(t, tools[0])
	done := runAsync(t.Context(), j.r, j.target, j.stage(executor.StageStepScript, `i=0; while [ $i -lt 2000 ]; do echo "line $i"; i=$((i+1)); done`), StartFresh, 0)
	checks := 0
	for {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			if checks == 0 {
				t.Log("no checkpoint while the stage ran")
			}
			if _, stage, off := checkpoint(t, j.r); stage != "" || off != 0 {
				t.Errorf("checkpoint after the stage: %q %d", stage, off)
			}
			return
		default:
		}
		err := j.r.Checkpoint(state(j.r), func(_ json.RawMessage, stage executor.Stage, off int64) {
			if n := int64(len(j.trace.String())); stage != "" && n != off {
				t.Errorf("checkpoint offset %d, trace %d bytes", off, n)
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		checks++
	}
}

// TestRestoreAndResumeModeErrors: states that cannot be and resumes that
// do not match the state are refused.
func TestRestoreAndResumeModeErrors(t *testing.T) {
	r := New(Config{Dir: t.TempDir()})
	for _, tc := range []struct {
		runs int
		st   *State
	}{
		{-1, nil},
		{2, &State{Name: executor.StageStepScript, N: 1, Where: "x"}},
		{1, &State{Name: executor.StageStepScript, N: 1}},
	} {
		if err := r.Restore(tc.runs, tc.st); err == nil {
			t.Errorf("Restore(%d, %+v) = nil", tc.runs, tc.st)
		}
	}
	if err := r.Restore(3, &State{Name: executor.StageStepScript, N: 3, Where: "x"}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := r.ResumeMode(executor.StageStepScript, -1); err == nil {
		t.Error("ResumeMode with a negative offset = nil")
	}
	if _, _, err := r.ResumeMode(executor.StageAfterScript, 0); err == nil {
		t.Error("ResumeMode of another stage than the saved one = nil")
	}
	if err := r.Run(t.Context(), nil, Stage{Name: executor.StageStepScript}, StartFresh, 5); err == nil {
		t.Error("Run(StartFresh) from byte 5 = nil")
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := r.Run(ctx, nil, Stage{Name: executor.StageStepScript}, StartFresh, 0); !errors.Is(err, context.Canceled) {
		t.Errorf("Run with a cancelled context = %v", err)
	}
}

// TestCheckpointNilRunner: an executor not prepared has no Runner; its
// checkpoint is its state's (an error, most likely).
func TestCheckpointNilRunner(t *testing.T) {
	var r *Runner
	notPrepared := errors.New("not prepared")
	if err := r.Checkpoint(func() (json.RawMessage, error) { return nil, notPrepared }, nil); err != notPrepared {
		t.Errorf("Checkpoint = %v, want %v", err, notPrepared)
	}
	called := false
	err := r.Checkpoint(func() (json.RawMessage, error) { return json.RawMessage(`{}`), nil }, func(_ json.RawMessage, stage executor.Stage, off int64) {
		called = stage == "" && off == 0
	})
	if err != nil || !called {
		t.Errorf("Checkpoint = %v, fn called with no stage: %v", err, called)
	}
}

// TestResumeScriptCutShort: the manager dies while it sends the stage's
// script in its one store-and-start round trip (saved state: the stage
// running, none of its output in the trace). A script cut short is never
// started, and no one claims the run: the manager that resumes the job
// starts the whole script, once. A script that arrived whole was started
// by the dead manager: the resumed one follows it and starts nothing.
func TestResumeScriptCutShort(t *testing.T) {
	var script, want strings.Builder
	script.WriteString("echo run >> ../job/count\n")
	for i := range 40 {
		fmt.Fprintf(&script, "echo line %d\n", i)
		fmt.Fprintf(&want, "line %d\n", i)
	}
	cuts := []struct {
		name string
		cut  int
	}{{"nothing sent", 0}, {"half sent", script.Len() / 2}, {"all but a byte", script.Len() - 1}, {"all sent", -1}}
	for _, tl := range tools {
		for _, c := range cuts {
			t.Run(tl.name+"/"+c.name, func(t *testing.T) {
				t.Parallel()
				j := newJob(t, tl)
				s := j.stage(executor.StageStepScript, script.String())
				var st saved
				var off int64
				dead := &cutShort{localTarget: j.target, cut: c.cut, before: func() {
					var stage executor.Stage
					st, stage, off = checkpoint(t, j.r)
					if stage != executor.StageStepScript || off != 0 {
						t.Errorf("checkpoint: stage %q, offset %d", stage, off)
					}
				}}
				err := j.r.Run(t.Context(), dead, s, StartFresh, 0)
				if wantErr := map[bool]string{true: "arrived cut short", false: "the manager died"}[c.cut >= 0]; err == nil || !strings.Contains(err.Error(), wantErr) {
					t.Errorf("the dead manager's Run = %v, want %q", err, wantErr)
				}
				if c.cut >= 0 {
					for _, f := range []string{"001.claim", "001.log", "count"} {
						if _, err := os.Stat(filepath.Join(j.dir, f)); err == nil {
							t.Errorf("%s exists: a cut script was started", f)
						}
					}
				}
				r2, trace2 := j.restored(t, tl.tool, st)
				mode, sv, err := r2.ResumeMode(s.Name, off)
				if err != nil || mode != AttachSaved || sv == nil || sv.N != 1 {
					t.Fatalf("ResumeMode = %v, %+v, %v", mode, sv, err)
				}
				checkResult(t, r2.Run(t.Context(), j.target, s, mode, off), 0)
				if trace2.String() != want.String() {
					t.Errorf("resumed trace %q, want the whole output", trace2.String())
				}
				if b, _ := os.ReadFile(filepath.Join(j.dir, "count")); string(b) != "run\n" {
					t.Errorf("the stage ran %q times", b)
				}
			})
		}
	}
}
