package web_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"golang.org/x/net/html"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/fleetticket"
	"github.com/drover-ci/drover/internal/web"
)

// runnerView is a runner as the admin API shows it.
type runnerView struct {
	ID          int64    `json:"id"`
	Description string   `json:"description"`
	Paused      bool     `json:"paused"`
	TagList     []string `json:"tag_list"`
}

// runnerNamed returns the runner described desc, from the admin API.
func (e *env) runnerNamed(desc string) runnerView {
	e.t.Helper()
	var rs []runnerView
	e.api("GET", "/api/v1/runners", nil, &rs)
	for _, r := range rs {
		if r.Description == desc {
			return r
		}
	}
	e.t.Fatalf("no runner %q in %+v", desc, rs)
	return runnerView{}
}

// post sends a form of a signed-in browser c.
func (e *env) post(c *http.Client, path string, form url.Values) *http.Response {
	e.t.Helper()
	resp, _ := e.do(c, "POST", path, map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, strings.NewReader(form.Encode()))
	return resp
}

func TestRunnersPage(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	// e.running registers runner web-test and has its manager s_web take
	// a job with jobs/request.
	id, _ := e.running(map[string]any{"name": "build-it", "script": []string{"true"}})
	rn := e.runnerNamed("web-test")
	c := e.login()
	resp, page := e.do(c, "GET", "/runners", nil, nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /runners = %d", resp.StatusCode)
	}
	for _, want := range []string{
		fmt.Sprintf(`id="runner-%d"`, rn.ID), "web-test", "<code>s_web</code>", "19.4.0", "<code>shell</code>",
		fmt.Sprintf(`<a href="/jobs/%d">#%d</a>`, id, id), "build-it", " s ago", `data-live="/runners/events"`,
		`<span class="status st-active">active</span>`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("runners page lacks %q:\n%s", want, page)
		}
	}
	m := csrfRE.FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("runners page has no form with a csrf field")
	}
	pause := fmt.Sprintf("/runners/%d/pause", rn.ID)

	// Without the CSRF token, or with a wrong one: 403 and no change.
	for _, v := range []url.Values{{}, {"csrf": {"wrong"}}} {
		if resp := e.post(c, pause, v); resp.StatusCode != http.StatusForbidden {
			t.Errorf("POST pause with csrf %q = %d, want 403", v.Get("csrf"), resp.StatusCode)
		}
	}
	if e.runnerNamed("web-test").Paused {
		t.Fatal("runner paused by a POST without the CSRF token")
	}
	if resp := e.post(e.client(), pause, url.Values{"csrf": {m[1]}}); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("POST pause without a session = %d, want 401", resp.StatusCode)
	}

	// Pause, then resume.
	if resp := e.post(c, pause, url.Values{"csrf": {m[1]}}); resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/runners" {
		t.Fatalf("POST pause = %d to %q, want 303 to /runners", resp.StatusCode, resp.Header.Get("Location"))
	}
	if !e.runnerNamed("web-test").Paused {
		t.Fatal("runner not paused")
	}
	_, page = e.do(c, "GET", "/runners", nil, nil)
	if !strings.Contains(page, `<span class="status st-paused">paused</span>`) || !strings.Contains(page, fmt.Sprintf(`action="/runners/%d/resume"`, rn.ID)) {
		t.Errorf("runners page does not show the runner paused with a resume button:\n%s", page)
	}
	if resp := e.post(c, fmt.Sprintf("/runners/%d/resume", rn.ID), url.Values{"csrf": {m[1]}}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("POST resume = %d", resp.StatusCode)
	}
	if e.runnerNamed("web-test").Paused {
		t.Fatal("runner not resumed")
	}
	if resp := e.post(c, "/runners/999999/pause", url.Values{"csrf": {m[1]}}); resp.StatusCode != http.StatusNotFound {
		t.Errorf("POST pause of an unknown runner = %d, want 404", resp.StatusCode)
	}

	// Delete: the runner and its token are gone.
	del := fmt.Sprintf("/runners/%d/delete", rn.ID)
	if resp := e.post(c, del, nil); resp.StatusCode != http.StatusForbidden {
		t.Errorf("POST delete without csrf = %d, want 403", resp.StatusCode)
	}
	if resp := e.post(c, del, url.Values{"csrf": {m[1]}}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("POST delete = %d", resp.StatusCode)
	}
	if resp, _ := e.do(e.srv.Client(), "GET", fmt.Sprintf("/api/v1/runners/%d", rn.ID), e.bearer(), nil); resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET deleted runner = %d, want 404", resp.StatusCode)
	}
	_, page = e.do(c, "GET", "/runners", nil, nil)
	if strings.Contains(page, "web-test") {
		t.Errorf("runners page still lists the deleted runner")
	}
	if resp := e.post(c, del, url.Values{"csrf": {m[1]}}); resp.StatusCode != http.StatusNotFound {
		t.Errorf("POST delete again = %d, want 404", resp.StatusCode)
	}
}

