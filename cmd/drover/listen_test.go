package main

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/drover-ci/drover/internal/httpserver"
	"github.com/drover-ci/drover/internal/httpserver/conntest"
	"github.com/drover-ci/drover/internal/lockedbuf"
)

// TestDaemonsCapConnectionsPerClient: drover coordinator and drover
// router with --max-conns-per-client 2 answer a client address's third
// connection 429 naming the cause, serve other addresses, and count the
// refusal in their /metrics.
func TestDaemonsCapConnectionsPerClient(t *testing.T) {
	forEachDaemon(t, []string{"--max-conns-per-client", "2"}, func(t *testing.T, daemon, addr string, out *lockedbuf.Buffer) {
		if !strings.Contains(out.String(), "max_conns_per_client=2") {
			t.Errorf("the listening line does not give the cap:\n%s", out.String())
		}
		for i := range 2 {
			if a := conntest.Get(t, conntest.Dial(t, "127.0.0.2", addr), "/health/live"); a.Status != http.StatusOK {
				t.Fatalf("connection %d from 127.0.0.2: %d %q", i+1, a.Status, a.Body)
			}
		}
		a := conntest.Get(t, conntest.Dial(t, "127.0.0.2", addr), "/health/live")
		if want := "too many connections from 127.0.0.2: limit 2"; a.Status != http.StatusTooManyRequests || !strings.Contains(a.Body, want) {
			t.Errorf("third connection from 127.0.0.2: %d %q, want 429 %q", a.Status, a.Body, want)
		}
		m := conntest.Get(t, conntest.Dial(t, "127.0.0.3", addr), "/metrics")
		for _, want := range []string{
			fmt.Sprintf("drover_%s_connections_rejected_total{reason=\"per_client\"} 1\n", daemon),
			fmt.Sprintf("drover_%s_connections 3\n", daemon),
		} {
			if m.Status != http.StatusOK || !strings.Contains(m.Body, want) {
				t.Errorf("/metrics from 127.0.0.3 = %d, lacks %q", m.Status, want)
			}
		}
	})
}

// TestMaxConnsPerClientBelowZero is a usage error.
func TestMaxConnsPerClientBelowZero(t *testing.T) {
	_, code, err := drover(t, "coordinator", "--listen", "127.0.0.1:0", "--data", t.TempDir(), "--max-conns-per-client", "-1")
	if code != 2 || err == nil || !strings.Contains(err.Error(), "--max-conns-per-client -1") {
		t.Errorf("--max-conns-per-client -1 = exit %d, %v; want 2 naming the flag", code, err)
	}
}

// forEachDaemon runs test in a subtest for drover coordinator and for
// drover router (its upstream never reached), each started with args on
// a free port of 127.0.0.1 until the subtest ends (startDaemon), with
// DROVER_ADMIN_TOKEN and DROVER_DATABASE_URL cleared; test gets the
// daemon's name, the address it listens on and its log.
func forEachDaemon(t *testing.T, args []string, test func(t *testing.T, daemon, addr string, out *lockedbuf.Buffer)) {
	t.Helper()
	for _, tc := range []struct {
		daemon string
		args   []string
	}{
		{"coordinator", nil},
		{"router", []string{"--upstream", "http://127.0.0.1:1", "--upstream-token", "glrt-test"}},
	} {
		t.Run(tc.daemon, func(t *testing.T) {
			t.Setenv("DROVER_ADMIN_TOKEN", "")
			t.Setenv("DROVER_DATABASE_URL", "")
			out, done := startDaemon(t, slices.Concat([]string{tc.daemon, "--listen", "127.0.0.1:0", "--data", t.TempDir()}, args, tc.args)...)
			test(t, tc.daemon, listeningAt(t, out, tc.daemon+" listening", done), out)
		})
	}
}

// listeningAt waits for the log line msg with the daemon's addr=http(s)://...
// and returns the address.
func listeningAt(t *testing.T, out *lockedbuf.Buffer, msg string, done <-chan error) string {
	t.Helper()
	return waitLog(t, out, regexp.MustCompile(regexp.QuoteMeta(msg)+`.* addr=https?://(\S+)`), done)
}

// TestListenAddressCapsConnections: the manager's listen_address admits
// listenMaxConnsPerClient connections from one address and answers the
// next 429.
func TestListenAddressCapsConnections(t *testing.T) {
	m, err := httpserver.NewMetrics(prometheus.NewRegistry(), "manager")
	if err != nil {
		t.Fatal(err)
	}
	ms := &metricsServer{
		log:     slog.New(slog.DiscardHandler),
		handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") }),
		metrics: m,
	}
	if err := ms.apply("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	defer ms.close()
	addr := ms.bound.String()
	for i := range listenMaxConnsPerClient {
		if a := conntest.Get(t, conntest.Dial(t, "127.0.0.2", addr), "/"); a.Status != http.StatusOK {
			t.Fatalf("connection %d: %d %q", i+1, a.Status, a.Body)
		}
	}
	a := conntest.Get(t, conntest.Dial(t, "127.0.0.2", addr), "/")
	if want := fmt.Sprintf("too many connections from 127.0.0.2: limit %d", listenMaxConnsPerClient); a.Status != http.StatusTooManyRequests || !strings.Contains(a.Body, want) {
		t.Errorf("connection %d: %d %q, want 429 %q", listenMaxConnsPerClient+1, a.Status, a.Body, want)
	}
	if a := conntest.Get(t, conntest.Dial(t, "127.0.0.3", addr), "/"); a.Status != http.StatusOK {
		t.Errorf("from another address: %d %q", a.Status, a.Body)
	}
}
