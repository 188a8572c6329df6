package web_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/coordinator"
	"github.com/drover-ci/drover/internal/web"
)

// env is a real coordinator on SQLite in a temporary directory, served
// over loopback HTTP, with its web UI.
type env struct {
	t     testing.TB
	c     *coordinator.Coordinator
	srv   *httptest.Server
	token string
}

func newEnv(t testing.TB) *env {
	t.Helper()
	return newEnvIn(t, t.TempDir())
}

// newEnvIn is newEnv with the coordinator's data directory dir.
func newEnvIn(t testing.TB, dir string) *env {
	t.Helper()
	return newEnvWith(t, coordinator.Config{DataDir: dir})
}

// newEnvWith is newEnv with the coordinator's configuration cfg: a
// temporary data directory and a long poll of 1 s unless set.
func newEnvWith(t testing.TB, cfg coordinator.Config) *env {
	t.Helper()
	if cfg.DataDir == "" {
		cfg.DataDir = t.TempDir()
	}
	if cfg.LongPollTimeout == 0 {
		cfg.LongPollTimeout = time.Second
	}
	c, err := coordinator.New(t.Context(), slog.New(slog.DiscardHandler), cfg)
	if err != nil {
		t.Fatalf("coordinator.New = %v", err)
	}
	srv := httptest.NewServer(c.Handler())
	t.Cleanup(func() { srv.CloseClientConnections(); srv.Close(); c.Close() })
	return &env{t: t, c: c, srv: srv, token: c.AdminToken()}
}

// client is a browser: cookies kept, redirects not followed.
func (e *env) client() *http.Client {
	jar, err := cookiejar.New(nil)
	if err != nil {
		e.t.Fatal(err)
	}
	return &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

func (e *env) do(c *http.Client, method, path string, hdr map[string]string, body io.Reader) (*http.Response, string) {
	e.t.Helper()
	req, err := http.NewRequestWithContext(e.t.Context(), method, e.srv.URL+path, body)
	if err != nil {
		e.t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatalf("%s %s: read: %v", method, path, err)
	}
	return resp, string(b)
}

func (e *env) bearer() map[string]string {
	return map[string]string{"Authorization": "Bearer " + e.token}
}

// api calls the admin API with JSON.
func (e *env) api(method, path string, in, out any) {
	e.t.Helper()
	js, _ := json.Marshal(in)
	hdr := e.bearer()
	hdr["Content-Type"] = "application/json"
	resp, b := e.do(e.srv.Client(), method, path, hdr, bytes.NewReader(js))
	if resp.StatusCode/100 != 2 {
		e.t.Fatalf("%s %s = %d %s", method, path, resp.StatusCode, b)
	}
	if out != nil {
		if err := json.Unmarshal([]byte(b), out); err != nil {
			e.t.Fatal(err)
		}
	}
}

// running submits a job and has a runner take it: its id and job token.
func (e *env) running(spec map[string]any) (int64, string) {
	e.t.Helper()
	var runner struct {
		Token string `json:"token"`
	}
	e.api("POST", "/api/v1/runners", map[string]any{"description": "web-test", "run_untagged": true}, &runner)
	var job struct {
		ID int64 `json:"id"`
	}
	e.api("POST", "/api/v1/jobs", spec, &job)
	js, _ := json.Marshal(api.JobRequest{Token: runner.Token, SystemID: "s_web", Info: api.VersionInfo{Name: "gitlab-runner", Version: "19.4.0", Executor: "shell"}})
	resp, b := e.do(e.srv.Client(), "POST", "/api/v4/jobs/request", map[string]string{"Content-Type": "application/json"}, bytes.NewReader(js))
	if resp.StatusCode != http.StatusCreated {
		e.t.Fatalf("jobs/request = %d %s", resp.StatusCode, b)
	}
	var jr api.JobResponse
	if err := json.Unmarshal([]byte(b), &jr); err != nil {
		e.t.Fatal(err)
	}
	if jr.ID != job.ID {
		e.t.Fatalf("jobs/request gave job %d, want %d", jr.ID, job.ID)
	}
	return jr.ID, jr.Token
}

// patch appends b to job id's trace, which has size bytes.
func (e *env) patch(id int64, token string, size int, b string) {
	e.t.Helper()
	resp, body := e.do(e.srv.Client(), "PATCH", fmt.Sprintf("/api/v4/jobs/%d/trace", id), map[string]string{
		"JOB-TOKEN": token, "Content-Type": "text/plain", "Content-Range": fmt.Sprintf("%d-%d", size, size+len(b)-1),
	}, strings.NewReader(b))
	if resp.StatusCode != http.StatusAccepted {
		e.t.Fatalf("PATCH trace = %d %s", resp.StatusCode, body)
	}
}

// finish has the runner report job id's final state u (its token set
// here).
func (e *env) finish(id int64, token string, u api.UpdateJobRequest) {
	e.t.Helper()
	u.Token = token
	js, _ := json.Marshal(u)
	resp, b := e.do(e.srv.Client(), "PUT", fmt.Sprintf("/api/v4/jobs/%d", id), map[string]string{"JOB-TOKEN": token, "Content-Type": "application/json"}, bytes.NewReader(js))
	if resp.StatusCode != http.StatusOK {
		e.t.Fatalf("PUT job %d %s = %d %s", id, u.State, resp.StatusCode, b)
	}
}

// status returns job id's status as the admin API tells it.
func (e *env) status(id int64) string {
	e.t.Helper()
	var got struct {
		Status string `json:"status"`
	}
	e.api("GET", fmt.Sprintf("/api/v1/jobs/%d", id), nil, &got)
	return got.Status
}

// login signs a browser in through /login?token=.
func (e *env) login() *http.Client {
	e.t.Helper()
	c := e.client()
	resp, _ := e.do(c, "GET", "/login?"+url.Values{"token": {e.token}, "next": {"/jobs"}}.Encode(), nil, nil)
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/jobs" {
		e.t.Fatalf("GET /login?token = %d to %q, want 303 to /jobs", resp.StatusCode, resp.Header.Get("Location"))
	}
	return c
}

