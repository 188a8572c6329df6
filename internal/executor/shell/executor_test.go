package shell

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/executor"
	"github.com/drover-ci/drover/internal/executor/executortest"
)

func testJob() *api.JobResponse {
	return &api.JobResponse{ID: 7, JobInfo: api.JobInfo{ProjectFullPath: "group/sub/project", ProjectID: 3}}
}

// modes are the two ways stages run: attached to the manager (the
// default) and detached, resumable.
var modes = []struct {
	name      string
	resumable bool
}{{"attached", false}, {"resumable", true}}

// prepared returns a prepared executor for sh with its trace.
func prepared(t testing.TB, sh string, grace time.Duration, resumable bool) (*Executor, *executortest.Trace) {
	t.Helper()
	p := &Provider{GracePeriod: grace}
	e := p.Create().(*Executor)
	trace := &executortest.Trace{}
	err := e.Prepare(t.Context(), executor.PrepareOptions{
		Job: testJob(),
		Settings: executor.Settings{Shell: sh, ShortToken: "abcdefghi", ConcurrentID: 2, Resumable: resumable,
			BuildsDir: filepath.Join(t.TempDir(), "builds"), CacheDir: filepath.Join(t.TempDir(), "cache")},
		Trace: trace,
	})
	if err != nil {
		t.Fatalf("Prepare() = %v, want nil", err)
	}
	t.Cleanup(func() { e.Cleanup(context.Background()) })
	return e, trace
}

func TestProvider(t *testing.T) {
	p := NewProvider()
	if !p.CanCreate() {
		t.Fatal("CanCreate() = false, want true")
	}
	if got := p.DefaultShell(); got != "bash" {
		t.Errorf("DefaultShell() = %q, want bash (installed here)", got)
	}
	if d, err := p.Acquire(t.Context(), executor.Settings{}); d != nil || err != nil {
		t.Errorf("Acquire() = %v, %v; want nil, nil", d, err)
	}
	var f api.FeaturesInfo
	p.Features(&f)
	want := api.FeaturesInfo{
		Variables: true, Shared: true, Masking: true, RawVariables: true, MultiBuildSteps: true,
		ReturnExitCode: true, Refspecs: true, Cancelable: true, CancelGracefully: true,
		TraceReset: true, TraceChecksum: true, TraceSize: true,
	}
	if diff := cmp.Diff(want, f); diff != "" {
		t.Errorf("Features (-want +got):\n%s", diff)
	}
}

func TestPrepareLayout(t *testing.T) {
	t.Parallel()
	e, trace := prepared(t, "sh", 0, false)
	paths := e.Paths()
	want := filepath.Join(paths.BuildsDir, "abcdefghi", "2", "group", "sub", "project")
	if paths.ProjectDir != want {
		t.Errorf("ProjectDir = %q, want %q", paths.ProjectDir, want)
	}
	for _, dir := range []string{paths.ProjectDir, paths.CacheDir} {
		if st, err := os.Stat(dir); err != nil || !st.IsDir() {
			t.Errorf("stat %s = %v, want a directory", dir, err)
		}
	}
	for _, w := range []string{`Preparing the "shell" executor`, "Using Shell (sh) executor...\n"} {
		if !strings.Contains(trace.String(), w) {
			t.Errorf("trace lacks %q:\n%s", w, trace)
		}
	}
	if e.Shell() != "sh" || e.GracePeriod != DefaultGracePeriod {
		t.Errorf("Shell(), GracePeriod = %q, %v; want sh, %v", e.Shell(), e.GracePeriod, DefaultGracePeriod)
	}
}

func TestPrepareRejectsShell(t *testing.T) {
	e := NewProvider().Create()
	err := e.Prepare(t.Context(), executor.PrepareOptions{Job: testJob(), Settings: executor.Settings{Shell: "pwsh", BuildsDir: t.TempDir()}})
	if err == nil {
		t.Fatal("Prepare(shell pwsh) = nil, want an error")
	}
	e.Cleanup(t.Context()) // safe after a failed Prepare
}

func TestRunBeforePrepare(t *testing.T) {
	if err := NewProvider().Create().Run(t.Context(), executor.Command{Stage: "step_script", Script: "true"}); err == nil {
		t.Fatal("Run before Prepare = nil, want an error")
	}
}

