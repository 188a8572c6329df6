package jobrun

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/clock"
	"github.com/drover-ci/drover/internal/executor"
	"github.com/drover-ci/drover/internal/executor/executortest"
	shellexec "github.com/drover-ci/drover/internal/executor/shell"
)

// recorder is the real shell executor, recording the calls the build makes.
type recorder struct {
	executor.Executor
	mu         sync.Mutex
	stages     []executor.Stage
	finished   bool
	cleanedUp  bool
	cleanupErr error // ctx.Err() seen by Cleanup
}

func (r *recorder) SetCurrentStage(s executor.Stage) {
	r.mu.Lock()
	r.stages = append(r.stages, s)
	r.mu.Unlock()
	r.Executor.SetCurrentStage(s)
}

func (r *recorder) Finish(err error) {
	r.mu.Lock()
	r.finished = true
	r.mu.Unlock()
	r.Executor.Finish(err)
}

func (r *recorder) Cleanup(ctx context.Context) {
	r.mu.Lock()
	r.cleanedUp, r.cleanupErr = true, ctx.Err()
	r.mu.Unlock()
	r.Executor.Cleanup(ctx)
}

func job(script []string, after []string, vars ...api.Variable) *api.JobResponse {
	j := &api.JobResponse{
		ID:         11,
		JobInfo:    api.JobInfo{ProjectFullPath: "group/project", ProjectID: 5},
		RunnerInfo: api.RunnerInfo{Timeout: 60},
		Variables:  append(api.Variables{{Key: "GIT_STRATEGY", Value: "none"}}, vars...),
		Steps:      []api.Step{{Name: api.StepScript, Script: script, When: api.WhenOnSuccess}},
	}
	if after != nil {
		j.Steps = append(j.Steps, api.Step{Name: api.StepAfterScript, Script: after, When: api.WhenAlways})
	}
	return j
}

type fixture struct {
	opts  Options
	trace *executortest.Trace
	rec   *recorder
}

func newFixture(t *testing.T, sh string, j *api.JobResponse) *fixture {
	t.Helper()
	p := &shellexec.Provider{GracePeriod: 300 * time.Millisecond}
	rec := &recorder{Executor: p.Create()}
	trace := &executortest.Trace{}
	return &fixture{
		trace: trace,
		rec:   rec,
		opts: Options{
			Job: j, Provider: p, Executor: rec, Trace: trace, Version: "test",
			Settings: executor.Settings{
				RunnerName: "tester", Shell: sh, ShortToken: "abcdefghi", ConcurrentID: 1,
				BuildsDir: filepath.Join(t.TempDir(), "builds"), CacheDir: filepath.Join(t.TempDir(), "cache"),
			},
		},
	}
}

func (f *fixture) run(ctx context.Context, graceful <-chan struct{}) Result {
	return Run(ctx, graceful, f.opts)
}

func (f *fixture) projectDir() string {
	return executor.ProjectDir(f.opts.Settings.BuildsDir, "abcdefghi", 1, f.opts.Job)
}

func (f *fixture) assertTrace(t *testing.T, want, notWant []string) {
	t.Helper()
	tr := f.trace.String()
	for _, w := range want {
		if !strings.Contains(tr, w) {
			t.Errorf("trace lacks %q:\n%s", w, tr)
		}
	}
	for _, w := range notWant {
		if strings.Contains(tr, w) {
			t.Errorf("trace contains %q:\n%s", w, tr)
		}
	}
}

func checkResult(t *testing.T, got, want Result) {
	t.Helper()
	got.Err = nil
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Result (-want +got):\n%s", diff)
	}
}