var csrfRE = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

func TestAuth(t *testing.T) {
	t.Parallel()
	e := newEnv(t)

	resp, _ := e.do(e.client(), "GET", "/jobs?status=running", nil, nil)
	if loc := resp.Header.Get("Location"); resp.StatusCode != http.StatusSeeOther || loc != "/login?next=%2Fjobs%3Fstatus%3Drunning" {
		t.Errorf("GET /jobs without a token = %d to %q, want 303 to the login form", resp.StatusCode, loc)
	}
	if resp, _ := e.do(e.client(), "GET", "/jobs/events", nil, nil); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("GET /jobs/events without a token = %d, want 401", resp.StatusCode)
	}
	resp, body := e.do(e.client(), "GET", "/jobs", e.bearer(), nil)
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, "<h1>Jobs</h1>") {
		t.Errorf("GET /jobs with the bearer token = %d, want 200 and the jobs page", resp.StatusCode)
	}
	csp := resp.Header.Get("Content-Security-Policy")
	if !strings.Contains(csp, "default-src 'self'") || strings.Contains(csp, "unsafe-inline") {
		t.Errorf("Content-Security-Policy = %q", csp)
	}
	if resp, _ := e.do(e.client(), "GET", "/jobs", map[string]string{"Authorization": "Bearer nope"}, nil); resp.StatusCode != http.StatusForbidden {
		t.Errorf("GET /jobs with a wrong bearer token = %d, want 403", resp.StatusCode)
	}

	// A login with a wrong token gets the form again, no session.
	c := e.client()
	resp, _ = e.do(c, "GET", "/login?token=wrong&next=/jobs", nil, nil)
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("GET /login?token=wrong = %d, want 403", resp.StatusCode)
	}
	for _, next := range []string{"//evil.example/x", "https://evil.example/", `/\evil.example`, "javascript:alert(1)", "jobs"} {
		resp, _ := e.do(c, "GET", "/login?"+url.Values{"token": {e.token}, "next": {next}}.Encode(), nil, nil)
		if resp.StatusCode != http.StatusBadRequest || resp.Header.Get("Location") != "" {
			t.Errorf("GET /login next=%q = %d to %q, want 400", next, resp.StatusCode, resp.Header.Get("Location"))
		}
	}

	// The session cookie.
	resp, _ = e.do(c, "GET", "/login?"+url.Values{"token": {e.token}, "next": {"/jobs?project=a/b"}}.Encode(), nil, nil)
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/jobs?project=a/b" {
		t.Fatalf("GET /login?token = %d to %q, want 303 to next", resp.StatusCode, resp.Header.Get("Location"))
	}
	var cookie *http.Cookie
	for _, ck := range resp.Cookies() {
		if ck.Name == "drover_session" {
			cookie = ck
		}
	}
	if cookie == nil || !cookie.HttpOnly || cookie.SameSite != http.SameSiteStrictMode || cookie.Secure || strings.Contains(cookie.Value, e.token) {
		t.Fatalf("session cookie = %+v, want HttpOnly, SameSite=Strict, not Secure over plain HTTP, without the token", cookie)
	}
	if resp, _ := e.do(c, "GET", "/jobs", nil, nil); resp.StatusCode != http.StatusOK {
		t.Errorf("GET /jobs with the session = %d, want 200", resp.StatusCode)
	}
	forged := e.client()
	u, _ := url.Parse(e.srv.URL)
	forged.Jar.SetCookies(u, []*http.Cookie{{Name: "drover_session", Value: "99999999999.x.y"}})
	if resp, _ := e.do(forged, "GET", "/jobs", nil, nil); resp.StatusCode != http.StatusSeeOther {
		t.Errorf("GET /jobs with a forged session = %d, want 303 to the login form", resp.StatusCode)
	}

	// The login form: its POST needs the form's own CSRF value.
	fc := e.client()
	_, form := e.do(fc, "GET", "/login?next=/jobs/1", nil, nil)
	m := csrfRE.FindStringSubmatch(form)
	if m == nil {
		t.Fatalf("login form has no csrf field:\n%s", form)
	}
	post := func(v url.Values) *http.Response {
		resp, _ := e.do(fc, "POST", "/login", map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, strings.NewReader(v.Encode()))
		return resp
	}
	if resp := post(url.Values{"token": {e.token}, "next": {"/jobs/1"}}); resp.StatusCode != http.StatusForbidden {
		t.Errorf("POST /login without csrf = %d, want 403", resp.StatusCode)
	}
	_, form = e.do(fc, "GET", "/login?next=/jobs/1", nil, nil)
	m = csrfRE.FindStringSubmatch(form)
	if resp := post(url.Values{"token": {e.token}, "next": {"/jobs/1"}, "csrf": {m[1]}}); resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/jobs/1" {
		t.Errorf("POST /login = %d to %q, want 303 to /jobs/1", resp.StatusCode, resp.Header.Get("Location"))
	}
}

