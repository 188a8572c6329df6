package coordinator

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/clock"
	"github.com/drover-ci/drover/internal/pgtest"
	"github.com/drover-ci/drover/internal/secretbox"
	"github.com/drover-ci/drover/internal/store"
	"github.com/drover-ci/drover/internal/store/postgres"
	"github.com/drover-ci/drover/internal/store/storetest"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if err := pgtest.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
	os.Exit(code)
}

// traceDirHarness runs the store.Traces conformance suite on the files a
// coordinator on SQLite keeps.
type traceDirHarness struct{}

func (traceDirHarness) OpenTraces(t *testing.T) (store.Traces, func(t *testing.T) int64) {
	td, err := newTraceDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	var next atomic.Int64
	return td, func(*testing.T) int64 { return next.Add(1) }
}

func TestTraceDirConformance(t *testing.T) {
	storetest.RunTraces(t, traceDirHarness{})
}

// cluster is n coordinators on one PostgreSQL database, each with its own
// data directory and HTTP server, each running (reapers, the queue
// listener) and listening before cluster returns. They share a secret key,
// as coordinators on one database must.
func cluster(t testing.TB, n int, url string, mod func(*Config)) []*env {
	t.Helper()
	envs := make([]*env, n)
	key, _ := secretbox.NewRandomKey()
	for i := range envs {
		st, err := postgres.Open(t.Context(), url)
		if err != nil {
			t.Fatalf("postgres.Open = %v", err)
		}
		envs[i] = newEnv(t, func(c *Config) {
			c.Store = st
			c.SecretKey = key
			c.LongPollTimeout = 5 * time.Minute // held requests end by events here, never by time
			if mod != nil {
				mod(c)
			}
		})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			envs[i].c.Run(ctx)
		}()
		t.Cleanup(func() { cancel(); <-done })
		select {
		case <-envs[i].c.Listening():
		case <-t.Context().Done():
		}
	}
	return envs
}

// held returns how many jobs/request calls c holds.
func held(c *Coordinator) int {
	c.poll.mu.Lock()
	defer c.poll.mu.Unlock()
	return c.poll.waiters.n
}

// waitHeld waits until c holds n requests, or the request that should be
// held came back.
func waitHeld(t testing.TB, c *Coordinator, n int, answered <-chan struct{}) {
	t.Helper()
	waitUntil(t, func() bool { return held(c) >= n }, answered)
}