func TestRunScripts(t *testing.T) {
	for _, sh := range []string{"bash", "sh"} {
		t.Run(sh+"/success", func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, sh, job([]string{"echo hello"}, []string{`echo "after=$CI_JOB_STATUS"`}))
			res := f.run(t.Context(), nil)
			checkResult(t, res, Result{State: api.StateSuccess})
			if res.Err != nil {
				t.Errorf("Result.Err = %v, want nil", res.Err)
			}
			f.assertTrace(t, []string{
				"Running with drover test\n  on tester abcdefghi\n",
				":prepare_executor\r\033[0K", "Using Shell (" + sh + ") executor...",
				":prepare_script\r\033[0K", "Running on ",
				"Skipping Git repository setup", "Skipping Git checkout", "Skipping Git submodules setup",
				":step_script\r\033[0K\033[0K\033[36;1mExecuting \"step_script\" stage of the job script",
				"$ echo hello", "hello\n", "section_end:",
				"Running after_script", "after=success\n",
				"\033[32;1mJob succeeded\033[0;m\n",
			}, nil)
			// Every section_end marker ends its line (GitLab Runner 19).
			tr := f.trace.String()
			if n, m := strings.Count(tr, "section_end:"), len(regexp.MustCompile(`section_end:[0-9]+:[a-z_]+\r\033\[0K\n`).FindAllString(tr, -1)); n == 0 || n != m {
				t.Errorf("%d section_end markers, %d of them followed by a newline:\n%q", n, m, tr)
			}
		})
		t.Run(sh+"/failure", func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, sh, job([]string{"echo one", "exit 3", "echo two"}, []string{`echo "after=$CI_JOB_STATUS"`}))
			res := f.run(t.Context(), nil)
			checkResult(t, res, Result{State: api.StateFailed, FailureReason: api.ScriptFailure, ExitCode: 3, HasExitCode: true})
			f.assertTrace(t, []string{"one\n", "after=failed\n", "\033[31;1mERROR: Job failed: exit code 3\033[0;m\n"}, []string{"two\n", "Job succeeded"})
		})
	}
}

func TestStagesAndCleanup(t *testing.T) {
	t.Parallel()
	f := newFixture(t, "bash", job([]string{"true"}, []string{"true"}, api.Variable{Key: "F", Value: "x", File: true}))
	f.run(t.Context(), nil)
	want := []executor.Stage{
		executor.StagePrepareExecutor, executor.StagePrepareScript, executor.StageGetSources,
		executor.StageRestoreCache, executor.StageDownloadArtifacts,
		executor.StageStepScript, executor.StageAfterScript,
		executor.StageArchiveCache, executor.StageUploadArtifacts,
		executor.StageCleanupFileVariables, executor.StageFinished,
	}
	if diff := cmp.Diff(want, f.rec.stages); diff != "" {
		t.Errorf("stages (-want +got):\n%s", diff)
	}
	if !f.rec.finished || !f.rec.cleanedUp {
		t.Errorf("Finish called %v, Cleanup called %v; want both", f.rec.finished, f.rec.cleanedUp)
	}
}

func TestVariablesAndLayout(t *testing.T) {
	t.Parallel()
	j := job([]string{
		`echo "pwd=$(pwd)"`,
		`echo "project=$CI_PROJECT_DIR builds=$CI_BUILDS_DIR"`,
		`echo "ids=$CI_CONCURRENT_ID/$CI_CONCURRENT_PROJECT_ID token=$CI_RUNNER_SHORT_TOKEN server=$CI_SERVER"`,
		`echo "timeout=$CI_JOB_TIMEOUT shared=$CI_SHARED_ENVIRONMENT arch=$CI_RUNNER_EXECUTABLE_ARCH"`,
		`echo "override=$OVERRIDE runner=$FROM_RUNNER job=$JOB_VAR"`,
	}, nil,
		api.Variable{Key: "OVERRIDE", Value: "job"},
		api.Variable{Key: "JOB_VAR", Value: "in $CI_PROJECT_DIR"},
	)
	f := newFixture(t, "sh", j)
	f.opts.Settings.Environment = []string{"OVERRIDE=runner", "FROM_RUNNER=yes", "malformed"}
	res := f.run(t.Context(), nil)
	checkResult(t, res, Result{State: api.StateSuccess})
	dir, builds := f.projectDir(), f.opts.Settings.BuildsDir
	f.assertTrace(t, []string{
		"pwd=" + dir + "\n",
		"project=" + dir + " builds=" + builds + "\n",
		"ids=1/1 token=abcdefghi server=yes\n",
		"timeout=60 shared=true arch=",
		// As GitLab Runner 19: the job's variable wins over the runner's environment.
		"override=job runner=yes job=in " + dir + "\n",
	}, nil)
}

