package jobrun

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/clock"
	"github.com/drover-ci/drover/internal/executor"
	"github.com/drover-ci/drover/internal/executor/executortest"
)

// gitServer is a git repository served over HTTP by git's own
// http-backend, answering the first fail fetches (their info/refs
// request) with 503.
type gitServer struct {
	url, sha string
	fail     atomic.Int64
	fetches  atomic.Int64 // info/refs requests, answered or refused
}

func newGitServer(t *testing.T, fail int) *gitServer {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not installed")
	}
	out, err := exec.Command("git", "--exec-path").Output()
	if err != nil {
		t.Fatalf("git --exec-path: %v", err)
	}
	backend := filepath.Join(strings.TrimSpace(string(out)), "git-http-backend")
	root := t.TempDir()
	work := filepath.Join(root, "work")
	if err := os.MkdirAll(work, 0o755); err != nil {
		t.Fatal(err)
	}
	gitIn(t, work, "init", "-q", "-b", "main")
	if err := os.WriteFile(filepath.Join(work, "file.txt"), []byte("checked out\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	gitIn(t, work, "add", "file.txt")
	gitIn(t, work, "commit", "-q", "-m", "first")
	gitIn(t, root, "clone", "-q", "--bare", work, "repo.git")
	s := &gitServer{sha: gitIn(t, work, "rev-parse", "HEAD")}
	s.fail.Store(int64(fail))
	h := &cgi.Handler{Path: backend, Env: []string{"GIT_PROJECT_ROOT=" + root, "GIT_HTTP_EXPORT_ALL=1"}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/info/refs") {
			if n := s.fetches.Add(1); n <= s.fail.Load() {
				http.Error(w, "not now", http.StatusServiceUnavailable)
				return
			}
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	s.url = srv.URL + "/repo.git"
	return s
}

// gitIn runs git with args in dir, as a committer of its own, and
// returns its output.
func gitIn(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@t.invalid", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@t.invalid")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// gitJob is a job that checks out s's repository and prints its file.
func (s *gitServer) job(after []string, vars ...api.Variable) *api.JobResponse {
	j := job([]string{"cat file.txt"}, after, vars...)
	j.Variables = vars
	j.RunnerInfo.Timeout = 3600
	j.GitInfo = api.GitInfo{RepoURL: s.url, Ref: "main", Sha: s.sha, RefType: "branch", Depth: 1}
	return j
}

// counterHelper is a stand-in for drover's helper, as Options.Helper
// words: each call counts itself in file counter, fails the whole stage
// script (exit 7) for the first fail calls, and succeeds without doing
// anything after them.
func counterHelper(counter string, fail int) string {
	return fmt.Sprintf(`{ n=$(($(cat %[1]s 2>/dev/null || echo 0)+1)); echo $n >%[1]s; [ $n -gt %[2]d ] || exit 7; } && true`, quote(counter), fail)
}

func quote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// count returns the number in file counter, 0 when there is none.
func count(t *testing.T, counter string) int {
	b, err := os.ReadFile(counter)
	if errors.Is(err, os.ErrNotExist) {
		return 0
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("counter %s: %v", counter, err)
	}
	return n
}

// retryDriver drives the fake clock of a build that waits between the
// attempts of a stage: after each "WARNING: Retrying..." in the trace it
// waits until the build sleeps (a timer besides the job timeout's is
// pending), then advances the clock a second at a time until the sleep is
// over, and records how long that was.
type retryDriver struct {
	mu    sync.Mutex
	waits []time.Duration
}

func driveRetries(ctx context.Context, fake *clock.Fake, trace *executortest.Trace) *retryDriver {
	d := &retryDriver{}
	go func() {
		seen := 0
		for ctx.Err() == nil {
			if strings.Count(trace.String(), "WARNING: Retrying...") == seen || fake.Pending() < 2 {
				time.Sleep(2 * time.Millisecond)
				continue
			}
			seen++
			var waited time.Duration
			for fake.Pending() >= 2 && ctx.Err() == nil {
				fake.Advance(time.Second)
				waited += time.Second
			}
			d.mu.Lock()
			d.waits = append(d.waits, waited)
			d.mu.Unlock()
		}
	}()
	return d
}

func (d *retryDriver) got() []time.Duration {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]time.Duration(nil), d.waits...)
}

