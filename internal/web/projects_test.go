package web_test

import (
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
)

const accessCI = "build:\n  script: [make]\ndeploy:\n  when: manual\n  script: [deploy]\n"

// projectToken makes a token of project through the admin API.
func (e *env) projectToken(project, name, role string) (id int64, token string) {
	e.t.Helper()
	var tj struct {
		ID    int64  `json:"id"`
		Token string `json:"token"`
	}
	e.api("POST", "/api/v1/projects/"+url.PathEscape(project)+"/tokens", map[string]any{"name": name, "role": role}, &tj)
	return tj.ID, tj.Token
}

// registerProject registers project name of repo: its id.
func (e *env) registerProject(name, repo string, extra map[string]any) int64 {
	e.t.Helper()
	req := map[string]any{"name": name, "repo_url": repo}
	for k, v := range extra {
		req[k] = v
	}
	var p struct {
		ID int64 `json:"id"`
	}
	e.api("POST", "/api/v1/projects", req, &p)
	return p.ID
}

// loginWith signs a browser in with tok: its client and a page's CSRF
// token.
func (e *env) loginWith(tok string) (*http.Client, string) {
	e.t.Helper()
	c := e.client()
	resp, _ := e.do(c, "GET", "/login?"+url.Values{"token": {tok}, "next": {"/pipelines"}}.Encode(), nil, nil)
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/pipelines" {
		e.t.Fatalf("GET /login?token=<project token> = %d to %q, want 303 to /pipelines", resp.StatusCode, resp.Header.Get("Location"))
	}
	_, page := e.do(c, "GET", "/pipelines", nil, nil)
	m := csrfRE.FindStringSubmatch(page)
	if m == nil {
		e.t.Fatalf("no CSRF token on /pipelines:\n%.2000s", page)
	}
	return c, m[1]
}

var formHdr = map[string]string{"Content-Type": "application/x-www-form-urlencoded"}

// TestProjectTokenSessions: a project token's session sees its project
// only (other projects' pages are 404, lists are filtered, runners are
// none of its business), and a maintainer's acts on it where a viewer's
// cannot; revoking the token ends the session.
// formRun is a pipeline a project page's run form made, as the API shows
// it.
type formRun struct {
	Project     string `json:"project"`
	Ref         string `json:"ref"`
	Source      string `json:"source"`
	TriggeredBy string `json:"triggered_by"`
}

// runForm posts v (with csrf) to the run form of project id as client c;
// the form must answer 303 to the pipeline it made, which runForm returns.
func (e *env) runForm(c *http.Client, id int64, csrf string, v url.Values) formRun {
	e.t.Helper()
	resp, _ := e.postForm(c, fmt.Sprintf("/projects/%d/pipelines", id), csrf, v)
	m := regexp.MustCompile(`^/pipelines/(\d+)$`).FindStringSubmatch(resp.Header.Get("Location"))
	if resp.StatusCode != http.StatusSeeOther || m == nil {
		e.t.Fatalf("run form = %d to %q, want 303 to a pipeline", resp.StatusCode, resp.Header.Get("Location"))
	}
	var run formRun
	e.api("GET", "/api/v1/pipelines/"+m[1], nil, &run)
	return run
}