func TestFileVariableLifecycle(t *testing.T) {
	t.Parallel()
	content := "line one\nit's $NOT_EXPANDED\n"
	j := job([]string{`cat "$SECRET"`, `echo "path=$SECRET"`, `ls -l "$SECRET" | cut -c1-10`}, nil,
		api.Variable{Key: "SECRET", Value: content, File: true, Raw: true})
	f := newFixture(t, "bash", j)
	res := f.run(t.Context(), nil)
	checkResult(t, res, Result{State: api.StateSuccess})
	path := filepath.Join(f.projectDir()+".tmp", "SECRET")
	f.assertTrace(t, []string{content, "path=" + path + "\n", "-rw-------\n", ":cleanup_file_variables\r"}, nil)
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("stat %s after the build = %v, want not exist", path, err)
	}
}

func TestStepsWhen(t *testing.T) {
	t.Parallel()
	j := job([]string{"exit 2"}, []string{"echo after"})
	j.Steps = append(j.Steps,
		api.Step{Name: "release", Script: []string{"echo released"}},
		api.Step{Name: "notify", Script: []string{`echo "notified $CI_JOB_STATUS"`}, When: api.WhenOnFailure},
		api.Step{Name: "report", Script: []string{"echo reported", "exit 9"}, When: api.WhenAlways},
	)
	f := newFixture(t, "sh", j)
	res := f.run(t.Context(), nil)
	checkResult(t, res, Result{State: api.StateFailed, FailureReason: api.ScriptFailure, ExitCode: 2, HasExitCode: true})
	f.assertTrace(t, []string{"notified failed\n", "reported\n", `"step_notify"`, "after\n"}, []string{"released"})
}

func TestJobTimeout(t *testing.T) {
	t.Parallel()
	j := job([]string{"sleep 30"}, []string{`echo "after=$CI_JOB_STATUS"`})
	j.RunnerInfo.Timeout = 1
	f := newFixture(t, "bash", j)
	start := time.Now()
	res := f.run(t.Context(), nil)
	if d := time.Since(start); d > 4*time.Second {
		t.Errorf("Run took %v with a 1 s job timeout", d)
	}
	checkResult(t, res, Result{State: api.StateFailed, FailureReason: api.JobExecutionTimeout})
	// As GitLab Runner: no after_script once the job is out of time.
	f.assertTrace(t, []string{"step_script could not run to completion because the timeout was exceeded", "ERROR: Job failed: execution took longer than 1s seconds"}, []string{"after="})
}

func TestJobTimeoutFollowsClock(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	j := job([]string{"echo up > " + dir + "/started", "sleep 30"}, nil)
	j.RunnerInfo.Timeout = 3600
	f := newFixture(t, "sh", j)
	fake := clock.NewFake(time.Unix(1_700_000_000, 0))
	f.opts.Clock = fake
	go func() {
		waitFile(t, dir+"/started")
		fake.Advance(time.Hour)
	}()
	checkResult(t, f.run(t.Context(), nil), Result{State: api.StateFailed, FailureReason: api.JobExecutionTimeout})
	f.assertTrace(t, []string{"section_start:1700000000:step_script\r", "execution took longer than 1h0m0s seconds"}, nil)
}

func TestGracefulCancel(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	f := newFixture(t, "bash", job([]string{"echo up > " + dir + "/started", "sleep 30"}, []string{`echo "after=$CI_JOB_STATUS"`}))
	graceful := make(chan struct{})
	go func() {
		waitFile(t, dir+"/started")
		close(graceful)
	}()
	start := time.Now()
	res := f.run(t.Context(), graceful)
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("Run took %v after a graceful cancel", d)
	}
	checkResult(t, res, Result{State: api.StateFailed, FailureReason: api.JobCanceled, Canceled: true})
	f.assertTrace(t, []string{"after=canceled\n", "ERROR: Job failed: canceled"}, nil)
}

