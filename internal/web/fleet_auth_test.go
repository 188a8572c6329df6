package web_test

import (
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/autoscale"
	"github.com/drover-ci/drover/internal/clock"
	"github.com/drover-ci/drover/internal/fleetticket"
	"github.com/drover-ci/drover/internal/web"
)

// oneRunnerFleet is a fleet of one autoscaled runner with no instances.
type oneRunnerFleet struct{}

func (oneRunnerFleet) FleetRunners() []autoscale.RunnerStatus {
	return []autoscale.RunnerStatus{{Name: "fleet-one", ShortToken: "abcd1234", Plugin: "sim"}}
}

func (oneRunnerFleet) FleetTrace(string) (autoscale.JobTrace, bool) {
	return autoscale.JobTrace{}, false
}

// fleetServer serves a fleet page with sign-in s on a real loopback
// server (TLS when tlsOn); clk is its clock.
func fleetServer(t *testing.T, s web.FleetSignIn, clk clock.Clock, tlsOn bool) *httptest.Server {
	t.Helper()
	page, err := web.NewFleetPage(nil, web.FleetConfig{Fleet: oneRunnerFleet{}, SignIn: s, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	page.Mount(mux)
	mux.Handle("/debug/", page.Guard(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("debug")) })))
	var srv *httptest.Server
	if tlsOn {
		srv = httptest.NewTLSServer(mux)
	} else {
		srv = httptest.NewServer(mux)
	}
	t.Cleanup(srv.Close)
	return srv
}

// browser is a new client of srv with a cookie jar of its own that
// follows no redirect.
func browser(t *testing.T, srv *httptest.Server) *http.Client {
	t.Helper()
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	// A copy: srv.Client() is one client, which all would share.
	c := &http.Client{Transport: srv.Client().Transport}
	c.Jar = jar
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return c
}

func fget(t *testing.T, c *http.Client, u string, hdr map[string]string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	return send(t, c, req)
}

func postForm(t *testing.T, c *http.Client, u string, form url.Values) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, u, strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	return send(t, c, req)
}

func send(t *testing.T, c *http.Client, req *http.Request) (*http.Response, string) {
	t.Helper()
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	buf := make([]byte, 32<<10)
	for {
		n, err := resp.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	return resp, b.String()
}

// sessionCookie returns the fleet session cookie resp sets, nil if none.
func sessionCookie(resp *http.Response) *http.Cookie {
	for _, c := range resp.Cookies() {
		if c.Name == "drover_fleet_session" {
			return c
		}
	}
	return nil
}

// checkCookie fails unless c is the fleet session cookie with the flags
// a session cookie needs.
func checkCookie(t *testing.T, c *http.Cookie, secure bool) {
	t.Helper()
	if c == nil {
		t.Fatal("no drover_fleet_session cookie set")
	}
	if !c.HttpOnly || c.SameSite != http.SameSiteLaxMode || c.Secure != secure || c.Path != "/" || c.MaxAge <= 0 {
		t.Errorf("cookie %s: HttpOnly %v, SameSite %v, Secure %v, Path %q, MaxAge %d; want HttpOnly, Lax, Secure %v, /, > 0",
			c.Name, c.HttpOnly, c.SameSite, c.Secure, c.Path, c.MaxAge, secure)
	}
}

const fleetHeading = "<h1>Fleet</h1>"

// TestFleetPageWithoutSignIn: with no way to sign in, the fleet page and
// /debug/ are served only when Open says so (a loopback listener), and
// refused with 403 naming the flags otherwise; static files stay open.
func TestFleetPageWithoutSignIn(t *testing.T) {
	t.Parallel()
	for _, open := range []bool{true, false} {
		srv := fleetServer(t, web.FleetSignIn{Open: func() bool { return open }}, nil, false)
		c := browser(t, srv)
		for _, path := range []string{"/fleet", "/fleet/events", "/fleet/whatif?runner=abcd1234", "/debug/jobs/list"} {
			if open && path == "/fleet/events" {
				continue // an event stream that does not end
			}
			resp, body := fget(t, c, srv.URL+path, nil)
			switch {
			case open && path == "/fleet" && (resp.StatusCode != http.StatusOK || !strings.Contains(body, fleetHeading)):
				t.Errorf("open: GET %s = %d, want 200 and the page", path, resp.StatusCode)
			case open && path == "/debug/jobs/list" && resp.StatusCode != http.StatusOK:
				t.Errorf("open: GET %s = %d, want 200", path, resp.StatusCode)
			case !open && (resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "--listen-token-file")):
				t.Errorf("refused: GET %s = %d %q, want 403 naming --listen-token-file", path, resp.StatusCode, body)
			}
		}
		if resp, _ := fget(t, c, srv.URL+"/static/style.css", nil); resp.StatusCode != http.StatusOK {
			t.Errorf("open=%v: GET /static/style.css = %d, want 200", open, resp.StatusCode)
		}
	}
}

