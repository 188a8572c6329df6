package instance

import (
	"context"
	"errors"
	"fmt"
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

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/clock"
	"github.com/drover-ci/drover/internal/executor"
	"github.com/drover-ci/drover/internal/executor/executortest"
	"github.com/drover-ci/drover/internal/fleet"
	"github.com/drover-ci/drover/internal/jobrun"
	"github.com/drover-ci/drover/internal/sshx"
	"github.com/drover-ci/drover/internal/sshx/sshxtest"
)

// fakeSlots is a pool of one instance, the test's sshd: a fake because the
// pool is another package's; the instance behind it is real.
type fakeSlots struct {
	info     fleet.ConnectInfo
	capacity int
	// block makes Acquire wait for ctx (an instance that never gets ready).
	block bool

	mu                   sync.Mutex
	reserved, acquired   int
	unreserves, releases int
	used                 map[int]bool
	lost                 chan struct{}
}

func newSlots(srv *sshxtest.Server, capacity int) *fakeSlots {
	return &fakeSlots{
		info:     fleet.ConnectInfo{ID: "i-1", Protocol: "ssh", Username: srv.User, Key: srv.Key, InternalAddr: srv.Addr},
		capacity: capacity,
		used:     map[int]bool{},
		lost:     make(chan struct{}),
	}
}

type fakeAcq struct {
	slot int
	s    *fakeSlots
}

func (a *fakeAcq) InstanceID() string             { return a.s.info.ID }
func (a *fakeAcq) Slot() int                      { return a.slot }
func (a *fakeAcq) ConnectInfo() fleet.ConnectInfo { return a.s.info }
func (a *fakeAcq) Lost() <-chan struct{}          { return a.s.lost }

var errFull = errors.New("no capacity")

func (f *fakeSlots) Reserve() (Reservation, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.reserved+f.acquired >= f.capacity {
		return nil, errFull
	}
	f.reserved++
	return "reservation", nil
}

func (f *fakeSlots) Unreserve(r Reservation) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reserved--
	f.unreserves++
}

func (f *fakeSlots) Acquire(ctx context.Context, r Reservation) (Acquired, error) {
	if f.block {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reserved--
	f.acquired++
	slot := 0
	for f.used[slot] {
		slot++
	}
	f.used[slot] = true
	a := &fakeAcq{slot: slot, s: f}
	return a, nil
}

func (f *fakeSlots) Release(a Acquired) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.acquired--
	f.releases++
	delete(f.used, a.Slot())
}

func (f *fakeSlots) counts() (reserved, acquired, unreserves, releases int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.reserved, f.acquired, f.unreserves, f.releases
}

func newJob(script, after []string, vars ...api.Variable) *api.JobResponse {
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
	srv      *sshxtest.Server
	slots    *fakeSlots
	provider *Provider
	settings executor.Settings
	trace    *executortest.Trace
	runner   Runner
}

func newFixture(t testing.TB, sh string) *fixture {
	t.Helper()
	return newFixtureOn(t, sh, sshxtest.Start(t))
}

// newFixtureOn is newFixture with the instance behind srv.
func newFixtureOn(t testing.TB, sh string, srv *sshxtest.Server) *fixture {
	t.Helper()
	f := &fixture{srv: srv, slots: newSlots(srv, 2), trace: &executortest.Trace{}}
	f.runner = Runner{Slots: f.slots}
	p, err := NewProvider(Options{
		GracePeriod: 300 * time.Millisecond,
		Lookup: func(s executor.Settings) (Runner, error) {
			if s.ShortToken != "abcdefghi" {
				return Runner{}, fmt.Errorf("unknown runner %s", s.ShortToken)
			}
			return f.runner, nil
		},
	})
	if err != nil {
		t.Fatalf("NewProvider() = %v", err)
	}
	f.provider = p
	f.settings = executor.Settings{
		RunnerName: "tester", Shell: sh, ShortToken: "abcdefghi", ConcurrentID: 1,
		BuildsDir: filepath.Join(t.TempDir(), "builds"), CacheDir: filepath.Join(t.TempDir(), "cache"),
	}
	return f
}

// run runs job through internal/jobrun on a fresh executor, as the manager
// does: Acquire, jobrun.Run, Release.
func (f *fixture) run(t testing.TB, ctx context.Context, graceful <-chan struct{}, j *api.JobResponse) jobrun.Result {
	t.Helper()
	d, err := f.provider.Acquire(ctx, f.settings)
	if err != nil {
		t.Fatalf("Acquire() = %v, want nil", err)
	}
	defer f.provider.Release(context.Background(), f.settings, d)
	return jobrun.Run(ctx, graceful, jobrun.Options{
		Job: j, Provider: f.provider, Executor: f.provider.Create(), Data: d,
		Settings: f.settings, Trace: f.trace, Version: "test",
	})
}