// TestStageAttempts: GET_SOURCES_ATTEMPTS, RESTORE_CACHE_ATTEMPTS and
// ARTIFACT_DOWNLOAD_ATTEMPTS run their stage again after a failure, as
// GitLab Runner does: "WARNING: Retrying..." between two attempts, a wait
// of 5 s doubled each time (1 s with
// FF_USE_EXPONENTIAL_BACKOFF_STAGE_RETRY off), clear_worktree before
// get_sources' second attempt, and the last attempt's failure fails the
// job. The stages really run as many times as said: a git server counts
// the fetches, a stand-in helper counts its calls.
func TestStageAttempts(t *testing.T) {
	type stageCase struct {
		name     string
		variable string
		// setup makes the job and returns how many times the stage ran.
		setup func(t *testing.T, f *fixture, fail int, vars ...api.Variable) (runs func() int)
	}
	stages := []stageCase{
		{"get_sources", "GET_SOURCES_ATTEMPTS", func(t *testing.T, f *fixture, fail int, vars ...api.Variable) func() int {
			s := newGitServer(t, fail)
			f.opts.Job = s.job(nil, vars...)
			return func() int { return int(s.fetches.Load()) }
		}},
		{"restore_cache", "RESTORE_CACHE_ATTEMPTS", func(t *testing.T, f *fixture, fail int, vars ...api.Variable) func() int {
			counter := filepath.Join(t.TempDir(), "runs")
			f.opts.Job = job([]string{"echo script-ran"}, nil, vars...)
			f.opts.Job.RunnerInfo.Timeout = 3600
			f.opts.Job.Cache = []api.Cache{{Key: "deps", Policy: "pull", Paths: []string{"vendor"}}}
			f.opts.Helper = counterHelper(counter, fail)
			f.opts.Executor = f.rec.Executor // unwrapped: executor.Local shows, the helper runs
			return func() int { return count(t, counter) }
		}},
		{"download_artifacts", "ARTIFACT_DOWNLOAD_ATTEMPTS", func(t *testing.T, f *fixture, fail int, vars ...api.Variable) func() int {
			counter := filepath.Join(t.TempDir(), "runs")
			f.opts.Job = job([]string{"echo script-ran"}, nil, vars...)
			f.opts.Job.RunnerInfo.Timeout = 3600
			f.opts.Job.Dependencies = []api.Dependency{{ID: 3, Name: "build", ArtifactsFile: &api.ArtifactsFile{Filename: "artifacts.zip", Size: 10}}}
			f.opts.Helper = counterHelper(counter, fail)
			f.opts.Executor = f.rec.Executor
			f.opts.ServerURL = "http://127.0.0.1:1"
			return func() int { return count(t, counter) }
		}},
	}
	cases := []struct {
		name     string
		attempts string // the variable's value
		fail     int    // failures before the stage succeeds
		flagOff  bool   // FF_USE_EXPONENTIAL_BACKOFF_STAGE_RETRY=false
		runs     int
		ok       bool
		waits    []time.Duration
	}{
		{name: "default, no failure", attempts: "", fail: 0, runs: 1, ok: true},
		{name: "default, one failure", attempts: "", fail: 1, runs: 1},
		{name: "3 attempts, 2 failures", attempts: "3", fail: 2, runs: 3, ok: true, waits: []time.Duration{5 * time.Second, 10 * time.Second}},
		{name: "2 attempts, 2 failures", attempts: "2", fail: 2, runs: 2, waits: []time.Duration{5 * time.Second}},
		{name: "plain backoff", attempts: "3", fail: 2, flagOff: true, runs: 3, ok: true, waits: []time.Duration{time.Second, 2 * time.Second}},
	}
	for _, sc := range stages {
		for _, tc := range cases {
			t.Run(sc.name+"/"+tc.name, func(t *testing.T) {
				t.Parallel()
				var vars []api.Variable
				if tc.attempts != "" {
					vars = append(vars, api.Variable{Key: sc.variable, Value: tc.attempts})
				}
				if tc.flagOff {
					vars = append(vars, api.Variable{Key: "FF_USE_EXPONENTIAL_BACKOFF_STAGE_RETRY", Value: "false"})
				}
				if sc.name != "get_sources" {
					vars = append(vars, api.Variable{Key: "GIT_STRATEGY", Value: "none"})
				}
				f := newFixture(t, "bash", nil)
				runs := sc.setup(t, f, tc.fail, vars...)
				fake := clock.NewFake(time.Unix(1_700_000_000, 0))
				f.opts.Clock = fake
				ctx, stop := context.WithCancel(t.Context())
				d := driveRetries(ctx, fake, f.trace)
				res := f.run(t.Context(), nil)
				stop()

				if got := runs(); got != tc.runs {
					t.Errorf("%s ran %d times, want %d", sc.name, got, tc.runs)
				}
				if (res.State == api.StateSuccess) != tc.ok {
					t.Errorf("Result = %+v, want success %v", res, tc.ok)
				}
				tr := f.trace.String()
				if got := strings.Count(tr, "\033[0;33mWARNING: Retrying...\033[0;m\n"); got != tc.runs-1 {
					t.Errorf("%d retry lines, want %d:\n%s", got, tc.runs-1, tr)
				}
				if got := strings.Count(tr, ":"+sc.name+"\r"); got != 2*tc.runs {
					t.Errorf("%d %s section markers, want %d (a section per attempt)", got, sc.name, 2*tc.runs)
				}
				clear := strings.Count(tr, "Deleting all tracked and untracked files due to source fetch failure")
				if wantClear := sc.name == "get_sources" && tc.runs > 1; (clear == 1) != wantClear || clear > 1 {
					t.Errorf("%d clear_worktree sections, want one: %v", clear, wantClear)
				}
				if diff := cmp.Diff(tc.waits, d.got()); diff != "" {
					t.Errorf("waits between attempts (-want +got):\n%s", diff)
				}
				if tc.ok && !strings.Contains(tr, "Job succeeded") {
					t.Errorf("trace lacks the success:\n%s", tr)
				}
			})
		}
	}
}

