package router

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/coordinator"
	"github.com/drover-ci/drover/internal/runnerapi"
)

// TestCoordinatorRouterThreeManagers: coordinator ← router ← three real
// runner managers (shell executor). Jobs flow and succeed; their logs
// arrive at the coordinator.
func TestCoordinatorRouterThreeManagers(t *testing.T) {
	t.Parallel()
	c := startCoordinator(t, 2*time.Second)
	up := createRunner(t, c.srv.URL, c.admin, nil)
	x := startRouter(t, Config{Upstream: c.srv.URL, UpstreamToken: up, LongPollTimeout: 2 * time.Second, AckTimeout: 10 * time.Second})
	for i := range 3 {
		tok := createRunner(t, x.srv.URL, x.r.AdminToken(), map[string]any{"description": fmt.Sprintf("m%d", i)})
		startManager(t, x.srv.URL, fmt.Sprintf("s_manager%d", i), tok)
	}
	var ids []int64
	for i := range 9 {
		ids = append(ids, c.submit(fmt.Sprintf("group/p%d", i%3), fmt.Sprintf("echo out-%d", i)))
	}
	for i, id := range ids {
		waitFor(t, 60*time.Second, fmt.Sprintf("job %d to succeed", id), func() bool {
			s := c.status(id)
			if s == "failed" || s == "canceled" {
				t.Fatalf("job %d is %s; trace:\n%s", id, s, c.trace(id))
			}
			return s == "success"
		})
		if tr := c.trace(id); !strings.Contains(tr, fmt.Sprintf("out-%d", i)) {
			t.Errorf("trace of job %d lacks its output:\n%s", id, tr)
		}
	}
	// Every manager announced itself; the router's admin API lists them.
	var runners []runnerapi.RunnerView
	adminCall(t, x.srv.URL, x.r.AdminToken(), http.MethodGet, "/api/v1/runners", nil, &runners)
	if len(runners) != 3 {
		t.Fatalf("GET /api/v1/runners: %d runners, want 3", len(runners))
	}
	for _, rv := range runners {
		if len(rv.Managers) != 1 {
			t.Errorf("runner %d has %d managers, want 1", rv.ID, len(rv.Managers))
		}
	}
	if got := metricValue(t, x.srv.URL, "drover_router_jobs_routed_total"); got != 9 {
		t.Errorf("drover_router_jobs_routed_total = %v, want 9", got)
	}
}

// metricValue scrapes one unlabelled (or summed) metric from /metrics.
func metricValue(t testing.TB, base, name string) float64 {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	sum := 0.0
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, name+" ") || strings.HasPrefix(line, name+"{") {
			var v float64
			fmt.Sscanf(line[strings.LastIndexByte(line, ' ')+1:], "%g", &v)
			sum += v
		}
	}
	return sum
}

// ping makes the router see a runner manager (one request, not held).
func ping(t testing.TB, url, token, sysID string, twoPhase bool) {
	t.Helper()
	s := newSim(t, url, token, sysID, twoPhase)
	_, resp, err := s.c.RequestJob(t.Context(), api.JobRequest{Token: token, SystemID: sysID,
		Info: api.VersionInfo{Features: api.FeaturesInfo{TwoPhaseJobCommit: twoPhase}}})
	if err != nil || resp.StatusCode != http.StatusNoContent {
		t.Fatalf("jobs/request = %v, %v; want 204", resp, err)
	}
}

// TestFairnessEndToEnd: project A has 200 jobs held at the router, then
// project B submits 5: B's first job goes out after at most one of A's.
func TestFairnessEndToEnd(t *testing.T) {
	t.Parallel()
	eachUpstream(t, 60*time.Second, testFairness)
}