// TestRunnersLive follows /runners/events: a runner created after the
// stream started appears in a later message.
func TestRunnersLive(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.api("POST", "/api/v1/runners", map[string]any{"description": "first"}, nil)
	req, _ := http.NewRequestWithContext(t.Context(), "GET", e.srv.URL+"/runners/events", nil)
	req.Header.Set("Authorization", "Bearer "+e.token)
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("GET /runners/events = %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	events := readEvents(resp.Body)
	if ev := next(t, events, "html"); !strings.Contains(ev.data, "first") || strings.Contains(ev.data, "second") {
		t.Fatalf("first message: %s", ev.data)
	}
	e.api("POST", "/api/v1/runners", map[string]any{"description": "second"}, nil)
	if ev := next(t, events, "html"); !strings.Contains(ev.data, "second") {
		t.Fatalf("next message lacks the new runner: %s", ev.data)
	}
	if resp, _ := e.do(e.client(), "GET", "/runners/events", nil, nil); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("GET /runners/events without credentials = %d, want 401", resp.StatusCode)
	}
}

func TestRunnersEscaping(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.api("POST", "/api/v1/runners", map[string]any{
		"description": `<img src=x onerror=alert(1)>`, "tag_list": []string{`<script>t()</script>`, `"quoted'`},
	}, nil)
	_, page := e.do(e.client(), "GET", "/runners", e.bearer(), nil)
	for _, want := range []string{
		"&lt;img src=x onerror=alert(1)&gt;",
		`<span class="tag">&lt;script&gt;t()&lt;/script&gt;</span>`,
		`<span class="tag">&#34;quoted&#39;</span>`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("runners page lacks %q", want)
		}
	}
	for _, bad := range []string{"<img", "<script>t", `"quoted'`} {
		if strings.Contains(page, bad) {
			t.Errorf("runners page has %q unescaped", bad)
		}
	}
}

// fleetLinks returns the href of every fleet page link (a.fleet-link)
// on the page html, parsed.
func fleetLinks(t *testing.T, page string) []string {
	t.Helper()
	doc, err := html.Parse(strings.NewReader(page))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for n := range doc.Descendants() {
		if n.Type != html.ElementNode || n.Data != "a" {
			continue
		}
		var href, class string
		for _, a := range n.Attr {
			switch a.Key {
			case "href":
				href = a.Val
			case "class":
				class = a.Val
			}
		}
		if class == "fleet-link" {
			out = append(out, href)
		}
	}
	return out
}