func TestCancelAndRetryNeedCSRF(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var job struct {
		ID int64 `json:"id"`
	}
	e.api("POST", "/api/v1/jobs", map[string]any{"name": "j", "script": []string{"true"}}, &job)
	c := e.login()
	path := fmt.Sprintf("/jobs/%d", job.ID)
	_, page := e.do(c, "GET", path, nil, nil)
	m := csrfRE.FindStringSubmatch(page)
	if m == nil || !strings.Contains(page, `action="`+path+`/cancel"`) {
		t.Fatalf("job page has no cancel form with a csrf field:\n%s", page)
	}
	form := map[string]string{"Content-Type": "application/x-www-form-urlencoded"}
	for _, v := range []url.Values{{}, {"csrf": {"wrong"}}} {
		if resp, _ := e.do(c, "POST", path+"/cancel", form, strings.NewReader(v.Encode())); resp.StatusCode != http.StatusForbidden {
			t.Errorf("POST cancel with csrf %q = %d, want 403", v.Get("csrf"), resp.StatusCode)
		}
	}
	if resp, _ := e.do(e.client(), "POST", path+"/cancel", form, strings.NewReader(url.Values{"csrf": {m[1]}}.Encode())); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("POST cancel with a csrf token but no session = %d, want 401", resp.StatusCode)
	}
	if got := e.status(job.ID); got != "pending" {
		t.Fatalf("status after refused cancels = %q, want pending", got)
	}
	resp, _ := e.do(c, "POST", path+"/cancel", form, strings.NewReader(url.Values{"csrf": {m[1]}}.Encode()))
	if resp.StatusCode != http.StatusSeeOther {
		t.Errorf("POST cancel with the csrf token = %d, want 303", resp.StatusCode)
	}
	if got := e.status(job.ID); got != "canceled" {
		t.Errorf("status after cancel = %q, want canceled", got)
	}
	// A second cancel is too late, and the page says what happened.
	resp, page = e.do(c, "POST", path+"/cancel", form, strings.NewReader(url.Values{"csrf": {m[1]}}.Encode()))
	if want := fmt.Sprintf("Job %d already finished: canceled.", job.ID); resp.StatusCode != http.StatusConflict || !strings.Contains(page, want) {
		t.Errorf("POST cancel of a canceled job = %d, want 409 with %q:\n%s", resp.StatusCode, want, page)
	}

	// The finished job's page offers a retry, CSRF-protected too, which
	// leads to the new job's page.
	_, page = e.do(c, "GET", path, nil, nil)
	if strings.Contains(page, `action="`+path+`/cancel"`) || !strings.Contains(page, `action="`+path+`/retry"`) {
		t.Fatalf("a canceled job's page: want a retry form and no cancel form:\n%s", page)
	}
	if resp, _ := e.do(c, "POST", path+"/retry", form, strings.NewReader(url.Values{"csrf": {"wrong"}}.Encode())); resp.StatusCode != http.StatusForbidden {
		t.Errorf("POST retry with a wrong csrf = %d, want 403", resp.StatusCode)
	}
	resp, _ = e.do(c, "POST", path+"/retry", form, strings.NewReader(url.Values{"csrf": {m[1]}}.Encode()))
	want := fmt.Sprintf("/jobs/%d", job.ID+1)
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != want {
		t.Fatalf("POST retry = %d to %q, want 303 to %s", resp.StatusCode, resp.Header.Get("Location"), want)
	}
	if got := e.status(job.ID + 1); got != "pending" {
		t.Errorf("the retried job = %q, want pending", got)
	}
	if resp, _ := e.do(c, "POST", want+"/retry", form, strings.NewReader(url.Values{"csrf": {m[1]}}.Encode())); resp.StatusCode != http.StatusConflict {
		t.Errorf("POST retry of a pending job = %d, want 409", resp.StatusCode)
	}
}