// handedOutBefore reads the jobs handed out to s up to the first of
// project and returns how many came before it.
func handedOutBefore(t *testing.T, s *simRunner, project string) int {
	t.Helper()
	n := 0
	for {
		select {
		case j := <-s.got:
			if j.JobInfo.ProjectFullPath == project {
				return n
			}
			n++
		case <-time.After(20 * time.Second):
			t.Fatal("no job handed out")
		}
	}
}

func testFairness(t *testing.T, u upstreamUnderTest) {
	x := startRouter(t, Config{Upstream: u.url(), UpstreamToken: u.routerToken(), LongPollTimeout: 10 * time.Second, Prefetch: 1000})
	tok := createRunner(t, x.srv.URL, x.r.AdminToken(), nil)
	ping(t, x.srv.URL, tok, "s_fair", true)
	var ids []int64
	for range 200 {
		ids = append(ids, u.add("a/burst"))
	}
	waitFor(t, 30*time.Second, "A's jobs at the router", func() bool { return x.r.QueueLen() == 200 })
	for range 5 {
		ids = append(ids, u.add("b/small"))
	}
	waitFor(t, 30*time.Second, "B's jobs at the router", func() bool { return x.r.QueueLen() == 205 })

	s := newSim(t, x.srv.URL, tok, "s_fair", true)
	s.got = make(chan *api.JobResponse, 300)
	startSims(t, s)
	if aBefore := handedOutBefore(t, s, "b/small"); aBefore > 1 {
		t.Errorf("%d of A's jobs were handed out before B's first, want at most 1", aBefore)
	}
	waitFor(t, 60*time.Second, "all jobs done", func() bool { return s.jobs.Load() == 205 })
	waitFor(t, 10*time.Second, "the last job to succeed upstream", func() bool { return u.state(ids[len(ids)-1]) == "success" })
	if f, ok := u.(*fakeUpstream); ok {
		if n := f.requests.Load(); n > 205+10 {
			t.Errorf("upstream saw %d job requests for 205 jobs", n)
		}
	}
}

// TestOfferComesBack: a runner that declines, or takes a job and goes
// silent, loses it to another runner; the upstream never notices, and the
// runner that failed is tried last afterwards.
func TestOfferComesBack(t *testing.T) {
	t.Parallel()
	for name, mk := range upstreams(t, 60*time.Second) {
		for _, mode := range []string{"declined", "silent"} {
			t.Run(name+"/"+mode, func(t *testing.T) {
				t.Parallel()
				testOfferComesBack(t, mk(), mode)
			})
		}
	}
}