func TestHardCancel(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	j := job([]string{"sleep 100 &", "echo $! > " + dir + "/pid", "sleep 100"}, []string{"echo after-ran"},
		api.Variable{Key: "SECRET", Value: "s", File: true})
	f := newFixture(t, "bash", j)
	ctx, cancel := context.WithCancel(t.Context())
	var pid string
	go func() {
		pid = waitFile(t, dir+"/pid")
		cancel()
	}()
	res := f.run(ctx, nil)
	checkResult(t, res, Result{State: api.StateFailed, FailureReason: api.RunnerSystemFailure})
	if res.Err == nil {
		t.Error("Result.Err = nil, want the abort")
	}
	if executortest.Alive(t, pid) {
		t.Errorf("background sleep %s survived the hard cancel", pid)
	}
	f.assertTrace(t, []string{"ERROR: Job failed (system failure)"}, []string{"after-ran"})
	if _, err := os.Stat(filepath.Join(f.projectDir()+".tmp", "SECRET")); !os.IsNotExist(err) {
		t.Errorf("file variable after a hard cancel: stat = %v, want not exist", err)
	}
	if !f.rec.cleanedUp || f.rec.cleanupErr != nil {
		t.Errorf("Cleanup called %v with ctx.Err() = %v; want called on a live context", f.rec.cleanedUp, f.rec.cleanupErr)
	}
}

func TestAfterScript(t *testing.T) {
	t.Run("timeout does not fail the job", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, "bash", job([]string{"true"}, []string{"sleep 30"}, api.Variable{Key: "RUNNER_AFTER_SCRIPT_TIMEOUT", Value: "1s"}))
		start := time.Now()
		res := f.run(t.Context(), nil)
		if d := time.Since(start); d > 4*time.Second {
			t.Errorf("Run took %v with a 1 s after_script timeout", d)
		}
		checkResult(t, res, Result{State: api.StateSuccess})
		f.assertTrace(t, []string{"WARNING: after_script timed out"}, nil)
	})
	t.Run("errors ignored by default", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, "sh", job([]string{"true"}, []string{"exit 5"}))
		checkResult(t, f.run(t.Context(), nil), Result{State: api.StateSuccess})
		f.assertTrace(t, []string{"WARNING: after_script failed, but job will continue unaffected: exit code 5"}, nil)
	})
	t.Run("AFTER_SCRIPT_IGNORE_ERRORS=false", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, "sh", job([]string{"true"}, []string{"exit 5"}, api.Variable{Key: "AFTER_SCRIPT_IGNORE_ERRORS", Value: "false"}))
		checkResult(t, f.run(t.Context(), nil), Result{State: api.StateFailed, FailureReason: api.ScriptFailure, ExitCode: 5, HasExitCode: true})
	})
}

func TestSystemAndConfigFailures(t *testing.T) {
	t.Run("prepare", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, "pwsh", job([]string{"true"}, []string{"echo after"}))
		checkResult(t, f.run(t.Context(), nil), Result{State: api.StateFailed, FailureReason: api.RunnerSystemFailure})
		f.assertTrace(t, []string{"ERROR: Job failed (system failure): prepare executor"}, []string{"after"})
		if !f.rec.cleanedUp {
			t.Error("Cleanup not called after a failed Prepare")
		}
	})
	t.Run("bad GIT_STRATEGY", func(t *testing.T) {
		t.Parallel()
		j := job([]string{"echo never"}, nil, api.Variable{Key: "GIT_STRATEGY", Value: "teleport"})
		j.GitInfo.RepoURL = "file:///nonexistent"
		f := newFixture(t, "bash", j)
		checkResult(t, f.run(t.Context(), nil), Result{State: api.StateFailed, FailureReason: api.RunnerConfigurationError})
		f.assertTrace(t, []string{`GIT_STRATEGY "teleport"`}, []string{"never\n"})
	})
	t.Run("no executor", func(t *testing.T) {
		res := Run(t.Context(), nil, Options{Job: job(nil, nil)})
		checkResult(t, res, Result{State: api.StateFailed, FailureReason: api.RunnerSystemFailure})
	})
}

