package httpserver

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/drover-ci/drover/internal/httpserver/conntest"
)

var okHandler = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })

// capped serves ok with o, counting into fresh metrics.
func capped(t *testing.T, o Options) (*Server, *Metrics, string) {
	t.Helper()
	m, err := NewMetrics(prometheus.NewRegistry(), "test")
	if err != nil {
		t.Fatal(err)
	}
	o.Metrics = m
	srv, addr := start(t, okHandler, o)
	return srv, m, addr
}

// eventually waits for cond, which the server makes true on its own time
// (a closed connection is counted out when the server sees the close).
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("still not %s after 10 s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// counts are a limiter's open connections, in all and by client.
func (l *limiter) counts() (int, map[netip.Prefix]int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	by := make(map[netip.Prefix]int, len(l.byClient))
	for k, v := range l.byClient {
		by[k] = v
	}
	return l.open, by
}

// TestConnectionCaps: connections are admitted up to the cap of their
// client address and up to the server's; one over a cap is answered 429
// or 503 naming the cause, with Retry-After, and the admitted ones keep
// being served. Once all are closed the counts are back at zero.
func TestConnectionCaps(t *testing.T) {
	type step struct {
		from   string
		status int
		body   string // in the answer's body
	}
	for _, tc := range []struct {
		name     string
		opts     Options
		steps    []step
		rejected map[string]float64
	}{{
		name: "per client",
		opts: Options{MaxConnsPerClient: 2, MaxConns: NoCap},
		steps: []step{
			{"127.0.0.2", 200, "ok"}, {"127.0.0.2", 200, "ok"},
			{"127.0.0.2", 429, "too many connections from 127.0.0.2: limit 2"},
			{"127.0.0.3", 200, "ok"}, {"127.0.0.3", 200, "ok"}, // counted apart
			{"127.0.0.3", 429, "too many connections from 127.0.0.3: limit 2"},
		},
		rejected: map[string]float64{reasonClient: 2, reasonServer: 0},
	}, {
		name: "server-wide",
		opts: Options{MaxConnsPerClient: NoCap, MaxConns: 3},
		steps: []step{
			{"127.0.0.2", 200, "ok"}, {"127.0.0.3", 200, "ok"}, {"127.0.0.4", 200, "ok"},
			{"127.0.0.5", 503, "too many connections to this server: limit 3"},
		},
		rejected: map[string]float64{reasonClient: 0, reasonServer: 1},
	}, {
		name: "per client first",
		opts: Options{MaxConnsPerClient: 1, MaxConns: 2},
		steps: []step{
			{"127.0.0.2", 200, "ok"},
			{"127.0.0.2", 429, "too many connections from 127.0.0.2: limit 1"},
			{"127.0.0.3", 200, "ok"},
			{"127.0.0.2", 429, "from 127.0.0.2"},
			{"127.0.0.4", 503, "limit 2"},
		},
		rejected: map[string]float64{reasonClient: 2, reasonServer: 1},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			srv, m, addr := capped(t, tc.opts)
			var admitted []net.Conn
			for i, s := range tc.steps {
				c := conntest.Dial(t, s.from, addr)
				a := conntest.Get(t, c, "/")
				if a.Status != s.status || !strings.Contains(a.Body, s.body) {
					t.Fatalf("step %d, from %s: %d %q, want %d with %q", i, s.from, a.Status, a.Body, s.status, s.body)
				}
				if a.Status != http.StatusOK {
					if a.RetryAfter == "" {
						t.Errorf("step %d: %d without Retry-After", i, a.Status)
					}
					continue
				}
				admitted = append(admitted, c)
			}
			// The admitted connections are still served.
			for i, c := range admitted {
				if a := conntest.Get(t, c, "/"); a.Status != http.StatusOK {
					t.Errorf("admitted connection %d, second request: %d %q", i, a.Status, a.Body)
				}
			}
			if got := testutil.ToFloat64(m.open); got != float64(len(admitted)) {
				t.Errorf("connections gauge = %v, want %d", got, len(admitted))
			}
			for reason, want := range tc.rejected {
				if got := testutil.ToFloat64(m.rejected.WithLabelValues(reason)); got != want {
					t.Errorf("rejected{reason=%q} = %v, want %v", reason, got, want)
				}
			}
			for _, c := range admitted {
				c.Close()
			}
			eventually(t, "counted out", func() bool { n, _ := srv.lim.counts(); return n == 0 })
			if _, by := srv.lim.counts(); len(by) != 0 {
				t.Errorf("per-client counts after every close = %v, want none", by)
			}
			if got := testutil.ToFloat64(m.open); got != 0 {
				t.Errorf("connections gauge after every close = %v, want 0", got)
			}
		})
	}
}

