package main

import (
	"io"
	"net"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/httpserver/conntest"
	"github.com/drover-ci/drover/internal/lockedbuf"
)

// TestRunServesFleetPage: drover run's listen_address serves the fleet
// page of its autoscaled runners next to /metrics, and / leads there.
func TestRunServesFleetPage(t *testing.T) {
	cfg := fleetSimConfig(t, "glrt-fleetpagetest", "")
	addr, out, done := startRun(t, "--config", cfg)
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
		// One idle instance is the target; a second one is made when a
		// job request (which fails: no coordinator) has a slot reserved
		// as the pool looks, and idle_time keeps it.
		if idleShown.MatchString(page) {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("drover run ended: %v\n%s", err, out.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
	for _, want := range []string{"fleet-sim", "(fleetpag", ", sim)", "<svg", `href="/fleet" class="brand"`} {
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

// idleShown matches the fleet page's count of idle instances of the sim
// fleet once it has one or two.
var idleShown = regexp.MustCompile(`class="count-idle">[12]<`)

// fleetSimConfig writes a config.toml of drover run and returns its path:
// concurrent = 2, listen_address on a free port, and the runner fleet-sim
// (token) of the instance executor keeping one idle instance on the sim
// provider; more follows (more runners).
func fleetSimConfig(t *testing.T, token, more string) string {
	t.Helper()
	cfg := filepath.Join(t.TempDir(), "config.toml")
	writeTestFile(t, cfg, `concurrent = 2
listen_address = "127.0.0.1:0"
[[runners]]
  name = "fleet-sim"
  url = "http://127.0.0.1:1"
  token = "`+token+`"
  executor = "instance"
  [runners.autoscaler]
    plugin = "sim"
    max_instances = 2
    update_interval = "50ms"
    update_interval_when_expecting = "10ms"
    [[runners.autoscaler.policy]]
      idle_count = 1
      idle_time = "1h"
`+more)
	return cfg
}

// startRun runs drover run --log-format text with args in this process
// until the test ends (startDaemon); it returns the address
// listen_address bound, its output, and the channel its end comes on.
func startRun(t *testing.T, args ...string) (string, *lockedbuf.Buffer, <-chan error) {
	t.Helper()
	out, done := startDaemon(t, append([]string{"run", "--log-format", "text"}, args...)...)
	return waitLog(t, out, regexp.MustCompile(`metrics and health listening.* addr=(\S+)`), done), out, done
}

// httpGet is one GET of a client that follows no redirect, with headers
// hdr and cookies.
func httpGet(t *testing.T, u string, hdr map[string]string, cookies ...*http.Cookie) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	for _, c := range cookies {
		req.AddCookie(c)
	}
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// TestRunFleetPageSignIn: drover run --listen-url reports its fleet
// page to a real drover coordinator, whose runners page links it; the
// link, followed by the coordinator's admin, lands signed in on the
// fleet page of the manager, which refuses a request without sign-in and
// takes its own --listen-token-file token.
func TestRunFleetPageSignIn(t *testing.T) {
	clearRegisterEnv(t)
	c, coordURL := testCoordinator(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.toml")
	if out, code, err := drover(t, "register", "-c", cfg, "-u", coordURL, "-r", c.RegistrationToken(), "--name", "fleet-link", "--executor", "shell"); code != 0 {
		t.Fatalf("register = exit %d (%v)\n%s", code, err, out)
	}
	// A port for listen_address that --listen-url can name.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	writeTestFile(t, cfg, "listen_address = \""+addr+"\"\ncheck_interval = 1\n"+readFile(t, cfg))
	tokenFile := filepath.Join(dir, "fleet-token")
	writeTestFile(t, tokenFile, "fleet-page-secret\n")
	bound, out, _ := startRun(t, "-c", cfg, "--listen-url", "http://"+addr, "--listen-token-file", tokenFile)
	if bound != addr {
		t.Fatalf("listening on %s, want %s", bound, addr)
	}
	base := "http://" + addr

	// Without sign-in: to the form, or 401; health and /metrics open.
	if resp, _ := httpGet(t, base+"/fleet", nil); resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(resp.Header.Get("Location"), "/fleet/login?") {
		t.Errorf("GET /fleet without sign-in = %d to %q, want 303 to /fleet/login", resp.StatusCode, resp.Header.Get("Location"))
	}
	if resp, _ := httpGet(t, base+"/debug/jobs/list", nil); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("GET /debug/jobs/list without sign-in = %d, want 401", resp.StatusCode)
	}
	for _, p := range []string{"/health/live", "/metrics"} {
		if resp, _ := httpGet(t, base+p, nil); resp.StatusCode != http.StatusOK {
			t.Errorf("GET %s = %d, want 200", p, resp.StatusCode)
		}
	}
	// Its own token.
	if resp, body := httpGet(t, base+"/fleet", map[string]string{"Authorization": "Bearer fleet-page-secret"}); resp.StatusCode != http.StatusOK || !strings.Contains(body, "<h1>Fleet</h1>") {
		t.Errorf("GET /fleet with the token = %d, want 200 and the page", resp.StatusCode)
	}

	// The coordinator's runners page links the fleet page once the
	// manager asked for a job.
	admin := map[string]string{"Authorization": "Bearer " + c.AdminToken()}
	linkRE := regexp.MustCompile(`class="fleet-link" href="(/runners/\d+/fleet\?system_id=[^"]+)"`)
	var link string
	for deadline := time.Now().Add(2 * time.Minute); link == ""; {
		resp, page := httpGet(t, coordURL+"/runners", admin)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET /runners = %d", resp.StatusCode)
		}
		if m := linkRE.FindStringSubmatch(page); m != nil {
			link = strings.ReplaceAll(m[1], "&amp;", "&")
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no fleet link on the runners page after 2 min:\n%s\nlog:\n%s", page, out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	resp, _ := httpGet(t, coordURL+link, admin)
	loc := resp.Header.Get("Location")
	if resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(loc, base+"/fleet/signin?ticket=") {
		t.Fatalf("GET %s = %d to %q, want 303 to %s/fleet/signin?ticket=", link, resp.StatusCode, loc, base)
	}
	resp, _ = httpGet(t, loc, nil)
	var session *http.Cookie
	for _, ck := range resp.Cookies() {
		if ck.Name == "drover_fleet_session" {
			session = ck
		}
	}
	if resp.StatusCode != http.StatusSeeOther || session == nil || !session.HttpOnly || session.SameSite != http.SameSiteLaxMode {
		t.Fatalf("GET the ticket's link = %d, cookie %+v; want 303 and an HttpOnly, SameSite=Lax session", resp.StatusCode, session)
	}
	if resp, body := httpGet(t, base+"/fleet", nil, session); resp.StatusCode != http.StatusOK || !strings.Contains(body, "<h1>Fleet</h1>") {
		t.Errorf("GET /fleet signed in from the coordinator = %d, want 200 and the page", resp.StatusCode)
	}
	if resp, _ := httpGet(t, loc, nil); resp.StatusCode != http.StatusForbidden {
		t.Errorf("the ticket's link again = %d, want 403", resp.StatusCode)
	}
}

// TestRunFleetPageNotLoopback: on a listen_address that is not loopback
// and without sign-in, drover run warns and refuses the fleet page and
// /debug/ (403), while health and /metrics stay as GitLab Runner's.
func TestRunFleetPageNotLoopback(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.toml")
	writeTestFile(t, cfg, `listen_address = "0.0.0.0:0"
[[runners]]
  name = "plain"
  url = "http://127.0.0.1:1"
  token = "glrt-notloopback"
  executor = "shell"
`)
	bound, out, _ := startRun(t, "-c", cfg)
	_, port, _ := net.SplitHostPort(bound)
	base := "http://127.0.0.1:" + port
	if !strings.Contains(out.String(), "listen_address is not a loopback address and the fleet page has no sign-in") {
		t.Errorf("no warning:\n%s", out.String())
	}
	for _, p := range []string{"/fleet", "/debug/jobs/list"} {
		if resp, body := httpGet(t, base+p, nil); resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "--listen-url") {
			t.Errorf("GET %s = %d %q, want 403 naming the flags", p, resp.StatusCode, body)
		}
	}
	for _, p := range []string{"/health/live", "/metrics"} {
		if resp, _ := httpGet(t, base+p, nil); resp.StatusCode != http.StatusOK {
			t.Errorf("GET %s = %d, want 200", p, resp.StatusCode)
		}
	}
}

// TestRunListenURLInvalid: --listen-url that is not an http(s) URL is a
// usage error naming it.
func TestRunListenURLInvalid(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "config.toml")
	writeTestFile(t, cfg, "[[runners]]\n  name = \"x\"\n  url = \"http://127.0.0.1:1\"\n  token = \"glrt-x\"\n  executor = \"shell\"\n")
	_, code, err := drover(t, "run", "-c", cfg, "--listen-url", "javascript:alert(1)")
	if code != 2 || err == nil || !strings.Contains(err.Error(), "--listen-url") {
		t.Errorf("run --listen-url javascript: = exit %d, %v; want 2 naming --listen-url", code, err)
	}
}
