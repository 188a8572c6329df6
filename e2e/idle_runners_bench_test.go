package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/client"
)

// BenchmarkIdleRunners measures a `drover coordinator` process with many
// idle runner managers long-polling jobs/request, each from its own
// system_id, spread over 250 loopback source addresses as a fleet's would
// be:
//
//   - burst: 2,000 jobs submitted by 8 concurrent clients; hand-out
//     throughput is 2,000 over the time from the first submission to the
//     last 201, submit-p50/p99 the admin API's answer times during it;
//   - wake: then, one job at a time into the idle fleet, the time from
//     sending the submission to the 201 at the runner (wake-p50/p99; the
//     201 often arrives before the submission's own answer);
//   - rss-MiB: the coordinator's peak resident set (VmHWM).
//
// Every sub-benchmark starts its own coordinator; 20 waiters is the
// baseline of the same run. 10,000 waiters need 10,000 sockets on each
// side: the coordinator and this process each stay under the 20,000-fd
// limit of this machine.
func BenchmarkIdleRunners(b *testing.B) {
	for _, n := range []int{20, 1000, 10000} {
		b.Run(fmt.Sprintf("waiters=%d", n), func(b *testing.B) {
			// One burst is the measurement: run with -benchtime 1x.
			for range b.N {
				idleRunners(b, n, 2000, 200)
			}
		})
	}
}

func idleRunners(b *testing.B, n, burst, wakes int) {
	ctx, cancel := context.WithCancel(b.Context())
	defer cancel()
	co := startCoordinatorAt(b, b.TempDir(), "127.0.0.1:0", "--long-poll-timeout", "10m")
	token := co.runnerToken(b)
	admin := co.client()

	// One transport per source address: its connections are that
	// address's runners'.
	const addrs = 250
	clients := make([]*http.Client, addrs)
	for i := range clients {
		local := &net.TCPAddr{IP: net.IPv4(127, 0, 1+byte(i/250), byte(1+i%250))}
		d := &net.Dialer{LocalAddr: local}
		clients[i] = &http.Client{Transport: &http.Transport{
			DialContext:         d.DialContext,
			MaxIdleConnsPerHost: n/addrs + 2,
			IdleConnTimeout:     time.Hour,
		}}
	}

	// got carries each 201: which job, when it arrived.
	type handout struct {
		id int64
		at time.Time
	}
	got := make(chan handout, burst+wakes)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			hc := clients[i%addrs]
			lu := ""
			for ctx.Err() == nil {
				body := fmt.Sprintf(`{"token":%q,"system_id":"s_idle_%05d","last_update":%q,"info":{"name":"drover","version":"bench"}}`, token, i, lu)
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, co.url+"/api/v4/jobs/request", bytes.NewBufferString(body))
				req.Header.Set("Content-Type", "application/json")
				resp, err := hc.Do(req)
				if err != nil {
					if ctx.Err() == nil {
						errs <- fmt.Errorf("runner %d: %w", i, err)
					}
					return
				}
				lu = resp.Header.Get("X-GitLab-Last-Update")
				switch resp.StatusCode {
				case http.StatusCreated:
					var jr api.JobResponse
					err := json.NewDecoder(resp.Body).Decode(&jr)
					at := time.Now()
					resp.Body.Close()
					if err != nil {
						errs <- fmt.Errorf("runner %d: decode 201: %w", i, err)
						return
					}
					got <- handout{jr.ID, at}
				case http.StatusNoContent:
					resp.Body.Close()
				default:
					b, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					errs <- fmt.Errorf("runner %d: jobs/request = %d %s", i, resp.StatusCode, b)
					return
				}
			}
		})
	}
	waitWaiters(b, co, n, errs)

	submit := func() (int64, time.Duration) {
		t0 := time.Now()
		j, err := admin.Submit(ctx, client.JobSpec{Name: "idle-bench", Script: []string{"true"}})
		if err != nil {
			b.Fatalf("submit: %v", err)
		}
		return j.ID, time.Since(t0)
	}

	// The burst.
	b.ResetTimer()
	start := time.Now()
	var mu sync.Mutex
	var submitLat []time.Duration
	var sw sync.WaitGroup
	const submitters = 8
	for s := range submitters {
		sw.Go(func() {
			for k := s; k < burst; k += submitters {
				_, d := submit()
				mu.Lock()
				submitLat = append(submitLat, d)
				mu.Unlock()
			}
		})
	}
	var last time.Time
	for range burst {
		select {
		case h := <-got:
			last = h.at
		case err := <-errs:
			b.Fatal(err)
		}
	}
	sw.Wait()
	b.StopTimer()
	elapsed := last.Sub(start)

	// Wake-up: one job at a time into the idle fleet.
	var wakeLat []time.Duration
	for range wakes {
		waitWaiters(b, co, n, errs)
		t0 := time.Now()
		id, _ := submit()
		select {
		case h := <-got:
			if h.id != id {
				b.Fatalf("handed out job %d, want %d", h.id, id)
			}
			wakeLat = append(wakeLat, h.at.Sub(t0))
		case err := <-errs:
			b.Fatal(err)
		}
	}

	b.ReportMetric(float64(burst)/elapsed.Seconds(), "jobs/s")
	b.ReportMetric(ms(percentile(submitLat, 0.50)), "submit-p50-ms")
	b.ReportMetric(ms(percentile(submitLat, 0.99)), "submit-p99-ms")
	b.ReportMetric(ms(percentile(wakeLat, 0.50)), "wake-p50-ms")
	b.ReportMetric(ms(percentile(wakeLat, 0.99)), "wake-p99-ms")
	b.ReportMetric(vmHWM(b, co.cmd.Process.Pid), "rss-MiB")
	if l := co.log.String(); strings.Contains(l, "level=ERROR") {
		b.Errorf("coordinator logged errors:\n%s", grepLog(l, "level=ERROR"))
	}
	cancel()
	wg.Wait()
	checkNo500(b, co)
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// waitWaiters waits until the coordinator holds n jobs/request calls.
func waitWaiters(b *testing.B, co *coordinator, n int, errs chan error) {
	b.Helper()
	rx := regexp.MustCompile(`(?m)^drover_coordinator_long_poll_waiters (\d+)`)
	for {
		select {
		case err := <-errs:
			b.Fatal(err)
		default:
		}
		resp, err := http.Get(co.url + "/metrics")
		if err != nil {
			b.Fatal(err)
		}
		m, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if s := rx.FindSubmatch(m); s != nil {
			if k, _ := strconv.Atoi(string(s[1])); k == n {
				return
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// checkNo500 fails b if the coordinator answered any request with a 5xx.
func checkNo500(b *testing.B, co *coordinator) {
	b.Helper()
	resp, err := http.Get(co.url + "/metrics")
	if err != nil {
		b.Fatal(err)
	}
	m, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if bad := regexp.MustCompile(`(?m)^drover_coordinator_api_requests_total\{code="5\d\d".*$`).FindAll(m, -1); len(bad) > 0 {
		b.Errorf("coordinator answered 5xx:\n%s", bytes.Join(bad, []byte("\n")))
	}
}

func grepLog(s, sub string) string {
	var out []string
	for l := range strings.Lines(s) {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "")
}