// prepared returns a prepared executor, cleaned up (and its slot released)
// when the test ends.
func (f *fixture) prepared(t testing.TB) *Executor {
	t.Helper()
	d, err := f.provider.Acquire(t.Context(), f.settings)
	if err != nil {
		t.Fatalf("Acquire() = %v", err)
	}
	e := f.provider.Create().(*Executor)
	t.Cleanup(func() {
		e.Cleanup(context.Background())
		f.provider.Release(context.Background(), f.settings, d)
	})
	if err := e.Prepare(t.Context(), executor.PrepareOptions{Job: newJob(nil, nil), Settings: f.settings, Data: d, Trace: f.trace}); err != nil {
		t.Fatalf("Prepare() = %v, want nil", err)
	}
	return e
}

func (f *fixture) projectDir(slot int) string {
	return filepath.Join(f.settings.BuildsDir, "abcdefghi", strconv.Itoa(slot), "group", "project")
}

func checkResult(t *testing.T, got, want jobrun.Result) {
	t.Helper()
	got.Err = nil
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Result (-want +got):\n%s", diff)
	}
}

// inOrder checks that every string of want is in s, each after the one
// before.
func inOrder(t *testing.T, s string, want ...string) {
	t.Helper()
	rest := s
	for _, w := range want {
		i := strings.Index(rest, w)
		if i < 0 {
			t.Errorf("trace lacks %q after the previous ones:\n%s", w, s)
			return
		}
		rest = rest[i+len(w):]
	}
}

func TestJob(t *testing.T) {
	for _, sh := range []string{"bash", "sh"} {
		t.Run(sh, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, sh)
			host, _ := os.Hostname()
			j := newJob([]string{
				"echo one", "echo to-stderr >&2", `echo "shell=$(ps -o comm= -p $$)"`,
				`echo "pwd=$(pwd)"`, `echo "project=$CI_PROJECT_DIR builds=$CI_BUILDS_DIR"`,
			}, []string{`echo "after=$CI_JOB_STATUS"`})
			res := f.run(t, t.Context(), nil, j)
			checkResult(t, res, jobrun.Result{State: api.StateSuccess})
			dir := f.projectDir(0)
			inOrder(t, f.trace.String(),
				"Running with drover test\n  on tester abcdefghi\n",
				":prepare_executor\r\033[0K", `Preparing the "instance" executor`, "Waiting for a slot on an instance...",
				"Acquired slot 0 on instance i-1", "Using Instance ("+sh+") executor on "+host+"...", "section_end:",
				":prepare_script\r\033[0K", "Running on "+host+"...", "section_end:",
				":get_sources\r\033[0K", "Skipping Git repository setup", "Skipping Git checkout", "Skipping Git submodules setup", "section_end:",
				":step_script\r\033[0K", "$ echo one", "one\n", "to-stderr\n", "shell="+sh+"\n",
				"pwd="+dir+"\n", "project="+dir+" builds="+f.settings.BuildsDir+"\n", "section_end:",
				":after_script\r\033[0K", "after=success\n", "section_end:",
				"Job succeeded",
			)
			if _, _, unres, rel := f.slots.counts(); unres != 0 || rel != 1 {
				t.Errorf("unreserves, releases = %d, %d; want 0, 1", unres, rel)
			}
			// One connection served every stage of the job.
			if n := strings.Count(f.srv.Log(), "Accepted publickey"); n != 1 {
				t.Errorf("sshd accepted %d connections for one job, want 1:\n%s", n, f.srv.Log())
			}
		})
	}
}

func TestJobFailure(t *testing.T) {
	for _, sh := range []string{"bash", "sh"} {
		t.Run(sh, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, sh)
			j := newJob([]string{"echo one", "exit 3", "echo two"}, []string{`echo "after=$CI_JOB_STATUS"`})
			res := f.run(t, t.Context(), nil, j)
			checkResult(t, res, jobrun.Result{State: api.StateFailed, FailureReason: api.ScriptFailure, ExitCode: 3, HasExitCode: true})
			tr := f.trace.String()
			inOrder(t, tr, "one\n", ":after_script\r", "after=failed\n", "ERROR: Job failed: exit status 3")
			if strings.Contains(tr, "two\n") {
				t.Errorf("the script went on after exit 3:\n%s", tr)
			}
		})
	}
}

