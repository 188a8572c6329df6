package main

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/httpserver/conntest"
)

// TestRunServesFleetPage: drover run's listen_address serves the fleet
// page of its autoscaled runners next to /metrics, and / leads there.
func TestRunServesFleetPage(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(cfg, []byte(`concurrent = 2
listen_address = "127.0.0.1:0"
[[runners]]
  name = "fleet-sim"
  url = "http://127.0.0.1:1"
  token = "glrt-fleetpagetest"
  executor = "instance"
  [runners.autoscaler]
    plugin = "sim"
    max_instances = 2
    update_interval = "50ms"
    update_interval_when_expecting = "10ms"
    [[runners.autoscaler.policy]]
      idle_count = 1
      idle_time = "1h"
`), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	var out syncBuffer
	root := newRootCmd()
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs([]string{"run", "--config", cfg, "--log-format", "text"})
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx) }()
	defer func() {
		cancel()
		<-done
	}()
	re := regexp.MustCompile(`metrics and health listening.* addr=(\S+)`)
	var addr string
	for deadline := time.Now().Add(30 * time.Second); addr == ""; {
		if m := re.FindStringSubmatch(out.String()); m != nil {
			addr = m[1]
			break
		}
		select {
		case err := <-done:
			t.Fatalf("drover run ended: %v\n%s", err, out.String())
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("not listening after 30 s:\n%s", out.String())
		}
	}
	// Poll until the idle instance shows, closing each connection: the
	// server allows 32 at once per address, and a loaded machine can take
	// more polls than that. It takes well under a second; two minutes is
	// a guard against a hang, with what the page and the log said.
	var page string
	for deadline := time.Now().Add(2 * time.Minute); ; {
		if time.Now().After(deadline) {
			t.Fatalf("no idle instance on /fleet after 2 min; page:\n%s\nlog:\n%s", page, out.String())
		}
		c := conntest.Dial(t, "127.0.0.1", addr)
		a := conntest.Get(t, c, "/fleet")
		c.Close()
		if a.Status != http.StatusOK {
			t.Fatalf("GET /fleet = %d %q", a.Status, a.Body)
		}
		page = a.Body
		if strings.Contains(page, `class="count-idle">1<`) {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("drover run ended: %v\n%s", err, out.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
	for _, want := range []string{"fleet-sim", "(fleetpag", ", sim)", `class="count-idle">1<`, "<svg", `href="/fleet" class="brand"`} {
		if !strings.Contains(page, want) {
			t.Errorf("/fleet lacks %q:\n%s", want, page)
		}
	}
	if a := conntest.Get(t, conntest.Dial(t, "127.0.0.1", addr), "/metrics"); a.Status != http.StatusOK || !strings.Contains(a.Body, "drover_autoscaler_instances") {
		t.Errorf("GET /metrics = %d", a.Status)
	}
	if a := conntest.Get(t, conntest.Dial(t, "127.0.0.1", addr), "/"); a.Status != http.StatusSeeOther {
		t.Errorf("GET / = %d, want 303 to /fleet", a.Status)
	}
}