func TestRun(t *testing.T) {
	for _, m := range modes {
		for _, sh := range []string{"bash", "sh"} {
			t.Run(m.name+"/"+sh, func(t *testing.T) {
				t.Parallel()
				e, trace := prepared(t, sh, 0, m.resumable)
				if err := e.Run(t.Context(), executor.Command{Stage: "step_script", Script: "echo out; echo err >&2; pwd"}); err != nil {
					t.Fatalf("Run(ok) = %v, want nil", err)
				}
				for _, w := range []string{"out\n", "err\n", e.Paths().ProjectDir + "\n"} {
					if !strings.Contains(trace.String(), w) {
						t.Errorf("trace lacks %q:\n%s", w, trace)
					}
				}
				err := e.Run(t.Context(), executor.Command{Stage: "step_script", Script: "exit 3"})
				var be *executor.BuildError
				if !errors.As(err, &be) || be.ExitCode != 3 {
					t.Errorf("Run(exit 3) = %v, want *BuildError with exit code 3", err)
				}
				err = e.Run(t.Context(), executor.Command{Stage: "step_script", Script: "kill -KILL $$"})
				if !errors.As(err, &be) || be.ExitCode != 137 {
					t.Errorf("Run(kill -KILL $$) = %v, want *BuildError with exit code 137", err)
				}
				// stdin is empty: a reading command cannot hang or eat the script.
				if err := e.Run(t.Context(), executor.Command{Stage: "step_script", Script: "cat; echo after-cat"}); err != nil || !strings.Contains(trace.String(), "after-cat") {
					t.Errorf("Run(cat) = %v, want nil and the rest of the script run", err)
				}
				// The whole group, a resumable stage's wrapper too.
				err = e.Run(t.Context(), executor.Command{Stage: "step_script", Script: "kill -KILL 0"})
				if !errors.As(err, &be) || be.ExitCode != 137 {
					t.Errorf("Run(kill -KILL 0) = %v, want *BuildError with exit code 137", err)
				}
			})
		}
	}
}

func TestCancelKillsProcessGroup(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			e, _ := prepared(t, "bash", 200*time.Millisecond, m.resumable)
			pidFile := filepath.Join(t.TempDir(), "pid")
			pid, d, err := executortest.RunCanceled(t, e, "sleep 100 &\necho $! > "+pidFile+"\nsleep 100\n", pidFile)
			if !errors.Is(err, context.Canceled) {
				t.Errorf("Run after cancel = %v, want context.Canceled wrapped", err)
			}
			if d > 3*time.Second {
				t.Errorf("Run took %v after cancel", d)
			}
			if executortest.Alive(t, pid) {
				t.Errorf("background sleep %s still alive after Run returned", pid)
			}
		})
	}
}

func TestCancelEscalatesToKill(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			e, _ := prepared(t, "bash", 300*time.Millisecond, m.resumable)
			dir := t.TempDir()
			// The group ignores SIGTERM: only SIGKILL after the grace period ends it.
			pid, d, err := executortest.RunCanceled(t, e, "trap '' TERM\nsleep 100 &\necho $! > "+dir+"/pid\nwait\n", dir+"/pid")
			if !errors.Is(err, context.Canceled) {
				t.Errorf("Run after cancel = %v, want context.Canceled wrapped", err)
			}
			if d < 300*time.Millisecond || d > 5*time.Second {
				t.Errorf("Run returned %v after cancel, want after the 300ms grace period", d)
			}
			if executortest.Alive(t, pid) {
				t.Errorf("sleep %s survived SIGKILL", pid)
			}
		})
	}
}

func TestCancelIsGraceful(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			e, trace := prepared(t, "bash", 10*time.Second, m.resumable)
			dir := t.TempDir()
			_, d, err := executortest.RunCanceled(t, e, "trap 'echo cleaning up; exit 0' TERM\necho ready > "+dir+"/ready\nwhile :; do sleep 0.05; done\n", dir+"/ready")
			if !errors.Is(err, context.Canceled) {
				t.Errorf("Run after cancel = %v, want context.Canceled wrapped", err)
			}
			if d > 5*time.Second {
				t.Errorf("Run took %v: it waited for the grace period although the script exited", d)
			}
			if !strings.Contains(trace.String(), "cleaning up") {
				t.Errorf("the TERM trap did not run:\n%s", trace)
			}
		})
	}
}

