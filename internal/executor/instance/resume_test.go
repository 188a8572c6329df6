package instance

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

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/executor"
	"github.com/drover-ci/drover/internal/executor/executortest"
	"github.com/drover-ci/drover/internal/jobrun"
	"github.com/drover-ci/drover/internal/sshx/sshxtest"
)

// Claim gives a restored job its slot back (Claimer), on the one instance
// of the fake pool.
func (f *fakeSlots) Claim(_ context.Context, id string, slot int) (Acquired, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if id != f.info.ID {
		return nil, fmt.Errorf("no instance %s", id)
	}
	if f.used[slot] {
		return nil, fmt.Errorf("slot %d is taken", slot)
	}
	f.used[slot] = true
	f.acquired++
	return &fakeAcq{slot: slot, s: f}, nil
}

// servers are the SSH servers the resume tests run on: OpenSSH's sshd
// and dropbear (that of many VM guests).
var servers = []struct {
	name  string
	start func(testing.TB) *sshxtest.Server
}{
	{"sshd", sshxtest.Start},
	{"dropbear", sshxtest.StartDropbear},
}

// resumable is a fixture whose jobs are prepared resumable, as by a
// manager with a job store.
func resumable(t testing.TB, sh string, srv *sshxtest.Server) *fixture {
	t.Helper()
	f := newFixtureOn(t, sh, srv)
	f.settings.Resumable = true
	f.settings.SystemID = "s_test"
	return f
}

// manager is one manager process's view of a job on the fixture's host:
// its own pool (whose instance it can lose) and provider.
func (f *fixture) manager(t testing.TB) *fixture {
	t.Helper()
	m := newFixtureOn(t, f.settings.Shell, f.srv)
	m.settings = f.settings
	return m
}

// numbered is a stage script printing n numbered lines, pause apart, after
// recording that it ran (in runs).
func numbered(n int, pause, runs string) string {
	return fmt.Sprintf("echo run >> %s\nfor i in $(seq 1 %d); do echo \"line $i\"; sleep %s; done\n", runs, n, pause)
}

func numberedOutput(n int) string {
	var b strings.Builder
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&b, "line %d\n", i)
	}
	return b.String()
}

// checkpoint is what a manager saves of a running job.
type checkpoint struct {
	state  json.RawMessage
	stage  executor.Stage
	offset int64
	trace  string // the trace when the checkpoint was taken
}

func takeCheckpoint(t *testing.T, e *Executor, trace *executortest.Trace) checkpoint {
	t.Helper()
	var cp checkpoint
	err := e.OutputCheckpoint(func(st json.RawMessage, stage executor.Stage, off int64) {
		cp = checkpoint{state: st, stage: stage, offset: off, trace: trace.String()}
	})
	if err != nil {
		t.Fatalf("OutputCheckpoint() = %v", err)
	}
	return cp
}