// TestFleetPageToken: with a token of its own, the fleet page takes it
// as a bearer token or through the sign-in form (which sets a session
// cookie with the right flags), and sends others to the form (a page) or
// answers 401 (an event stream, /debug/) or 403 (a wrong token).
func TestFleetPageToken(t *testing.T) {
	t.Parallel()
	for _, tlsOn := range []bool{false, true} {
		srv := fleetServer(t, web.FleetSignIn{Token: "fleet-secret", Open: func() bool { return true }}, nil, tlsOn)
		c := browser(t, srv)
		// Open is not asked once a token is set: not signed in is out.
		resp, _ := fget(t, c, srv.URL+"/fleet?x=1", nil)
		if loc := resp.Header.Get("Location"); resp.StatusCode != http.StatusSeeOther || loc != "/fleet/login?next=%2Ffleet%3Fx%3D1" {
			t.Errorf("GET /fleet without sign-in = %d to %q, want 303 to the form", resp.StatusCode, loc)
		}
		for _, path := range []string{"/fleet/events", "/debug/jobs/list"} {
			if resp, _ := fget(t, c, srv.URL+path, nil); resp.StatusCode != http.StatusUnauthorized {
				t.Errorf("GET %s without sign-in = %d, want 401", path, resp.StatusCode)
			}
		}
		for _, h := range []string{"Bearer wrong", "Bearer ", "fleet-secret", "Basic Zm9vOmJhcg=="} {
			if resp, _ := fget(t, c, srv.URL+"/fleet", map[string]string{"Authorization": h}); resp.StatusCode != http.StatusForbidden {
				t.Errorf("GET /fleet with Authorization %q = %d, want 403", h, resp.StatusCode)
			}
		}
		for _, path := range []string{"/fleet", "/debug/jobs/list"} {
			if resp, _ := fget(t, c, srv.URL+path, map[string]string{"Authorization": "Bearer fleet-secret"}); resp.StatusCode != http.StatusOK {
				t.Errorf("GET %s with the bearer token = %d, want 200", path, resp.StatusCode)
			}
		}

		// The form.
		resp, body := fget(t, c, srv.URL+"/fleet/login?next=%2Ffleet%3Fx%3D1", nil)
		m := csrfRE.FindStringSubmatch(body)
		if resp.StatusCode != http.StatusOK || m == nil || !strings.Contains(body, `name="token"`) {
			t.Fatalf("GET /fleet/login = %d, want the form with a csrf field:\n%s", resp.StatusCode, body)
		}
		for _, tc := range []struct {
			name string
			form url.Values
		}{
			{"no csrf", url.Values{"token": {"fleet-secret"}}},
			{"wrong csrf", url.Values{"token": {"fleet-secret"}, "csrf": {"x"}}},
			{"wrong token", url.Values{"token": {"nope"}, "csrf": {m[1]}}},
		} {
			resp, _ := postForm(t, c, srv.URL+"/fleet/login", tc.form)
			if resp.StatusCode != http.StatusForbidden || sessionCookie(resp) != nil {
				t.Errorf("POST /fleet/login, %s = %d (cookie %v), want 403 and no session", tc.name, resp.StatusCode, sessionCookie(resp))
			}
		}
		// Each form shown sets a new double-submit value: ask again.
		_, body = fget(t, c, srv.URL+"/fleet/login", nil)
		m = csrfRE.FindStringSubmatch(body)
		resp, _ = postForm(t, c, srv.URL+"/fleet/login", url.Values{"token": {"fleet-secret"}, "csrf": {m[1]}, "next": {"/fleet?x=1"}})
		if loc := resp.Header.Get("Location"); resp.StatusCode != http.StatusSeeOther || loc != "/fleet?x=1" {
			t.Fatalf("POST /fleet/login = %d to %q, want 303 to /fleet?x=1", resp.StatusCode, loc)
		}
		checkCookie(t, sessionCookie(resp), tlsOn)
		if resp, body := fget(t, c, srv.URL+"/fleet", nil); resp.StatusCode != http.StatusOK || !strings.Contains(body, fleetHeading) {
			t.Errorf("GET /fleet signed in = %d, want 200 and the page", resp.StatusCode)
		}

		// A session cookie this page did not sign is not one.
		other := browser(t, srv)
		u, _ := url.Parse(srv.URL)
		other.Jar.SetCookies(u, []*http.Cookie{{Name: "drover_fleet_session", Value: "9999999999.nonce.forged"}})
		if resp, _ := fget(t, other, srv.URL+"/fleet", nil); resp.StatusCode != http.StatusSeeOther {
			t.Errorf("GET /fleet with a forged session = %d, want 303 to the form", resp.StatusCode)
		}
		// An open redirect is not made of next.
		resp, _ = postForm(t, c, srv.URL+"/fleet/login", url.Values{"token": {"fleet-secret"}, "csrf": {m[1]}, "next": {"//evil.example/"}})
		if loc := resp.Header.Get("Location"); strings.Contains(loc, "evil") {
			t.Errorf("POST /fleet/login next=//evil.example/ goes to %q", loc)
		}
	}
}