func TestFileVariables(t *testing.T) {
	t.Parallel()
	f := newFixture(t, "bash")
	content := "line one\nit's $NOT_EXPANDED\n"
	j := newJob([]string{`cat "$SECRET"`, `echo "path=$SECRET"`, `ls -l "$SECRET" | cut -c1-10`}, nil,
		api.Variable{Key: "SECRET", Value: content, File: true, Raw: true})
	res := f.run(t, t.Context(), nil, j)
	checkResult(t, res, jobrun.Result{State: api.StateSuccess})
	path := filepath.Join(f.projectDir(0)+".tmp", "SECRET")
	inOrder(t, f.trace.String(), content, "path="+path+"\n", "-rw-------\n", ":cleanup_file_variables\r")
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("stat %s after the build = %v, want not exist", path, err)
	}
}

func TestGitClone(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not installed")
	}
	repo := t.TempDir()
	git := func(args ...string) string {
		cmd := exec.Command("git", args...)
		cmd.Dir = repo
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@t.invalid", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@t.invalid")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	git("init", "-q", "-b", "main")
	if err := os.WriteFile(filepath.Join(repo, "file.txt"), []byte("from the repository\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	git("add", "file.txt")
	git("commit", "-q", "-m", "first")
	sha := git("rev-parse", "HEAD")

	f := newFixture(t, "sh")
	j := newJob([]string{"cat file.txt", "git rev-parse HEAD"}, nil)
	j.Variables = nil
	j.GitInfo = api.GitInfo{RepoURL: "file://" + repo, Ref: "main", Sha: sha, RefType: "branch", Depth: 1}
	res := f.run(t, t.Context(), nil, j)
	checkResult(t, res, jobrun.Result{State: api.StateSuccess})
	inOrder(t, f.trace.String(), ":get_sources\r", "Checking out "+sha[:8], "section_end:", "from the repository\n", sha+"\n")
	// A file:// repository's project directory is project-<id>, as GitLab Runner names it.
	if _, err := os.Stat(filepath.Join(executor.ProjectDir(f.settings.BuildsDir, "abcdefghi", 0, j), ".git")); err != nil {
		t.Errorf("no checkout in the project directory: %v", err)
	}
}

// waitDead waits a little for pid to be gone: the remote kill and the
// reaping of the killed process are not synchronous with Run's return.
func waitDead(t *testing.T, pid string) bool {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for executortest.Alive(t, pid) {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
	return true
}

func TestGracefulCancel(t *testing.T) {
	t.Parallel()
	f := newFixture(t, "bash")
	dir := t.TempDir()
	j := newJob([]string{"sleep 300 &", "echo $! > " + dir + "/bg", "echo $$ > " + dir + "/sh", "sleep 300"},
		[]string{`echo "after=$CI_JOB_STATUS"`})
	graceful := make(chan struct{})
	resc := make(chan jobrun.Result, 1)
	go func() { resc <- f.run(t, t.Context(), graceful, j) }()
	bg, sh := executortest.WaitFile(t, dir+"/bg"), executortest.WaitFile(t, dir+"/sh")
	start := time.Now()
	close(graceful)
	var res jobrun.Result
	select {
	case res = <-resc:
	case <-time.After(20 * time.Second):
		t.Fatal("the build did not end after a graceful cancel")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("the build took %v after the cancel", d)
	}
	checkResult(t, res, jobrun.Result{State: api.StateFailed, FailureReason: api.JobCanceled, Canceled: true})
	inOrder(t, f.trace.String(), ":after_script\r", "after=canceled\n")
	for _, pid := range []string{bg, sh} {
		if !waitDead(t, pid) {
			t.Errorf("remote process %s still alive after the cancel", pid)
		}
	}
}

func TestCancelEscalatesToKill(t *testing.T) {
	t.Parallel()
	f := newFixture(t, "bash")
	e := f.prepared(t)
	dir := t.TempDir()
	// The group ignores SIGTERM: only SIGKILL after the grace period ends it.
	pid, d, err := executortest.RunCanceled(t, e, "trap '' TERM\nsleep 300 &\necho $! > "+dir+"/pid\nwait\n", dir+"/pid")
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Run after cancel = %v, want context.Canceled wrapped", err)
	}
	if d < 300*time.Millisecond || d > 5*time.Second {
		t.Errorf("Run returned %v after cancel, want after the 300ms grace period", d)
	}
	if !waitDead(t, pid) {
		t.Errorf("sleep %s survived SIGKILL", pid)
	}
}

func TestCancelIsGraceful(t *testing.T) {
	t.Parallel()
	f := newFixture(t, "bash")
	e := f.prepared(t)
	e.GracePeriod = 10 * time.Second
	dir := t.TempDir()
	_, d, err := executortest.RunCanceled(t, e, "trap 'echo cleaning up; exit 0' TERM\necho ready > "+dir+"/ready\nwhile :; do sleep 0.05; done\n", dir+"/ready")
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Run after cancel = %v, want context.Canceled wrapped", err)
	}
	if d > 5*time.Second {
		t.Errorf("Run took %v: it waited for the grace period although the script exited", d)
	}
	if !strings.Contains(f.trace.String(), "cleaning up") {
		t.Errorf("the TERM trap did not run:\n%s", f.trace)
	}
}