// waitTrace waits until the trace holds s.
func waitTrace(t *testing.T, b *executortest.Trace, s string) {
	t.Helper()
	for !strings.Contains(b.String(), s) {
		select {
		case <-t.Context().Done():
			t.Fatalf("trace never got %q:\n%s", s, b.String())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// die makes e's manager lose its instance (the pool says so): its Run
// returns without stopping the stage, which goes on on the host, as when
// the manager process dies.
func die(t *testing.T, f *fixture, e *Executor, runErr <-chan error) {
	t.Helper()
	close(f.slots.lost)
	if runErr != nil {
		select {
		case err := <-runErr:
			if !errors.Is(err, ErrInstanceLost) {
				t.Errorf("Run of the dead manager = %v, want ErrInstanceLost", err)
			}
		case <-t.Context().Done():
			t.Fatal("Run of the dead manager did not return")
		}
	}
	e.Cleanup(context.Background())
}

// restored is a new manager's executor of the job, restored from cp.
func (f *fixture) restored(t *testing.T, cp checkpoint, trace *executortest.Trace) *Executor {
	t.Helper()
	e := f.provider.Create().(*Executor)
	t.Cleanup(func() { e.Cleanup(context.Background()) })
	if err := e.Restore(t.Context(), executor.PrepareOptions{Job: newJob(nil, nil), Settings: f.settings, Trace: trace}, cp.state); err != nil {
		t.Fatalf("Restore() = %v", err)
	}
	return e
}

func countRuns(t *testing.T, runs string) int {
	t.Helper()
	b, err := os.ReadFile(runs)
	if err != nil {
		t.Fatalf("the stage never ran: %v", err)
	}
	return strings.Count(string(b), "run\n")
}

// TestResumableJob: a whole job through jobrun, prepared resumable: the
// stages run detached on the host with the attached path's results.
func TestResumableJob(t *testing.T) {
	for _, sh := range []string{"bash", "sh"} {
		t.Run(sh, func(t *testing.T) {
			t.Parallel()
			f := resumable(t, sh, sshxtest.Start(t))
			f.settings.SystemID = "s_job_" + sh
			j := newJob([]string{"echo one", "echo to-stderr >&2", `echo "pwd=$(pwd)"`, "exit 3"}, []string{`echo "after=$CI_JOB_STATUS"`})
			res := f.run(t, t.Context(), nil, j)
			checkResult(t, res, jobrun.Result{State: api.StateFailed, FailureReason: api.ScriptFailure, ExitCode: 3, HasExitCode: true})
			inOrder(t, f.trace.String(), "one\n", "to-stderr\n", "pwd="+f.projectDir(0)+"\n", "after=failed\n", "exit status 3")
			if dirs, _ := filepath.Glob("/tmp/drover-job-s_job_" + sh + "-11-*"); len(dirs) != 0 {
				t.Errorf("job directories left after cleanup: %v", dirs)
			}
		})
	}
}

// TestResume: the manager running a stage dies; a new one restored from
// its last checkpoint follows the stage from the checkpoint's byte: the
// trace up to the checkpoint and the new one make the stage's output
// once, in order, and the stage ran once. Checkpoints in the middle of
// the stage's output, before any of it, and between stages (the next
// stage started by the dead manager after the checkpoint, or not).
func TestResume(t *testing.T) {
	const lines = 30
	cases := []struct {
		name string
		// when: "mid" (after line 5), "silent" (running, no output yet),
		// "before" (between stages, then the dead manager starts the
		// stage), "never" (between stages, the stage never started).
		when string
	}{{"mid-stage", "mid"}, {"nothing output yet", "silent"}, {"between stages, started", "before"}, {"between stages, not started", "never"}}
	for _, sv := range servers {
		for _, tc := range cases {
			t.Run(sv.name+"/"+tc.name, func(t *testing.T) {
				t.Parallel()
				f := resumable(t, "sh", sv.start(t))
				dead := f.manager(t)
				e1 := dead.prepared(t)
				runs := filepath.Join(t.TempDir(), "runs")
				script := numbered(lines, "0.05", runs)
				if tc.when == "silent" {
					script = "sleep 1\n" + script
				}
				cmd := executor.Command{Stage: executor.StageStepScript, Script: script}
				base := len(dead.trace.String())
				var cp checkpoint
				var runErr chan error
				if tc.when == "before" || tc.when == "never" {
					cp = takeCheckpoint(t, e1, dead.trace)
				}
				if tc.when != "never" {
					runErr = make(chan error, 1)
					go func() { runErr <- e1.Run(t.Context(), cmd) }()
				}
				switch tc.when {
				case "mid":
					waitTrace(t, dead.trace, "line 5\n")
					cp = takeCheckpoint(t, e1, dead.trace)
				case "silent":
					executortest.WaitFile(t, filepath.Join(e1.scriptDir, "001.pid"))
					cp = takeCheckpoint(t, e1, dead.trace)
				case "before":
					waitTrace(t, dead.trace, "line 1\n")
				}
				die(t, dead, e1, runErr)

				var st savedState
				if err := json.Unmarshal(cp.state, &st); err != nil {
					t.Fatal(err)
				}
				got := cp.trace[base:]
				switch {
				case tc.when == "mid" || tc.when == "silent":
					if cp.stage != executor.StageStepScript || st.Stage == nil || st.Stage.N != 1 || st.Runs != 1 || int64(len(got)) != cp.offset {
						t.Fatalf("checkpoint: stage %q offset %d (trace has %d bytes of the stage), state %+v", cp.stage, cp.offset, len(got), st)
					}
				case cp.stage != "" || st.Stage != nil || cp.offset != 0:
					t.Fatalf("checkpoint between stages: stage %q offset %d, state %+v", cp.stage, cp.offset, st)
				}
				if st.Instance != "i-1" || st.Dir != e1.scriptDir || st.Addr != f.srv.Addr || strings.Contains(string(cp.state), "PRIVATE KEY") {
					t.Errorf("state %s: want instance i-1, dir %s, addr %s and no key", cp.state, e1.scriptDir, f.srv.Addr)
				}

				trace := &executortest.Trace{}
				e2 := f.restored(t, cp, trace)
				if trace.String() != "" {
					t.Errorf("Restore wrote to the trace: %q", trace.String())
				}
				if err := e2.Resume(t.Context(), cmd, cp.offset); err != nil {
					t.Fatalf("Resume() = %v, want nil", err)
				}
				if got += trace.String(); got != numberedOutput(lines) {
					t.Errorf("the stage's output across the resume:\n%s\nwant every line once, in order", got)
				}
				if n := countRuns(t, runs); n != 1 {
					t.Errorf("the stage ran %d times, want once", n)
				}
				// Later stages run as usual.
				if err := e2.Run(t.Context(), executor.Command{Stage: executor.StageAfterScript, Script: "echo after\n"}); err != nil || !strings.HasSuffix(trace.String(), "after\n") {
					t.Errorf("Run after Resume = %v, trace %q", err, trace.String())
				}
			})
		}
	}
}

// stageGroup returns the process group of run n's wrapper on the host
// (this machine).
func stageGroup(t *testing.T, dir string, n int) int {
	t.Helper()
	pid := executortest.WaitFile(t, filepath.Join(dir, fmt.Sprintf("%03d.pid", n)))
	stat, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	g, err := strconv.Atoi(f[2])
	if err != nil || g <= 1 {
		t.Fatalf("process group of %s: %q", pid, f)
	}
	return g
}

// TestResumeVanished: while no manager watches, the stage's processes are
// killed (SIGKILL, no exit status), or the host loses the job's directory
// (a reboot): the resumed stage vanished.
func TestResumeVanished(t *testing.T) {
	for _, how := range []string{"killed", "directory gone"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			f := resumable(t, "sh", sshxtest.Start(t))
			dead := f.manager(t)
			e1 := dead.prepared(t)
			cmd := executor.Command{Stage: executor.StageStepScript, Script: numbered(200, "0.05", filepath.Join(t.TempDir(), "runs"))}
			runErr := make(chan error, 1)
			go func() { runErr <- e1.Run(t.Context(), cmd) }()
			waitTrace(t, dead.trace, "line 3\n")
			cp := takeCheckpoint(t, e1, dead.trace)
			g := stageGroup(t, e1.scriptDir, 1)
			t.Cleanup(func() { _ = syscall.Kill(-g, syscall.SIGKILL) })
			die(t, dead, e1, runErr)
			if how == "killed" {
				if err := syscall.Kill(-g, syscall.SIGKILL); err != nil {
					t.Fatal(err)
				}
			} else {
				if err := os.RemoveAll(e1.scriptDir); err != nil {
					t.Fatal(err)
				}
			}
			e2 := f.restored(t, cp, &executortest.Trace{})
			err := e2.Resume(t.Context(), cmd, cp.offset)
			if !errors.Is(err, executor.ErrStageVanished) {
				t.Errorf("Resume() = %v, want ErrStageVanished", err)
			}
		})
	}
}

// TestResumeCancel: cancelling a resumed stage stops its processes on the
// host; Resume returns the context's error.
func TestResumeCancel(t *testing.T) {
	t.Parallel()
	f := resumable(t, "bash", sshxtest.Start(t))
	dead := f.manager(t)
	e1 := dead.prepared(t)
	sleeper := filepath.Join(t.TempDir(), "sleeper")
	cmd := executor.Command{Stage: executor.StageStepScript, Script: "sleep 300 &\necho $! > " + sleeper + "\necho started\nwait\n"}
	runErr := make(chan error, 1)
	go func() { runErr <- e1.Run(t.Context(), cmd) }()
	waitTrace(t, dead.trace, "started\n")
	cp := takeCheckpoint(t, e1, dead.trace)
	pid := executortest.WaitFile(t, sleeper)
	die(t, dead, e1, runErr)
	if !executortest.Alive(t, pid) {
		t.Fatal("the stage did not outlive its manager")
	}
	e2 := f.restored(t, cp, &executortest.Trace{})
	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() { errc <- e2.Resume(ctx, cmd, cp.offset) }()
	time.Sleep(200 * time.Millisecond) // following
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Errorf("Resume after cancel = %v, want context.Canceled", err)
	}
	if !waitDead(t, pid) {
		t.Errorf("the resumed stage's sleep %s survived the cancel", pid)
	}
}

