package web_test

import (
	"archive/zip"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"html"
	"io"
	"mime/multipart"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/drover-ci/drover/internal/api"
)

// Hostile text: a job's name and a commit's title that would run script
// if a page did not escape them.
const (
	hostileJob   = `<img src=x onerror="document.title='pwned-job'">`
	hostileTitle = `<script>document.title='pwned-commit'</script> & "fix"`
)

// ciRepo makes a git repository whose main branch holds files (path →
// contents) in one commit with message msg by Ada, and returns its path.
func ciRepo(t testing.TB, msg string, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	git := func(args ...string) {
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=Ada Lovelace", "GIT_AUTHOR_EMAIL=ada@example.com", "GIT_COMMITTER_NAME=Ada", "GIT_COMMITTER_EMAIL=ada@example.com")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	git("init", "-q", "-b", "main")
	for name, data := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	git("add", "-A")
	git("commit", "-q", "-m", msg)
	return dir
}

// pipelineView is what the tests read of the admin API's pipeline.
type pipelineView struct {
	ID     int64  `json:"id"`
	Status string `json:"status"`
	Jobs   []struct {
		ID     int64  `json:"id"`
		Name   string `json:"name"`
		Status string `json:"status"`
	} `json:"jobs"`
}

// job returns the id of p's job name.
func (p *pipelineView) job(t testing.TB, name string) int64 {
	t.Helper()
	for _, j := range p.Jobs {
		if j.Name == name {
			return j.ID
		}
	}
	t.Fatalf("pipeline %d has no job %q: %+v", p.ID, name, p.Jobs)
	return 0
}

// run runs the coordinator's background work (its pipelines' advance,
// the reapers) until the test ends.
func (e *env) run() {
	ctx, cancel := context.WithCancel(context.WithoutCancel(e.t.Context()))
	done := make(chan struct{})
	go func() {
		defer close(done)
		e.c.Run(ctx)
	}()
	e.t.Cleanup(func() { cancel(); <-done })
}

// runPipeline runs the pipeline of repo's main branch in project.
func (e *env) runPipeline(project, repo string, extra map[string]any) pipelineView {
	e.t.Helper()
	req := map[string]any{"project": project, "repo_url": repo, "ref": "main"}
	for k, v := range extra {
		req[k] = v
	}
	var p pipelineView
	e.api("POST", "/api/v1/pipelines", req, &p)
	return p
}

// pipeline reads pipeline id through the admin API.
func (e *env) pipeline(id int64) pipelineView {
	e.t.Helper()
	var p pipelineView
	e.api("GET", fmt.Sprintf("/api/v1/pipelines/%d", id), nil, &p)
	return p
}

// newRunner registers a runner for untagged jobs: its token.
func (e *env) newRunner() string {
	e.t.Helper()
	var rn struct {
		Token string `json:"token"`
	}
	e.api("POST", "/api/v1/runners", map[string]any{"description": "pipeline-test", "run_untagged": true}, &rn)
	return rn.Token
}

// take has the runner with token take a pending job: its id and token.
// It asks until there is one: each request is a long poll, answered as
// soon as a pipeline's advance queues a job.
func (e *env) take(token string) (int64, string) {
	e.t.Helper()
	js, _ := json.Marshal(api.JobRequest{Token: token, SystemID: "s_pipe", Info: api.VersionInfo{Name: "gitlab-runner", Version: "19.4.0", Executor: "shell"}})
	var resp *http.Response
	var b string
	for {
		resp, b = e.do(e.srv.Client(), "POST", "/api/v4/jobs/request", map[string]string{"Content-Type": "application/json"}, bytes.NewReader(js))
		if resp.StatusCode != http.StatusNoContent {
			break
		}
	}
	if resp.StatusCode != http.StatusCreated {
		e.t.Fatalf("jobs/request = %d %s", resp.StatusCode, b)
	}
	var jr api.JobResponse
	if err := json.Unmarshal([]byte(b), &jr); err != nil {
		e.t.Fatal(err)
	}
	return jr.ID, jr.Token
}

// upload uploads an artifact of job id (query: artifact_format=&
// artifact_type=) with the job's token.
func (e *env) upload(id int64, token, query string, data []byte) {
	e.t.Helper()
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	fw, _ := mw.CreateFormFile("file", "artifacts")
	fw.Write(data)
	mw.Close()
	resp, b := e.do(e.srv.Client(), "POST", fmt.Sprintf("/api/v4/jobs/%d/artifacts?%s", id, query),
		map[string]string{"JOB-TOKEN": token, "Content-Type": mw.FormDataContentType()}, &body)
	if resp.StatusCode != http.StatusCreated {
		e.t.Fatalf("upload %s = %d %s", query, resp.StatusCode, b)
	}
}

// untilSection follows pipeline id's live section, as browser c, until a
// section matches re: that section.
func (e *env) untilSection(c *http.Client, id int64, re *regexp.Regexp) string {
	e.t.Helper()
	req, err := http.NewRequestWithContext(e.t.Context(), "GET", fmt.Sprintf("%s/pipelines/%d/events", e.srv.URL, id), nil)
	if err != nil {
		e.t.Fatal(err)
	}
	resp, err := c.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	for ev := range readEvents(resp.Body) {
		if ev.event == "html" && re.MatchString(ev.data) {
			return ev.data
		}
	}
	e.t.Fatalf("pipeline %d's live section ended before it matched %s", id, re)
	return ""
}

// csrfOf is the CSRF token on a page.
func csrfOf(t *testing.T, page string) string {
	t.Helper()
	m := csrfRE.FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no csrf field on the page:\n%.2000s", page)
	}
	return m[1]
}