func TestRun(t *testing.T) {
	for _, sh := range []string{"bash", "sh"} {
		t.Run(sh, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, sh)
			e := f.prepared(t)
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
			if err := e.Run(t.Context(), executor.Command{Stage: "step_script", Script: "cat; echo after-cat"}); err != nil || !strings.Contains(f.trace.String(), "after-cat") {
				t.Errorf("Run(cat) = %v, want nil and the rest of the script run", err)
			}
			// A script with every kind of quote and a large body arrives intact.
			big := strings.Repeat("x", 200<<10)
			script := "v='it'\"'\"'s \"q\" $HOME `x`'\nprintf '%s\\n' \"$v\"\n: " + big + "\necho end-of-big\n"
			if err := e.Run(t.Context(), executor.Command{Stage: "step_script", Script: script}); err != nil {
				t.Errorf("Run(quotes) = %v", err)
			}
			inOrder(t, f.trace.String(), "it's \"q\" $HOME `x`\n", "end-of-big\n")
		})
	}
}

func TestOutputStreams(t *testing.T) {
	t.Parallel()
	f := newFixture(t, "sh")
	e := f.prepared(t)
	dir := t.TempDir()
	errc := make(chan error, 1)
	go func() {
		errc <- e.Run(t.Context(), executor.Command{Stage: "step_script",
			Script: "echo first-line\nwhile [ ! -e " + dir + "/go ]; do sleep 0.02; done\necho second-line\n"})
	}()
	// The first line reaches the trace while the script still runs.
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(f.trace.String(), "first-line\n") {
		if time.Now().After(deadline) {
			t.Fatalf("first-line not streamed while the stage runs:\n%s", f.trace)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if strings.Contains(f.trace.String(), "second-line") {
		t.Fatal("second-line before the go file")
	}
	if err := os.WriteFile(dir+"/go", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatalf("Run = %v", err)
	}
	inOrder(t, f.trace.String(), "first-line\n", "second-line\n")
}

func TestBackgroundChildDoesNotOutliveStage(t *testing.T) {
	t.Parallel()
	f := newFixture(t, "sh")
	e := f.prepared(t)
	pidFile := filepath.Join(t.TempDir(), "pid")
	start := time.Now()
	if err := e.Run(t.Context(), executor.Command{Stage: "step_script", Script: "sleep 300 &\necho $! > " + pidFile + "\n"}); err != nil {
		t.Fatalf("Run = %v, want nil", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("Run took %v: the background child held it", d)
	}
	if pid := executortest.WaitFile(t, pidFile); !waitDead(t, pid) {
		t.Errorf("background sleep %s still alive after the stage", pid)
	}
}

func TestInstanceLost(t *testing.T) {
	t.Parallel()
	f := newFixture(t, "bash")
	dir := t.TempDir()
	j := newJob([]string{"echo $$ > " + dir + "/started", "sleep 20", "echo not-reached"}, []string{"echo after"})
	resc := make(chan jobrun.Result, 1)
	go func() { resc <- f.run(t, t.Context(), nil, j) }()
	killGroup(t, executortest.WaitFile(t, dir+"/started"))
	close(f.slots.lost)
	var res jobrun.Result
	select {
	case res = <-resc:
	case <-time.After(10 * time.Second):
		t.Fatal("the build did not end after the instance was lost")
	}
	if !errors.Is(res.Err, ErrInstanceLost) {
		t.Errorf("Result.Err = %v, want ErrInstanceLost", res.Err)
	}
	checkResult(t, res, jobrun.Result{State: api.StateFailed, FailureReason: api.RunnerSystemFailure})
	if tr := f.trace.String(); strings.Contains(tr, "not-reached") || !strings.Contains(tr, "system failure") {
		t.Errorf("trace:\n%s", tr)
	}
	if _, _, _, rel := f.slots.counts(); rel != 1 {
		t.Errorf("releases = %d, want 1 (a lost slot is still given back)", rel)
	}
}

func TestInstanceLostBeforeStart(t *testing.T) {
	t.Parallel()
	f := newFixture(t, "bash")
	close(f.slots.lost)
	res := f.run(t, t.Context(), nil, newJob([]string{"echo hi"}, nil))
	if !errors.Is(res.Err, ErrInstanceLost) || res.FailureReason != api.RunnerSystemFailure {
		t.Errorf("Result = %+v, want runner_system_failure wrapping ErrInstanceLost", res)
	}
}

func TestProviderCapacity(t *testing.T) {
	t.Parallel()
	f := newFixture(t, "bash")
	d1, err1 := f.provider.Acquire(t.Context(), f.settings)
	d2, err2 := f.provider.Acquire(t.Context(), f.settings)
	if err1 != nil || err2 != nil {
		t.Fatalf("Acquire() x2 = %v, %v; want nil (capacity 2)", err1, err2)
	}
	if _, err := f.provider.Acquire(t.Context(), f.settings); !errors.Is(err, executor.ErrNoFreeExecutor) || !errors.Is(err, errFull) {
		t.Errorf("third Acquire() = %v, want ErrNoFreeExecutor wrapping the pool's error", err)
	}
	other := f.settings
	other.ShortToken = "zzz"
	if _, err := f.provider.Acquire(t.Context(), other); err == nil || errors.Is(err, executor.ErrNoFreeExecutor) {
		t.Errorf("Acquire(unknown runner) = %v, want the lookup error", err)
	}
	// A job never received: Release unreserves.
	f.provider.Release(t.Context(), f.settings, d1)
	f.provider.Release(t.Context(), f.settings, d1) // once only
	if res, acq, unres, rel := f.slots.counts(); res != 1 || acq != 0 || unres != 1 || rel != 0 {
		t.Errorf("reserved, acquired, unreserves, releases = %d, %d, %d, %d; want 1, 0, 1, 0", res, acq, unres, rel)
	}
	// A job that got its slot: Cleanup releases, Release does not unreserve.
	e := f.provider.Create()
	if err := e.Prepare(t.Context(), executor.PrepareOptions{Job: newJob(nil, nil), Settings: f.settings, Data: d2}); err != nil {
		t.Fatalf("Prepare() = %v", err)
	}
	if res, acq, _, _ := f.slots.counts(); res != 0 || acq != 1 {
		t.Errorf("after Prepare: reserved, acquired = %d, %d; want 0, 1", res, acq)
	}
	e.Cleanup(t.Context())
	e.Cleanup(t.Context())
	f.provider.Release(t.Context(), f.settings, d2)
	if res, acq, unres, rel := f.slots.counts(); res != 0 || acq != 0 || unres != 1 || rel != 1 {
		t.Errorf("after the job: reserved, acquired, unreserves, releases = %d, %d, %d, %d; want 0, 0, 1, 1", res, acq, unres, rel)
	}
}

func TestPrepareWaitsForSlot(t *testing.T) {
	t.Parallel()
	f := newFixture(t, "bash")
	f.slots.block = true
	d, err := f.provider.Acquire(t.Context(), f.settings)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	e := f.provider.Create()
	if err := e.Prepare(ctx, executor.PrepareOptions{Job: newJob(nil, nil), Settings: f.settings, Data: d}); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Prepare(no ready instance) = %v, want DeadlineExceeded", err)
	}
	e.Cleanup(t.Context())
	f.provider.Release(t.Context(), f.settings, d)
	if res, _, unres, rel := f.slots.counts(); res != 0 || unres != 1 || rel != 0 {
		t.Errorf("reserved, unreserves, releases = %d, %d, %d; want 0, 1, 0", res, unres, rel)
	}
}

func TestPrepareFails(t *testing.T) {
	t.Parallel()
	f := newFixture(t, "bash")
	other := sshxtest.Start(t)
	tests := map[string]struct {
		shell  string
		mutate func(*fakeSlots, *Runner)
		want   string
	}{
		"shell":        {shell: "pwsh", want: "not supported"},
		"no address":   {mutate: func(s *fakeSlots, _ *Runner) { s.info.InternalAddr = "" }, want: "no address"},
		"protocol":     {mutate: func(s *fakeSlots, _ *Runner) { s.info.Protocol = "winrm" }, want: "only ssh"},
		"unauthorized": {mutate: func(s *fakeSlots, _ *Runner) { s.info.Key = sshxtest.NewKey(t) }, want: "unable to authenticate"},
		"key_path": {mutate: func(s *fakeSlots, r *Runner) {
			r.Connector = fleet.ConnectorConfig{UseStaticCredentials: true, Username: "root", KeyPath: "/nonexistent"}
		}, want: "key_path"},
		"host key moved": {mutate: func(s *fakeSlots, _ *Runner) { s.info.InternalAddr, s.info.Key = other.Addr, other.Key }, want: "host key mismatch"},
	}
	// i-1 is first met at f.srv: "host key moved" then meets another key.
	f.prepared(t)
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			slots := newSlots(f.srv, 1)
			r := Runner{Slots: slots}
			if tc.mutate != nil {
				tc.mutate(slots, &r)
			}
			settings := f.settings
			if tc.shell != "" {
				settings.Shell = tc.shell
			}
			e := f.provider.Create()
			err := e.Prepare(t.Context(), executor.PrepareOptions{Job: newJob(nil, nil), Settings: settings, Data: &Lease{runner: r, res: "r"}})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Prepare() = %v, want an error containing %q", err, tc.want)
			}
			e.Cleanup(t.Context())
			if _, acq, _, _ := slots.counts(); acq > 0 {
				t.Errorf("the slot was not released after a failed Prepare")
			}
		})
	}
}