// TestDetachedStage: a resumable job's stage keeps the attached path's
// semantics: a cancel stops it (SIGTERM, then SIGKILL after the grace
// period for what ignores it), and a background child does not outlive
// it. With and without setsid(1) on the host.
func TestDetachedStage(t *testing.T) {
	t.Run("cancel", func(t *testing.T) {
		t.Parallel()
		f := resumable(t, "bash", sshxtest.Start(t))
		e := f.prepared(t)
		dir := t.TempDir()
		ctx, cancel := context.WithCancel(t.Context())
		errc := make(chan error, 1)
		go func() {
			errc <- e.Run(ctx, executor.Command{Stage: executor.StageStepScript,
				Script: "trap '' TERM\nsleep 300 &\necho $! > " + dir + "/bg\necho $$ > " + dir + "/sh\nwhile :; do sleep 0.1; done\n"})
		}()
		bg, sh := executortest.WaitFile(t, dir+"/bg"), executortest.WaitFile(t, dir+"/sh")
		cancel()
		if err := <-errc; !errors.Is(err, context.Canceled) {
			t.Errorf("Run after cancel = %v, want context.Canceled", err)
		}
		for _, pid := range []string{bg, sh} {
			if !waitDead(t, pid) {
				t.Errorf("process %s of the cancelled stage survived", pid)
			}
		}
	})
	t.Run("background child", func(t *testing.T) {
		t.Parallel()
		f := resumable(t, "sh", sshxtest.Start(t))
		e := f.prepared(t)
		bg := filepath.Join(t.TempDir(), "bg")
		if err := e.Run(t.Context(), executor.Command{Stage: executor.StageStepScript, Script: "sleep 300 &\necho $! > " + bg + "\n"}); err != nil {
			t.Fatalf("Run() = %v", err)
		}
		if pid := executortest.WaitFile(t, bg); !waitDead(t, pid) {
			t.Errorf("the stage's background sleep %s outlived it", pid)
		}
	})
	t.Run("without setsid", func(t *testing.T) {
		t.Parallel()
		f := resumable(t, "bash", sshxtest.StartWith(t, sshxtest.Options{SetEnv: []string{"PATH=" + withoutSetsid(t)}}))
		e := f.prepared(t)
		if err := e.Run(t.Context(), executor.Command{Stage: "step_script", Script: "if command -v setsid; then exit 9; fi\necho no-setsid\n"}); err != nil {
			t.Fatalf("Run = %v, want nil", err)
		}
		var be *executor.BuildError
		if err := e.Run(t.Context(), executor.Command{Stage: "step_script", Script: "exit 4"}); !errors.As(err, &be) || be.ExitCode != 4 {
			t.Errorf("Run(exit 4) = %v, want *BuildError with exit code 4", err)
		}
		inOrder(t, f.trace.String(), "no-setsid\n")
	})
}