func TestEscaping(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	id, tok := e.running(map[string]any{
		"name": `<img src=x onerror=alert(1)>`, "script": []string{"true"},
		"variables": []map[string]any{{"key": "SECRET_THING", "value": "hunter2-very-secret", "masked": true}},
	})
	e.patch(id, tok, 0, "<script>alert(1)</script> &lt; \x1b[31m<b>red</b>\x1b[0m\nsection_start:1:s\r\x1b[0K\"><script>x()</script>\n")
	_, page := e.do(e.client(), "GET", fmt.Sprintf("/jobs/%d", id), e.bearer(), nil)
	for _, want := range []string{
		"&lt;script&gt;alert(1)&lt;/script&gt; &amp;lt; ",
		`<span class="fg-1">&lt;b&gt;red&lt;/b&gt;</span>`,
		"&#34;&gt;&lt;script&gt;x()&lt;/script&gt;",
		"&lt;img src=x onerror=alert(1)&gt;",
		"<code>SECRET_THING</code>",
	} {
		if !strings.Contains(page, want) {
			t.Errorf("job page lacks %q", want)
		}
	}
	for _, bad := range []string{"<script>alert", "<script>x", "<b>", "<img", "hunter2"} {
		if strings.Contains(page, bad) {
			t.Errorf("job page has %q unescaped (or a secret)", bad)
		}
	}
	_, list := e.do(e.client(), "GET", "/jobs", e.bearer(), nil)
	if strings.Contains(list, "<img") || !strings.Contains(list, "&lt;img src=x onerror=alert(1)&gt;") {
		t.Errorf("jobs page does not escape the job's name")
	}
	resp, raw := e.do(e.client(), "GET", fmt.Sprintf("/jobs/%d/raw", id), e.bearer(), nil)
	if !strings.HasPrefix(raw, "<script>alert(1)</script>") || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") ||
		!strings.HasPrefix(resp.Header.Get("Content-Disposition"), "attachment") || resp.Header.Get("X-Content-Type-Options") != "nosniff" {
		t.Errorf("raw log: %q with %v, want the bytes as a text/plain attachment, nosniff", raw, resp.Header)
	}
}