// TestClosingFreesAPlace: once a client closes a connection, it may open
// another.
func TestClosingFreesAPlace(t *testing.T) {
	srv, _, addr := capped(t, Options{MaxConnsPerClient: 1})
	first := conntest.Dial(t, "127.0.0.2", addr)
	if a := conntest.Get(t, first, "/"); a.Status != http.StatusOK {
		t.Fatalf("first: %d", a.Status)
	}
	if a := conntest.Get(t, conntest.Dial(t, "127.0.0.2", addr), "/"); a.Status != http.StatusTooManyRequests {
		t.Fatalf("second while the first is open: %d, want 429", a.Status)
	}
	first.Close()
	eventually(t, "counted out", func() bool { n, _ := srv.lim.counts(); return n == 0 })
	if a := conntest.Get(t, conntest.Dial(t, "127.0.0.2", addr), "/"); a.Status != http.StatusOK {
		t.Fatalf("third, the first closed: %d %q, want 200", a.Status, a.Body)
	}
}

// TestCountedOutOnce: a connection closed twice (net/http may) is counted
// out once.
func TestCountedOutOnce(t *testing.T) {
	m, err := NewMetrics(prometheus.NewRegistry(), "test")
	if err != nil {
		t.Fatal(err)
	}
	lim := newLimiter(2, 10, slog.New(slog.DiscardHandler), m)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	cl := &capListener{Listener: ln, lim: lim}
	var conns []net.Conn
	for range 2 {
		conntest.Dial(t, "127.0.0.2", ln.Addr().String())
		c, err := cl.Accept()
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	conns[0].Close()
	conns[0].Close()
	if n, by := lim.counts(); n != 1 || len(by) != 1 {
		t.Errorf("after closing one twice: open %d, by client %v; want 1 and one client", n, by)
	}
	conns[1].Close()
	if n, by := lim.counts(); n != 0 || len(by) != 0 {
		t.Errorf("after closing both: open %d, by client %v; want none", n, by)
	}
	if got := testutil.ToFloat64(m.open); got != 0 {
		t.Errorf("connections gauge = %v, want 0", got)
	}
}

// recorder keeps the log records, which the server may write while the
// test reads them.
type recorder struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (r *recorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *recorder) WithAttrs([]slog.Attr) slog.Handler       { return r }
func (r *recorder) WithGroup(string) slog.Handler            { return r }

func (r *recorder) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.recs = append(r.recs, rec.Clone())
	return nil
}

// messages are the records whose message has sub, each as its message
// and attributes, key=value.
func (r *recorder) messages(sub string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, rec := range r.recs {
		if !strings.Contains(rec.Message, sub) {
			continue
		}
		line := rec.Message
		rec.Attrs(func(a slog.Attr) bool {
			line += " " + a.String()
			return true
		})
		out = append(out, line)
	}
	return out
}

// TestRefusalsLoggedOncePerClient: a flood of refused connections from
// one address is one log line a minute, whose next line says how many
// went unlogged; another address gets its own line.
func TestRefusalsLoggedOncePerClient(t *testing.T) {
	logs := &recorder{}
	var now atomic.Int64
	now.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	srv := New(okHandler, Options{MaxConnsPerClient: 1, Logger: slog.New(logs)})
	srv.lim.now = func() time.Time { return time.Unix(0, now.Load()) }
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	addr := ln.Addr().String()
	lines := func() []string { return logs.messages("connection refused") }
	refuse := func(from string, n int) {
		t.Helper()
		for range n {
			if a := conntest.Get(t, conntest.Dial(t, from, addr), "/"); a.Status != http.StatusTooManyRequests {
				t.Fatalf("from %s: %d, want 429", from, a.Status)
			}
		}
	}
	conntest.Get(t, conntest.Dial(t, "127.0.0.2", addr), "/")
	conntest.Get(t, conntest.Dial(t, "127.0.0.3", addr), "/")
	refuse("127.0.0.2", 20)
	if got := lines(); len(got) != 1 || !strings.Contains(got[0], "client=127.0.0.2") {
		t.Fatalf("after 20 refusals from one address, log lines:\n%s\nwant one naming 127.0.0.2", strings.Join(got, "\n"))
	}
	refuse("127.0.0.3", 5)
	if got := lines(); len(got) != 2 || !strings.Contains(got[1], "client=127.0.0.3") {
		t.Fatalf("then 5 from another, log lines:\n%s\nwant a second naming 127.0.0.3", strings.Join(got, "\n"))
	}
	now.Add(int64(logEvery))
	refuse("127.0.0.2", 1)
	got := lines()
	if len(got) != 3 || !strings.Contains(got[2], "client=127.0.0.2") || !strings.Contains(got[2], "unlogged_before=19") {
		t.Fatalf("a minute later, log lines:\n%s\nwant a third for 127.0.0.2 with unlogged_before=19", strings.Join(got, "\n"))
	}
}