// TestClearWorktree: before get_sources' second attempt, clear_worktree
// removes the failed checkout's tracked and untracked files (git rm,
// git clean), so the next attempt starts from an empty work tree.
func TestClearWorktree(t *testing.T) {
	t.Parallel()
	s := newGitServer(t, 0)
	f := newFixture(t, "sh", s.job(nil, api.Variable{Key: "GET_SOURCES_ATTEMPTS", Value: "2"}, api.Variable{Key: "GIT_STRATEGY", Value: "fetch"}))
	// A first build leaves a checkout with an untracked file behind.
	f.opts.Job.Steps[0].Script = []string{"cat file.txt", "echo junk > untracked.txt"}
	checkResult(t, f.run(t.Context(), nil), Result{State: api.StateSuccess})
	// The next one fails its first fetch.
	s.fail.Store(s.fetches.Load() + 1)
	f.trace = &executortest.Trace{}
	f.opts.Trace = f.trace
	marker := filepath.Join(t.TempDir(), "seen")
	f.opts.Settings.Hooks.PreGetSources = fmt.Sprintf(`if [ -e %[1]s/.git ]; then ls -A %[1]s | grep -v '^.git$' | sort | tr '\n' ' ' >> %[2]s; echo >> %[2]s; fi`, f.projectDir(), marker)
	fake := clock.NewFake(time.Unix(1_700_000_000, 0))
	f.opts.Clock = fake
	ctx, stop := context.WithCancel(t.Context())
	defer stop()
	driveRetries(ctx, fake, f.trace)
	checkResult(t, f.run(t.Context(), nil), Result{State: api.StateSuccess})
	f.assertTrace(t, []string{"Deleting tracked and untracked files...", "checked out\n"}, nil)
	b, err := os.ReadFile(marker)
	if err != nil {
		t.Fatal(err)
	}
	// What the work tree held before each attempt.
	if diff := cmp.Diff([]string{"file.txt untracked.txt ", ""}, strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")); diff != "" {
		t.Errorf("work tree before each attempt (-want +got):\n%s", diff)
	}
}

// lossy is the shell executor whose runs of one stage report their
// environment lost (executor.ErrEnvironmentLost) the first lose times,
// after running: what the docker executor reports when a stage's
// container disappeared.
type lossy struct {
	executor.Executor
	stage executor.Stage
	lose  int
	runs  int
}