// waitUntil polls cond until it holds; answered, if it closes first, means
// a request that should have been held came back.
func waitUntil(t testing.TB, cond func() bool, answered <-chan struct{}) {
	t.Helper()
	for !cond() {
		select {
		case <-answered:
			t.Fatalf("the request was answered instead of held")
		case <-t.Context().Done():
			t.Fatal("test ended waiting for a held request")
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func TestSharedTokensAndTraces(t *testing.T) {
	envs := cluster(t, 2, pgtest.NewDatabase(t), nil)
	a, b := envs[0], envs[1]
	if a.c.AdminToken() != b.c.AdminToken() || a.c.RegistrationToken() != b.c.RegistrationToken() {
		t.Fatalf("coordinators on one database have different tokens: admin %q / %q, registration %q / %q",
			a.c.AdminToken(), b.c.AdminToken(), a.c.RegistrationToken(), b.c.RegistrationToken())
	}
	if f, err := os.ReadFile(b.c.AdminTokenPath()); err != nil || strings.TrimSpace(string(f)) != a.c.AdminToken() {
		t.Fatalf("admin token file of the second coordinator = %q, %v; want the shared token", f, err)
	}
	_, tok := a.runner(nil)
	j := a.submit(nil)
	jr := b.take(tok) // created on a, claimed through b
	if jr.ID != j.ID {
		t.Fatalf("took job %d, want %d", jr.ID, j.ID)
	}
	if r := a.patch(jr.ID, jr.Token, "0-5", []byte("hello ")); r.StatusCode != http.StatusAccepted {
		t.Fatalf("PATCH on a = %d", r.StatusCode)
	}
	if r := b.patch(jr.ID, jr.Token, "6-11", []byte("world\n")); r.StatusCode != http.StatusAccepted || r.Header.Get("Range") != "0-12" {
		t.Fatalf("PATCH continuing on b = %d, Range %q", r.StatusCode, r.Header.Get("Range"))
	}
	// A resend of the first part, to the other coordinator: 416 with the
	// size both know.
	if r := b.patch(jr.ID, jr.Token, "0-5", []byte("hello ")); r.StatusCode != http.StatusRequestedRangeNotSatisfiable || r.Header.Get("Range") != "0-12" {
		t.Fatalf("stale PATCH on b = %d, Range %q; want 416, 0-12", r.StatusCode, r.Header.Get("Range"))
	}
	for _, e := range envs {
		if got := e.trace(jr.ID); got != "hello world\n" {
			t.Fatalf("trace through one coordinator = %q", got)
		}
	}
	sum := fmt.Sprintf("crc32:%08x", crc32.ChecksumIEEE([]byte("hello world\n")))
	if r, body := a.put(jr.ID, jr.Token, api.UpdateJobRequest{State: api.StateSuccess, Output: api.JobOutput{Checksum: sum}}); r.StatusCode != http.StatusOK {
		t.Fatalf("final PUT with the checksum = %d %s", r.StatusCode, body)
	}
	if got := b.job(jr.ID); got.Status != "success" || got.TraceSize != 12 {
		t.Fatalf("job through b = %s, trace size %d", got.Status, got.TraceSize)
	}
	// /health/ready names the database.
	r, body := b.do("GET", "/health/ready", nil, nil)
	if r.StatusCode != http.StatusOK || !bytes.Contains(body, []byte("store: postgres postgres@127.0.0.1")) {
		t.Fatalf("/health/ready = %d %q", r.StatusCode, body)
	}
	// Pool and query metrics.
	_, body = a.do("GET", "/metrics", nil, nil)
	for _, m := range []string{"drover_coordinator_db_query_seconds_count", "drover_coordinator_db_pool_max_connections", "drover_coordinator_db_pool_acquires_total"} {
		if !bytes.Contains(body, []byte(m)) {
			t.Errorf("/metrics lacks %s", m)
		}
	}
}

// TestCrossCoordinatorWakeUp: a request held on one coordinator is woken
// by a job submitted through another, and a last_update issued by one
// coordinator is honoured by the others (the request is held, not answered
// at once), so runners behind a round-robin balancer long-poll.
func TestCrossCoordinatorWakeUp(t *testing.T) {
	envs := cluster(t, 3, pgtest.NewDatabase(t), nil)
	a, b, c := envs[0], envs[1], envs[2]
	_, tok := a.runner(nil)
	// The first request learns a version from a.
	resp, _ := a.request(tok, "", api.FeaturesInfo{})
	version := resp.Header.Get(hdrLastUpdate)
	if resp.StatusCode != http.StatusNoContent || version == "" {
		t.Fatalf("first request = %d, version %q", resp.StatusCode, version)
	}
	for round, e := range []*env{b, c, a} {
		answered := make(chan struct{})
		var got *api.JobResponse
		var gotResp *http.Response
		go func() {
			defer close(answered)
			gotResp, got = e.request(tok, version, api.FeaturesInfo{})
		}()
		waitHeld(t, e.c, 1, answered)
		// Submitted through another coordinator than the one holding.
		j := envs[(round+1)%3].submit(nil)
		<-answered
		if gotResp.StatusCode != http.StatusCreated || got == nil || got.ID != j.ID {
			t.Fatalf("round %d: held request = %d, want 201 with job %d", round, gotResp.StatusCode, j.ID)
		}
		version = gotResp.Header.Get(hdrLastUpdate)
	}
}

// TestReapersActOnce: every coordinator runs the reapers; two passes over
// the same silent jobs at the same moment fail each job once, with one
// line in its trace.
func TestReapersActOnce(t *testing.T) {
	clk := clock.NewFake(fakeStart)
	envs := cluster(t, 2, pgtest.NewDatabase(t), func(c *Config) {
		c.Clock = clk
		c.StaleTimeout = time.Minute
	})
	a, b := envs[0], envs[1]
	_, tok := a.runner(nil)
	const n = 12
	var ids []int64
	for range n {
		a.submit(nil)
		jr := b.take(tok)
		if r := a.patch(jr.ID, jr.Token, "0-2", []byte("ok\n")); r.StatusCode != http.StatusAccepted {
			t.Fatalf("PATCH = %d", r.StatusCode)
		}
		ids = append(ids, jr.ID)
	}
	clk.Advance(2 * time.Minute)
	for range 3 { // passes racing each other, then more passes: nothing more happens
		var wg sync.WaitGroup
		for _, e := range envs {
			wg.Go(func() { e.c.reapOnce(t.Context()) })
		}
		wg.Wait()
	}
	for _, id := range ids {
		j := a.job(id)
		if j.Status != "failed" || j.FailureReason != string(api.RunnerSystemFailure) {
			t.Errorf("job %d = %s (%s), want failed (runner_system_failure)", id, j.Status, j.FailureReason)
		}
		tr := b.trace(id)
		if c := strings.Count(tr, "no word from the runner"); c != 1 || !strings.HasPrefix(tr, "ok\n") {
			t.Errorf("job %d trace has the reaper's line %d times: %q", id, c, tr)
		}
	}
	finished := func(e *env) float64 {
		return counterValue(t, e.c.metrics.finished.WithLabelValues("failed"))
	}
	if got := finished(a) + finished(b); got != n {
		t.Errorf("jobs failed by the reapers, counted over both coordinators = %v, want %d", got, n)
	}
}

// TestDatabaseRestart: while PostgreSQL restarts, requests get 503 with
// Retry-After (nothing half done); afterwards the coordinators carry on
// without a restart of their own, and cross-coordinator wake-ups work.
func TestDatabaseRestart(t *testing.T) {
	srv, err := pgtest.Start(t.Context())
	if err != nil {
		if err == pgtest.ErrNotInstalled {
			t.Skip(err)
		}
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Stop() })
	envs := cluster(t, 2, srv.NewDatabase(t), nil)
	a, b := envs[0], envs[1]
	_, tok := a.runner(nil)
	before := a.submit(nil)

	var down503 *http.Response
	var downBody []byte
	if err := srv.Restart(t.Context(), func() {
		down503, downBody = a.admin("POST", "/api/v1/jobs", map[string]any{"name": "during", "script": []string{"true"}})
		if r, _ := b.do("GET", "/health/ready", nil, nil); r.StatusCode != http.StatusServiceUnavailable {
			t.Errorf("/health/ready with the database down = %d, want 503", r.StatusCode)
		}
	}); err != nil {
		t.Fatal(err)
	}
	if down503.StatusCode != http.StatusServiceUnavailable || down503.Header.Get("Retry-After") == "" {
		t.Fatalf("submit with the database down = %d (Retry-After %q) %s; want 503 with Retry-After",
			down503.StatusCode, down503.Header.Get("Retry-After"), downBody)
	}
	// Back: the first call on a pool connection broken by the restart may
	// still fail (503 again); a runner's retry then succeeds.
	var after jobView
	for attempt := 1; ; attempt++ {
		r, body := a.admin("POST", "/api/v1/jobs", map[string]any{"name": "after", "script": []string{"true"}})
		if r.StatusCode == http.StatusCreated {
			a.decode(body, &after)
			break
		}
		if r.StatusCode != http.StatusServiceUnavailable || attempt == 20 {
			t.Fatalf("submit after the restart, attempt %d = %d %s", attempt, r.StatusCode, body)
		}
	}
	// Nothing was queued by the failed submit: two jobs, in order.
	var ids []int64
	for range 2 {
		var jr *api.JobResponse
		for attempt := 1; jr == nil; attempt++ {
			resp, got := b.request(tok, "", api.FeaturesInfo{})
			if resp.StatusCode == http.StatusCreated {
				jr = got
			} else if resp.StatusCode != http.StatusServiceUnavailable || attempt == 20 {
				t.Fatalf("jobs/request after the restart = %d", resp.StatusCode)
			}
		}
		ids = append(ids, jr.ID)
	}
	if ids[0] != before.ID || ids[1] != after.ID {
		t.Fatalf("claimed %v, want [%d %d]", ids, before.ID, after.ID)
	}
	if r, _ := b.request(tok, "", api.FeaturesInfo{}); r.StatusCode != http.StatusNoContent {
		t.Fatalf("a third job = %d, want 204: the submit answered 503 queued something", r.StatusCode)
	}
	// The listener is back too: a request held on b is woken by a job
	// submitted on a (by its notification, or by the resync after the
	// listener reconnected).
	resp, _ := b.request(tok, "", api.FeaturesInfo{})
	version := resp.Header.Get(hdrLastUpdate)
	answered := make(chan struct{})
	var gotResp *http.Response
	go func() {
		defer close(answered)
		gotResp, _ = b.request(tok, version, api.FeaturesInfo{})
	}()
	waitHeld(t, b.c, 1, answered)
	a.submit(nil)
	<-answered
	if gotResp.StatusCode != http.StatusCreated {
		t.Fatalf("held request after the restart = %d, want 201", gotResp.StatusCode)
	}
}

// TestClaimExactlyOnceAcrossCoordinators: 4 coordinators on one database,
// 200 runner managers long-polling through them in turn (as behind a
// round-robin balancer), 1,000 jobs submitted through all of them: every
// job is handed out once and finishes.
func TestClaimExactlyOnceAcrossCoordinators(t *testing.T) {
	const coords, managers, jobs = 4, 200, 1000
	envs := cluster(t, coords, pgtest.NewDatabase(t), nil)
	_, tok := envs[0].runner(nil)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: managers}}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()

	var mu sync.Mutex
	handed := map[int64]int{}
	var done atomic.Int64
	errs := make(chan error, managers)
	var wg sync.WaitGroup
	for m := range managers {
		wg.Go(func() {
			errs <- runFakeManager(ctx, client, envs, m, tok, func(id int64) {
				mu.Lock()
				handed[id]++
				mu.Unlock()
			}, func() {
				if done.Add(1) == jobs {
					cancel()
				}
			})
		})
	}
	// Submit through every coordinator, in turn, while the managers poll.
	for i := range jobs {
		envs[i%coords].submit(map[string]any{"name": fmt.Sprintf("j%d", i), "project": fmt.Sprintf("g/p%d", i%7)})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if len(handed) != jobs {
		t.Fatalf("%d distinct jobs handed out, want %d", len(handed), jobs)
	}
	for id, n := range handed {
		if n != 1 {
			t.Errorf("job %d handed out %d times", id, n)
		}
	}
	resp, body := envs[3].admin("GET", "/api/v1/jobs?status=success&limit=1000", nil)
	var list []jobView
	envs[3].decode(body, &list)
	if resp.StatusCode != http.StatusOK || len(list) != jobs {
		t.Fatalf("successful jobs = %d (%d), want %d", len(list), resp.StatusCode, jobs)
	}
}

// runFakeManager is one runner manager speaking API v4 over HTTP, its
// requests going to the coordinators in turn: request (long polling with
// the version it was given), then a trace PATCH and the final PUT of each
// job it gets. It returns nil when ctx ends.
func runFakeManager(ctx context.Context, client *http.Client, envs []*env, m int, tok string, got func(int64), finished func()) error {
	system := fmt.Sprintf("s_mgr%03d", m)
	next := m
	url := func() string {
		next++
		return envs[next%len(envs)].srv.URL
	}
	do := func(method, u string, hdr map[string]string, body []byte) (*http.Response, []byte, error) {
		req, err := http.NewRequestWithContext(ctx, method, u, bytes.NewReader(body))
		if err != nil {
			return nil, nil, err
		}
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := client.Do(req)
		if err != nil {
			return nil, nil, err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return resp, b, err
	}
	version := ""
	for ctx.Err() == nil {
		body, _ := json.Marshal(api.JobRequest{Token: tok, SystemID: system, LastUpdate: version,
			Info: api.VersionInfo{Name: "fake", Version: "1", Executor: "shell"}})
		resp, b, err := do("POST", url()+"/api/v4/jobs/request", map[string]string{"Content-Type": "application/json"}, body)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return fmt.Errorf("manager %d: jobs/request: %w", m, err)
		}
		version = resp.Header.Get(hdrLastUpdate)
		switch resp.StatusCode {
		case http.StatusNoContent:
			continue
		case http.StatusCreated:
		default:
			return fmt.Errorf("manager %d: jobs/request = %d %s", m, resp.StatusCode, b)
		}
		var jr api.JobResponse
		if err := json.Unmarshal(b, &jr); err != nil {
			return err
		}
		got(jr.ID)
		line := []byte(fmt.Sprintf("job %d on %s\n", jr.ID, system))
		hdr := map[string]string{hdrJobToken: jr.Token, "Content-Range": fmt.Sprintf("0-%d", len(line)-1)}
		if resp, b, err = do("PATCH", fmt.Sprintf("%s/api/v4/jobs/%d/trace", url(), jr.ID), hdr, line); err != nil || resp.StatusCode != http.StatusAccepted {
			return fmt.Errorf("manager %d: PATCH job %d = %v %v %s", m, jr.ID, err, resp, b)
		}
		put, _ := json.Marshal(api.UpdateJobRequest{Token: jr.Token, State: api.StateSuccess,
			Output: api.JobOutput{Checksum: fmt.Sprintf("crc32:%08x", crc32.ChecksumIEEE(line))}})
		resp, b, err = do("PUT", fmt.Sprintf("%s/api/v4/jobs/%d", url(), jr.ID), map[string]string{"Content-Type": "application/json"}, put)
		if err != nil || resp.StatusCode != http.StatusOK {
			return fmt.Errorf("manager %d: PUT job %d = %v %v %s", m, jr.ID, err, resp, b)
		}
		finished()
	}
	return nil
}

// counterValue reads a counter's value.
func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}