// TestRefusalLogIsBounded: refusals from more addresses in a minute than
// maxLogged are counted, not logged, and what is remembered of them stays
// bounded; a minute later new addresses are logged again.
func TestRefusalLogIsBounded(t *testing.T) {
	lim := newLimiter(1, 0, slog.New(slog.DiscardHandler), nil)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	lim.now = func() time.Time { return now }
	client := func(i int) netip.Prefix {
		return netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}), 32)
	}
	logged := 0
	for i := range 2 * maxLogged {
		if _, ok := lim.shouldLog(client(i)); ok {
			logged++
		}
	}
	if logged != maxLogged || len(lim.logged) != maxLogged {
		t.Errorf("%d addresses refused in a minute: %d logged, %d remembered; want %d and %d", 2*maxLogged, logged, len(lim.logged), maxLogged, maxLogged)
	}
	now = now.Add(logEvery)
	if _, ok := lim.shouldLog(client(3 * maxLogged)); !ok {
		t.Error("a new address a minute later: not logged")
	}
	if len(lim.logged) != 1 {
		t.Errorf("a minute later, %d addresses remembered, want 1 (the others swept)", len(lim.logged))
	}
}

// flakyListener fails its first accepts with "too many open files".
type flakyListener struct {
	net.Listener
	fails atomic.Int32
}

func (l *flakyListener) Accept() (net.Conn, error) {
	if l.fails.Add(-1) >= 0 {
		return nil, &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", syscall.EMFILE)}
	}
	return l.Listener.Accept()
}

// TestAcceptErrorsDoNotStopTheServer: with the file descriptors used up,
// accepting fails with EMFILE; the server logs it, pauses and accepts
// again when it can, and serves.
func TestAcceptErrorsDoNotStopTheServer(t *testing.T) {
	logs := &recorder{}
	srv := New(okHandler, Options{Logger: slog.New(logs)})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fl := &flakyListener{Listener: ln}
	fl.fails.Store(3)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(fl) }()
	defer srv.Close()
	resp, err := http.Get("http://" + ln.Addr().String() + "/")
	if err != nil {
		t.Fatalf("GET after accept errors: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("GET after accept errors = %d", resp.StatusCode)
	}
	select {
	case err := <-served:
		t.Fatalf("Serve returned %v on EMFILE", err)
	default:
	}
	if got := logs.messages("too many open files"); len(got) == 0 {
		t.Errorf("the accept errors were not logged; log:\n%s", strings.Join(logs.messages(""), "\n"))
	}
}

func TestClientOf(t *testing.T) {
	for _, tc := range []struct {
		addr net.Addr
		want string // "" = not counted by client
	}{
		{&net.TCPAddr{IP: net.ParseIP("127.0.0.2"), Port: 5}, "127.0.0.2/32"},
		{&net.TCPAddr{IP: net.ParseIP("::ffff:10.1.2.3"), Port: 5}, "10.1.2.3/32"},
		{&net.TCPAddr{IP: net.ParseIP("2001:db8:1:2:3:4:5:6"), Port: 5}, "2001:db8:1:2::/64"},
		{&net.TCPAddr{IP: net.ParseIP("fe80::1"), Port: 5, Zone: "eth0"}, "fe80::/64"},
		{&net.UDPAddr{IP: net.ParseIP("192.0.2.1"), Port: 5}, "192.0.2.1/32"},
		{&net.UnixAddr{Name: "/run/x.sock", Net: "unix"}, ""},
		{nil, ""},
	} {
		got := clientOf(tc.addr)
		if (tc.want == "" && got.IsValid()) || (tc.want != "" && got.String() != tc.want) {
			t.Errorf("clientOf(%v) = %v, want %q", tc.addr, got, tc.want)
		}
	}
}

// TestFDBudget: three quarters of the open-file limit, a quarter kept for
// the rest.
func TestFDBudget(t *testing.T) {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		t.Skip(err)
	}
	if got, want := FDBudget(), int(rl.Cur)-max(int(rl.Cur)/4, 64); got != want {
		t.Errorf("FDBudget() = %d with a limit of %d, want %d", got, rl.Cur, want)
	}
	if _, total := New(okHandler, Options{}).Limits(); total != FDBudget() {
		t.Errorf("default MaxConns = %d, want FDBudget() = %d", total, FDBudget())
	}
}