func TestRunBeforePrepare(t *testing.T) {
	p, err := NewProvider(Options{Lookup: func(executor.Settings) (Runner, error) { return Runner{}, nil }})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Create().Run(t.Context(), executor.Command{Stage: "step_script", Script: "true"}); err == nil {
		t.Fatal("Run before Prepare = nil, want an error")
	}
	p.Create().Cleanup(t.Context()) // safe without Prepare
	if _, err := NewProvider(Options{}); err == nil {
		t.Error("NewProvider without Lookup = nil error, want one")
	}
}

func TestCommonBuildDir(t *testing.T) {
	t.Parallel()
	f := newFixture(t, "sh")
	f.runner.UseCommonBuildDir = true
	e := f.prepared(t)
	if got, want := e.Paths().ProjectDir, f.projectDir(1); got != want {
		t.Errorf("ProjectDir with use_common_build_dir = %q, want %q (the concurrent id)", got, want)
	}
}

func TestTwoJobsShareAnInstance(t *testing.T) {
	t.Parallel()
	f := newFixture(t, "sh")
	e1, e2 := f.prepared(t), f.prepared(t)
	if e1.Paths().ProjectDir == e2.Paths().ProjectDir {
		t.Errorf("two slots of one instance share %s", e1.Paths().ProjectDir)
	}
	if e1.InstanceID() != "i-1" {
		t.Errorf("InstanceID() = %q, want i-1", e1.InstanceID())
	}
}