func TestBackgroundChildDoesNotOutliveStage(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			e, _ := prepared(t, "sh", time.Second, m.resumable)
			pidFile := filepath.Join(t.TempDir(), "pid")
			start := time.Now()
			if err := e.Run(t.Context(), executor.Command{Stage: "step_script", Script: "sleep 100 &\necho $! > " + pidFile + "\n"}); err != nil {
				t.Fatalf("Run = %v, want nil", err)
			}
			if d := time.Since(start); d > 3*time.Second {
				t.Errorf("Run took %v: the background child held it", d)
			}
			if pid := executortest.WaitFile(t, pidFile); executortest.Alive(t, pid) {
				t.Errorf("background sleep %s still alive after the stage", pid)
			}
		})
	}
}

func TestStage(t *testing.T) {
	e := NewProvider().Create()
	e.SetCurrentStage(executor.StageGetSources)
	if got := e.CurrentStage(); got != executor.StageGetSources {
		t.Errorf("CurrentStage() = %q, want %q", got, executor.StageGetSources)
	}
}

// TestLargeOutput: every byte of a stage's output reaches the trace once,
// in order, in both modes.
func TestLargeOutput(t *testing.T) {
	var want strings.Builder
	for i := 1; i <= 200000; i++ {
		want.WriteString(strconv.Itoa(i))
		want.WriteByte('\n')
	}
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			e, trace := prepared(t, "sh", 0, m.resumable)
			if err := e.Run(t.Context(), executor.Command{Stage: "step_script", Script: "seq 1 200000"}); err != nil {
				t.Fatalf("Run(seq) = %v, want nil", err)
			}
			got := trace.String()
			got = got[strings.Index(got, "executor...\n")+len("executor...\n"):]
			if got != want.String() {
				t.Errorf("trace holds %d bytes of output, want the %d of seq 1 200000", len(got), want.Len())
			}
		})
	}
}

// TestStageFilesPrivate: what a stage leaves on the host while its job
// runs (the script, which holds the job's variables, and a resumable
// stage's output, which is not masked yet) is readable by the runner's
// user only: the directories are 0700 and the script and output files
// 0600.
func TestStageFilesPrivate(t *testing.T) {
	e, trace := prepared(t, "sh", 0, true)
	// The script is removed when its stage ends: it reports its own mode.
	if err := e.Run(t.Context(), executor.Command{Stage: "step_script", Script: `stat -c 'mode %a' "$0" "$(dirname "$0")"`}); err != nil {
		t.Fatal(err)
	}
	if got := strings.Count(trace.String(), "mode 600\n") + strings.Count(trace.String(), "mode 700\n"); got != 2 {
		t.Errorf("the running script and its directory: %q, want modes 600 and 700", trace.String())
	}
	f := e.stageFiles(1, "step_script")
	for _, c := range []struct {
		path string
		dir  bool
	}{{e.scriptDir, true}, {e.outputDir, true}, {f.output, false}} {
		fi, err := os.Stat(c.path)
		if err != nil {
			t.Fatalf("stat %s: %v", c.path, err)
		}
		if fi.IsDir() != c.dir || fi.Mode().Perm()&0o077 != 0 {
			t.Errorf("%s: mode %v, want no access for group or others", c.path, fi.Mode())
		}
	}
}

// TestLoginShell: stages run in login shells, as GitLab Runner's shell
// executor runs them (bash -l, sh -l): the runner user's profile is read
// before the script (bash's ~/.bash_profile first, which then hides
// ~/.profile; sh's ~/.profile), in both ways stages run.
func TestLoginShell(t *testing.T) {
	home := t.TempDir()
	for name, body := range map[string]string{
		".profile":      "export FROM_PROFILE=profile-read\n",
		".bash_profile": "export FROM_PROFILE=bash-profile-read\n",
	} {
		if err := os.WriteFile(filepath.Join(home, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("HOME", home)
	for _, tc := range []struct{ shell, want string }{
		{"bash", "bash-profile-read"},
		{"sh", "profile-read"},
	} {
		for _, m := range modes {
			t.Run(tc.shell+"/"+m.name, func(t *testing.T) {
				e, trace := prepared(t, tc.shell, 0, m.resumable)
				script := "set -e\necho \"profile says: ${FROM_PROFILE:-nothing}\"\n"
				if err := e.Run(t.Context(), executor.Command{Stage: executor.StageStepScript, Script: script}); err != nil {
					t.Fatalf("Run() = %v, want nil", err)
				}
				if want := "profile says: " + tc.want + "\n"; !strings.Contains(trace.String(), want) {
					t.Errorf("trace lacks %q:\n%s", want, trace)
				}
			})
		}
	}
}