// post sends a form with csrf as a browser with client c.
func (e *env) postCSRF(c *http.Client, path, csrf string) (*http.Response, string) {
	e.t.Helper()
	return e.do(c, "POST", path, map[string]string{"Content-Type": "application/x-www-form-urlencoded"},
		strings.NewReader(url.Values{"csrf": {csrf}}.Encode()))
}

const graphCI = `stages: [build, test, deploy]
build:
  stage: build
  script: [make]
lint:
  stage: build
  script: [lint]
unit:
  stage: test
  needs: [build]
  script: [test]
"` + `<img src=x onerror=\"document.title='pwned-job'\">` + `":
  stage: test
  needs: [build, lint]
  script: [echo]
deploy:
  stage: deploy
  when: manual
  script: [deploy]
`

// nodeRE matches a node of the graph: its job's name and status.
var nodeRE = regexp.MustCompile(`<a href="/jobs/(\d+)" class="node n-([a-z_]+)[^"]*" data-job="([^"]*)" data-status="([a-z_]+)"`)

func TestPipelinePage(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.run()
	repo := ciRepo(t, hostileTitle+"\n\nThe body.", map[string]string{".gitlab-ci.yml": graphCI})
	p := e.runPipeline("group/app", repo, map[string]any{"triggered_by": "Grace <bot>"})
	c := e.login()
	e.untilSection(c, p.ID, regexp.MustCompile(`data-job="lint" data-status="pending"`))
	resp, page := e.do(c, "GET", fmt.Sprintf("/pipelines/%d", p.ID), nil, nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET pipeline = %d %s", resp.StatusCode, page)
	}
	nodes := nodeRE.FindAllStringSubmatch(page, -1)
	got := map[string]string{}
	for _, n := range nodes {
		got[html.UnescapeString(n[3])] = n[4]
	}
	want := map[string]string{"build": "pending", "lint": "pending", "unit": "created", hostileJob: "created", "deploy": "created"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("graph nodes = %v, want %v", got, want)
	}
	for _, s := range []string{
		`data-from="build" data-to="unit"`, `data-from="build" data-to="` + html.EscapeString(hostileJob) + `"`,
		`data-from="lint" data-to="` + html.EscapeString(hostileJob) + `"`,
		`<text class="stage-name" x="113" y="18" text-anchor="middle">build</text>`,
		"Grace &lt;bot&gt;", "by Ada Lovelace", `data-live="/pipelines/` + fmt.Sprint(p.ID) + `/events"`,
	} {
		if !strings.Contains(page, s) {
			t.Errorf("the pipeline page lacks %q", s)
		}
	}
	if n := strings.Count(page, `<path class="edge`); n != 3 {
		t.Errorf("the graph has %d edges, want 3", n)
	}
	for _, s := range []string{hostileJob, "<script>document.title", `onerror="document`} {
		if strings.Contains(page, s) {
			t.Errorf("the pipeline page holds %q unescaped", s)
		}
	}
	if !strings.Contains(page, html.EscapeString("<script>document.title='pwned-commit'</script>")) {
		t.Error("the pipeline page does not show the commit's title, escaped")
	}

	// The list: the commit's title and author, the source and who ran it.
	_, list := e.do(c, "GET", "/pipelines", nil, nil)
	for _, s := range []string{fmt.Sprintf(`href="/pipelines/%d"`, p.ID), "by Ada Lovelace", "Grace &lt;bot&gt;", html.EscapeString("<script>document.title='pwned-commit'</script>")} {
		if !strings.Contains(list, s) {
			t.Errorf("the pipelines list lacks %q", s)
		}
	}
	if strings.Contains(list, "<script>document.title") {
		t.Error("the pipelines list holds the commit title unescaped")
	}

	// The job page links back to its pipeline and shows CI_JOB_URL.
	build := p.job(t, "build")
	_, jp := e.do(c, "GET", fmt.Sprintf("/jobs/%d", build), nil, nil)
	for _, s := range []string{fmt.Sprintf(`<a href="/pipelines/%d" id="job-pipeline">Pipeline #%d</a> / build`, p.ID, p.ID), fmt.Sprintf(`<code id="job-url">%s/jobs/%d</code>`, e.srv.URL, build)} {
		if !strings.Contains(jp, s) {
			t.Errorf("the job page lacks %q", s)
		}
	}
}

