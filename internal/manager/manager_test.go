package manager

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/config"
	"github.com/drover-ci/drover/internal/executor"
	"github.com/drover-ci/drover/internal/executor/shell"
)

func discard() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// startManager runs a manager with one shell runner against url.
func startManager(t *testing.T, url string, tweak func(*config.Config)) (*Manager, context.CancelFunc, chan error) {
	t.Helper()
	return startManagerWith(t, url, shell.NewProvider(), tweak)
}

// startManagerWith runs a manager whose one runner uses provider p.
func startManagerWith(t testing.TB, url string, p executor.Provider, tweak func(*config.Config)) (*Manager, context.CancelFunc, chan error) {
	t.Helper()
	return startManagerOpts(t, url, p, tweak, nil)
}

// startManagerOpts is startManagerWith with the manager's options tweaked.
func startManagerOpts(t testing.TB, url string, p executor.Provider, tweak func(*config.Config), opts func(*Options)) (*Manager, context.CancelFunc, chan error) {
	t.Helper()
	m := newTestManager(t, discard(), url, p, tweak, opts)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			t.Error("manager did not stop")
		}
	})
	return m, cancel, done
}

// newTestManager makes a manager logging to log, with one runner of
// provider p against url, its configuration and options tweaked.
func newTestManager(t testing.TB, log *slog.Logger, url string, p executor.Provider, tweak func(*config.Config), opts func(*Options)) *Manager {
	t.Helper()
	cfg := &config.Config{
		Concurrent:      2,
		CheckInterval:   1,
		ShutdownTimeout: 5,
		Runners: []config.RunnerConfig{{
			Name: "t", URL: url, Token: "glrt-testtoken123", Executor: "shell",
			BuildsDir: t.TempDir(), RequestConcurrency: 1, OutputLimit: 4096,
		}},
	}
	if tweak != nil {
		tweak(cfg)
	}
	o := Options{
		Config: cfg, ConfigPath: "test.toml", SystemID: "s_test",
		Providers:    map[string]executor.Provider{"shell": p},
		RetryBackoff: 50 * time.Millisecond, ForceSendInterval: time.Second,
	}
	if opts != nil {
		opts(&o)
	}
	m, err := New(log, o)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return m
}

func waitFinal(t *testing.T, f *fakeCoordinator) api.UpdateJobRequest {
	t.Helper()
	select {
	case u := <-f.finals:
		return u
	case <-time.After(30 * time.Second):
		t.Fatal("no final update within 30s")
	}
	return api.UpdateJobRequest{}
}

func TestJobProtocolHappyPath(t *testing.T) {
	f := newFakeCoordinator(t)
	f.addJob(testJob(1, []string{"echo hello-from-job"}, nil))
	startManager(t, f.srv.URL, nil)
	u := waitFinal(t, f)
	if u.State != api.StateSuccess || u.ExitCode != nil || u.FailureReason != "" {
		t.Errorf("final update = %+v, want success without reason or exit code", u)
	}
	if tr := f.traceOf(1); !strings.Contains(tr, "hello-from-job") {
		t.Errorf("trace lacks the output:\n%s", tr)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.updates) < 2 || f.updates[0].State != api.StateRunning {
		t.Errorf("first PUT = %+v, want state running before anything else", f.updates)
	}
	// Long polling: each request echoes the last X-GitLab-Last-Update seen.
	for i := 1; i < len(f.requests); i++ {
		if f.requests[i].LastUpdate == "" {
			t.Errorf("request %d carries no last_update", i)
		}
	}
	if f.requests[0].SystemID != "s_test" || f.requests[0].Info.Executor != "shell" || !f.requests[0].Info.Features.TraceChecksum {
		t.Errorf("job request info = %+v", f.requests[0])
	}
}

func TestJobProtocolFailureReasonAndExitCode(t *testing.T) {
	f := newFakeCoordinator(t)
	f.addJob(testJob(2, []string{"echo x", "exit 42"}, []string{"echo after-$CI_JOB_STATUS"}))
	startManager(t, f.srv.URL, nil)
	u := waitFinal(t, f)
	if u.State != api.StateFailed || u.ExitCode == nil || *u.ExitCode != 42 || u.FailureReason != api.ScriptFailure {
		t.Errorf("final update = state %s exit %v reason %s, want failed 42 script_failure", u.State, u.ExitCode, u.FailureReason)
	}
	if tr := f.traceOf(2); !strings.Contains(tr, "after-failed") {
		t.Errorf("after_script did not run:\n%s", tr)
	}
}

