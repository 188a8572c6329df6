package e2e

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/client"
	"github.com/drover-ci/drover/internal/config"
	coord "github.com/drover-ci/drover/internal/coordinator"
	"github.com/drover-ci/drover/internal/executor"
	"github.com/drover-ci/drover/internal/executor/shell"
	"github.com/drover-ci/drover/internal/manager"
)

// stack is a coordinator and a runner manager in this process, talking
// over real loopback HTTP, for benchmarks.
type stack struct {
	api  *client.Client
	stop func()
	// settle waits for work the executor does after a job's result
	// (the docker executor removes containers in the background).
	settle func()
}

func newStack(b *testing.B, concurrent int) *stack {
	return newStackStore(b, concurrent, nil)
}

// newStackStore is newStack with a [runners.store] table (nil: none).
func newStackStore(b *testing.B, concurrent int, store map[string]any) *stack {
	b.Helper()
	return newStackWith(b, concurrent, config.RunnerConfig{
		Executor: "shell", BuildsDir: filepath.Join(b.TempDir(), "builds"), Store: store,
	}, map[string]executor.Provider{"shell": shell.NewProvider()}, nil)
}

// newStackWith is a stack whose one runner is rc (its name, url, token and
// request settings filled in here), with the given providers; apply, when
// set, sees the configuration before the manager starts.
func newStackWith(b *testing.B, concurrent int, rc config.RunnerConfig, providers map[string]executor.Provider, apply func(*config.Config) error) *stack {
	b.Helper()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx, cancel := context.WithCancel(context.Background())
	dir := b.TempDir()
	cs, err := coord.New(ctx, logger, coord.Config{DataDir: filepath.Join(dir, "coord")})
	if err != nil {
		b.Fatal(err)
	}
	srv := httptest.NewServer(cs.Handler())
	go func() { _ = cs.Run(ctx) }()
	api := client.New(srv.URL, cs.AdminToken(), nil)
	yes := true
	r, err := api.CreateRunner(ctx, client.RunnerSpec{RunUntagged: &yes})
	if err != nil {
		b.Fatal(err)
	}
	rc.Name, rc.URL, rc.Token, rc.RequestConcurrency, rc.OutputLimit = "bench", srv.URL, r.Token, 1, 4096
	cfg := &config.Config{Concurrent: concurrent, CheckInterval: 3, ShutdownTimeout: 5, Runners: []config.RunnerConfig{rc}}
	if apply != nil {
		if err := apply(cfg); err != nil {
			b.Fatal(err)
		}
	}
	m, err := manager.New(logger, manager.Options{Config: cfg, ConfigPath: "bench", SystemID: "s_bench", Providers: providers})
	if err != nil {
		b.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = m.Run(ctx); close(done) }()
	return &stack{api: api, stop: func() {
		cancel()
		<-done
		srv.Close()
		cs.Close()
	}}
}

