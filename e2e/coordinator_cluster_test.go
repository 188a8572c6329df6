package e2e

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/client"
	"github.com/drover-ci/drover/internal/lockedbuf"
	"github.com/drover-ci/drover/internal/pgtest"
)

// nginxProxy is Debian's nginx in front of several coordinators, as the
// README shows it: round robin, the next coordinator when one refuses
// connections, long polls held.
type nginxProxy struct {
	url string
	cmd *exec.Cmd
}

// nginxConf is the configuration the README shows, with the upstream
// list, listen address and file paths filled in.
func nginxConf(dir, listen string, upstreams []string) string {
	var servers strings.Builder
	for _, u := range upstreams {
		fmt.Fprintf(&servers, "    server %s max_fails=1 fail_timeout=2s;\n", u)
	}
	return fmt.Sprintf(`worker_processes 1;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path %[1]s/body;
  proxy_temp_path %[1]s/proxy;
  fastcgi_temp_path %[1]s/fastcgi;
  uwsgi_temp_path %[1]s/uwsgi;
  scgi_temp_path %[1]s/scgi;
  upstream drover {
%[2]s    keepalive 64;
  }
  server {
    listen %[3]s;
    client_max_body_size 8m;
    location / {
      proxy_pass http://drover;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header Host $http_host;
      # Long polls are held up to --long-poll-timeout (50 s by default).
      proxy_read_timeout 120s;
      proxy_buffering off;
      # A coordinator that is down refuses the connection: try the next.
      proxy_next_upstream error timeout;
    }
  }
}
`, dir, servers.String(), listen)
}