func TestJobProtocol412ResendsWholeLog(t *testing.T) {
	f := newFakeCoordinator(t)
	f.addJob(testJob(3, []string{"echo some output for the log"}, nil))
	var rejected atomic.Bool
	f.updateHook = func(w http.ResponseWriter, id int64, u api.UpdateJobRequest) bool {
		if u.State == api.StateSuccess && rejected.CompareAndSwap(false, true) {
			// The coordinator lost its copy: it truncates and asks for all.
			f.mu.Lock()
			f.trace[id].Reset()
			f.mu.Unlock()
			w.WriteHeader(http.StatusPreconditionFailed)
			return true
		}
		return false
	}
	startManager(t, f.srv.URL, nil)
	u := waitFinal(t, f)
	if u.State != api.StateSuccess {
		t.Fatalf("final state = %s", u.State)
	}
	if tr := f.traceOf(3); !strings.Contains(tr, "some output for the log") {
		t.Errorf("log was not resent after 412:\n%s", tr)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	zero := 0
	for _, p := range f.patches {
		if strings.HasPrefix(p, "0-") {
			zero++
		}
	}
	if zero < 2 {
		t.Errorf("patches %v: want the log sent from 0 twice", f.patches)
	}
}

func TestJobProtocol416ResumesAtRange(t *testing.T) {
	f := newFakeCoordinator(t)
	f.addJob(testJob(4, []string{"echo resumed-log-line"}, nil))
	var once atomic.Bool
	f.patchHook = func(w http.ResponseWriter, id int64, start int64, n int) bool {
		if start == 0 && once.CompareAndSwap(false, true) {
			// Pretend the first 5 bytes already arrived.
			f.mu.Lock()
			f.trace[id].WriteString("XXXXX")
			f.mu.Unlock()
			w.Header().Set("Range", "0-5")
			w.WriteHeader(http.StatusRequestedRangeNotSatisfiable)
			return true
		}
		return false
	}
	f.updateHook = func(w http.ResponseWriter, id int64, u api.UpdateJobRequest) bool {
		if u.State == api.StateSuccess {
			f.finals <- u
			w.WriteHeader(http.StatusOK)
			return true
		}
		return false
	}
	startManager(t, f.srv.URL, nil)
	waitFinal(t, f)
	tr := f.traceOf(4)
	if !strings.HasPrefix(tr, "XXXXX") || !strings.Contains(tr, "resumed-log-line") {
		t.Errorf("trace after 416 = %q", tr)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.patches) < 2 || !strings.HasPrefix(f.patches[1], "5-") {
		t.Errorf("patches = %v, want the second to start at 5", f.patches)
	}
}

// TestJobProtocolRetriesFinalUpdate: a final update answered 202 or 500
// is sent again until it is answered 200.
func TestJobProtocolRetriesFinalUpdate(t *testing.T) {
	for _, tc := range []struct {
		name   string
		id     int64
		status int
	}{
		{"202", 5, http.StatusAccepted},
		{"500", 6, http.StatusInternalServerError},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeCoordinator(t)
			f.addJob(testJob(tc.id, []string{"echo x"}, nil))
			var n atomic.Int32
			f.updateHook = func(w http.ResponseWriter, id int64, u api.UpdateJobRequest) bool {
				if u.State == api.StateSuccess && n.Add(1) <= 2 {
					w.WriteHeader(tc.status)
					return true
				}
				return false
			}
			startManager(t, f.srv.URL, nil)
			waitFinal(t, f)
			if got := n.Load(); got != 3 {
				t.Errorf("final PUTs = %d, want 3 (two %d answers, then 200)", got, tc.status)
			}
		})
	}
}

func TestJobProtocolCancelingRunsAfterScript(t *testing.T) {
	f := newFakeCoordinator(t)
	f.addJob(testJob(7, []string{"echo started", "sleep 60"}, []string{"echo after-$CI_JOB_STATUS"}))
	begin := time.Now()
	startManager(t, f.srv.URL, nil)
	for !strings.Contains(f.traceOf(7), "started") && time.Since(begin) < 20*time.Second {
		time.Sleep(20 * time.Millisecond)
	}
	f.mu.Lock()
	f.jobStatus = api.RemoteCanceling
	f.mu.Unlock()
	u := waitFinal(t, f)
	if u.State != api.StateFailed {
		t.Errorf("state = %s, want failed (canceled)", u.State)
	}
	if time.Since(begin) > 20*time.Second {
		t.Errorf("cancel took %v", time.Since(begin))
	}
	if tr := f.traceOf(7); !strings.Contains(tr, "after-canceled") {
		t.Errorf("after_script did not run with CI_JOB_STATUS=canceled:\n%s", tr)
	}
}