func TestSSHConfig(t *testing.T) {
	keyFile := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(keyFile, []byte("KEY"), 0o600); err != nil {
		t.Fatal(err)
	}
	info := fleet.ConnectInfo{Username: "inst", Key: []byte("IK"), InternalAddr: "10.0.0.1:22", ExternalAddr: "1.2.3.4:22"}
	tests := map[string]struct {
		info fleet.ConnectInfo
		c    fleet.ConnectorConfig
		want sshx.Config
	}{
		"instance's own": {info: info, c: fleet.ConnectorConfig{Username: "static", KeyPath: keyFile}, want: sshx.Config{Addr: "10.0.0.1:22", User: "inst", Key: []byte("IK")}},
		"external":       {info: info, c: fleet.ConnectorConfig{UseExternalAddr: true}, want: sshx.Config{Addr: "1.2.3.4:22", User: "inst", Key: []byte("IK")}},
		"static":         {info: info, c: fleet.ConnectorConfig{UseStaticCredentials: true, Username: "static", KeyPath: keyFile, Timeout: time.Second, Keepalive: time.Minute}, want: sshx.Config{Addr: "10.0.0.1:22", User: "static", Key: []byte("KEY"), Timeout: time.Second, Keepalive: time.Minute}},
		"no credentials": {info: fleet.ConnectInfo{InternalAddr: "h:22"}, c: fleet.ConnectorConfig{Username: "u", Password: "pw"}, want: sshx.Config{Addr: "h:22", User: "u", Password: "pw"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := sshConfig(tc.info, tc.c)
			if err != nil {
				t.Fatalf("sshConfig() = %v", err)
			}
			if diff := cmp.Diff(tc.want, got, cmp.FilterPath(func(p cmp.Path) bool {
				return p.String() == "HostKey" || p.String() == "Clock" || p.String() == "Logger"
			}, cmp.Ignore())); diff != "" {
				t.Errorf("sshConfig (-want +got):\n%s", diff)
			}
		})
	}
}

// TestCancelRace cancels stages at every moment of their start: whether
// the stop comes before or after the stage wrote its pid file, nothing it
// started survives and Run returns promptly.
func TestCancelRace(t *testing.T) {
	t.Parallel()
	f := newFixture(t, "sh")
	e := f.prepared(t)
	e.GracePeriod = time.Second
	pids := filepath.Join(t.TempDir(), "pids")
	for i := 0; i < 12; i++ {
		ctx, cancel := context.WithCancel(t.Context())
		time.AfterFunc(time.Duration(i)*4*time.Millisecond, cancel)
		start := time.Now()
		err := e.Run(ctx, executor.Command{Stage: "step_script", Script: "sleep 300 &\necho $! >> " + pids + "\nexec sleep 300\n"})
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Run cancelled after %v = %v, want context.Canceled", time.Duration(i)*4*time.Millisecond, err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("Run took %v after the cancel", d)
		}
		cancel()
	}
	b, _ := os.ReadFile(pids)
	for _, pid := range strings.Fields(string(b)) {
		if !waitDead(t, pid) {
			t.Errorf("sleep %s survived its cancelled stage", pid)
		}
	}
}