func (l *lossy) Run(ctx context.Context, cmd executor.Command) error {
	err := l.Executor.Run(ctx, cmd)
	if cmd.Stage == l.stage {
		if l.runs++; l.runs <= l.lose {
			return fmt.Errorf("%s: the container is gone: %w", cmd.Stage, executor.ErrEnvironmentLost)
		}
	}
	return err
}

// TestSectionAttempts: EXECUTOR_JOB_SECTION_ATTEMPTS runs a stage again,
// in the same log section, when the executor lost its environment; other
// failures are not retried, and when the attempts run out the job fails
// as a system failure, with GitLab Runner's "Execution attempts
// exceeded".
func TestSectionAttempts(t *testing.T) {
	for _, tc := range []struct {
		name     string
		attempts string
		lose     int
		runs     int
		ok       bool
	}{
		{"default", "", 1, 1, false},
		{"retried", "3", 2, 3, true},
		{"exhausted", "2", 2, 2, false},
		{"clamped to 10", "11", 10, 10, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			counter := filepath.Join(t.TempDir(), "runs")
			var vars []api.Variable
			if tc.attempts != "" {
				vars = append(vars, api.Variable{Key: "EXECUTOR_JOB_SECTION_ATTEMPTS", Value: tc.attempts})
			}
			f := newFixture(t, "bash", job([]string{"echo run >> " + quote(counter)}, nil, vars...))
			f.opts.Executor = &lossy{Executor: f.rec, stage: executor.StageStepScript, lose: tc.lose}
			res := f.run(t.Context(), nil)
			b, _ := os.ReadFile(counter)
			if got := strings.Count(string(b), "run\n"); got != tc.runs {
				t.Errorf("step_script ran %d times, want %d", got, tc.runs)
			}
			tr := f.trace.String()
			if got := strings.Count(tr, "\033[32;1mRetrying step_script\033[0;m\n"); got != tc.runs-1 {
				t.Errorf("%d retry lines, want %d:\n%s", got, tc.runs-1, tr)
			}
			if got := strings.Count(tr, ":step_script\r"); got != 2 {
				t.Errorf("%d step_script section markers, want 2 (one section)", got)
			}
			if tc.ok {
				checkResult(t, res, Result{State: api.StateSuccess})
				return
			}
			checkResult(t, res, Result{State: api.StateFailed, FailureReason: api.RunnerSystemFailure})
			exceeded := strings.Contains(tr, "ERROR: Execution attempts exceeded")
			if exceeded != (tc.runs > 1) {
				t.Errorf("trace says the attempts were exceeded: %v, want %v", exceeded, tc.runs > 1)
			}
		})
	}
	t.Run("a script failure is not retried", func(t *testing.T) {
		t.Parallel()
		counter := filepath.Join(t.TempDir(), "runs")
		f := newFixture(t, "bash", job([]string{"echo run >> " + quote(counter), "exit 4"}, nil,
			api.Variable{Key: "EXECUTOR_JOB_SECTION_ATTEMPTS", Value: "3"}))
		checkResult(t, f.run(t.Context(), nil), Result{State: api.StateFailed, FailureReason: api.ScriptFailure, ExitCode: 4, HasExitCode: true})
		if b, _ := os.ReadFile(counter); string(b) != "run\n" {
			t.Errorf("step_script ran %q, want once", b)
		}
	})
}