// TestPipelineActions: the buttons, for the admin only and with the CSRF
// token: play a manual job, cancel the pipeline, retry it, retry a job.
func TestPipelineActions(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.run()
	ci := strings.Replace(graphCI, "  needs: [build]\n", "  needs: [build]\n  allow_failure: true\n", 1)
	repo := ciRepo(t, "actions", map[string]string{".gitlab-ci.yml": ci})
	p := e.runPipeline("group/app", repo, nil)
	tok := e.newRunner()
	c := e.login()
	path := fmt.Sprintf("/pipelines/%d", p.ID)
	// unit fails, allowed to; the others succeed: deploy waits, manual.
	unit := p.job(t, "unit")
	for range 4 {
		id, jt := e.take(tok)
		if id == unit {
			e.finish(id, jt, api.UpdateJobRequest{State: "failed", FailureReason: "script_failure"})
		} else {
			e.finish(id, jt, api.UpdateJobRequest{State: "success"})
		}
	}
	deploy := p.job(t, "deploy")
	page := e.untilSection(c, p.ID, regexp.MustCompile(`data-job="deploy" data-status="manual"`))
	csrf := csrfOf(t, page)
	for _, s := range []string{
		fmt.Sprintf(`action="%s/jobs/%d/play"`, path, deploy), fmt.Sprintf(`action="%s/retry"`, path),
		fmt.Sprintf(`action="%s/jobs/%d/retry"`, path, unit), `class="node n-failed allowed"`,
	} {
		if !strings.Contains(page, s) {
			t.Errorf("the pipeline page lacks %q", s)
		}
	}

	// Without the CSRF token, or without a session: refused.
	if resp, _ := e.postCSRF(c, fmt.Sprintf("%s/jobs/%d/play", path, deploy), "wrong"); resp.StatusCode != http.StatusForbidden {
		t.Errorf("play with a wrong csrf = %d, want 403", resp.StatusCode)
	}
	if resp, _ := e.postCSRF(e.client(), fmt.Sprintf("%s/jobs/%d/play", path, deploy), csrf); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("play without a session = %d, want 401", resp.StatusCode)
	}
	// A job of another pipeline through this one's path: 404.
	if resp, _ := e.postCSRF(c, fmt.Sprintf("/pipelines/%d/jobs/%d/play", p.ID+1, deploy), csrf); resp.StatusCode != http.StatusNotFound {
		t.Errorf("play through another pipeline = %d, want 404", resp.StatusCode)
	}
	resp, _ := e.postCSRF(c, fmt.Sprintf("%s/jobs/%d/play", path, deploy), csrf)
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != path {
		t.Fatalf("play = %d to %q, want 303 to %s", resp.StatusCode, resp.Header.Get("Location"), path)
	}
	if got := e.status(deploy); got != "pending" {
		t.Errorf("the played job is %s, want pending", got)
	}
	resp, page = e.postCSRF(c, fmt.Sprintf("%s/jobs/%d/play", path, deploy), csrf)
	if resp.StatusCode != http.StatusConflict || !strings.Contains(page, "not manual") {
		t.Errorf("a second play = %d, want 409 saying it is not manual:\n%.500s", resp.StatusCode, page)
	}

	// Cancel: the played job is canceled.
	if resp, _ := e.postCSRF(c, path+"/cancel", csrf); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("cancel = %d", resp.StatusCode)
	}
	if got := e.status(deploy); got != "canceled" {
		t.Errorf("after the pipeline's cancel deploy is %s, want canceled", got)
	}
	// Retry: the failed and canceled jobs get retries.
	if resp, _ := e.postCSRF(c, path+"/retry", csrf); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("retry = %d", resp.StatusCode)
	}
	after := e.pipeline(p.ID)
	if id := after.job(t, "unit"); id == p.job(t, "unit") {
		t.Errorf("after the retry unit is still job %d", id)
	}
	if resp, page := e.postCSRF(c, path+"/retry", csrf); resp.StatusCode != http.StatusConflict {
		t.Errorf("retry with nothing failed = %d, want 409:\n%.500s", resp.StatusCode, page)
	}

	// A viewer sees no buttons and may not act.
	v := e.client()
	e.do(v, "GET", "/login?"+url.Values{"token": {e.c.ViewerToken()}}.Encode(), nil, nil)
	_, vp := e.do(v, "GET", path, nil, nil)
	if strings.Contains(vp, `/cancel"`) || strings.Contains(vp, `/retry"`) || strings.Contains(vp, `/play"`) {
		t.Error("a viewer's pipeline page has action buttons")
	}
	if resp, _ := e.postCSRF(v, path+"/cancel", csrfOf(t, vp)); resp.StatusCode != http.StatusForbidden {
		t.Errorf("a viewer's cancel = %d, want 403", resp.StatusCode)
	}
}