func TestProjectTokenSessions(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.run()
	repo := ciRepo(t, "ci", map[string]string{".gitlab-ci.yml": accessCI})
	idA := e.registerProject("g/a", repo, nil)
	idB := e.registerProject("g/b", repo, nil)
	pa := e.runPipeline("g/a", repo, nil)
	pb := e.runPipeline("g/b", repo, nil)
	maintID, maint := e.projectToken("g/a", "deployer", "maintainer")
	_, viewer := e.projectToken("g/a", "dashboard", "viewer")

	for _, tc := range []struct {
		name       string
		token      string
		maintainer bool
	}{{"maintainer", maint, true}, {"viewer", viewer, false}} {
		t.Run(tc.name, func(t *testing.T) {
			c, csrf := e.loginWith(tc.token)
			for _, p := range []struct {
				path string
				want int
			}{
				{"/pipelines", 200}, {"/jobs", 200}, {"/projects", 200},
				{fmt.Sprintf("/pipelines/%d", pa.ID), 200},
				{fmt.Sprintf("/jobs/%d", pa.job(t, "build")), 200},
				{fmt.Sprintf("/projects/%d", idA), 200},
				{fmt.Sprintf("/pipelines/%d", pb.ID), 404},
				{fmt.Sprintf("/jobs/%d", pb.job(t, "build")), 404},
				{fmt.Sprintf("/jobs/%d/raw", pb.job(t, "build")), 404},
				{fmt.Sprintf("/jobs/%d/artifacts", pb.job(t, "build")), 404},
				{fmt.Sprintf("/projects/%d", idB), 404},
				{"/runners", 404},
			} {
				resp, page := e.do(c, "GET", p.path, nil, nil)
				if resp.StatusCode != p.want {
					t.Errorf("GET %s = %d, want %d", p.path, resp.StatusCode, p.want)
				}
				if strings.Contains(page, "g/b") {
					t.Errorf("GET %s names project g/b:\n%.3000s", p.path, page)
				}
			}
			// The event streams: only the status is read (a stream served
			// would not end).
			for _, path := range []string{fmt.Sprintf("/pipelines/%d/events", pb.ID), fmt.Sprintf("/jobs/%d/log", pb.job(t, "build"))} {
				req, _ := http.NewRequestWithContext(t.Context(), "GET", e.srv.URL+path, nil)
				resp, err := c.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusNotFound {
					t.Errorf("GET %s = %d, want 404", path, resp.StatusCode)
				}
			}
			_, page := e.do(c, "GET", "/pipelines", nil, nil)
			if !strings.Contains(page, fmt.Sprintf(`href="/pipelines/%d"`, pa.ID)) || strings.Contains(page, fmt.Sprintf(`href="/pipelines/%d"`, pb.ID)) {
				t.Errorf("/pipelines: want pipeline %d and not %d:\n%.3000s", pa.ID, pb.ID, page)
			}
			if _, page := e.do(c, "GET", "/pipelines?project=g%2Fb", nil, nil); strings.Contains(page, fmt.Sprintf(`href="/pipelines/%d"`, pb.ID)) {
				t.Errorf("/pipelines?project=g/b lists g/b's pipeline")
			}
			_, page = e.do(c, "GET", "/jobs", nil, nil)
			if strings.Contains(page, fmt.Sprintf(`href="/jobs/%d"`, pb.job(t, "build"))) {
				t.Errorf("/jobs lists g/b's job:\n%.3000s", page)
			}
			if strings.Contains(page, `href="/runners"`) {
				t.Errorf("the nav of a project token's session links the runners")
			}
			// The buttons: a maintainer's only.
			_, page = e.do(c, "GET", fmt.Sprintf("/pipelines/%d", pa.ID), nil, nil)
			if got := strings.Contains(page, "/jobs/"+fmt.Sprint(pa.job(t, "deploy"))+"/play\""); got != tc.maintainer {
				t.Errorf("pipeline page shows the play button: %v, want %v", got, tc.maintainer)
			}
			_, page = e.do(c, "GET", fmt.Sprintf("/projects/%d", idA), nil, nil)
			if got := strings.Contains(page, `id="run-form"`); got != tc.maintainer {
				t.Errorf("project page shows the run form: %v, want %v", got, tc.maintainer)
			}

			// Another project's actions are 404 to a maintainer, 403 to
			// a viewer; its own are a maintainer's.
			otherWant, ownWant := http.StatusNotFound, http.StatusSeeOther
			if !tc.maintainer {
				otherWant, ownWant = http.StatusForbidden, http.StatusForbidden
			}
			for _, path := range []string{
				fmt.Sprintf("/pipelines/%d/cancel", pb.ID),
				fmt.Sprintf("/pipelines/%d/jobs/%d/play", pb.ID, pb.job(t, "deploy")),
				fmt.Sprintf("/jobs/%d/cancel", pb.job(t, "build")),
				fmt.Sprintf("/jobs/%d/play", pb.job(t, "deploy")),
				fmt.Sprintf("/projects/%d/pipelines", idB),
			} {
				if resp, _ := e.postCSRF(c, path, csrf); resp.StatusCode != otherWant {
					t.Errorf("POST %s = %d, want %d", path, resp.StatusCode, otherWant)
				}
			}
			if got := e.pipeline(pb.ID); got.Status == "canceled" {
				t.Errorf("g/b's pipeline was canceled by g/a's token")
			}
			// Without the CSRF token, nothing.
			if resp, _ := e.do(c, "POST", fmt.Sprintf("/jobs/%d/cancel", pa.job(t, "build")), formHdr, strings.NewReader("")); resp.StatusCode != http.StatusForbidden {
				t.Errorf("POST cancel without csrf = %d, want 403", resp.StatusCode)
			}
			if resp, _ := e.postCSRF(c, fmt.Sprintf("/jobs/%d/cancel", pa.job(t, "build")), csrf); resp.StatusCode != ownWant {
				t.Errorf("POST own job's cancel = %d, want %d", resp.StatusCode, ownWant)
			}
		})
	}

	// A maintainer's run form runs a pipeline in the token's name.
	c, csrf := e.loginWith(maint)
	run := e.runForm(c, idA, csrf, url.Values{"ref": {"main"}, "variables": {"GREETING=hi there\n"}})
	if run.Project != "g/a" || run.Source != "web" || run.TriggeredBy != "deployer" {
		t.Errorf("the form's pipeline: %+v, want g/a, web, deployer", run)
	}

	// Revoked: the session ends.
	e.api("DELETE", fmt.Sprintf("/api/v1/projects/g%%2Fa/tokens/%d", maintID), nil, nil)
	if resp, _ := e.do(c, "GET", "/pipelines", nil, nil); resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(resp.Header.Get("Location"), "/login") {
		t.Errorf("GET /pipelines with a revoked token's session = %d to %q, want 303 to /login", resp.StatusCode, resp.Header.Get("Location"))
	}
	if resp, _ := e.do(e.client(), "GET", "/login?"+url.Values{"token": {maint}}.Encode(), nil, nil); resp.StatusCode != http.StatusForbidden {
		t.Errorf("sign-in with a revoked token = %d, want 403", resp.StatusCode)
	}
}