// TestRunnersPageFleetLink: a manager that reports its fleet page's URL
// with its job requests is linked from the runners page; the link signs
// a browser in to that fleet page (a real one, taking tickets signed
// with the runner's token) through a ticket; a manager without a URL is
// not linked, and the runner API refuses a URL that is not http(s).
func TestRunnersPageFleetLink(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var rn struct {
		ID    int64  `json:"id"`
		Token string `json:"token"`
	}
	e.api("POST", "/api/v1/runners", map[string]any{"description": "fleet-runner", "run_untagged": true}, &rn)
	fleetSrv := fleetServer(t, web.FleetSignIn{
		SystemID:   "s_fleet",
		TicketKeys: func() []string { return []string{fleetticket.HashToken(rn.Token)} },
	}, nil, false)

	// The managers ask for jobs (none pending: a 204 after the long
	// poll) with and without a fleet URL; a javascript: one is refused.
	request := func(sys, fleetURL string) (int, string) {
		js, _ := json.Marshal(api.JobRequest{Token: rn.Token, SystemID: sys, Info: api.VersionInfo{Name: "drover", Version: "1.0", FleetURL: fleetURL}})
		resp, b := e.do(e.srv.Client(), "POST", "/api/v4/jobs/request", map[string]string{"Content-Type": "application/json"}, bytes.NewReader(js))
		return resp.StatusCode, b
	}
	if code, b := request("s_fleet", fleetSrv.URL); code != http.StatusNoContent {
		t.Fatalf("jobs/request with a fleet URL = %d %s", code, b)
	}
	if code, b := request("s_plain", ""); code != http.StatusNoContent {
		t.Fatalf("jobs/request without a fleet URL = %d %s", code, b)
	}
	if code, b := request("s_evil", "javascript:alert(document.cookie)"); code != http.StatusBadRequest || !strings.Contains(b, "info.drover_fleet_url") {
		t.Errorf("jobs/request with a javascript: fleet URL = %d %s, want 400 naming info.drover_fleet_url", code, b)
	}

	c := e.login()
	resp, page := e.do(c, "GET", "/runners", nil, nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /runners = %d", resp.StatusCode)
	}
	want := fmt.Sprintf("/runners/%d/fleet?system_id=s_fleet", rn.ID)
	if links := fleetLinks(t, page); len(links) != 1 || links[0] != want {
		t.Fatalf("fleet links on the runners page = %q, want only %q", links, want)
	}
	if strings.Contains(page, "javascript:") || strings.Contains(page, "s_evil") {
		t.Errorf("the runners page shows the refused manager:\n%s", page)
	}

	// Not signed in on the coordinator: to its sign-in, no ticket.
	resp, _ = e.do(e.client(), "GET", want, nil, nil)
	if loc := resp.Header.Get("Location"); resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(loc, "/login?") {
		t.Errorf("GET %s without a session = %d to %q, want 303 to /login", want, resp.StatusCode, loc)
	}
	// Signed in: to the fleet page's sign-in with a ticket.
	resp, _ = e.do(c, "GET", want, nil, nil)
	loc := resp.Header.Get("Location")
	if resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(loc, fleetSrv.URL+"/fleet/signin?ticket=v1.") {
		t.Fatalf("GET %s = %d to %q, want 303 to %s/fleet/signin?ticket=", want, resp.StatusCode, loc, fleetSrv.URL)
	}
	fb := browser(t, fleetSrv)
	resp, _ = fget(t, fb, loc, nil)
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/fleet" {
		t.Fatalf("GET the ticket's link = %d to %q, want 303 to /fleet", resp.StatusCode, resp.Header.Get("Location"))
	}
	checkCookie(t, sessionCookie(resp), false)
	if resp, body := fget(t, fb, fleetSrv.URL+"/fleet", nil); resp.StatusCode != http.StatusOK || !strings.Contains(body, "fleet-one") {
		t.Errorf("GET /fleet signed in through the coordinator = %d, want 200 and the page", resp.StatusCode)
	}
	// The ticket is taken once.
	if resp, _ := fget(t, browser(t, fleetSrv), loc, nil); resp.StatusCode != http.StatusForbidden {
		t.Errorf("the ticket's link followed again = %d, want 403", resp.StatusCode)
	}

	// No link, no ticket: a manager without a URL, an unknown one.
	for _, path := range []string{
		fmt.Sprintf("/runners/%d/fleet?system_id=s_plain", rn.ID),
		fmt.Sprintf("/runners/%d/fleet?system_id=s_none", rn.ID),
		fmt.Sprintf("/runners/%d/fleet?system_id=s_evil", rn.ID),
		fmt.Sprintf("/runners/%d/fleet", rn.ID),
		"/runners/999/fleet?system_id=s_fleet",
	} {
		if resp, _ := e.do(c, "GET", path, nil, nil); resp.StatusCode != http.StatusNotFound {
			t.Errorf("GET %s = %d, want 404", path, resp.StatusCode)
		}
	}
}

// TestFleetLinked: only an http(s) URL is linked, whatever a store
// holds.
func TestFleetLinked(t *testing.T) {
	for _, tc := range []struct {
		url  string
		want bool
	}{
		{"https://manager1.example.com:9252", true},
		{"http://127.0.0.1:9252/", true},
		{"", false},
		{"javascript:alert(1)", false},
		{" javascript:alert(1)", false},
		{"data:text/html,x", false},
		{"//evil.example", false},
	} {
		if got := (web.RunnerManager{FleetURL: tc.url}).FleetLinked(); got != tc.want {
			t.Errorf("FleetLinked(%q) = %v, want %v", tc.url, got, tc.want)
		}
	}
}