func startNginx(t *testing.T, upstreams []string) *nginxProxy {
	t.Helper()
	bin, err := exec.LookPath("nginx")
	if err != nil {
		if bin, err = exec.LookPath("/usr/sbin/nginx"); err != nil {
			t.Skip("nginx not installed (Debian's package nginx-light; scripts/test.sh installs it)")
		}
	}
	dir := t.TempDir()
	listen := "127.0.0.1:" + freePort(t)
	conf := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(conf, []byte(nginxConf(dir, listen, upstreams)), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-c", conf, "-p", dir, "-g", "daemon off;")
	out := &lockedbuf.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start nginx: %v", err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGQUIT)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	})
	for {
		c, err := net.Dial("tcp", listen)
		if err == nil {
			c.Close()
			break
		}
		select {
		case <-done:
			log, _ := os.ReadFile(filepath.Join(dir, "error.log"))
			t.Fatalf("nginx exited: %s%s", out.String(), log)
		case <-time.After(20 * time.Millisecond):
		}
	}
	return &nginxProxy{url: "http://" + listen, cmd: cmd}
}

// TestCoordinatorClusterFailover: four coordinators on one PostgreSQL
// behind nginx, ten runner managers taking jobs through nginx with 20
// requests each in flight (request_concurrency): 200 long polls held over
// the four coordinators before the first of 1,000 jobs is submitted.
// Mid-run one coordinator is killed with SIGKILL, later PostgreSQL
// restarts. Every job the API accepted runs exactly once and succeeds with
// its whole log; while the database is down the coordinators answer 503
// with Retry-After; nothing is restarted but the database.
func TestCoordinatorClusterFailover(t *testing.T) {
	srv, err := pgtest.Start(t.Context())
	if err == pgtest.ErrNotInstalled {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Stop() })
	dbURL := srv.NewDatabase(t)
	dir := t.TempDir()

	var coords []*coordinator
	var addrs []string
	for i := range 4 {
		addr := "127.0.0.1:" + freePort(t)
		c := startCoordinatorAt(t, filepath.Join(dir, fmt.Sprintf("coord%d", i)), addr,
			"--database-url", dbURL, "--long-poll-timeout", "60s", "--ack-timeout", "5s",
			"--secret-key-file", filepath.Join(dir, "secret-key")) // one key for all: the first creates it
		coords = append(coords, c)
		addrs = append(addrs, addr)
	}
	for _, c := range coords[1:] {
		if c.token != coords[0].token {
			t.Fatalf("coordinators on one database have different admin tokens")
		}
	}
	lb := startNginx(t, addrs)
	cl := client.New(lb.url, coords[0].token, nil)
	runnerTok := coords[0].runnerToken(t)

	marks := filepath.Join(dir, "runs")
	var mgrs []*proc
	// A manager adds one request per check_interval (1 s) up to
	// request_concurrency; each is held up to the long-poll timeout (60 s).
	for i := range 10 {
		mdir := filepath.Join(dir, fmt.Sprintf("mgr%d", i))
		os.MkdirAll(mdir, 0o755)
		cfg := writeConfig(t, mdir, lb.url, runnerTok, 20, "  request_concurrency = 20\n")
		m := start(t, mdir, "run", "--config", cfg)
		m.waitLog("runner manager started", 20*time.Second)
		mgrs = append(mgrs, m)
	}
	// 200 long polls held, spread over the coordinators.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		total, per := 0, []int{}
		for _, c := range coords {
			w := longPollWaiters(t, c.url)
			total += w
			per = append(per, w)
		}
		if total == 200 {
			t.Logf("held long polls per coordinator: %v", per)
			for i, w := range per {
				if w == 0 {
					t.Errorf("coordinator %d holds no long poll: nginx did not spread them", i)
				}
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("held long polls: %v, want 200 in all", per)
		}
		time.Sleep(50 * time.Millisecond)
	}

	const n = 1000
	ctx := t.Context()
	var ids []int64 // the jobs the API acknowledged (201)
	var idsMu sync.Mutex
	submitted := make(chan struct{})
	// Submit all jobs through nginx while they run; a submit that fails
	// (502: its coordinator died with the request; 503: the database is
	// restarting) was not acknowledged and is sent again.
	go func() {
		defer close(submitted)
		for i := 0; i < n && ctx.Err() == nil; {
			j, err := cl.Submit(ctx, client.JobSpec{
				Name:    fmt.Sprintf("j%d", i),
				Project: fmt.Sprintf("g/p%d", i%5),
				Script:  []string{"echo run-$CI_JOB_ID | tee -a " + marks, "sleep 1", "echo done-$CI_JOB_ID"},
			})
			if err != nil {
				time.Sleep(50 * time.Millisecond)
				continue
			}
			idsMu.Lock()
			ids = append(ids, j.ID)
			idsMu.Unlock()
			i++
		}
	}()
	// Jobs that succeeded, from the jobs-by-status gauge (the database's
	// count, whichever coordinator nginx asks).
	succeeded := func() int {
		for {
			if n, ok := metricValue(lb.url, `drover_coordinator_jobs{status="success"}`); ok {
				return int(n)
			}
			if ctx.Err() != nil {
				t.Fatal(ctx.Err())
			}
			time.Sleep(100 * time.Millisecond) // the database is restarting
		}
	}
	// waitSucceeded waits for want jobs to have succeeded, as long as jobs
	// go on succeeding: it fails when none did for stall (a hang), not
	// when a loaded machine is merely slow.
	waitSucceeded := func(want int, stall time.Duration) {
		t.Helper()
		last, since := succeeded(), time.Now()
		for last < want {
			time.Sleep(50 * time.Millisecond)
			if n := succeeded(); n > last {
				last, since = n, time.Now()
			} else if time.Since(since) > stall {
				t.Fatalf("%d of %d jobs succeeded, none for %s", n, want, stall)
			}
		}
	}

	// SIGKILL one coordinator mid-burst: jobs are being submitted, handed
	// out, logged and finished through it.
	waitSucceeded(n/5, 5*time.Minute)
	idsMu.Lock()
	t.Logf("SIGKILL to coordinator 1 with %d jobs submitted, %d succeeded", len(ids), succeeded())
	idsMu.Unlock()
	coords[1].proc.signal(syscall.SIGKILL)
	coords[1].proc.wait(10 * time.Second)
	waitSucceeded(n/2, 5*time.Minute)

	// PostgreSQL restarts: meanwhile requests get 503 with Retry-After.
	idsMu.Lock()
	t.Logf("PostgreSQL restart with %d jobs submitted, %d succeeded", len(ids), succeeded())
	idsMu.Unlock()
	if err := srv.Restart(ctx, func() {
		resp, err := http.Get(lb.url + "/health/ready")
		if err != nil {
			t.Errorf("/health/ready through nginx while the database is down: %v", err)
			return
		}
		resp.Body.Close()
		req, _ := http.NewRequest("GET", lb.url+"/api/v1/jobs", nil)
		req.Header.Set("Authorization", "Bearer "+coords[0].token)
		resp, err = http.DefaultClient.Do(req)
		if err != nil {
			t.Errorf("list jobs while the database is down: %v", err)
			return
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
			t.Errorf("list jobs while the database is down = %d, Retry-After %q; want 503 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
		}
	}); err != nil {
		t.Fatal(err)
	}
	<-submitted
	waitSucceeded(n, 10*time.Minute)
	for _, id := range ids {
		if j := waitJob(t, cl, id, 5*time.Minute, finished); j.Status != "success" {
			t.Errorf("job %d: %s (%s)", id, j.Status, j.FailureReason)
		}
	}
	for i, m := range mgrs {
		t.Logf("manager %d: %d warnings in its log", i, strings.Count(m.log.String(), "level=WARN"))
	}

	// Every job ran exactly once, and its log is whole.
	runs := map[string]int{}
	f, err := os.Open(marks)
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		runs[sc.Text()]++
	}
	f.Close()
	for _, id := range ids {
		if c := runs[fmt.Sprintf("run-%d", id)]; c != 1 {
			t.Errorf("job %d ran %d times", id, c)
		}
		log := trace(t, cl, id)
		if !strings.Contains(log, fmt.Sprintf("run-%d", id)) || !strings.Contains(log, fmt.Sprintf("done-%d", id)) {
			t.Errorf("job %d log is not whole:\n%s", id, log)
		}
	}
	for run, c := range runs {
		if c != 1 {
			t.Errorf("%s: %d times", run, c)
		}
	}
	if len(runs) < n {
		t.Errorf("%d distinct jobs ran, want at least the %d acknowledged", len(runs), n)
	}
	for _, c := range []*coordinator{coords[0], coords[2], coords[3]} {
		if strings.Contains(c.log.String(), "panic:") {
			t.Errorf("a coordinator panicked:\n%s", c.log.String())
		}
	}
	for _, m := range mgrs {
		m.signal(syscall.SIGTERM)
		m.wait(30 * time.Second)
	}
}

// longPollWaiters reads drover_coordinator_long_poll_waiters from the
// coordinator at url.
func longPollWaiters(t *testing.T, url string) int {
	t.Helper()
	n, ok := metricValue(url, "drover_coordinator_long_poll_waiters")
	if !ok {
		t.Fatalf("%s/metrics has no drover_coordinator_long_poll_waiters", url)
	}
	return int(n)
}

// metricValue reads the sample named name (with its labels, as
// exposed) from url's /metrics.
func metricValue(url, name string) (float64, bool) {
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		return 0, false
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			var n float64
			if _, err := fmt.Sscan(v, &n); err == nil {
				return n, true
			}
		}
	}
	return 0, false
}