// TestSettingsWarnings: values GitLab Runner cannot use are one warning
// after the log's first lines, each with what is used instead, worded and
// ordered as GitLab Runner's.
func TestSettingsWarnings(t *testing.T) {
	for _, tc := range []struct {
		name     string
		vars     []api.Variable
		disabled bool
		want     []string
		check    func(settings) string
	}{
		{name: "none", want: nil, check: func(s settings) string {
			if s.getSources != 1 || s.restoreCache != 1 || s.downloadArtifacts != 1 || s.section != 1 || s.debugTrace ||
				s.cacheRequestTimeout != 10 || !s.afterScriptIgnoreErrors || s.backoff != 5*time.Second {
				return fmt.Sprintf("defaults: %+v", s)
			}
			return ""
		}},
		{name: "in range", vars: []api.Variable{{Key: "GET_SOURCES_ATTEMPTS", Value: "10"}, {Key: "RESTORE_CACHE_ATTEMPTS", Value: "4"}}, check: func(s settings) string {
			if s.getSources != 10 || s.restoreCache != 4 {
				return fmt.Sprintf("attempts %d, %d", s.getSources, s.restoreCache)
			}
			return ""
		}},
		{name: "out of range and unreadable", vars: []api.Variable{
			{Key: "GET_SOURCES_ATTEMPTS", Value: "0"}, {Key: "ARTIFACT_DOWNLOAD_ATTEMPTS", Value: "11"},
			{Key: "RESTORE_CACHE_ATTEMPTS", Value: "three"}, {Key: "EXECUTOR_JOB_SECTION_ATTEMPTS", Value: "-2"},
			{Key: "CI_DEBUG_TRACE", Value: "yes"}, {Key: "CACHE_REQUEST_TIMEOUT", Value: "5m"},
		}, want: []string{
			`CI_DEBUG_TRACE: expected bool got "yes", using default value: false`,
			`RESTORE_CACHE_ATTEMPTS: expected int got "three", using default value: 1`,
			`CACHE_REQUEST_TIMEOUT: expected int got "5m", using default value: 10`,
			"EXECUTOR_JOB_SECTION_ATTEMPTS: number of attempts out of the range [1, 10], clamping to: 1",
			"GET_SOURCES_ATTEMPTS: number of attempts out of the range [1, 10], clamping to: 1",
			"ARTIFACT_DOWNLOAD_ATTEMPTS: number of attempts out of the range [1, 10], clamping to: 10",
		}, check: func(s settings) string {
			if s.getSources != 1 || s.downloadArtifacts != 10 || s.restoreCache != 1 || s.section != 1 || s.cacheRequestTimeout != 10 {
				return fmt.Sprintf("settings %+v", s)
			}
			return ""
		}},
		{name: "get_sources' variables unreadable", vars: []api.Variable{
			{Key: "GIT_SUBMODULE_FORCE_HTTPS", Value: "2"}, {Key: "GIT_LFS_SKIP_SMUDGE", Value: "yes"},
			{Key: "GIT_SUBMODULE_DEPTH", Value: "deep"}, {Key: "GIT_SUBMODULE_STRATEGY", Value: "sideways"},
			{Key: "GIT_CHECKOUT", Value: "maybe"}, {Key: "GET_SOURCES_ATTEMPTS", Value: "x"},
		}, want: []string{
			`GIT_CHECKOUT: expected bool got "maybe", using default value: true`,
			`GIT_SUBMODULE_STRATEGY: expected either 'normal', 'recursive' or 'none' got "sideways"`,
			`GIT_SUBMODULE_DEPTH: expected int got "deep", using default value: 0`,
			`GIT_LFS_SKIP_SMUDGE: expected bool got "yes", using default value: false`,
			`GIT_SUBMODULE_FORCE_HTTPS: expected bool got "2", using default value: false`,
			`GET_SOURCES_ATTEMPTS: expected int got "x", using default value: 1`,
		}},
		{name: "debug disabled on the runner", disabled: true,
			vars: []api.Variable{{Key: "CI_DEBUG_TRACE", Value: "true"}, {Key: "CI_DEBUG_SERVICES", Value: "1"}},
			want: []string{"CI_DEBUG_TRACE: usage is disabled on this Runner", "CI_DEBUG_SERVICES: usage is disabled on this Runner"},
			check: func(s settings) string {
				if s.debugTrace || s.debugServices {
					return "debug trace or services on"
				}
				return ""
			}},
		{name: "debug services", vars: []api.Variable{{Key: "CI_DEBUG_SERVICES", Value: "true"}},
			check: func(s settings) string {
				if !s.debugServices {
					return "debug services off"
				}
				return ""
			}},
		{name: "the last definition wins", vars: []api.Variable{{Key: "GET_SOURCES_ATTEMPTS", Value: "2"}, {Key: "GET_SOURCES_ATTEMPTS", Value: "5"}},
			check: func(s settings) string {
				if s.getSources != 5 {
					return fmt.Sprintf("attempts %d, want the last definition's", s.getSources)
				}
				return ""
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := readSettings(tc.vars, 0, tc.disabled, nil)
			if diff := cmp.Diff(tc.want, s.warnings); diff != "" {
				t.Errorf("warnings (-want +got):\n%s", diff)
			}
			if tc.check != nil {
				if msg := tc.check(s); msg != "" {
					t.Error(msg)
				}
			}
			// The log says it once, after the first lines.
			f := newFixture(t, "sh", job([]string{"true"}, nil, tc.vars...))
			f.opts.Runner.DebugTraceDisabled = tc.disabled
			checkResult(t, f.run(t.Context(), nil), Result{State: api.StateSuccess})
			tr := f.trace.String()
			want := ""
			if tc.want != nil {
				want = "\033[0;33mWARNING: " + strings.Join(tc.want, "\n") + "\033[0;m\n"
			}
			if got := strings.Count(tr, "WARNING: "); want != "" && (got != 1 || !strings.HasPrefix(tr, "Running with drover test\n  on tester abcdefghi\n"+want)) || want == "" && got != 0 {
				t.Errorf("log does not start with the warning %q:\n%s", want, tr)
			}
		})
	}
	t.Run("runner feature flag wins", func(t *testing.T) {
		s := readSettings(api.Variables{{Key: "FF_USE_EXPONENTIAL_BACKOFF_STAGE_RETRY", Value: "true"}}, 0, false,
			map[string]bool{"FF_USE_EXPONENTIAL_BACKOFF_STAGE_RETRY": false})
		var got []time.Duration
		for n := 1; n <= 4; n++ {
			got = append(got, s.wait(n))
		}
		if diff := cmp.Diff([]time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 5 * time.Second}, got); diff != "" {
			t.Errorf("waits (-want +got):\n%s", diff)
		}
		s = readSettings(nil, 0, false, nil)
		if got := []time.Duration{s.wait(1), s.wait(6), s.wait(7), s.wait(9)}; !cmp.Equal(got, []time.Duration{5 * time.Second, 160 * time.Second, 5 * time.Minute, 5 * time.Minute}) {
			t.Errorf("exponential waits = %v", got)
		}
	})
}

