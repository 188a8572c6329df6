package coordinator

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/httpserver"
	"github.com/drover-ci/drover/internal/httpserver/conntest"
)

// serveHardened serves e through the daemons' server (httpserver: its
// timeouts, header cap and connection caps), as drover coordinator does,
// instead of a plain httptest one; e's helpers then go through it.
func (e *env) serveHardened(o httpserver.Options) *httpserver.Server {
	e.t.Helper()
	hs := httpserver.New(e.c.Handler(), o)
	ts := httptest.NewUnstartedServer(nil)
	ts.Listener = hs.Listener(ts.Listener)
	ts.Config = hs.HTTPServer()
	ts.Start()
	e.srv.Close()
	e.srv = ts
	return hs
}

// slowClients are connections from one address that send a jobs/request's
// headers and then its body a byte a second: no token, never a whole
// request.
type slowClients struct {
	mu      sync.Mutex
	refused int   // answered 429
	other   []any // any other answer, or an error reading it
	conns   []net.Conn
	changed chan struct{} // a refusal or another answer came
}

// startSlowClients opens n slow clients from 127.0.0.2 to addr, one after
// another, in the background; they are closed when the test ends.
func startSlowClients(tb testing.TB, addr string, n int) *slowClients {
	s := &slowClients{changed: make(chan struct{}, 1)}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	tb.Cleanup(func() {
		close(stop)
		s.mu.Lock()
		for _, c := range s.conns {
			c.Close()
		}
		s.mu.Unlock()
		wg.Wait()
	})
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}}
	wg.Go(func() {
		for range n {
			select {
			case <-stop:
				return
			default:
			}
			c, err := d.Dial("tcp", addr)
			if err != nil {
				s.answered(fmt.Errorf("dial: %w", err))
				continue
			}
			s.mu.Lock()
			s.conns = append(s.conns, c)
			s.mu.Unlock()
			fmt.Fprintf(c, "POST /api/v4/jobs/request HTTP/1.1\r\nHost: coordinator\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{")
			wg.Go(func() {
				a, err := conntest.Read(c, 10*time.Minute)
				select {
				case <-stop: // closed at the end
					return
				default:
				}
				if err != nil {
					s.answered(err)
				} else {
					s.answered(a)
				}
			})
		}
	})
	wg.Go(func() { // a byte a second on each
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			s.mu.Lock()
			conns := slices.Clone(s.conns)
			s.mu.Unlock()
			for _, c := range conns {
				_, _ = c.Write([]byte(" "))
			}
		}
	})
	return s
}

func (s *slowClients) answered(v any) {
	s.mu.Lock()
	if a, ok := v.(conntest.Answer); ok && a.Status == http.StatusTooManyRequests {
		s.refused++
	} else {
		s.other = append(s.other, v)
	}
	s.mu.Unlock()
	select {
	case s.changed <- struct{}{}:
	default:
	}
}

// waitRefused waits until n of the slow clients were refused; any other
// answer is an error.
func (s *slowClients) waitRefused(n int) error {
	timeout := time.After(time.Minute) // only reached when refusals never come
	for {
		s.mu.Lock()
		refused, other := s.refused, slices.Clone(s.other)
		s.mu.Unlock()
		if len(other) > 0 {
			return fmt.Errorf("slow clients answered otherwise than 429: %v", other)
		}
		if refused >= n {
			return nil
		}
		select {
		case <-s.changed:
		case <-timeout:
			return fmt.Errorf("%d slow clients refused after a minute, want %d", refused, n)
		}
	}
}

// cycle submits a job and takes it as the runner tok, and returns how
// long that took.
func (e *env) cycle(tok string) time.Duration {
	e.t.Helper()
	start := time.Now()
	j := e.submit(nil)
	if jr := e.take(tok); jr.ID != j.ID {
		e.t.Fatalf("took job %d, want %d", jr.ID, j.ID)
	}
	return time.Since(start)
}

const slowFlood = 1000