// TestPipelinesList: the filters by project, ref and status, and the
// pages by id.
func TestPipelinesList(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.run()
	repo := ciRepo(t, "list", map[string]string{".gitlab-ci.yml": "only:\n  script: [true]\n"})
	a := e.runPipeline("group/a", repo, nil)
	b := e.runPipeline("group/b", repo, nil)
	e.api("POST", fmt.Sprintf("/api/v1/pipelines/%d/cancel", b.ID), nil, nil)
	c := e.login()
	rows := func(query string) []string {
		t.Helper()
		resp, page := e.do(c, "GET", "/pipelines?"+query, nil, nil)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET /pipelines?%s = %d %s", query, resp.StatusCode, page)
		}
		var ids []string
		for _, m := range regexp.MustCompile(`<td><a href="/pipelines/(\d+)">`).FindAllStringSubmatch(page, -1) {
			ids = append(ids, m[1])
		}
		return ids
	}
	for _, c := range []struct {
		query string
		want  []int64
	}{
		{"", []int64{b.ID, a.ID}},
		{"project=group/a", []int64{a.ID}},
		{"status=canceled", []int64{b.ID}},
		{"ref=main&project=group/b", []int64{b.ID}},
		{"ref=other", nil},
		{fmt.Sprintf("before=%d", b.ID), []int64{a.ID}},
	} {
		if got := rows(c.query); fmt.Sprint(got) != strings.Trim(fmt.Sprint(c.want), "") {
			want := []string{}
			for _, id := range c.want {
				want = append(want, fmt.Sprint(id))
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("/pipelines?%s shows %v, want %v", c.query, got, want)
			}
		}
	}
	for _, q := range []string{"status=bogus", "before=x"} {
		if resp, _ := e.do(c, "GET", "/pipelines?"+q, nil, nil); resp.StatusCode != http.StatusBadRequest {
			t.Errorf("/pipelines?%s = %d, want 400", q, resp.StatusCode)
		}
	}
}