// TestDebugTrace: CI_DEBUG_TRACE traces every command of the stage
// scripts (bash xtrace, sh -x) into the log, as GitLab Runner's scripts
// do; not when it is false, and not when the runner has
// debug_trace_disabled (a warning says so).
func TestDebugTrace(t *testing.T) {
	for _, sh := range []string{"bash", "sh"} {
		for _, tc := range []struct {
			name     string
			value    string
			disabled bool
			traced   bool
		}{
			{"on", "true", false, true},
			{"off", "false", false, false},
			{"unset", "", false, false},
			{"disabled on the runner", "true", true, false},
		} {
			t.Run(sh+"/"+tc.name, func(t *testing.T) {
				t.Parallel()
				var vars []api.Variable
				if tc.value != "" {
					vars = append(vars, api.Variable{Key: "CI_DEBUG_TRACE", Value: tc.value})
				}
				f := newFixture(t, sh, job([]string{"echo traced-line"}, []string{"echo after-line"}, vars...))
				f.opts.Runner.DebugTraceDisabled = tc.disabled
				checkResult(t, f.run(t.Context(), nil), Result{State: api.StateSuccess})
				tr := f.trace.String()
				for _, line := range []string{"+ echo traced-line\n", "+ echo after-line\n"} {
					if strings.Contains(tr, line) != tc.traced {
						t.Errorf("trace has %q: %v, want %v:\n%s", line, !tc.traced, tc.traced, tr)
					}
				}
				if !strings.Contains(tr, "\ntraced-line\n") {
					t.Errorf("the script's own output is missing:\n%s", tr)
				}
				if warned := strings.Contains(tr, "CI_DEBUG_TRACE: usage is disabled on this Runner"); warned != tc.disabled {
					t.Errorf("disabled warning: %v, want %v", warned, tc.disabled)
				}
				if got := DebugTrace(f.opts.Job.Variables, tc.disabled); got != tc.traced {
					t.Errorf("DebugTrace() = %v, want %v", got, tc.traced)
				}
			})
		}
	}
}

// blockingPrepare is an executor whose Prepare waits for ctx to end,
// after saying it started.
type blockingPrepare struct {
	executor.Executor
	started chan struct{}
}

func (b *blockingPrepare) Prepare(ctx context.Context, opts executor.PrepareOptions) error {
	close(b.started)
	<-ctx.Done()
	return ctx.Err()
}