// BenchmarkStage measures one trivial stage on a prepared executor: a
// session, the script upload, the wrapper and the exit status, over a
// loopback SSH connection.
func BenchmarkStage(b *testing.B) {
	f := newFixture(b, "sh")
	e := f.prepared(b)
	b.ResetTimer()
	for b.Loop() {
		if err := e.Run(b.Context(), executor.Command{Stage: "step_script", Script: "echo hi\n"}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkJob measures a whole trivial job through internal/jobrun:
// acquire, connect, prepare, five stages, cleanup.
func BenchmarkJob(b *testing.B) {
	f := newFixture(b, "sh")
	j := newJob([]string{"echo hi"}, []string{"echo after"})
	b.ResetTimer()
	for b.Loop() {
		if res := f.run(b, b.Context(), nil, j); res.State != api.StateSuccess {
			b.Fatalf("job: %+v", res)
		}
	}
}

// TestConnectionLost cuts the SSH connection in the middle of a stage (the
// pool has not noticed anything): the job fails with runner_system_failure,
// not as a script failure.
func TestConnectionLost(t *testing.T) {
	for _, how := range []string{"cut", "frozen"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, "sh")
			px := sshxtest.NewProxy(t, f.srv.Addr)
			f.slots.info.InternalAddr = px.Addr
			// Keep-alives detect the frozen peer.
			f.runner.Connector = fleet.ConnectorConfig{Keepalive: 100 * time.Millisecond, Timeout: 500 * time.Millisecond}
			dir := t.TempDir()
			j := newJob([]string{"echo $$ > " + dir + "/started", "sleep 20", "echo not-reached"}, []string{"echo after"})
			resc := make(chan jobrun.Result, 1)
			go func() { resc <- f.run(t, t.Context(), nil, j) }()
			killGroup(t, executortest.WaitFile(t, dir+"/started"))
			if how == "cut" {
				px.Cut()
			} else {
				px.Freeze()
			}
			var res jobrun.Result
			select {
			case res = <-resc:
			case <-time.After(15 * time.Second):
				t.Fatal("the build did not end after the connection was lost")
			}
			if !errors.Is(res.Err, ErrInstanceLost) {
				t.Errorf("Result.Err = %v, want ErrInstanceLost", res.Err)
			}
			checkResult(t, res, jobrun.Result{State: api.StateFailed, FailureReason: api.RunnerSystemFailure})
			if _, acq, _, rel := f.slots.counts(); acq != 0 || rel != 1 {
				t.Errorf("acquired, releases = %d, %d; want 0, 1", acq, rel)
			}
		})
	}
}

func TestRunners(t *testing.T) {
	var r Runners
	s := executor.Settings{ShortToken: "tok", RunnerName: "r1"}
	if _, err := r.Lookup(s); !errors.Is(err, ErrUnknownRunner) {
		t.Errorf("Lookup(empty) = %v, want ErrUnknownRunner", err)
	}
	slots := &fakeSlots{capacity: 1, used: map[int]bool{}}
	r.Set("tok", Runner{Slots: slots, UseCommonBuildDir: true})
	got, err := r.Lookup(s)
	if err != nil || got.Slots != Slots(slots) || !got.UseCommonBuildDir {
		t.Errorf("Lookup() = %+v, %v; want the runner set", got, err)
	}
	p, err := NewProvider(Options{Lookup: r.Lookup})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Acquire(t.Context(), s); err != nil {
		t.Errorf("Acquire() = %v, want nil", err)
	}
	r.Delete("tok")
	if _, err := p.Acquire(t.Context(), s); !errors.Is(err, ErrUnknownRunner) {
		t.Errorf("Acquire(deleted runner) = %v, want ErrUnknownRunner", err)
	}
}