// TestPipelineEvents: the live section is sent anew when a job of the
// pipeline finishes.
func TestPipelineEvents(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.run()
	repo := ciRepo(t, "live", map[string]string{".gitlab-ci.yml": graphCI})
	p := e.runPipeline("group/app", repo, nil)
	tok := e.newRunner()
	c := e.login()
	req, err := http.NewRequestWithContext(t.Context(), "GET", fmt.Sprintf("%s/pipelines/%d/events", e.srv.URL, p.ID), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	events := readEvents(resp.Body)
	id, jt := e.take(tok)
	for ev := range events {
		if ev.event == "html" && strings.Contains(ev.data, fmt.Sprintf(`data-status="running" data-id="%d"`, id)) {
			break
		}
	}
	e.finish(id, jt, api.UpdateJobRequest{State: "success"})
	for ev := range events {
		if ev.event == "html" && strings.Contains(ev.data, fmt.Sprintf(`data-id="%d"`, id)) && regexp.MustCompile(`data-status="success" data-id="`+fmt.Sprint(id)+`"`).MatchString(ev.data) {
			return
		}
	}
	t.Fatal("the stream ended before the finished job was shown")
}

// TestJobArtifactsAndJUnit: a job's page lists the files of its archive
// and the failed tests of its JUnit report; a file downloads alone, and
// only a file's clean path is taken.
func TestJobArtifactsAndJUnit(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	id, tok := e.running(map[string]any{"name": "tests", "script": []string{"true"}})
	var zbuf bytes.Buffer
	zw := zip.NewWriter(&zbuf)
	for i := range 30 {
		w, _ := zw.Create(fmt.Sprintf("out/file-%02d.txt", i))
		fmt.Fprintf(w, "contents %d", i)
	}
	w, _ := zw.Create("out/<b>odd name</b>.html")
	w.Write([]byte("<script>alert(1)</script>"))
	zw.Close()
	e.upload(id, tok, "artifact_format=zip&artifact_type=archive", zbuf.Bytes())
	var jbuf bytes.Buffer
	gz := gzip.NewWriter(&jbuf)
	gz.Write([]byte(`<testsuite name="pkg"><testcase name="TestOK" classname="pkg"/><testcase name="TestBad" classname="pkg"><failure message="&lt;b&gt;want 1">line 1
line 2</failure></testcase></testsuite>`))
	gz.Close()
	e.upload(id, tok, "artifact_format=gzip&artifact_type=junit", jbuf.Bytes())
	e.finish(id, tok, api.UpdateJobRequest{State: "failed", FailureReason: "script_failure"})

	c := e.login()
	_, page := e.do(c, "GET", fmt.Sprintf("/jobs/%d", id), nil, nil)
	for _, s := range []string{
		"2 tests:", "1 passed", "1 failed", "TestBad", "&lt;b&gt;want 1", "line 1\nline 2",
		fmt.Sprintf(`href="/jobs/%d/artifacts/file?path=out%%2ffile-00.txt"`, id), "31 entries",
		fmt.Sprintf(`href="/jobs/%d/artifacts/files?skip=20"`, id),
	} {
		if !strings.Contains(page, s) {
			t.Errorf("the job page lacks %q", s)
		}
	}
	if strings.Contains(page, "<b>want") || strings.Contains(page, "<b>odd") {
		t.Error("the job page holds a report's or archive's text unescaped")
	}
	_, more := e.do(c, "GET", fmt.Sprintf("/jobs/%d/artifacts/files?skip=20", id), nil, nil)
	if !strings.Contains(more, "out/file-29.txt") || strings.Contains(more, "out/file-19.txt") || !strings.Contains(more, "&lt;b&gt;odd name&lt;/b&gt;.html") {
		t.Errorf("the second page of files:\n%s", more)
	}

	get := func(p string) (*http.Response, string) {
		return e.do(c, "GET", fmt.Sprintf("/jobs/%d/artifacts/file?path=%s", id, url.QueryEscape(p)), nil, nil)
	}
	resp, body := get("out/file-07.txt")
	if resp.StatusCode != http.StatusOK || body != "contents 7" || resp.Header.Get("Content-Type") != "text/plain; charset=utf-8" ||
		resp.Header.Get("Content-Disposition") != `attachment; filename=file-07.txt` {
		t.Errorf("GET a file = %d %q %v", resp.StatusCode, body, resp.Header)
	}
	resp, _ = get("out/<b>odd name</b>.html")
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/octet-stream" || !strings.HasPrefix(resp.Header.Get("Content-Security-Policy"), "sandbox") {
		t.Errorf("GET an HTML file = %d %v, want it as an octet-stream attachment, sandboxed", resp.StatusCode, resp.Header)
	}
	for _, p := range []string{"../out/file-01.txt", "/out/file-01.txt", "out/../out/file-01.txt", "out/", "", "out//file-01.txt", "out\\file-01.txt"} {
		if resp, _ := get(p); resp.StatusCode != http.StatusBadRequest {
			t.Errorf("GET path %q = %d, want 400", p, resp.StatusCode)
		}
	}
	if resp, _ := get("out/none.txt"); resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET a file not in the archive = %d, want 404", resp.StatusCode)
	}
	// Not signed in: to the login form.
	if resp, _ := e.do(e.client(), "GET", fmt.Sprintf("/jobs/%d/artifacts/file?path=out/file-01.txt", id), nil, nil); resp.StatusCode != http.StatusSeeOther {
		t.Errorf("GET a file without a session = %d, want 303", resp.StatusCode)
	}
	_ = io.Discard
}