func TestGetSources(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not installed")
	}
	repo := t.TempDir()
	gitCmd := func(args ...string) string { return gitIn(t, repo, args...) }
	gitCmd("init", "-q", "-b", "main")
	if err := os.WriteFile(filepath.Join(repo, "file.txt"), []byte("content\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	gitCmd("add", "file.txt")
	gitCmd("commit", "-q", "-m", "first")
	sha := gitCmd("rev-parse", "HEAD")

	newJob := func(sha string) *api.JobResponse {
		j := job([]string{"cat file.txt"}, []string{"echo after"})
		j.Variables = nil
		j.GitInfo = api.GitInfo{RepoURL: "file://" + repo, Ref: "main", Sha: sha, RefType: "branch", Depth: 1}
		return j
	}
	t.Run("ok", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, "bash", newJob(sha))
		checkResult(t, f.run(t.Context(), nil), Result{State: api.StateSuccess})
		f.assertTrace(t, []string{"Fetching changes with git depth set to 1...", "Checking out " + sha[:8], "content\n"}, nil)
	})
	t.Run("bad sha", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, "bash", newJob(strings.Repeat("0f", 20)))
		res := f.run(t.Context(), nil)
		if res.State != api.StateFailed || res.FailureReason != api.ScriptFailure || res.ExitCode == 0 {
			t.Errorf("Result = %+v, want failed, script_failure, non-zero exit code", res)
		}
		// As GitLab Runner: no script and no after_script after a failed
		// get_sources.
		f.assertTrace(t, []string{"fatal: reference is not a tree"}, []string{"content\n", "after\n"})
	})
}

// waitFile waits until path holds a complete line and returns it.
func waitFile(t *testing.T, path string) string {
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if b, err := os.ReadFile(path); err == nil && strings.HasSuffix(string(b), "\n") {
			return strings.TrimSpace(string(b))
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Errorf("%s never written", path)
	return ""
}

// cancelAfterPrepare prepares, then closes graceful and waits for the
// cancel to land: the build is cancelled between Prepare and the accept.
type cancelAfterPrepare struct {
	executor.Executor
	graceful chan struct{}
}

func (e *cancelAfterPrepare) Prepare(ctx context.Context, opts executor.PrepareOptions) error {
	if err := e.Executor.Prepare(ctx, opts); err != nil {
		return err
	}
	close(e.graceful)
	<-ctx.Done()
	return nil
}

func TestAccept(t *testing.T) {
	t.Run("right before prepare_script", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, "bash", job([]string{"echo script-ran"}, nil))
		var seen []executor.Stage
		f.opts.Accept = func(ctx context.Context) error {
			f.rec.mu.Lock()
			seen = append(seen, f.rec.stages...)
			f.rec.mu.Unlock()
			return nil
		}
		checkResult(t, f.run(t.Context(), nil), Result{State: api.StateSuccess})
		if diff := cmp.Diff([]executor.Stage{executor.StagePrepareExecutor}, seen); diff != "" {
			t.Errorf("stages set when Accept was called (-want +got):\n%s", diff)
		}
		f.assertTrace(t, []string{"script-ran\n"}, nil)
	})
	t.Run("after the record's first checkpoint", func(t *testing.T) {
		// A manager killed right after the accept must find the job's
		// record: the synchronous checkpoint of prepare_script before it
		// starts comes first.
		t.Parallel()
		f := newFixture(t, "bash", job([]string{"echo script-ran"}, nil))
		var mu sync.Mutex
		var events []string
		f.opts.Checkpoint = func(cp Checkpoint, sync bool) {
			if sync && !cp.Started {
				mu.Lock()
				events = append(events, "checkpoint "+string(cp.Stage))
				mu.Unlock()
			}
		}
		f.opts.Accept = func(ctx context.Context) error {
			mu.Lock()
			events = append(events, "accept")
			mu.Unlock()
			return nil
		}
		checkResult(t, f.run(t.Context(), nil), Result{State: api.StateSuccess})
		mu.Lock()
		defer mu.Unlock()
		want := []string{"checkpoint " + string(executor.StagePrepareScript), "accept"}
		if len(events) < 2 || !slices.Equal(events[:2], want) {
			t.Errorf("synchronous checkpoints and accept in order %v; want %v first", events, want)
		}
	})
	t.Run("refused", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, "bash", job([]string{"echo script-ran"}, []string{"echo after-ran"}))
		f.opts.Accept = func(ctx context.Context) error { return errors.New("409") }
		res := f.run(t.Context(), nil)
		checkResult(t, res, Result{State: api.StateFailed, FailureReason: api.RunnerSystemFailure})
		if !errors.Is(res.Err, ErrNotAccepted) {
			t.Errorf("Run(…).Err = %v, want it to wrap ErrNotAccepted", res.Err)
		}
		f.assertTrace(t, nil, []string{"script-ran", "after-ran"})
		if slices.Contains(f.rec.stages, executor.StagePrepareScript) || !f.rec.cleanedUp {
			t.Errorf("stages = %v, cleaned up = %v: want no script stage and a cleanup", f.rec.stages, f.rec.cleanedUp)
		}
	})
	t.Run("system failure in Prepare is not accepted", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, "pwsh", job([]string{"true"}, nil))
		f.opts.Accept = func(ctx context.Context) error {
			t.Error("Accept called after a failed Prepare")
			return nil
		}
		checkResult(t, f.run(t.Context(), nil), Result{State: api.StateFailed, FailureReason: api.RunnerSystemFailure})
	})
	t.Run("the job's own failure in Prepare is accepted", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, "bash", job([]string{"echo script-ran"}, []string{"echo after-ran"}))
		p := &executortest.SlowProvider{Provider: f.opts.Provider, PrepareErr: &executor.BuildError{ExitCode: 1, Reason: api.ImagePullFailure}}
		f.opts.Executor = p.Create()
		accepted := false
		f.opts.Accept = func(ctx context.Context) error { accepted = true; return nil }
		res := f.run(t.Context(), nil)
		checkResult(t, res, Result{State: api.StateFailed, FailureReason: api.ImagePullFailure, ExitCode: 1, HasExitCode: true})
		if !accepted || len(p.Stages()) != 0 {
			t.Errorf("accepted = %v, stages run = %v; want accepted and no stage", accepted, p.Stages())
		}
	})
	t.Run("cancelled before the accept", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, "bash", job([]string{"echo script-ran"}, []string{"echo after-ran"}))
		graceful := make(chan struct{})
		f.opts.Executor = &cancelAfterPrepare{Executor: f.rec, graceful: graceful}
		f.opts.Accept = func(ctx context.Context) error {
			t.Error("Accept called in a cancelled build")
			return nil
		}
		res := f.run(t.Context(), graceful)
		if !errors.Is(res.Err, ErrNotAccepted) {
			t.Errorf("Run(…).Err = %v, want it to wrap ErrNotAccepted", res.Err)
		}
		f.assertTrace(t, nil, []string{"script-ran", "after-ran"})
	})
	t.Run("the job timeout counts from the accept", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		j := job([]string{"echo up > " + dir + "/started", "sleep 1"}, nil)
		j.RunnerInfo.Timeout = 3600
		f := newFixture(t, "sh", j)
		fake := clock.NewFake(time.Unix(1_700_000_000, 0))
		f.opts.Clock = fake
		// Preparation took almost the whole timeout...
		f.opts.Accept = func(ctx context.Context) error { fake.Advance(time.Hour - time.Second); return nil }
		go func() {
			waitFile(t, dir+"/started")
			fake.Advance(time.Minute) // ...and the script runs past the hour.
		}()
		checkResult(t, f.run(t.Context(), nil), Result{State: api.StateSuccess})
	})
}