// TestWithoutSetsid runs stages on an instance that has no setsid(1): the
// stages still run with their exit codes, and a cancel still signals the
// stage's shell.
func TestWithoutSetsid(t *testing.T) {
	t.Parallel()
	srv := sshxtest.StartWith(t, sshxtest.Options{SetEnv: []string{"PATH=" + withoutSetsid(t)}})
	f := newFixtureOn(t, "bash", srv)
	e := f.prepared(t)
	if err := e.Run(t.Context(), executor.Command{Stage: "step_script", Script: "if command -v setsid; then exit 9; fi\necho no-setsid\n"}); err != nil {
		t.Fatalf("Run = %v, want nil", err)
	}
	var be *executor.BuildError
	if err := e.Run(t.Context(), executor.Command{Stage: "step_script", Script: "exit 4"}); !errors.As(err, &be) || be.ExitCode != 4 {
		t.Errorf("Run(exit 4) = %v, want *BuildError with exit code 4", err)
	}
	pidFile := filepath.Join(t.TempDir(), "pid")
	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() {
		errc <- e.Run(ctx, executor.Command{Stage: "step_script", Script: "echo $$ > " + pidFile + "\nexec sleep 300\n"})
	}()
	pid := executortest.WaitFile(t, pidFile)
	cancel()
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Run after cancel = %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after the cancel")
	}
	if !waitDead(t, pid) {
		t.Errorf("the stage's process %s survived the cancel", pid)
	}
	inOrder(t, f.trace.String(), "no-setsid\n")
}

// TestStageSetupFailure: when the wrapper cannot set the stage up (here the
// project directory cannot be created), Run fails with a system error, not
// a script failure.
func TestStageSetupFailure(t *testing.T) {
	t.Parallel()
	f := newFixture(t, "sh")
	e := f.prepared(t)
	blocker := filepath.Join(f.settings.BuildsDir, "abcdefghi")
	if err := os.RemoveAll(blocker); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(blocker, []byte("not a directory"), 0o644); err != nil {
		t.Fatal(err)
	}
	err := e.Run(t.Context(), executor.Command{Stage: "step_script", Script: "echo never\n"})
	var be *executor.BuildError
	if err == nil || errors.As(err, &be) || !strings.Contains(err.Error(), "cannot enter the project directory") {
		t.Errorf("Run(no project directory) = %v, want a system error naming the project directory", err)
	}
	if strings.Contains(f.trace.String(), "never") {
		t.Error("the script ran")
	}
}

// killGroup kills, when the test ends, the process group of a stage that
// was cut off from its connection and would otherwise run on (the
// "instance" is this host).
func killGroup(t *testing.T, pgid string) {
	pid, err := strconv.Atoi(pgid)
	if err != nil || pid <= 1 {
		t.Fatalf("bad pgid %q", pgid)
	}
	t.Cleanup(func() { _ = syscall.Kill(-pid, syscall.SIGKILL) })
}

// TestConnectRetries: an instance whose sshd is not up yet is tried again
// (1s, then 2s later, on the provider's clock); after three attempts
// Prepare gives up.
func TestConnectRetries(t *testing.T) {
	for _, comesUp := range []bool{true, false} {
		t.Run(fmt.Sprintf("comes up %v", comesUp), func(t *testing.T) {
			t.Parallel()
			srv := sshxtest.Start(t)
			f := newFixtureOn(t, "sh", srv)
			clk := clock.NewFake(time.Unix(0, 0))
			f.provider.opts.Clock = clk
			addr := sshxtest.FreeAddr(t)
			f.slots.info.InternalAddr = addr
			d, err := f.provider.Acquire(t.Context(), f.settings)
			if err != nil {
				t.Fatal(err)
			}
			e := f.provider.Create()
			t.Cleanup(func() { e.Cleanup(context.Background()); f.provider.Release(context.Background(), f.settings, d) })
			errc := make(chan error, 1)
			go func() {
				errc <- e.Prepare(t.Context(), executor.PrepareOptions{Job: newJob(nil, nil), Settings: f.settings, Data: d, Trace: f.trace})
			}()
			waitPending := func() {
				t.Helper()
				deadline := time.Now().Add(10 * time.Second)
				for clk.Pending() != 1 {
					if time.Now().After(deadline) {
						t.Fatalf("no retry timer: Pending() = %d", clk.Pending())
					}
					time.Sleep(time.Millisecond)
				}
			}
			waitPending()
			if comesUp {
				sshxtest.NewProxyAt(t, addr, srv.Addr)
				clk.Advance(time.Second)
				if err := <-errc; err != nil {
					t.Fatalf("Prepare() = %v, want nil once sshd is up", err)
				}
				inOrder(t, f.trace.String(), "Cannot reach the instance yet, trying again in 1s", "Using Instance (sh) executor")
				return
			}
			clk.Advance(time.Second)
			waitPending()
			clk.Advance(2 * time.Second)
			select {
			case err := <-errc:
				if !errors.Is(err, sshx.ErrUnreachable) {
					t.Errorf("Prepare() = %v, want ErrUnreachable", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("Prepare did not give up after three attempts")
			}
			inOrder(t, f.trace.String(), "trying again in 1s", "trying again in 2s")
			if n := strings.Count(f.trace.String(), "trying again"); n != 2 {
				t.Errorf("%d retries, want 2", n)
			}
		})
	}
}