// withoutSetsid is a directory of /usr/bin's commands but setsid.
func withoutSetsid(t *testing.T) string {
	t.Helper()
	bin := t.TempDir()
	entries, err := os.ReadDir("/usr/bin")
	if err != nil {
		t.Skipf("cannot list /usr/bin: %v", err)
	}
	for _, e := range entries {
		if e.Name() != "setsid" {
			if err := os.Symlink(filepath.Join("/usr/bin", e.Name()), filepath.Join(bin, e.Name())); err != nil {
				t.Fatal(err)
			}
		}
	}
	return bin
}

// TestSweep: at the manager's start, the stages a dead manager of the same
// system id left running for jobs no store will resume are stopped and
// their directories removed; those of jobs to resume, and those of
// another system id, stay. On a fixed host at Sweep; on an autoscaled
// instance when a job of the new process first reaches it.
func TestSweep(t *testing.T) {
	for _, fixed := range []bool{true, false} {
		// Not in parallel: both subtests' hosts are this machine, whose
		// /tmp holds the job directories of both under the same system
		// id, and the first job of one would sweep the other's.
		t.Run(fmt.Sprintf("fixed host %v", fixed), func(t *testing.T) {
			f := resumable(t, "sh", sshxtest.Start(t))
			type left struct {
				dir string
				pid string
			}
			// Jobs 21 (not kept), 22 (kept), and 23 of another system id.
			start := func(jobID int64, systemID string) left {
				dead := f.manager(t)
				dead.settings.SystemID = systemID
				d, err := dead.provider.Acquire(t.Context(), dead.settings)
				if err != nil {
					t.Fatal(err)
				}
				e := dead.provider.Create().(*Executor)
				j := newJob(nil, nil)
				j.ID = jobID
				if err := e.Prepare(t.Context(), executor.PrepareOptions{Job: j, Settings: dead.settings, Data: d, Trace: dead.trace}); err != nil {
					t.Fatalf("Prepare() = %v", err)
				}
				pidFile := filepath.Join(t.TempDir(), "pid")
				go func() {
					_ = e.Run(context.Background(), executor.Command{Stage: "step_script", Script: "echo $$ > " + pidFile + "\nexec sleep 300\n"})
				}()
				pid := executortest.WaitFile(t, pidFile)
				g := stageGroup(t, e.scriptDir, 1)
				t.Cleanup(func() { _ = syscall.Kill(-g, syscall.SIGKILL) })
				die(t, dead, e, nil)
				t.Cleanup(func() {
					// The dead manager's followers of the stage too: with
					// the directory gone they would wait for it forever.
					_ = exec.Command("pkill", "-f", e.scriptDir).Run()
					_ = os.RemoveAll(e.scriptDir)
				})
				return left{e.scriptDir, pid}
			}
			gone, kept, other := start(21, "s_test"), start(22, "s_test"), start(23, "s_other")

			p := f.provider
			if fixed {
				var err error
				p, err = NewProvider(Options{Lookup: p.opts.Lookup, GracePeriod: 300 * time.Millisecond,
					Hosts: func() []Host { return []Host{{Runner: f.runner, Info: f.slots.info}} }})
				if err != nil {
					t.Fatal(err)
				}
			}
			removed, err := p.Sweep(t.Context(), "s_test", func(id int64) bool { return id == 22 })
			if err != nil {
				t.Fatalf("Sweep() = %v", err)
			}
			if !fixed {
				if len(removed) != 0 {
					t.Errorf("Sweep() removed %v before any job reached the instance", removed)
				}
				if !executortest.Alive(t, gone.pid) {
					t.Fatal("the stage was stopped before a job reached its instance")
				}
				f.prepared(t) // the first job of the new process
			} else if len(removed) == 0 || !strings.Contains(strings.Join(removed, "\n"), "job 21") {
				t.Errorf("Sweep() = %v, want job 21's directory", removed)
			}
			if !waitDead(t, gone.pid) {
				t.Errorf("the stage of job 21 (not to be resumed) survived the sweep")
			}
			if _, err := os.Stat(gone.dir); err == nil {
				t.Errorf("job 21's directory %s is still there", gone.dir)
			}
			for _, l := range []left{kept, other} {
				if !executortest.Alive(t, l.pid) {
					t.Errorf("the stage in %s was stopped", l.dir)
				}
				if _, err := os.Stat(l.dir); err != nil {
					t.Errorf("%s: %v", l.dir, err)
				}
			}
		})
	}
}

