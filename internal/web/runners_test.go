package web_test

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
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