// TestPhaseTimeouts: prepare_timeout bounds the executor's preparation
// (and prepare_script), get_sources_timeout bounds get_sources; a build
// past one fails with job_execution_timeout saying which, without
// after_script, as GitLab Runner's. A phase timeout longer than the job
// timeout bounds nothing: the job timeout ends the build first.
func TestPhaseTimeouts(t *testing.T) {
	t.Run("prepare", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, "bash", job([]string{"echo script-ran"}, []string{"echo after-ran"}))
		f.opts.Job.RunnerInfo.Timeout = 3600
		fake := clock.NewFake(time.Unix(1_700_000_000, 0))
		f.opts.Clock = fake
		f.opts.Runner.PrepareTimeout = time.Minute
		bp := &blockingPrepare{Executor: f.rec, started: make(chan struct{})}
		f.opts.Executor = bp
		accepted := false
		f.opts.Accept = func(ctx context.Context) error { accepted = true; return nil }
		go func() {
			<-bp.started
			fake.Advance(time.Minute)
		}()
		res := f.run(t.Context(), nil)
		checkResult(t, res, Result{State: api.StateFailed, FailureReason: api.JobExecutionTimeout})
		if !accepted {
			t.Error("the job was not accepted: a prepare timeout is the job's failure, reported by this runner")
		}
		f.assertTrace(t, []string{"\033[31;1mERROR: Job failed: prepare timeout: exceeded timeout of 1m0s\033[0;m\n"}, []string{"script-ran", "after-ran"})
	})
	for _, tc := range []struct {
		name       string
		timeout    time.Duration
		jobTimeout int
		footer     string
	}{
		{"get_sources", 2 * time.Minute, 3600, "ERROR: Job failed: get sources timeout: exceeded timeout of 2m0s"},
		{"get_sources longer than the job", 2 * time.Hour, 3600, "ERROR: Job failed: execution took longer than 1h0m0s seconds"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newGitServer(t, 0)
			started := filepath.Join(t.TempDir(), "started")
			f := newFixture(t, "bash", s.job([]string{"echo after-ran"}))
			f.opts.Job.RunnerInfo.Timeout = tc.jobTimeout
			f.opts.Settings.Hooks.PreGetSources = "echo up > " + quote(started) + "; sleep 600"
			fake := clock.NewFake(time.Unix(1_700_000_000, 0))
			f.opts.Clock = fake
			f.opts.Runner.GetSourcesTimeout = tc.timeout
			go func() {
				waitFile(t, started)
				fake.Advance(min(tc.timeout, time.Duration(tc.jobTimeout)*time.Second))
			}()
			res := f.run(t.Context(), nil)
			checkResult(t, res, Result{State: api.StateFailed, FailureReason: api.JobExecutionTimeout})
			f.assertTrace(t, []string{tc.footer}, []string{"checked out", "after-ran"})
		})
	}
}

// TestCacheRequestTimeout: CACHE_REQUEST_TIMEOUT (minutes) reaches the
// helper's cache commands as --request-timeout; GitLab Runner's default
// (10) leaves the helper's own.
func TestCacheRequestTimeout(t *testing.T) {
	for _, tc := range []struct{ value, want string }{
		{"30", "--request-timeout\n30m0s\n"},
		{"", ""},
		{"10", ""},
	} {
		t.Run("value "+tc.value, func(t *testing.T) {
			t.Parallel()
			args := filepath.Join(t.TempDir(), "args")
			vars := []api.Variable{{Key: "CACHE_REQUEST_TIMEOUT", Value: tc.value}}
			f := newFixture(t, "sh", job([]string{"mkdir -p vendor && echo x > vendor/x"}, nil, vars...))
			f.opts.Job.Cache = []api.Cache{{Key: "deps", Policy: "pull-push", Paths: []string{"vendor"}}}
			// The helper's arguments, a line each.
			f.opts.Helper = "printf '%s\\n' >>" + quote(args)
			f.opts.Executor = f.rec.Executor // unwrapped: executor.Local shows, the helper runs
			checkResult(t, f.run(t.Context(), nil), Result{State: api.StateSuccess})
			b, err := os.ReadFile(args)
			if err != nil {
				t.Fatal(err)
			}
			calls := strings.Count(string(b), "cache-extractor\n") + strings.Count(string(b), "cache-archiver\n")
			if calls != 2 {
				t.Fatalf("%d cache calls, want 2:\n%s", calls, b)
			}
			if got := strings.Count(string(b), "--request-timeout\n"); tc.want == "" && got != 0 || tc.want != "" && strings.Count(string(b), tc.want) != 2 {
				t.Errorf("helper arguments:\n%s\nwant %q in each call", b, tc.want)
			}
		})
	}
}