// TestLiveLog follows a running job's log over SSE: lines PATCHed after
// the stream started arrive on it, and the stream ends once the job did.
func TestLiveLog(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	id, tok := e.running(map[string]any{"name": "live", "script": []string{"true"}})
	first := "section_start:100:step_script\r\x1b[0Kstep\nfirst line\n"
	e.patch(id, tok, 0, first)

	c := e.login()
	_, page := e.do(c, "GET", fmt.Sprintf("/jobs/%d", id), nil, nil)
	m := regexp.MustCompile(`data-events="([^"]+)"`).FindStringSubmatch(page)
	if m == nil || !strings.Contains(page, "first line") {
		t.Fatalf("job page of a running job has no live log:\n%s", page)
	}
	stream := strings.ReplaceAll(m[1], "&amp;", "&")
	if want := fmt.Sprintf("/jobs/%d/log?from=0&offset=%d", id, len(first)); stream != want {
		t.Errorf("live log URL = %q, want %q", stream, want)
	}
	req, _ := http.NewRequestWithContext(t.Context(), "GET", e.srv.URL+stream, nil)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != http.StatusOK || ct != "text/event-stream" {
		t.Fatalf("GET %s = %d %s", stream, resp.StatusCode, ct)
	}
	events := readEvents(resp.Body)

	second := "second <line>\n" + "section_end:107:step_script\r\x1b[0K\n"
	e.patch(id, tok, len(first), second)
	ev := next(t, events, "log")
	var got []map[string]any
	if err := json.Unmarshal([]byte(ev.data), &got); err != nil {
		t.Fatal(err)
	}
	want := `[{"h":"second \u0026lt;line\u0026gt;","t":"line"},{"d":"7s","n":"step_script","t":"end"}]`
	if b, _ := json.Marshal(got); string(b) != want {
		t.Errorf("log event = %s, want %s (the first line was on the page)", b, want)
	}
	if ev.id != fmt.Sprint(len(first)+len(second)) {
		t.Errorf("log event id = %q, want the offset %d", ev.id, len(first)+len(second))
	}

	// The job ends: its last line (no newline) and the end come.
	e.patch(id, tok, len(first)+len(second), "Job succeeded")
	e.finish(id, tok, api.UpdateJobRequest{State: "success"})
	var sawLast bool
	for ev := range events {
		if ev.event == "log" && strings.Contains(ev.data, "Job succeeded") {
			sawLast = true
		}
		if ev.event == "done" {
			if !sawLast || ev.data != "success" {
				t.Errorf("done (%q) without the last line", ev.data)
			}
			return
		}
	}
	t.Fatal("the stream ended without done")
}

type sseEvent struct{ event, id, data string }

// readEvents reads an event stream into a channel, closed at its end.
func readEvents(r io.Reader) <-chan sseEvent {
	ch := make(chan sseEvent)
	go func() {
		defer close(ch)
		sc := bufio.NewScanner(r)
		sc.Buffer(nil, 64<<20) // a log event carries all the lines that came since the last
		var ev sseEvent
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if ev.event != "" {
					ch <- ev
				}
				ev = sseEvent{}
			case strings.HasPrefix(line, "event: "):
				ev.event = line[len("event: "):]
			case strings.HasPrefix(line, "id: "):
				ev.id = line[len("id: "):]
			case strings.HasPrefix(line, "data: "):
				if ev.data != "" {
					ev.data += "\n"
				}
				ev.data += line[len("data: "):]
			}
		}
	}()
	return ch
}

// next returns the next event named name; the test's own deadline bounds
// the wait.
func next(t *testing.T, events <-chan sseEvent, name string) sseEvent {
	t.Helper()
	for ev := range events {
		if ev.event == name {
			return ev
		}
	}
	t.Fatalf("the stream ended before a %s event", name)
	return sseEvent{}
}