// settleOn makes s wait for p, a provider that cleans up after a job's
// result in the background (containers, pods), when it settles and after
// it stops.
func (s *stack) settleOn(b *testing.B, p interface{ Wait(context.Context) error }) {
	s.settle = func() {
		if err := p.Wait(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
	stop := s.stop
	s.stop = func() {
		stop()
		s.settle() // the last job's leftovers are being removed
	}
}

func percentile(d []time.Duration, p float64) time.Duration {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[min(len(s)-1, int(float64(len(s))*p))]
}

// BenchmarkSubmitToSuccess measures one trivial job from POST /api/v1/jobs
// until GET /api/v1/jobs/:id reports success (polled every millisecond).
func BenchmarkSubmitToSuccess(b *testing.B) {
	s := newStack(b, 1)
	defer s.stop()
	ctx := context.Background()
	// Warm up: the first request of the manager is not held.
	runTrivial(b, s, ctx)
	var lat []time.Duration
	b.ResetTimer()
	for b.Loop() {
		lat = append(lat, runTrivial(b, s, ctx))
	}
	b.StopTimer()
	b.ReportMetric(float64(percentile(lat, 0.5).Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(percentile(lat, 0.95).Microseconds())/1000, "p95-ms")
}

func runTrivial(b *testing.B, s *stack, ctx context.Context) time.Duration {
	start := time.Now()
	j, err := s.api.Submit(ctx, client.JobSpec{Name: "trivial", Script: []string{"true"}})
	if err != nil {
		b.Fatal(err)
	}
	for {
		got, err := s.api.Job(ctx, j.ID)
		if err != nil {
			b.Fatal(err)
		}
		if got.Finished() {
			if got.Status != "success" {
				b.Fatalf("job %d: %s %s", j.ID, got.Status, got.FailureReason)
			}
			return time.Since(start)
		}
		time.Sleep(time.Millisecond)
	}
}

// BenchmarkThroughput1000 submits 1,000 trivial jobs and measures the time
// until all of them succeeded, with concurrent = 8.
func BenchmarkThroughput1000(b *testing.B) {
	throughput(b, 1000, nil)
}

// BenchmarkThroughputStore is BenchmarkThroughput1000 (500 jobs) without a
// job store, with the file store and with the Redis store, in one run.
func BenchmarkThroughputStore(b *testing.B) {
	b.Run("none", func(b *testing.B) { throughput(b, 500, nil) })
	b.Run("file", func(b *testing.B) {
		throughput(b, 500, map[string]any{"name": "file", "file": map[string]any{"path": b.TempDir()}})
	})
	b.Run("redis", func(b *testing.B) {
		url := startRedis(b)
		throughput(b, 500, map[string]any{"name": "redis", "redis": map[string]any{"url": url}})
	})
}

func throughput(b *testing.B, n int, store map[string]any) {
	for range b.N {
		b.StopTimer()
		s := newStackStore(b, 8, store)
		b.StartTimer()
		runMany(b, s, n)
		b.StopTimer()
		s.stop()
	}
}

// runMany submits n trivial jobs from four goroutines, waits until all of
// them succeeded and reports jobs/s.
func runMany(b *testing.B, s *stack, n int) {
	runManyPoll(b, s, n, 5*time.Millisecond)
}

// runManyPoll is runMany looking at an unfinished job every poll.
func runManyPoll(b *testing.B, s *stack, n int, poll time.Duration) {
	ctx := context.Background()
	start := time.Now()
	ids := make([]int64, n)
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += 4 {
				j, err := s.api.Submit(ctx, client.JobSpec{Name: "t" + strconv.Itoa(i), Script: []string{"true"}})
				if err != nil {
					errs <- err
					return
				}
				ids[i] = j.ID
			}
		}()
	}
	wg.Wait()
	select {
	case err := <-errs:
		b.Fatal(err)
	default:
	}
	// Walk the jobs in order, one cheap GET at a time, so that watching
	// costs the coordinator little next to the work measured.
	for i := 0; i < n; {
		j, err := s.api.Job(ctx, ids[i])
		if err != nil {
			b.Fatal(err)
		}
		if !j.Finished() {
			time.Sleep(poll)
			continue
		}
		if j.Status != "success" {
			b.Fatalf("trivial job %d: %s %s", j.ID, j.Status, j.FailureReason)
		}
		i++
	}
	b.ReportMetric(float64(n)/time.Since(start).Seconds(), "jobs/s")
}

// BenchmarkManagerRSS1GiBLog runs a job printing 1 GiB through a real
// `drover run` process and a real coordinator process, and reports the
// manager's peak RSS (VmHWM) and the end-to-end log throughput.
func BenchmarkManagerRSS1GiBLog(b *testing.B) {
	for range b.N {
		b.StopTimer()
		dir := b.TempDir()
		c := startCoordinator(b, filepath.Join(dir, "coord"))
		cfgPath := filepath.Join(dir, "config.toml")
		body := fmt.Sprintf("concurrent = 1\ncheck_interval = 1\n[[runners]]\n  name = \"rss\"\n  url = %q\n  token = %q\n  executor = \"shell\"\n  builds_dir = %q\n  output_limit = 1100000\n",
			c.url, c.runnerToken(b), filepath.Join(dir, "builds"))
		if err := os.WriteFile(cfgPath, []byte(body), 0o600); err != nil {
			b.Fatal(err)
		}
		m := start(b, dir, "run", "--config", cfgPath)
		b.StartTimer()
		start := time.Now()
		j, err := c.client().Submit(context.Background(), client.JobSpec{Name: "big", Script: []string{
			"(yes 'drover log line: the quick brown fox jumps over the lazy dog 0123456789' || true) | head -c 1073741824",
		}})
		if err != nil {
			b.Fatal(err)
		}
		for {
			got, err := c.client().Job(context.Background(), j.ID)
			if err != nil {
				b.Fatal(err)
			}
			if got.Finished() {
				if got.Status != "success" || got.TraceSize < 1<<30 {
					b.Fatalf("big job = %s, trace %d bytes", got.Status, got.TraceSize)
				}
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		el := time.Since(start)
		b.StopTimer()
		hwm := vmHWM(b, m.cmd.Process.Pid)
		b.ReportMetric(hwm, "manager-peak-rss-MiB")
		b.ReportMetric(1024/el.Seconds(), "log-MiB/s")
		_ = m.cmd.Process.Kill()
		_ = c.cmd.Process.Kill()
	}
}

func vmHWM(b *testing.B, pid int) float64 {
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	for _, l := range strings.Split(string(st), "\n") {
		if strings.HasPrefix(l, "VmHWM:") {
			kb, _ := strconv.ParseFloat(strings.Fields(l)[1], 64)
			return kb / 1024
		}
	}
	b.Fatal("no VmHWM")
	return 0
}

// BenchmarkResumeLatency measures, for a job printing a line every 50 ms,
// the time from starting a manager after a SIGKILL of the previous one (same
// file store) until the job's log grows on the coordinator again.
func BenchmarkResumeLatency(b *testing.B) {
	dir := b.TempDir()
	c := startCoordinator(b, filepath.Join(dir, "coord"))
	cl := c.client()
	cfg := writeConfig(b, dir, c.url, c.runnerToken(b), 1, fileStore(filepath.Join(dir, "store")))
	marker := fmt.Sprintf("bench-resume-%d", time.Now().UnixNano())
	j, err := cl.Submit(context.Background(), numberedJob("long", marker, 100000, "0.05"))
	if err != nil {
		b.Fatal(err)
	}
	// The job's stages are detached: cancel it while a manager runs, so
	// that the manager stops them before the test kills it.
	defer func() {
		_, _ = cl.Cancel(context.Background(), j.ID)
		waitJob(b, cl, j.ID, 30*time.Second, finished)
	}()
	resumeLatency(b, dir, cfg, cl, j.ID, 30*time.Second)
}

// resumeLatency starts a manager on cfg, waits for job id to run, then
// kills the manager with SIGKILL and starts a new one b.N times, measuring
// from each start until the job's log grows on the coordinator again (at
// most limit), and reports p50 and p95.
func resumeLatency(b *testing.B, dir, cfg string, cl *client.Client, id int64, limit time.Duration) {
	size := func() int {
		tr, _, err := cl.Trace(context.Background(), id, 0)
		if err != nil {
			b.Fatal(err)
		}
		return len(tr)
	}
	m := start(b, dir, "run", "--config", cfg)
	waitJob(b, cl, id, limit, func(j *client.Job) bool { return j.Status == "running" })
	var lat []time.Duration
	for b.Loop() {
		time.Sleep(700 * time.Millisecond) // let the log flow
		m.signal(syscall.SIGKILL)
		m.wait(10 * time.Second)
		at := size()
		t0 := time.Now()
		m = start(b, dir, "run", "--config", cfg)
		for size() <= at {
			if time.Since(t0) > limit {
				b.Fatalf("the log did not flow again within %v; manager log:\n%s", limit, m.log.String())
			}
			time.Sleep(5 * time.Millisecond)
		}
		lat = append(lat, time.Since(t0))
	}
	b.ReportMetric(float64(percentile(lat, 0.5).Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(percentile(lat, 0.95).Microseconds())/1000, "p95-ms")
}
