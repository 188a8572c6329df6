package router

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/runnerapi"
)

// Modes of flakyFront, the upstream as the router sees it.
const (
	frontUp    = iota // the fake upstream answers
	frontBad          // a proxy in front answers 502 (the upstream behind it is down)
	frontReset        // connections are cut: the upstream is unreachable
)

// flakyFront is an HTTP server in front of a fake upstream that can
// answer for it as a down upstream would.
type flakyFront struct {
	srv  *httptest.Server
	mode atomic.Int32
}

func newFlakyFront(t *testing.T, target string) *flakyFront {
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(u)
	f := &flakyFront{}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch f.mode.Load() {
		case frontBad:
			http.Error(w, "502 Bad Gateway", http.StatusBadGateway)
		case frontReset:
			hj, ok := w.(http.Hijacker)
			if !ok {
				t.Error("no hijacker")
				return
			}
			c, _, err := hj.Hijack()
			if err == nil {
				c.Close()
			}
		default:
			proxy.ServeHTTP(w, r)
		}
	}))
	t.Cleanup(f.srv.Close)
	return f
}

// poller is a downstream runner manager's job requests, long polls
// after the first (it sends the last X-GitLab-Last-Update it got).
type poller struct {
	base, token, last string
}

// request sends one jobs/request to the router and returns its status.
func (p *poller) request(t *testing.T) int {
	t.Helper()
	b, _ := json.Marshal(api.JobRequest{Token: p.token, SystemID: "s_probe000001", LastUpdate: p.last})
	resp, err := http.Post(p.base+"/api/v4/jobs/request", "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatalf("jobs/request: %v", err)
	}
	resp.Body.Close()
	p.last = resp.Header.Get(api.HeaderLastUpdate)
	return resp.StatusCode
}