// TestLargeLog: a 20 MB log opens at its tail, the page bounded, and the
// pieces before it come one by one through "load earlier" until the log's
// start, each line once; the live log carries on from the tail.
func TestLargeLog(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	id, tok := e.running(map[string]any{"name": "big", "script": []string{"true"}})
	var log strings.Builder
	log.WriteString("section_start:1700000000:big_section\r\x1b[0Kthe whole job\n")
	pad := strings.Repeat("x", 80)
	var lines []string
	for i := 0; log.Len() < 20<<20; i++ {
		l := fmt.Sprintf("line %08d %s", i, pad)
		lines = append(lines, l)
		log.WriteString(l + "\n")
	}
	log.WriteString("section_end:1700000100:big_section\r\x1b[0K\n")
	lines = append(lines, "the last line")
	log.WriteString("the last line\n")
	raw := log.String()
	for off := 0; off < len(raw); off += 512 << 10 {
		e.patch(id, tok, off, raw[off:min(off+512<<10, len(raw))])
	}

	c := e.login()
	start := time.Now()
	_, page := e.do(c, "GET", fmt.Sprintf("/jobs/%d", id), nil, nil)
	t.Logf("the page of a %d-byte log: %d bytes in %v", len(raw), len(page), time.Since(start))
	if len(page) > 1<<20 {
		t.Errorf("the page is %d bytes, want under 1 MiB", len(page))
	}
	rangeRE := regexp.MustCompile(`data-range="/jobs/\d+/log/range\?to=(\d+)"`)
	eventsRE := regexp.MustCompile(`data-events="/jobs/\d+/log\?from=(\d+)&(?:amp;)?offset=(\d+)"`)
	m, ev := rangeRE.FindStringSubmatch(page), eventsRE.FindStringSubmatch(page)
	if m == nil || ev == nil {
		i := strings.Index(page, `id="log"`)
		t.Fatalf("the page has no load earlier button or no live log:\n%.600s", page[max(i, 0):])
	}
	from, size := atoi(t, ev[1]), atoi(t, ev[2])
	if atoi(t, m[1]) != from || size != len(raw) || from < len(raw)-web.DefaultLogTail || raw[from-1] != '\n' {
		t.Errorf("the tail starts at %s, the live log at %d from %d: want a line start in the last %d bytes, the log's end", m[1], size, from, web.DefaultLogTail)
	}
	// A section that started before the tail is not one on the page.
	if strings.Contains(page, `data-name="big_section"`) || strings.Contains(page, "line 00000000 ") {
		t.Error("the page shows the log's start")
	}

	lineRE := regexp.MustCompile(`<div class="ln">([^<]*)</div>`)
	var got []string
	for _, m := range lineRE.FindAllStringSubmatch(page, -1) {
		got = append(got, m[1])
	}
	to, pieces := from, 0
	for to > 0 {
		pieces++
		resp, piece := e.do(c, "GET", fmt.Sprintf("/jobs/%d/log/range?to=%d", id, to), nil, nil)
		if resp.StatusCode != http.StatusOK || len(piece) > 1<<20 {
			t.Fatalf("range to %d = %d, %d bytes", to, resp.StatusCode, len(piece))
		}
		var before []string
		for _, m := range lineRE.FindAllStringSubmatch(piece, -1) {
			before = append(before, m[1])
		}
		got = append(before, got...)
		m := rangeRE.FindStringSubmatch(piece)
		if m == nil {
			// The first piece: the section, which had not ended in it.
			if !strings.Contains(piece, `<details class="sec" data-name="big_section" open><summary><span class="sec-head">the whole job</span><span class="sec-dur"></span>`) {
				t.Errorf("the first piece does not show its unfinished section as such:\n%.500s", piece)
			}
			break
		}
		next := atoi(t, m[1])
		if next >= to || to-next > web.DefaultLogTail || raw[next-1] != '\n' {
			t.Fatalf("the piece before %d starts at %d: want a line start at most %d before", to, next, web.DefaultLogTail)
		}
		to = next
	}
	if want := len(raw)/web.DefaultLogTail + 1; pieces < want-1 || pieces > want+1 {
		t.Errorf("%d pieces, want about %d", pieces, want)
	}
	if len(got) != len(lines) {
		t.Fatalf("the pieces have %d lines, want %d", len(got), len(lines))
	}
	for i := range lines {
		if got[i] != lines[i] {
			t.Fatalf("line %d = %q, want %q", i, got[i], lines[i])
		}
	}

	// The live log carries on from the tail.
	req, _ := http.NewRequestWithContext(t.Context(), "GET", fmt.Sprintf("%s/jobs/%d/log?from=%d&offset=%d", e.srv.URL, id, from, size), nil)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	events := readEvents(resp.Body)
	e.patch(id, tok, len(raw), "one more\n")
	if got := next(t, events, "log"); got.data != `[{"t":"line","h":"one more"}]` {
		t.Errorf("live log after the tail = %s", got.data)
	}

	// Once the log grew by 8 tails past the page's start, the stream
	// tells the page to start over at the new tail.
	more, at := strings.Repeat(lines[0]+"\n", (1<<20-1)/(len(lines[0])+1)), len(raw)+len("one more\n")
	for at-from <= 8*web.DefaultLogTail {
		e.patch(id, tok, at, more)
		at += len(more)
	}
	next(t, events, "tail")

	for _, q := range []string{"to=x", "to=-1"} {
		if resp, _ := e.do(c, "GET", fmt.Sprintf("/jobs/%d/log/range?%s", id, q), nil, nil); resp.StatusCode != http.StatusBadRequest {
			t.Errorf("range %s = %d, want 400", q, resp.StatusCode)
		}
	}
	if resp, _ := e.do(e.client(), "GET", fmt.Sprintf("/jobs/%d/log/range?to=10", id), nil, nil); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("range without a session = %d, want 401", resp.StatusCode)
	}
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestViewerReadOnly: the coordinator's viewer token signs in (by link and
// as a bearer) to every page, without the action buttons, and every action
// is refused with 403 even with the right CSRF token; the admin's session
// still acts.
func TestViewerReadOnly(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	viewer := e.c.ViewerToken()
	if viewer == "" || viewer == e.token {
		t.Fatalf("viewer token %q (admin %q): want one of its own", viewer, e.token)
	}
	var job struct {
		ID int64 `json:"id"`
	}
	e.api("POST", "/api/v1/jobs", map[string]any{"name": "j", "script": []string{"true"}}, &job)
	path := fmt.Sprintf("/jobs/%d", job.ID)

	c := e.client()
	resp, _ := e.do(c, "GET", "/login?"+url.Values{"token": {viewer}, "next": {path}}.Encode(), nil, nil)
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != path {
		t.Fatalf("viewer login = %d to %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	for _, p := range []string{"/jobs", path, "/runners"} {
		resp, page := e.do(c, "GET", p, nil, nil)
		if resp.StatusCode != http.StatusOK {
			t.Errorf("viewer GET %s = %d", p, resp.StatusCode)
		}
		if strings.Contains(page, "/cancel\"") || strings.Contains(page, "/retry\"") || strings.Contains(page, "/pause\"") || strings.Contains(page, "/delete\"") {
			t.Errorf("viewer's %s shows an action form:\n%s", p, page)
		}
	}
	_, page := e.do(c, "GET", path, nil, nil)
	m := csrfRE.FindStringSubmatch(page) // the sign-out form's
	if m == nil {
		t.Fatalf("no csrf token on the viewer's page:\n%s", page)
	}
	form := map[string]string{"Content-Type": "application/x-www-form-urlencoded"}
	if resp, _ := e.do(c, "POST", path+"/cancel", form, strings.NewReader(url.Values{"csrf": {m[1]}}.Encode())); resp.StatusCode != http.StatusForbidden {
		t.Errorf("viewer cancel = %d, want 403", resp.StatusCode)
	}
	if resp, _ := e.do(e.client(), "POST", path+"/cancel", map[string]string{"Authorization": "Bearer " + viewer}, nil); resp.StatusCode != http.StatusForbidden {
		t.Errorf("viewer bearer cancel = %d, want 403", resp.StatusCode)
	}
	if resp, _ := e.do(e.client(), "GET", "/jobs", map[string]string{"Authorization": "Bearer " + viewer}, nil); resp.StatusCode != http.StatusOK {
		t.Errorf("viewer bearer GET /jobs = %d, want 200", resp.StatusCode)
	}
	if got := e.status(job.ID); got != "pending" {
		t.Fatalf("a viewer changed the job: %q", got)
	}
	if resp, _ := e.do(c, "POST", "/logout", form, strings.NewReader(url.Values{"csrf": {m[1]}}.Encode())); resp.StatusCode != http.StatusSeeOther {
		t.Errorf("viewer sign-out = %d, want 303", resp.StatusCode)
	}
	// The admin's session sees and uses the buttons.
	a := e.login()
	_, page = e.do(a, "GET", path, nil, nil)
	am := csrfRE.FindStringSubmatch(page)
	if !strings.Contains(page, path+"/cancel\"") || am == nil {
		t.Fatalf("the admin's page lacks the cancel form:\n%s", page)
	}
	if resp, _ := e.do(a, "POST", path+"/cancel", form, strings.NewReader(url.Values{"csrf": {am[1]}}.Encode())); resp.StatusCode != http.StatusSeeOther {
		t.Errorf("admin cancel = %d, want 303", resp.StatusCode)
	}
}
