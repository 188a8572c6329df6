package router

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/config"
	"github.com/drover-ci/drover/internal/coordinator"
	"github.com/drover-ci/drover/internal/executor"
	"github.com/drover-ci/drover/internal/executor/shell"
	"github.com/drover-ci/drover/internal/manager"
)

type testWriter struct{ t testing.TB }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(b)))
	return len(b), nil
}

func testLogger(t testing.TB) *slog.Logger {
	if verboseNotJSON() {
		return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// counter counts POST /api/v4/jobs/request calls through a handler.
type counter struct {
	next     http.Handler
	requests atomic.Int64
}

func (c *counter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodPost && r.URL.Path == "/api/v4/jobs/request" {
		c.requests.Add(1)
	}
	c.next.ServeHTTP(w, r)
}

// coord is a real drover coordinator over loopback HTTP.
type coord struct {
	t     testing.TB
	c     *coordinator.Coordinator
	srv   *httptest.Server
	count *counter
	admin string
}

func startCoordinator(t testing.TB, longPoll time.Duration) *coord {
	t.Helper()
	return startCoordinatorCfg(t, coordinator.Config{LongPollTimeout: longPoll})
}

func startCoordinatorCfg(t testing.TB, cfg coordinator.Config) *coord {
	t.Helper()
	cfg.DataDir = t.TempDir()
	c, err := coordinator.New(context.Background(), testLogger(t), cfg)
	if err != nil {
		t.Fatalf("coordinator.New = %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go c.Run(ctx)
	cnt := &counter{next: c.Handler()}
	srv := httptest.NewServer(cnt)
	t.Cleanup(func() {
		cancel()
		srv.CloseClientConnections()
		srv.Close()
		c.Close()
	})
	return &coord{t: t, c: c, srv: srv, count: cnt, admin: c.AdminToken()}
}

// adminCall does one admin API call and decodes the answer into out.
func adminCall(t testing.TB, base, token, method, path string, in, out any) int {
	t.Helper()
	var body io.Reader
	if in != nil {
		b, _ := json.Marshal(in)
		body = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, base+path, body)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if out != nil && resp.StatusCode < 300 {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: decode %q: %v", method, path, b, err)
		}
	}
	return resp.StatusCode
}

// createRunner makes a runner token through the admin API at base.
func createRunner(t testing.TB, base, admin string, spec map[string]any) string {
	t.Helper()
	if spec == nil {
		spec = map[string]any{"description": "test"}
	}
	var out struct {
		Token string `json:"token"`
	}
	if code := adminCall(t, base, admin, http.MethodPost, "/api/v1/runners", spec, &out); code != http.StatusCreated {
		t.Fatalf("create runner: status %d", code)
	}
	return out.Token
}

func (c *coord) submit(project string, script ...string) int64 {
	c.t.Helper()
	if len(script) == 0 {
		script = []string{"echo hi"}
	}
	var out struct {
		ID int64 `json:"id"`
	}
	if code := adminCall(c.t, c.srv.URL, c.admin, http.MethodPost, "/api/v1/jobs",
		map[string]any{"name": "j", "project": project, "script": script}, &out); code != http.StatusCreated {
		c.t.Fatalf("submit: status %d", code)
	}
	return out.ID
}

func (c *coord) status(id int64) string {
	c.t.Helper()
	var out struct {
		Status string `json:"status"`
	}
	adminCall(c.t, c.srv.URL, c.admin, http.MethodGet, fmt.Sprintf("/api/v1/jobs/%d", id), nil, &out)
	return out.Status
}

func (c *coord) trace(id int64) string {
	c.t.Helper()
	req, _ := http.NewRequest(http.MethodGet, fmt.Sprintf("%s/api/v1/jobs/%d/trace", c.srv.URL, id), nil)
	req.Header.Set("Authorization", "Bearer "+c.admin)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// waitFor polls cond every 10ms until it is true or d passed.
func waitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// rtr is a router over loopback HTTP.
type rtr struct {
	r      *Router
	srv    *httptest.Server
	cancel context.CancelFunc
	done   chan struct{}
	closed bool
}

func startRouter(t testing.TB, cfg Config) *rtr {
	t.Helper()
	if cfg.DataDir == "" {
		cfg.DataDir = t.TempDir()
	}
	r, err := New(context.Background(), testLogger(t), cfg)
	if err != nil {
		t.Fatalf("router.New = %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	x := &rtr{r: r, srv: httptest.NewServer(r.Handler()), cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(x.done)
		if err := r.Run(ctx); err != nil {
			t.Errorf("Run = %v, want nil", err)
		}
	}()
	t.Cleanup(x.stop)
	return x
}

// stop kills the router the way a crash would: no declines, connections cut.
func (x *rtr) stop() {
	if x.closed {
		return
	}
	x.closed = true
	x.srv.CloseClientConnections()
	x.srv.Close()
	x.cancel()
	<-x.done
	x.r.Close()
}

// startManager runs a real runner manager with shell runners against url,
// one [[runners]] entry per token.
func startManager(t testing.TB, url, systemID string, tokens ...string) {
	t.Helper()
	cfg := &config.Config{Concurrent: 2 * len(tokens), CheckInterval: 1, ShutdownTimeout: 5}
	for i, tok := range tokens {
		cfg.Runners = append(cfg.Runners, config.RunnerConfig{
			Name: fmt.Sprintf("r%d", i), URL: url, Token: tok, Executor: "shell",
			BuildsDir: t.TempDir(), RequestConcurrency: 1,
		})
	}
	m, err := manager.New(testLogger(t), manager.Options{
		Config: cfg, ConfigPath: "test.toml", SystemID: systemID,
		Providers:    map[string]executor.Provider{"shell": shell.NewProvider()},
		RetryBackoff: 50 * time.Millisecond, ForceSendInterval: time.Second,
	})
	if err != nil {
		t.Fatalf("manager.New = %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); m.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			t.Error("manager did not stop")
		}
	})
}

// simRunner is a minimal runner speaking the runner API: long polls, and
// for each job: accept (two-phase) or PUT running (classic), one trace
// patch, PUT success. decide may return "declined" or "silent" to decline
// the job or go quiet on it.
type simRunner struct {
	t        testing.TB
	c        *api.Client
	token    string
	sysID    string
	twoPhase bool
	decide   func(job *api.JobResponse) string
	got      chan *api.JobResponse // every job received, if not nil
	done     chan int64            // ids of jobs finished, if not nil
	jobs     atomic.Int64
}

func (s *simRunner) run(ctx context.Context) {
	last := ""
	for ctx.Err() == nil {
		req := api.JobRequest{Token: s.token, SystemID: s.sysID, LastUpdate: last,
			Info: api.VersionInfo{Name: "sim", Features: api.FeaturesInfo{TwoPhaseJobCommit: s.twoPhase, TraceChecksum: true}}}
		job, resp, err := s.c.RequestJob(ctx, req)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			time.Sleep(20 * time.Millisecond)
			continue
		}
		if resp.LastUpdate != "" {
			last = resp.LastUpdate
		}
		if job == nil {
			if resp.StatusCode != http.StatusNoContent {
				time.Sleep(20 * time.Millisecond)
			}
			continue
		}
		if s.got != nil {
			s.got <- job
		}
		s.handle(ctx, job)
	}
}

func (s *simRunner) handle(ctx context.Context, job *api.JobResponse) {
	what := ""
	if s.decide != nil {
		what = s.decide(job)
	}
	switch what {
	case "silent":
		return
	case "declined":
		s.c.ReportProvisioning(ctx, job.ID, job.Token, api.ProvisioningRequest{Status: "declined", Reason: "test"})
		return
	}
	if job.Features.TwoPhaseJobCommit {
		s.c.ReportProvisioning(ctx, job.ID, job.Token, api.ProvisioningRequest{Status: "pending"})
		r, err := s.c.ReportProvisioning(ctx, job.ID, job.Token, api.ProvisioningRequest{Status: "accepted"})
		if err != nil || r.StatusCode != http.StatusOK {
			return
		}
	} else {
		r, err := s.c.UpdateJob(ctx, job.ID, api.UpdateJobRequest{Token: job.Token, State: api.StateRunning})
		if err != nil || r.StatusCode != http.StatusOK {
			return
		}
	}
	log := []byte("sim ran job\n")
	s.c.PatchTrace(ctx, job.ID, job.Token, 0, log)
	s.c.UpdateJob(ctx, job.ID, api.UpdateJobRequest{Token: job.Token, State: api.StateSuccess,
		Output: api.JobOutput{Bytesize: int64(len(log))}})
	s.jobs.Add(1)
	if s.done != nil {
		s.done <- job.ID
	}
}

func newSim(t testing.TB, url, token, sysID string, twoPhase bool) *simRunner {
	c, err := api.NewClient(url, api.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return &simRunner{t: t, c: c, token: token, sysID: sysID, twoPhase: twoPhase}
}

// startSims runs n sim runners until the test ends.
func startSims(t testing.TB, sims ...*simRunner) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, s := range sims {
		wg.Add(1)
		go func() { defer wg.Done(); s.run(ctx) }()
	}
	t.Cleanup(func() { cancel(); wg.Wait() })
}

// upstreamUnderTest is what the router tests need of an upstream: the real
// coordinator or the fake one.
type upstreamUnderTest interface {
	url() string
	routerToken() string
	add(project string) int64
	state(id int64) string // pending, waiting_for_runner_ack, running, success, ...
}

func (c *coord) url() string                { return c.srv.URL }
func (c *coord) add(project string) int64   { return c.submit(project) }
func (c *coord) state(id int64) string      { return c.status(id) }
func (c *coord) routerToken() string        { return createRunner(c.t, c.srv.URL, c.admin, nil) }
func (f *fakeUpstream) url() string         { return f.srv.URL }
func (f *fakeUpstream) routerToken() string { return "glrt-router" }
func (f *fakeUpstream) state(id int64) string {
	s := f.job(id).state
	if s == "waiting" {
		return "waiting_for_runner_ack"
	}
	return s
}

// upstreams returns the upstreams a test runs against, with ack timeout ack.
// eachUpstream runs test in parallel subtests, one for each of upstreams.
func eachUpstream(t *testing.T, ack time.Duration, test func(*testing.T, upstreamUnderTest)) {
	for name, mk := range upstreams(t, ack) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			test(t, mk())
		})
	}
}

func upstreams(t *testing.T, ack time.Duration) map[string]func() upstreamUnderTest {
	return map[string]func() upstreamUnderTest{
		"fake": func() upstreamUnderTest { return newFakeUpstream(t, ack) },
		"coordinator": func() upstreamUnderTest {
			return startCoordinatorCfg(t, coordinator.Config{LongPollTimeout: 2 * time.Second, AckTimeout: ack, ReapInterval: 100 * time.Millisecond})
		},
	}
}

// verboseNotJSON reports go test -v. Under -json (-test.v=test2json,
// scripts/test.sh through scripts/testreport, which keeps only failing
// tests' output) the debug log stays off, as without -v: it would only
// make every test's output larger.
func verboseNotJSON() bool {
	f := flag.Lookup("test.v")
	return f != nil && f.Value.String() == "true"
}