func testOfferComesBack(t *testing.T, u upstreamUnderTest, mode string) {
	x := startRouter(t, Config{Upstream: u.url(), UpstreamToken: u.routerToken(), LongPollTimeout: 5 * time.Second, AckTimeout: time.Second})
	tok := createRunner(t, x.srv.URL, x.r.AdminToken(), nil)
	bad := newSim(t, x.srv.URL, tok, "s_bad", true)
	bad.decide = func(*api.JobResponse) string { return mode }
	bad.got = make(chan *api.JobResponse, 10)
	good := newSim(t, x.srv.URL, tok, "s_good", true)
	good.done = make(chan int64, 10)
	startSims(t, bad)
	waitFor(t, 10*time.Second, "the bad runner to wait", func() bool { return x.r.Waiting() == 1 })
	id := u.add("g/p")
	select {
	case <-bad.got:
	case <-time.After(10 * time.Second):
		t.Fatal("the bad runner got no job")
	}
	startSims(t, good)
	select {
	case got := <-good.done:
		if got != id {
			t.Fatalf("good runner ran job %d, want %d", got, id)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the job did not reach the good runner")
	}
	waitFor(t, 5*time.Second, "the job to succeed upstream", func() bool { return u.state(id) == "success" })
	if f, ok := u.(*fakeUpstream); ok {
		if j := f.job(id); j.handouts != 1 || f.declines.Load() != 0 || f.expiries.Load() != 0 {
			t.Errorf("upstream: %d hand-outs, %d declines, %d expiries; want 1, 0, 0", j.handouts, f.declines.Load(), f.expiries.Load())
		}
	}
	// Both wait now: the next job goes to the healthy one.
	waitFor(t, 10*time.Second, "both runners to wait", func() bool { return x.r.Waiting() == 2 })
	id2 := u.add("g/p")
	select {
	case got := <-good.done:
		if got != id2 {
			t.Fatalf("good runner ran job %d, want %d", got, id2)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the second job did not reach the good runner")
	}
	if n := len(bad.got); n != 0 {
		t.Errorf("the runner that %s got %d more jobs, want 0", mode, n)
	}
	src := map[string]string{"declined": "downstream", "silent": "expired"}[mode]
	if v := metricValue(t, x.srv.URL, `drover_router_declines_total{source="`+src+`"}`); v != 1 {
		t.Errorf("declines_total{source=%q} = %v, want 1", src, v)
	}
}

// TestRouterRestart: a router dies holding jobs; the upstream's ack
// deadlines return them; a new router on the same data directory serves
// them to the same runners (same tokens), no manual steps.
func TestRouterRestart(t *testing.T) {
	t.Parallel()
	// An ack timeout of 3 s: the router's keep-alives (every second) stay
	// well inside it on a loaded 2-core machine.
	eachUpstream(t, 3*time.Second, testRouterRestart)
}

func testRouterRestart(t *testing.T, u upstreamUnderTest) {
	dir := t.TempDir()
	cfg := Config{Upstream: u.url(), UpstreamToken: u.routerToken(), DataDir: dir, LongPollTimeout: 5 * time.Second, Prefetch: 10}
	x1 := startRouter(t, cfg)
	tok := createRunner(t, x1.srv.URL, x1.r.AdminToken(), nil)
	admin, sys := x1.r.AdminToken(), x1.r.SystemID()
	ping(t, x1.srv.URL, tok, "s_r", false)
	var ids []int64
	for range 3 {
		ids = append(ids, u.add("g/p"))
	}
	held := func() bool {
		for _, id := range ids {
			if u.state(id) != "waiting_for_runner_ack" {
				return false
			}
		}
		return true
	}
	waitFor(t, 10*time.Second, "jobs held by the first router", func() bool { return x1.r.QueueLen() == 3 && held() })
	// Held longer than the upstream ack timeout: the router keeps them alive.
	time.Sleep(3500 * time.Millisecond)
	if !held() {
		t.Fatal("jobs left waiting_for_runner_ack upstream while the router kept them alive")
	}
	x1.stop()
	waitFor(t, 10*time.Second, "the upstream to take the jobs back", func() bool {
		for _, id := range ids {
			if u.state(id) != "pending" {
				return false
			}
		}
		return true
	})

	x2 := startRouter(t, cfg)
	if x2.r.AdminToken() != admin || x2.r.SystemID() != sys {
		t.Errorf("restart changed the admin token or system id")
	}
	// A classic runner this time: its first PUT running is the accept.
	s := newSim(t, x2.srv.URL, tok, "s_r", false)
	s.done = make(chan int64, 10)
	startSims(t, s)
	for range ids {
		select {
		case <-s.done:
		case <-time.After(20 * time.Second):
			t.Fatal("jobs not served after the restart")
		}
	}
	for _, id := range ids {
		waitFor(t, 5*time.Second, "job success upstream", func() bool { return u.state(id) == "success" })
	}
	if f, ok := u.(*fakeUpstream); ok {
		for _, id := range ids {
			if tr := string(f.job(id).trace); tr != "sim ran job\n" {
				t.Errorf("job %d: trace %q", id, tr)
			}
		}
	}
	if b, err := os.ReadFile(filepath.Join(dir, "admin-token")); err != nil || strings.TrimSpace(string(b)) != admin {
		t.Errorf("admin-token file: %q, %v", b, err)
	}
}

// TestUpstreamRequestsPerJob: with 100 idle runners long-polling the
// router, the upstream sees at most 1.1 jobs/request calls per job.
func TestUpstreamRequestsPerJob(t *testing.T) {
	t.Parallel()
	perJob, _ := upstreamRequestsPerJob(t, 30, 100, true)
	if perJob > 1.1 {
		t.Errorf("upstream jobs/request per job = %.2f, want <= 1.1", perJob)
	}
}

// upstreamRequestsPerJob runs jobs one after the other through n idle
// runners, polling the coordinator through a router (viaRouter) or
// directly, and returns the coordinator's jobs/request calls per job and
// the p50 latency from submission to the runner's final update.
func upstreamRequestsPerJob(t testing.TB, jobs, n int, viaRouter bool) (float64, time.Duration) {
	c := startCoordinator(t, 2*time.Second)
	up := createRunner(t, c.srv.URL, c.admin, nil)
	url, tok := c.srv.URL, up
	var x *rtr
	if viaRouter {
		x = startRouter(t, Config{Upstream: c.srv.URL, UpstreamToken: up, LongPollTimeout: 2 * time.Second})
		url = x.srv.URL
		tok = createRunner(t, url, x.r.AdminToken(), nil)
	}
	done := make(chan int64, jobs)
	var sims []*simRunner
	for i := range n {
		s := newSim(t, url, tok, fmt.Sprintf("s_%03d", i), true)
		s.done = done
		sims = append(sims, s)
	}
	startSims(t, sims...)
	// Warm up: every runner's first request is answered at once, the
	// second one is held.
	if viaRouter {
		waitFor(t, 20*time.Second, "runners waiting at the router", func() bool { return x.r.Waiting() == n })
		waitFor(t, 20*time.Second, "the router's upstream poll", func() bool { return c.count.requests.Load() >= 2 })
	} else {
		waitFor(t, 20*time.Second, "runners waiting at the coordinator", func() bool {
			return metricValue(t, c.srv.URL, "drover_coordinator_long_poll_waiters") == float64(n)
		})
	}
	time.Sleep(100 * time.Millisecond)
	base := c.count.requests.Load()
	lat := make([]time.Duration, 0, jobs)
	for range jobs {
		start := time.Now()
		id := c.submit("g/p")
		select {
		case got := <-done:
			if got != id {
				t.Fatalf("finished job %d, want %d", got, id)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("job %d not done", id)
		}
		lat = append(lat, time.Since(start))
	}
	return float64(c.count.requests.Load()-base) / float64(jobs), p50(lat)
}

func p50(ds []time.Duration) time.Duration {
	s := append([]time.Duration(nil), ds...)
	for i := 1; i < len(s); i++ {
		for k := i; k > 0 && s[k] < s[k-1]; k-- {
			s[k], s[k-1] = s[k-1], s[k]
		}
	}
	return s[len(s)/2]
}

// BenchmarkUpstreamRequestsPerJob reports the coordinator's jobs/request
// calls per job with 100 idle runners behind a router
// (upstream-requests/job) and polling it directly (direct-requests/job),
// long-poll timeout 2s on both, jobs run one after the other.
func BenchmarkUpstreamRequestsPerJob(b *testing.B) {
	jobs := max(b.N, 20)
	viaRouter, _ := upstreamRequestsPerJob(b, jobs, 100, true)
	direct, _ := upstreamRequestsPerJob(b, jobs, 100, false)
	b.ReportMetric(viaRouter, "upstream-requests/job")
	b.ReportMetric(direct, "direct-requests/job")
}

// BenchmarkRouterLatency reports the p50 time from submission to a
// trivial job's final update, one idle runner, through the router and
// directly, in the same run.
func BenchmarkRouterLatency(b *testing.B) {
	jobs := max(b.N, 20)
	_, viaRouter := upstreamRequestsPerJob(b, jobs, 1, true)
	_, direct := upstreamRequestsPerJob(b, jobs, 1, false)
	b.ReportMetric(float64(viaRouter.Microseconds())/1000, "router-p50-ms")
	b.ReportMetric(float64(direct.Microseconds())/1000, "direct-p50-ms")
	b.ReportMetric(float64((viaRouter-direct).Microseconds())/1000, "added-p50-ms")
}

// TestFairnessWithoutPrefetch: with --prefetch 0 the router pulls a job
// only for a waiting runner, so the order is the upstream's: drover's
// coordinator serves projects round robin, and B's first job still goes
// out after at most one of A's since B submitted.
func TestFairnessWithoutPrefetch(t *testing.T) {
	t.Parallel()
	u := upstreams(t, 60*time.Second)["coordinator"]()
	x := startRouter(t, Config{Upstream: u.url(), UpstreamToken: u.routerToken(), LongPollTimeout: 10 * time.Second})
	tok := createRunner(t, x.srv.URL, x.r.AdminToken(), nil)
	for range 200 {
		u.add("a/burst")
	}
	for range 5 {
		u.add("b/small")
	}
	s := newSim(t, x.srv.URL, tok, "s_fair0", true)
	s.got = make(chan *api.JobResponse, 300)
	startSims(t, s)
	if aBefore := handedOutBefore(t, s, "b/small"); aBefore > 1 {
		t.Errorf("%d of A's jobs were handed out before B's first, want at most 1", aBefore)
	}
	if n := x.r.QueueLen(); n > 1 {
		t.Errorf("router queue holds %d jobs with prefetch 0", n)
	}
}

// TestTagMatchingBehindRouter: the router's upstream token carries the
// union of its runners' tags; a job tagged gpu goes only to the router's
// runner that has the gpu tag (the coordinator's payload carries the job's
// tags for this), never to the one without.
func TestTagMatchingBehindRouter(t *testing.T) {
	t.Parallel()
	u := startCoordinatorCfg(t, coordinator.Config{LongPollTimeout: 2 * time.Second, AckTimeout: 60 * time.Second, ReapInterval: 100 * time.Millisecond})
	upTok := createRunner(t, u.srv.URL, u.admin, map[string]any{"description": "router", "tag_list": []string{"linux", "gpu"}})
	x := startRouter(t, Config{Upstream: u.url(), UpstreamToken: upTok, LongPollTimeout: 5 * time.Second})
	plainTok := createRunner(t, x.srv.URL, x.r.AdminToken(), map[string]any{"description": "plain", "tag_list": []string{"linux"}})
	gpuTok := createRunner(t, x.srv.URL, x.r.AdminToken(), map[string]any{"description": "gpu", "tag_list": []string{"linux", "gpu"}})
	plain := newSim(t, x.srv.URL, plainTok, "s_plain", true)
	plain.got = make(chan *api.JobResponse, 10)
	gpu := newSim(t, x.srv.URL, gpuTok, "s_gpu", true)
	gpu.got = make(chan *api.JobResponse, 10)
	startSims(t, plain, gpu)
	waitFor(t, 10*time.Second, "both runners waiting", func() bool { return x.r.Waiting() == 2 })

	var out struct {
		ID int64 `json:"id"`
	}
	if code := adminCall(t, u.srv.URL, u.admin, http.MethodPost, "/api/v1/jobs",
		map[string]any{"name": "cuda", "project": "g/ml", "tags": []string{"gpu"}, "script": []string{"nvidia-smi || true"}}, &out); code != http.StatusCreated {
		t.Fatalf("submit: status %d", code)
	}
	select {
	case j := <-gpu.got:
		if j.ID != out.ID {
			t.Errorf("gpu runner got job %d, want %d", j.ID, out.ID)
		}
	case j := <-plain.got:
		t.Fatalf("the runner without the gpu tag got job %d", j.ID)
	case <-time.After(20 * time.Second):
		t.Fatal("the tagged job was not handed out")
	}
}