// TestFleetPageTicket: the coordinator's ticket signs in once, within its
// expiry, on the manager it was minted for with the token of one of its
// runners; a used, expired, forged or other manager's ticket is refused.
func TestFleetPageTicket(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	clk := clock.NewFake(now)
	key, other := fleetticket.HashToken("glrt-runner-one"), fleetticket.HashToken("glrt-runner-two")
	srv := fleetServer(t, web.FleetSignIn{
		SystemID:   "s_manager1",
		TicketKeys: func() []string { return []string{other, key} },
	}, clk, false)
	signIn := func(c *http.Client, ticket string) *http.Response {
		resp, _ := fget(t, c, srv.URL+"/fleet/signin?"+url.Values{"ticket": {ticket}}.Encode(), nil)
		return resp
	}

	// Not signed in: to the form, which says to come from the
	// coordinator and has no token field (no token is set).
	c := browser(t, srv)
	if resp, _ := fget(t, c, srv.URL+"/fleet", nil); resp.StatusCode != http.StatusSeeOther {
		t.Errorf("GET /fleet without sign-in = %d, want 303", resp.StatusCode)
	}
	if resp, body := fget(t, c, srv.URL+"/fleet/login", nil); resp.StatusCode != http.StatusOK || !strings.Contains(body, "coordinator") || strings.Contains(body, `name="token"`) {
		t.Errorf("GET /fleet/login = %d, want how to sign in from the coordinator and no token field:\n%s", resp.StatusCode, body)
	}
	if resp, _ := postForm(t, c, srv.URL+"/fleet/login", url.Values{"token": {""}}); resp.StatusCode != http.StatusForbidden || sessionCookie(resp) != nil {
		t.Errorf("POST /fleet/login without a token of its own = %d, want 403", resp.StatusCode)
	}

	good := fleetticket.Mint(key, "s_manager1", now.Add(fleetticket.TTL))
	resp := signIn(c, good)
	if loc := resp.Header.Get("Location"); resp.StatusCode != http.StatusSeeOther || loc != "/fleet" {
		t.Fatalf("GET /fleet/signin with a good ticket = %d to %q, want 303 to /fleet", resp.StatusCode, loc)
	}
	checkCookie(t, sessionCookie(resp), false)
	if resp, body := fget(t, c, srv.URL+"/fleet", nil); resp.StatusCode != http.StatusOK || !strings.Contains(body, "fleet-one") {
		t.Errorf("GET /fleet after the ticket = %d, want 200 and the page", resp.StatusCode)
	}

	for _, tc := range []struct {
		name   string
		ticket string
	}{
		{"used again", good},
		{"expired", fleetticket.Mint(key, "s_manager1", now)},
		{"another manager's", fleetticket.Mint(key, "s_manager2", now.Add(fleetticket.TTL))},
		{"another runner's", fleetticket.Mint(fleetticket.HashToken("glrt-not-mine"), "s_manager1", now.Add(fleetticket.TTL))},
		{"forged", "v1.9999999999.bm9uY2U.c2lnbmF0dXJl"},
		{"too long-lived", fleetticket.Mint(key, "s_manager1", now.Add(24*time.Hour))},
		{"none", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := browser(t, srv)
			resp := signIn(c, tc.ticket)
			if resp.StatusCode != http.StatusForbidden || sessionCookie(resp) != nil {
				t.Errorf("GET /fleet/signin = %d (cookie %v), want 403 and no session", resp.StatusCode, sessionCookie(resp))
			}
			if resp, _ := fget(t, c, srv.URL+"/fleet", nil); resp.StatusCode != http.StatusSeeOther {
				t.Errorf("GET /fleet after a refused ticket = %d, want 303 to the form", resp.StatusCode)
			}
		})
	}

	// A page without --listen-url takes no ticket.
	tok := fleetServer(t, web.FleetSignIn{Token: "t"}, clk, false)
	c = browser(t, tok)
	if resp, _ := fget(t, c, tok.URL+"/fleet/signin?"+url.Values{"ticket": {fleetticket.Mint(key, "s_manager1", now.Add(time.Minute))}}.Encode(), nil); resp.StatusCode != http.StatusForbidden {
		t.Errorf("GET /fleet/signin on a page without tickets = %d, want 403", resp.StatusCode)
	}
}