// TestResumeAtFinished: once the result is known the build takes a
// checkpoint at StageFinished, before the executor's cleanup, holding the
// result and the log's last line. A build resumed there runs no stage: it
// restores the executor to clean it up, writes that last line and returns
// that result (a manager killed during a job's cleanup does not resume a
// stage whose processes or containers are gone).
func TestResumeAtFinished(t *testing.T) {
	f := newFixture(t, "bash", job([]string{"echo doing", "exit 3"}, nil))
	f.opts.Settings.Resumable = true
	var finished *Checkpoint
	var state []byte
	var cleanedBefore bool
	f.opts.Checkpoint = func(cp Checkpoint, sync bool) {
		if !sync || cp.Stage != executor.StageFinished {
			return
		}
		f.rec.mu.Lock()
		cleanedBefore = f.rec.cleanedUp
		f.rec.mu.Unlock()
		s, err := f.rec.Executor.(executor.Stateful).State()
		if err != nil {
			t.Errorf("State at the finished checkpoint: %v", err)
		}
		finished, state = &cp, s
	}
	want := Result{State: api.StateFailed, FailureReason: api.ScriptFailure, ExitCode: 3, HasExitCode: true}
	checkResult(t, f.run(t.Context(), nil), want)
	if finished == nil || finished.Outcome == nil {
		t.Fatalf("no finished checkpoint with an outcome: %+v", finished)
	}
	if cleanedBefore {
		t.Error("the finished checkpoint came after the executor's cleanup")
	}
	o := finished.Outcome
	if o.State != api.StateFailed || o.FailureReason != api.ScriptFailure || o.ExitCode != 3 || !o.HasExitCode ||
		o.Footer != "ERROR: Job failed: exit code 3" {
		t.Errorf("outcome = %+v", o)
	}

	r := newFixture(t, "bash", job([]string{"echo doing", "exit 3"}, nil))
	r.opts.Settings = f.opts.Settings
	r.opts.Resume = &Resume{Checkpoint: *finished, ExecutorState: state}
	r.opts.Executor = statefulRecorder{r.rec}
	checkResult(t, r.run(t.Context(), nil), want)
	if got := r.trace.String(); got != ansiBoldRed+"ERROR: Job failed: exit code 3"+ansiReset+"\n" {
		t.Errorf("resumed log = %q, want the last line only", got)
	}
	r.rec.mu.Lock()
	defer r.rec.mu.Unlock()
	ranStage := slices.ContainsFunc(r.rec.stages, func(s executor.Stage) bool {
		return s != executor.StageFinished && s != executor.StageCleanupFileVariables
	})
	if !r.rec.cleanedUp || ranStage {
		t.Errorf("resumed build: cleaned up %v, stages %v; want a cleanup and no script stage", r.rec.cleanedUp, r.rec.stages)
	}
}