// TestProjectsPages: the projects list and a project's page show its
// settings without a secret, hostile text as text, and the run form's
// configuration errors.
func TestProjectsPages(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	repo := ciRepo(t, "ci", map[string]string{".gitlab-ci.yml": accessCI})
	broken := ciRepo(t, "broken", map[string]string{".gitlab-ci.yml": "build:\n  script: [make]\n  needs: [nothing]\n"})
	id := e.registerProject("g/app", repo, map[string]any{
		"variables": []map[string]any{{"key": "DEPLOY_KEY", "value": "s3cret-value", "masked": true, "protected": true}},
		"forge":     map[string]any{"kind": "gitea", "url": "https://gitea.example.com", "repo": "g/app", "token": "forge-s3cret"},
	})
	brokenID := e.registerProject("g/broken", broken, nil)
	hostile := `<script>document.title='pwned-schedule'</script>`
	e.api("POST", "/api/v1/projects/g%2Fapp/schedules", map[string]any{"description": hostile, "ref": "main", "cron": "0 3 * * *", "cron_timezone": "Europe/Berlin"}, nil)
	p := e.runPipeline("g/app", repo, nil)

	a := e.login()
	resp, page := e.do(a, "GET", "/projects", nil, nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /projects = %d", resp.StatusCode)
	}
	for _, want := range []string{
		fmt.Sprintf(`href="/projects/%d"`, id), fmt.Sprintf(`href="/projects/%d"`, brokenID), `href="/pipelines?project=g%2fapp"`,
		fmt.Sprintf(`href="/pipelines/%d"`, p.ID), `<a href="/projects">Projects</a>`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("/projects lacks %s:\n%.3000s", want, page)
		}
	}
	resp, page = e.do(a, "GET", fmt.Sprintf("/projects/%d", id), nil, nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /projects/%d = %d", id, resp.StatusCode)
	}
	for _, want := range []string{
		"DEPLOY_KEY", "gitea.example.com", "token set", `<img src="/g/app/badge.svg"`, "[![pipeline status](" + e.srv.URL + "/g/app/badge.svg)",
		e.srv.URL + "/api/v1/hooks/github/g/app", e.srv.URL + "/api/v1/hooks/generic/g/app",
		"0 3 * * *", "Europe/Berlin", "&lt;script&gt;", `id="run-form"`, `name="ref" value="main"`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("/projects/%d lacks %s:\n%.5000s", id, want, page)
		}
	}
	for _, secret := range []string{"s3cret-value", "forge-s3cret", hostile} {
		if strings.Contains(page, secret) {
			t.Errorf("/projects/%d shows %q", id, secret)
		}
	}
	csrf := csrfOf(t, page)
	// A configuration error shows on the form.
	resp, page = e.do(a, "POST", fmt.Sprintf("/projects/%d/pipelines", brokenID), formHdr,
		strings.NewReader(url.Values{"csrf": {csrf}, "ref": {"main"}}.Encode()))
	if resp.StatusCode != http.StatusUnprocessableEntity || !strings.Contains(page, `id="run-errors"`) || !strings.Contains(page, ".gitlab-ci.yml:") {
		t.Errorf("run of a broken configuration = %d:\n%.3000s", resp.StatusCode, page)
	}
	// Bad variables, a ref that is none.
	for _, tc := range []struct {
		ref, vars string
		want      int
	}{{"main", "no equals sign", 400}, {"main", "1BAD=x", 400}, {"nope", "", 422}} {
		resp, _ := e.do(a, "POST", fmt.Sprintf("/projects/%d/pipelines", id), formHdr,
			strings.NewReader(url.Values{"csrf": {csrf}, "ref": {tc.ref}, "variables": {tc.vars}}.Encode()))
		if resp.StatusCode != tc.want {
			t.Errorf("run ref %q variables %q = %d, want %d", tc.ref, tc.vars, resp.StatusCode, tc.want)
		}
	}
	// The admin's run is the admin's.
	run := e.runForm(a, id, csrf, url.Values{"ref": {""}, "variables": {"A=1\r\nB=two words"}})
	if run.Ref != "main" || run.Source != "web" || run.TriggeredBy != "admin" {
		t.Errorf("the form's pipeline: %+v, want main, web, admin", run)
	}
	if resp, _ := e.do(a, "GET", "/projects/999999", nil, nil); resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET /projects/999999 = %d, want 404", resp.StatusCode)
	}
}