func TestJobProtocolRefusedStartDropsJob(t *testing.T) {
	f := newFakeCoordinator(t)
	f.addJob(testJob(8, []string{"echo must-not-run"}, nil))
	var puts atomic.Int32
	f.updateHook = func(w http.ResponseWriter, id int64, u api.UpdateJobRequest) bool {
		puts.Add(1)
		w.WriteHeader(http.StatusForbidden)
		return true
	}
	startManager(t, f.srv.URL, nil)
	time.Sleep(2 * time.Second)
	if got := puts.Load(); got != 1 {
		t.Errorf("PUTs = %d, want exactly the refused start", got)
	}
	if tr := f.traceOf(8); tr != "" {
		t.Errorf("a refused job produced a log: %q", tr)
	}
}

func TestMapFailureReason(t *testing.T) {
	for _, tc := range []struct {
		in        api.FailureReason
		supported []api.FailureReason
		want      api.FailureReason
	}{
		{"", nil, api.ScriptFailure},
		{api.ScriptFailure, nil, api.ScriptFailure},
		{api.JobExecutionTimeout, nil, api.JobExecutionTimeout},
		{api.ImagePullFailure, nil, api.RunnerSystemFailure},
		{api.ImagePullFailure, []api.FailureReason{api.ImagePullFailure}, api.ImagePullFailure},
		{api.RunnerConfigurationError, nil, api.ScriptFailure},
		{api.RunnerInterrupted, nil, api.UnknownFailure},
		{api.RunnerInterrupted, api.AllFailureReasons, api.RunnerInterrupted},
		{api.JobCanceled, api.AllFailureReasons, api.UnknownFailure},
		{"made_up", nil, api.UnknownFailure},
	} {
		if got := mapFailureReason(tc.in, tc.supported); got != tc.want {
			t.Errorf("mapFailureReason(%q, %v) = %q, want %q", tc.in, tc.supported, got, tc.want)
		}
	}
}

func TestUnsupportedExecutorIsAConfigError(t *testing.T) {
	cfg := &config.Config{Concurrent: 1, Runners: []config.RunnerConfig{{Name: "x", URL: "http://127.0.0.1:1", Token: "glrt-x", Executor: "docker"}}}
	_, err := New(discard(), Options{Config: cfg, ConfigPath: "c.toml", Providers: map[string]executor.Provider{"shell": shell.NewProvider()}})
	if err == nil || !strings.Contains(err.Error(), "c.toml: runners[0].executor") {
		t.Errorf("New with executor docker = %v, want an error naming c.toml: runners[0].executor", err)
	}
}

func TestOutputLimitTruncatesWithNotice(t *testing.T) {
	f := newFakeCoordinator(t)
	// 64 KiB of output against a 1 KiB limit.
	f.addJob(testJob(9, []string{"head -c 65536 /dev/zero | tr '\\0' 'a'", "echo; echo visible-after-limit"}, nil))
	startManager(t, f.srv.URL, func(c *config.Config) { c.Runners[0].OutputLimit = 1 })
	u := waitFinal(t, f)
	if u.State != api.StateSuccess {
		t.Errorf("state = %s, want success (truncation is not a failure)", u.State)
	}
	tr := f.traceOf(9)
	if !strings.Contains(tr, "Job's log exceeded limit of 1024 bytes") {
		t.Errorf("no truncation notice in a %d byte log", len(tr))
	}
	if len(tr) > 2048 || strings.Contains(tr, "visible-after-limit") {
		t.Errorf("log not truncated: %d bytes", len(tr))
	}
}

func TestMetricsAndHealth(t *testing.T) {
	f := newFakeCoordinator(t)
	f.addJob(testJob(10, []string{"echo hi"}, nil))
	m, _, _ := startManager(t, f.srv.URL, nil)
	waitFinal(t, f)
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	for path, want := range map[string]string{
		"/health/ready": "ready",
		"/metrics":      `gitlab_runner_jobs_total{runner="testtoken",runner_name="t",system_id="s_test"} 1`,
	} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), want) {
			t.Errorf("GET %s = %d, body lacks %q:\n%s", path, resp.StatusCode, want, b)
		}
	}
	m.Drain()
	resp, err := http.Get(srv.URL + "/health/ready")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("/health/ready while draining = %d, want 503", resp.StatusCode)
	}
}