// TestFleetPageSignOut: a page signed in with a session shows the
// sign-out form; POST /fleet/logout with the session's CSRF token drops
// the cookie and revokes the session (a copy of the cookie no longer
// signs in) and leaves other sessions alone; without the CSRF token, or
// with another session's, it is refused. A page seen with the bearer
// token or open to all shows no sign-out.
func TestFleetPageSignOut(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	clk := clock.NewFake(now)
	key := fleetticket.HashToken("glrt-runner-one")
	srv := fleetServer(t, web.FleetSignIn{
		Token:      "fleet-secret",
		SystemID:   "s_manager1",
		TicketKeys: func() []string { return []string{key} },
	}, clk, false)
	const signOutForm = `action="/fleet/logout"`

	// signIn returns a browser signed in with a ticket, its session
	// cookie's value and the sign-out form's CSRF token.
	signIn := func() (*http.Client, string, string) {
		t.Helper()
		c := browser(t, srv)
		ticket := fleetticket.Mint(key, "s_manager1", now.Add(fleetticket.TTL))
		resp, _ := fget(t, c, srv.URL+"/fleet/signin?"+url.Values{"ticket": {ticket}}.Encode(), nil)
		sc := sessionCookie(resp)
		if resp.StatusCode != http.StatusSeeOther || sc == nil {
			t.Fatalf("GET /fleet/signin = %d, want 303 and a session", resp.StatusCode)
		}
		for _, path := range []string{"/fleet", "/fleet/whatif?runner=abcd1234"} {
			resp, body := fget(t, c, srv.URL+path, nil)
			if resp.StatusCode == http.StatusNotFound && strings.Contains(path, "whatif") {
				continue // the stand-in fleet has no trace: no what-if page
			}
			m := csrfRE.FindStringSubmatch(body)
			if resp.StatusCode != http.StatusOK || !strings.Contains(body, signOutForm) || m == nil {
				t.Fatalf("GET %s signed in = %d, want 200 with the sign-out form:\n%s", path, resp.StatusCode, body)
			}
		}
		_, body := fget(t, c, srv.URL+"/fleet", nil)
		return c, sc.Value, csrfRE.FindStringSubmatch(body)[1]
	}
	c, session, csrf := signIn()
	other, _, otherCSRF := signIn()
	if csrf == otherCSRF {
		t.Fatal("two sessions have one CSRF token")
	}

	for _, tc := range []struct {
		name string
		form url.Values
	}{
		{"no csrf", url.Values{}},
		{"wrong csrf", url.Values{"csrf": {"x"}}},
		{"another session's csrf", url.Values{"csrf": {otherCSRF}}},
	} {
		resp, _ := postForm(t, c, srv.URL+"/fleet/logout", tc.form)
		if resp.StatusCode != http.StatusForbidden || sessionCookie(resp) != nil {
			t.Errorf("POST /fleet/logout, %s = %d (cookie %v), want 403 and the cookie kept", tc.name, resp.StatusCode, sessionCookie(resp))
		}
	}
	if resp, _ := fget(t, c, srv.URL+"/fleet", nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /fleet after refused sign-outs = %d, want 200", resp.StatusCode)
	}

	resp, _ := postForm(t, c, srv.URL+"/fleet/logout", url.Values{"csrf": {csrf}})
	if loc := resp.Header.Get("Location"); resp.StatusCode != http.StatusSeeOther || loc != "/fleet/login" {
		t.Fatalf("POST /fleet/logout = %d to %q, want 303 to /fleet/login", resp.StatusCode, loc)
	}
	if sc := sessionCookie(resp); sc == nil || sc.MaxAge >= 0 || sc.Value != "" {
		t.Errorf("POST /fleet/logout sets cookie %v, want drover_fleet_session deleted", sc)
	}
	if resp, _ := fget(t, c, srv.URL+"/fleet", nil); resp.StatusCode != http.StatusSeeOther {
		t.Errorf("GET /fleet after sign-out = %d, want 303 to the form", resp.StatusCode)
	}
	// A copy of the cookie is revoked too.
	replay := browser(t, srv)
	u, _ := url.Parse(srv.URL)
	replay.Jar.SetCookies(u, []*http.Cookie{{Name: "drover_fleet_session", Value: session}})
	for _, tc := range []struct {
		path string
		want int
	}{
		{"/fleet", http.StatusSeeOther}, // to the form
		{"/fleet/login", http.StatusOK}, // the form, not on to /fleet
		{"/debug/jobs/list", http.StatusUnauthorized},
	} {
		if resp, _ := fget(t, replay, srv.URL+tc.path, nil); resp.StatusCode != tc.want {
			t.Errorf("GET %s with the signed-out session's cookie = %d, want %d", tc.path, resp.StatusCode, tc.want)
		}
	}
	// Signing out again, or without a session, just drops the cookie.
	if resp, _ := postForm(t, replay, srv.URL+"/fleet/logout", url.Values{}); resp.StatusCode != http.StatusSeeOther {
		t.Errorf("POST /fleet/logout with a revoked session = %d, want 303", resp.StatusCode)
	}
	// The other session is still in, and a new sign-in works.
	if resp, _ := fget(t, other, srv.URL+"/fleet", nil); resp.StatusCode != http.StatusOK {
		t.Errorf("GET /fleet in another session after a sign-out = %d, want 200", resp.StatusCode)
	}
	signIn()

	// The bearer token and an open page: no session, no sign-out.
	if resp, body := fget(t, browser(t, srv), srv.URL+"/fleet", map[string]string{"Authorization": "Bearer fleet-secret"}); resp.StatusCode != http.StatusOK || strings.Contains(body, signOutForm) {
		t.Errorf("GET /fleet with the bearer token = %d, want 200 without the sign-out form", resp.StatusCode)
	}
	open := fleetServer(t, web.FleetSignIn{Open: func() bool { return true }}, nil, false)
	if resp, body := fget(t, browser(t, open), open.URL+"/fleet", nil); resp.StatusCode != http.StatusOK || strings.Contains(body, signOutForm) {
		t.Errorf("GET /fleet open to all = %d, want 200 without the sign-out form", resp.StatusCode)
	}
}