var sectionTime = regexp.MustCompile(`section_(start|end):[0-9]+:`)

// TestResumeAttempts: a build resumed in another process at a checkpoint
// of a retried stage goes on with the attempt it was at: the stage runs
// no more often than asked in all, clear_worktree is not run again, and
// the log the two processes wrote together is the log of a build that
// never stopped (no byte twice, none missing).
func TestResumeAttempts(t *testing.T) {
	type point struct {
		cp      Checkpoint
		state   []byte
		logLen  int
		fetches int64
	}
	for _, at := range []struct {
		name    string
		stage   executor.Stage
		attempt int
	}{
		{"clear_worktree", executor.StageClearWorktree, 2},
		{"second attempt", executor.StageGetSources, 2},
		{"third attempt", executor.StageGetSources, 3},
	} {
		t.Run(at.name, func(t *testing.T) {
			t.Parallel()
			s := newGitServer(t, 2)
			newJob := func() *api.JobResponse {
				return s.job(nil, api.Variable{Key: "GET_SOURCES_ATTEMPTS", Value: "4"})
			}
			f := newFixture(t, "bash", newJob())
			f.opts.Settings.Resumable = true
			fake := clock.NewFake(time.Unix(1_700_000_000, 0))
			f.opts.Clock = fake
			var points []point
			f.opts.Checkpoint = func(cp Checkpoint, sync bool) {
				if !sync {
					return
				}
				st, err := f.rec.Executor.(executor.Stateful).State()
				if err != nil {
					t.Errorf("State at the %s checkpoint: %v", cp.Stage, err)
				}
				points = append(points, point{cp, st, len(f.trace.String()), s.fetches.Load()})
			}
			ctx, stop := context.WithCancel(t.Context())
			defer stop()
			driveRetries(ctx, fake, f.trace)
			checkResult(t, f.run(t.Context(), nil), Result{State: api.StateSuccess})
			full := f.trace.String()
			if n := s.fetches.Load(); n != 3 {
				t.Fatalf("the first build fetched %d times, want 3", n)
			}

			var p *point
			for i := range points {
				if points[i].cp.Stage == at.stage && max(points[i].cp.Attempt, 1) == at.attempt && !points[i].cp.Started {
					p = &points[i]
				}
			}
			if p == nil {
				t.Fatalf("no checkpoint before %s attempt %d in %+v", at.stage, at.attempt, points)
			}
			// The new process finds the server as the dead one left it.
			s.fetches.Store(p.fetches)
			r := newFixture(t, "bash", newJob())
			r.opts.Settings = f.opts.Settings
			r.opts.Resume = &Resume{Checkpoint: p.cp, ExecutorState: p.state}
			r.opts.Executor = statefulRecorder{r.rec}
			rfake := clock.NewFake(time.Unix(1_700_000_000, 0))
			r.opts.Clock = rfake
			driveRetries(ctx, rfake, r.trace)
			checkResult(t, r.run(t.Context(), nil), Result{State: api.StateSuccess})
			if n := s.fetches.Load(); n != 3 {
				t.Errorf("fetches in all = %d, want 3: an attempt was lost or run twice", n)
			}
			resumed := r.trace.String()
			if at.stage != executor.StageClearWorktree && strings.Contains(resumed, "clear_worktree") {
				t.Errorf("the resumed build ran clear_worktree again:\n%s", resumed)
			}
			got := sectionTime.ReplaceAllString(full[:p.logLen]+resumed, "section_$1:T:")
			want := sectionTime.ReplaceAllString(full, "section_$1:T:")
			if diff := cmp.Diff(strings.Split(want, "\n"), strings.Split(got, "\n")); diff != "" {
				t.Errorf("log of the two processes (-uninterrupted +resumed):\n%s", diff)
			}
		})
	}
}