// TestSlowClientsDoNotStarveRunners: 1,000 connections from one address
// that send a request's headers and then a byte a second (no token needed)
// take their address's 512 places and are refused 429 beyond it, at once;
// meanwhile a runner on another address submits and takes jobs, every
// request answered.
func TestSlowClientsDoNotStarveRunners(t *testing.T) {
	e := newEnv(t, nil)
	hs := e.serveHardened(httpserver.Options{})
	perClient, _ := hs.Limits()
	if perClient != httpserver.DefaultMaxConnsPerClient || perClient >= slowFlood {
		t.Fatalf("per-client cap %d; the test wants the default, below %d", perClient, slowFlood)
	}
	_, tok := e.runner(nil)
	slow := startSlowClients(t, e.srv.Listener.Addr().String(), slowFlood)
	done := make(chan error, 1)
	go func() { done <- slow.waitRefused(slowFlood - perClient) }()
	cycles := 0
	for flooded := false; !flooded || cycles < 20; cycles++ {
		e.cycle(tok)
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			flooded = true
		default:
		}
	}
	slow.mu.Lock()
	defer slow.mu.Unlock()
	if slow.refused != slowFlood-perClient {
		t.Errorf("%d slow clients refused, want %d (all beyond the first %d)", slow.refused, slowFlood-perClient, perClient)
	}
	t.Logf("%d submit+take cycles while the slow clients connected and held", cycles)
}

// TestHeldLongPollOutlivesReadTimeout: a jobs/request held longer than the
// server's ReadTimeout is still answered: 204 when the long poll times
// out, 201 when a job comes.
func TestHeldLongPollOutlivesReadTimeout(t *testing.T) {
	const readTimeout = 200 * time.Millisecond
	for _, tc := range []struct {
		name string
		wake bool
		want int
	}{
		{"times out", false, http.StatusNoContent},
		{"woken by a job", true, http.StatusCreated},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, func(c *Config) { c.LongPollTimeout = 5 * readTimeout })
			e.serveHardened(httpserver.Options{ReadTimeout: readTimeout, ReadHeaderTimeout: readTimeout})
			_, tok := e.runner(nil)
			resp, _ := e.request(tok, "", api.FeaturesInfo{})
			lu := resp.Header.Get(hdrLastUpdate)
			type result struct {
				status int
				held   time.Duration
			}
			done := make(chan result, 1)
			go func() {
				start := time.Now()
				resp, _ := e.request(tok, lu, api.FeaturesInfo{})
				done <- result{resp.StatusCode, time.Since(start)}
			}()
			if tc.wake {
				waitFor(t, func() bool { return waiters(e) == 1 })
				time.Sleep(2 * readTimeout) // past the read deadline
				e.submit(nil)
			}
			r := <-done
			if r.status != tc.want || r.held < readTimeout {
				t.Errorf("held jobs/request = %d after %v, want %d after more than the %v ReadTimeout", r.status, r.held, tc.want, readTimeout)
			}
		})
	}
}

// BenchmarkRunnerUnderSlowClients: a runner's submit → take latency, b.N
// cycles without and then b.N with 1,000 slow clients from another
// address (see TestSlowClientsDoNotStarveRunners) held open; it reports
// both p99s and their ratio (the target: within 2×).
func BenchmarkRunnerUnderSlowClients(b *testing.B) {
	e := newEnv(b, nil)
	hs := e.serveHardened(httpserver.Options{})
	perClient, _ := hs.Limits()
	_, tok := e.runner(nil)
	for range 20 { // warm up
		e.cycle(tok)
	}
	measure := func() []time.Duration {
		d := make([]time.Duration, b.N)
		for i := range d {
			d[i] = e.cycle(tok)
		}
		slices.Sort(d)
		return d
	}
	b.ResetTimer()
	quiet := measure()
	b.StopTimer()
	slow := startSlowClients(b, e.srv.Listener.Addr().String(), slowFlood)
	if err := slow.waitRefused(slowFlood - perClient); err != nil {
		b.Fatal(err)
	}
	b.StartTimer()
	loaded := measure()
	b.StopTimer()
	var sum time.Duration
	for _, d := range slices.Concat(quiet, loaded) {
		sum += d
	}
	b.ReportMetric(float64(sum)/float64(2*b.N), "ns/op") // a cycle, both phases
	pct := func(d []time.Duration, p float64) float64 {
		return float64(d[min(len(d)-1, int(float64(len(d))*p))]) / float64(time.Millisecond)
	}
	b.ReportMetric(pct(quiet, 0.50), "p50-quiet-ms")
	b.ReportMetric(pct(quiet, 0.99), "p99-quiet-ms")
	b.ReportMetric(pct(loaded, 0.50), "p50-flood-ms")
	b.ReportMetric(pct(loaded, 0.99), "p99-flood-ms")
	b.ReportMetric(pct(loaded, 0.99)/pct(quiet, 0.99), "p99-ratio")
}