// statefulRecorder is a recorder of a stateful executor.
type statefulRecorder struct{ *recorder }

func (s statefulRecorder) State() (json.RawMessage, error) {
	return s.Executor.(executor.Stateful).State()
}

func (s statefulRecorder) Restore(ctx context.Context, opts executor.PrepareOptions, state json.RawMessage) error {
	return s.Executor.(executor.Stateful).Restore(ctx, opts, state)
}

func (s statefulRecorder) Resume(ctx context.Context, cmd executor.Command, from int64) error {
	return s.Executor.(executor.Stateful).Resume(ctx, cmd, from)
}

// TestResumeTakesNoCheckpointItResumedFrom: a build resumed at a stage
// that was about to start (or started without output yet) takes no sync
// checkpoint before re-attaching to it: the record already holds that
// checkpoint, and the coordinator's log bytes past it are still to be
// regenerated, so the manager could not save one (it warned "the log
// could not be sent before a stage" on every such resume).
func TestResumeTakesNoCheckpointItResumedFrom(t *testing.T) {
	f := newFixture(t, "bash", job([]string{"echo doing"}, nil))
	f.opts.Settings.Resumable = true
	var at *Checkpoint
	var state []byte
	f.opts.Checkpoint = func(cp Checkpoint, sync bool) {
		if !sync || cp.Stage != executor.StageStepScript || at != nil {
			return
		}
		s, err := f.rec.Executor.(executor.Stateful).State()
		if err != nil {
			t.Errorf("State at the %s checkpoint: %v", cp.Stage, err)
		}
		at, state = &cp, s
	}
	checkResult(t, f.run(t.Context(), nil), Result{State: api.StateSuccess})
	if at == nil || at.Started {
		t.Fatalf("no checkpoint before %s started: %+v", executor.StageStepScript, at)
	}

	r := newFixture(t, "bash", job([]string{"echo doing"}, nil))
	r.opts.Settings = f.opts.Settings
	r.opts.Resume = &Resume{Checkpoint: *at, ExecutorState: state}
	r.opts.Executor = statefulRecorder{r.rec}
	var syncs []Checkpoint
	r.opts.Checkpoint = func(cp Checkpoint, sync bool) {
		if sync {
			syncs = append(syncs, cp)
		}
	}
	checkResult(t, r.run(t.Context(), nil), Result{State: api.StateSuccess})
	if len(syncs) == 0 {
		t.Fatal("the resumed build took no checkpoint at all")
	}
	if syncs[0].Stage == at.Stage {
		t.Errorf("the resumed build's first checkpoint is the one it resumed from (%s, started %v): %+v", at.Stage, at.Started, syncs)
	}
}