// TestStateErrors: a job not prepared resumable has no state; states
// that cannot be restored, and pools that cannot give a slot back, are
// refused.
func TestStateErrors(t *testing.T) {
	t.Parallel()
	f := newFixture(t, "sh")
	e := f.prepared(t)
	if _, err := e.State(); err == nil || !strings.Contains(err.Error(), "not prepared resumable") {
		t.Errorf("State() of a job not prepared resumable = %v", err)
	}
	if err := e.OutputCheckpoint(func(json.RawMessage, executor.Stage, int64) {}); err == nil {
		t.Error("OutputCheckpoint() of a job not prepared resumable = nil")
	}
	good := savedState{Version: stateVersion, Instance: "i-1", Shell: "sh", Dir: "/tmp/drover-job-x",
		Paths: executor.Paths{BuildsDir: "/b", ProjectDir: "/b/p"}}
	for _, tc := range []struct {
		name  string
		edit  func(*savedState)
		slots Slots
		want  string
	}{
		{"version", func(s *savedState) { s.Version = 9 }, f.slots, "version 9"},
		{"no instance", func(s *savedState) { s.Instance = "" }, f.slots, "no instance"},
		{"relative dir", func(s *savedState) { s.Dir = "tmp/x" }, f.slots, "dir"},
		{"root dir", func(s *savedState) { s.Dir = "/" }, f.slots, "dir"},
		{"no claim", func(*savedState) {}, noClaim{f.slots}, "cannot give back a slot"},
		{"gone instance", func(s *savedState) { s.Instance = "i-9" }, f.slots, "no instance i-9"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := good
			tc.edit(&st)
			raw, _ := json.Marshal(st)
			f.runner.Slots = tc.slots
			defer func() { f.runner.Slots = f.slots }()
			e := f.provider.Create().(*Executor)
			err := e.Restore(t.Context(), executor.PrepareOptions{Job: newJob(nil, nil), Settings: f.settings}, raw)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Restore() = %v, want an error about %q", err, tc.want)
			}
		})
	}
}

// noClaim is a pool that cannot give a slot back after a restart.
type noClaim struct{ Slots }

// BenchmarkStageResumable is BenchmarkStage for a job prepared resumable:
// the stage runs detached (its script stored, its wrapper started, its
// output followed: three sessions instead of one).
func BenchmarkStageResumable(b *testing.B) {
	f := resumable(b, "sh", sshxtest.Start(b))
	e := f.prepared(b)
	b.ResetTimer()
	for b.Loop() {
		if err := e.Run(b.Context(), executor.Command{Stage: "step_script", Script: "echo hi\n"}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkJobResumable is BenchmarkJob for a job prepared resumable.
func BenchmarkJobResumable(b *testing.B) {
	f := resumable(b, "sh", sshxtest.Start(b))
	j := newJob([]string{"echo hi"}, []string{"echo after"})
	b.ResetTimer()
	for b.Loop() {
		if res := f.run(b, b.Context(), nil, j); res.State != api.StateSuccess {
			b.Fatalf("job: %+v", res)
		}
	}
}