func ready(t *testing.T, base string) int {
	t.Helper()
	resp, err := http.Get(base + "/health/ready")
	if err != nil {
		t.Fatalf("health/ready: %v", err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestUpstreamDown: while the upstream is down (a proxy answering 502, or
// connections cut) the router answers its runners' job requests 204, not
// 5xx, its readiness says the upstream is unavailable, and it hands out
// jobs again when the upstream is back.
func TestUpstreamDown(t *testing.T) {
	up := newFakeUpstream(t, 30*time.Second)
	up.longPoll = 200 * time.Millisecond
	front := newFlakyFront(t, up.srv.URL)
	x := startRouter(t, Config{Upstream: front.srv.URL, UpstreamToken: up.routerToken(), LongPollTimeout: 300 * time.Millisecond})
	p := &poller{base: x.srv.URL, token: createRunner(t, x.srv.URL, x.r.AdminToken(), nil)}

	waitFor(t, 20*time.Second, "ready with the upstream up", func() bool {
		p.request(t)
		return ready(t, x.srv.URL) == http.StatusOK
	})
	for _, mode := range []struct {
		name string
		m    int32
	}{{"502 from a proxy", frontBad}, {"connections cut", frontReset}} {
		t.Run(mode.name, func(t *testing.T) {
			front.mode.Store(mode.m)
			waitFor(t, 20*time.Second, "not ready with the upstream down", func() bool {
				if code := p.request(t); code != http.StatusNoContent {
					t.Fatalf("jobs/request with the upstream down = %d, want 204", code)
				}
				return ready(t, x.srv.URL) == http.StatusServiceUnavailable
			})
			for range 5 {
				if code := p.request(t); code != http.StatusNoContent {
					t.Fatalf("jobs/request with the upstream down = %d, want 204", code)
				}
			}
			front.mode.Store(frontUp)
			up.add("g/p")
			waitFor(t, 60*time.Second, "a job handed out after the upstream is back", func() bool {
				return p.request(t) == http.StatusCreated
			})
			if code := ready(t, x.srv.URL); code != http.StatusOK {
				t.Errorf("health/ready after the upstream is back = %d, want 200", code)
			}
		})
	}
}

// TestJobRequestFlood: one downstream runner holding many long polls at
// once: each is answered (204 at the end of its poll), the router asks
// the upstream for at most one job at a time, and the waiters are gone
// afterwards.
func TestJobRequestFlood(t *testing.T) {
	up := newFakeUpstream(t, 30*time.Second)
	up.longPoll = 200 * time.Millisecond
	x := startRouter(t, Config{Upstream: up.srv.URL, UpstreamToken: up.routerToken(), LongPollTimeout: 500 * time.Millisecond})
	tok := createRunner(t, x.srv.URL, x.r.AdminToken(), nil)
	const flood = 200
	codes := make(chan int, flood)
	for range flood {
		go func() {
			b, _ := json.Marshal(api.JobRequest{Token: tok, SystemID: "s_flood0000001"})
			resp, err := http.Post(x.srv.URL+"/api/v4/jobs/request", "application/json", bytes.NewReader(b))
			if err != nil {
				codes <- 0
				return
			}
			resp.Body.Close()
			codes <- resp.StatusCode
		}()
	}
	for range flood {
		if c := <-codes; c != http.StatusNoContent {
			t.Errorf("jobs/request in a flood = %d, want 204", c)
		}
	}
	waitFor(t, 10*time.Second, "no waiter left", func() bool { return x.r.Waiting() == 0 })
	// One upstream request in flight at a time, each held up to the fake
	// upstream's 200ms: a handful for the flood, never one per poll.
	if n := up.requests.Load(); n > 20 {
		t.Errorf("the upstream got %d job requests for %d downstream polls", n, flood)
	}
}

// TestOversizedBodies: bodies past the runner API's limit are refused
// with 413 before the router reads them whole or forwards them.
func TestOversizedBodies(t *testing.T) {
	up := newFakeUpstream(t, 30*time.Second)
	x := startRouter(t, Config{Upstream: up.srv.URL, UpstreamToken: up.routerToken(), LongPollTimeout: 300 * time.Millisecond})
	big := strings.Repeat("x", runnerapi.MaxRunnerBody+1)
	for _, c := range []struct{ method, path string }{
		{http.MethodPost, "/api/v4/jobs/request"},
		{http.MethodPut, "/api/v4/jobs/1"},
		{http.MethodPost, "/api/v4/jobs/1/runner_provisioning"},
	} {
		req, _ := http.NewRequest(c.method, x.srv.URL+c.path, strings.NewReader(`{"token":"`+big+`"}`))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", c.method, c.path, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestEntityTooLarge {
			t.Errorf("%s %s with %d bytes = %d, want 413", c.method, c.path, len(big), resp.StatusCode)
		}
	}
}

// take long-polls until the router hands out a job and returns its id
// and token.
func (p *poller) take(t *testing.T) (int64, string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		b, _ := json.Marshal(api.JobRequest{Token: p.token, SystemID: "s_" + p.token[len(p.token)-10:], LastUpdate: p.last})
		resp, err := http.Post(p.base+"/api/v4/jobs/request", "application/json", bytes.NewReader(b))
		if err != nil {
			t.Fatalf("jobs/request: %v", err)
		}
		p.last = resp.Header.Get(api.HeaderLastUpdate)
		if resp.StatusCode == http.StatusCreated {
			var j struct {
				ID    int64  `json:"id"`
				Token string `json:"token"`
			}
			err := json.NewDecoder(resp.Body).Decode(&j)
			resp.Body.Close()
			if err != nil {
				t.Fatalf("job payload: %v", err)
			}
			return j.ID, j.Token
		}
		resp.Body.Close()
	}
	t.Fatal("no job handed out in 20s")
	return 0, ""
}

// call sends a job call through the router and returns its status.
func call(t *testing.T, method, url, jobToken string, body string) int {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if jobToken != "" {
		req.Header.Set(api.HeaderJobToken, jobToken)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestTokenCrossing: runner A's job token does nothing to runner B's job
// through the router, while the router holds B's job (offered, not yet
// accepted) and after B accepted it: no accept, no state, no trace.
func TestTokenCrossing(t *testing.T) {
	up := newFakeUpstream(t, 30*time.Second)
	up.longPoll = 200 * time.Millisecond
	x := startRouter(t, Config{Upstream: up.srv.URL, UpstreamToken: up.routerToken(), LongPollTimeout: 300 * time.Millisecond})
	a := &poller{base: x.srv.URL, token: createRunner(t, x.srv.URL, x.r.AdminToken(), nil)}
	b := &poller{base: x.srv.URL, token: createRunner(t, x.srv.URL, x.r.AdminToken(), nil)}
	up.add("g/a")
	_, tokA := a.take(t)
	up.add("g/b")
	idB, tokB := b.take(t)
	jobURL := func(id int64) string { return x.srv.URL + "/api/v4/jobs/" + strconv.FormatInt(id, 10) }

	probe := func(when string) {
		t.Helper()
		for _, c := range []struct {
			name, method, url, hdr, body string
		}{
			{"accept B's job with A's token", http.MethodPut, jobURL(idB), "", `{"token":"` + tokA + `","state":"running"}`},
			{"fail B's job with A's token", http.MethodPut, jobURL(idB), "", `{"token":"` + tokA + `","state":"failed","failure_reason":"script_failure"}`},
			{"keep B's job alive with A's token", http.MethodPut, jobURL(idB), "", `{"token":"` + tokA + `","state":"pending"}`},
			{"A's token in the header, none in the body", http.MethodPut, jobURL(idB), tokA, `{"state":"running"}`},
			{"provisioning of B's job with A's token", http.MethodPost, jobURL(idB) + "/runner_provisioning", tokA, `{"status":"declined"}`},
			{"trace of B's job with A's token", http.MethodPatch, jobURL(idB) + "/trace", tokA, "injected"},
		} {
			if code := call(t, c.method, c.url, c.hdr, c.body); code < 300 {
				t.Errorf("%s, %s: %d, want a refusal", when, c.name, code)
			}
		}
		if j := up.job(idB); len(j.trace) > 0 {
			t.Errorf("%s: B's trace = %q, want nothing from A", when, j.trace)
		}
	}
	probe("B's job offered")
	if code := call(t, http.MethodPut, jobURL(idB), "", `{"token":"`+tokB+`","state":"running"}`); code != http.StatusOK {
		t.Fatalf("B's accept of its job = %d, want 200", code)
	}
	probe("B's job accepted")
	if s := up.job(idB).state; s != "running" {
		t.Errorf("B's job is %s upstream, want running", s)
	}
}
