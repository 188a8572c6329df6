package web_test

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// TestBrowserProjects: a project's page in the browser: the run form
// runs a pipeline with a variable and lands on its page; a hostile
// schedule description is text.
func TestBrowserProjects(t *testing.T) {
	t.Parallel()
	browser := startBrowser(t)
	e := newEnv(t)
	e.run()
	repo := ciRepo(t, "ci", map[string]string{".gitlab-ci.yml": accessCI})
	id := e.registerProject("group/app", repo, nil)
	e.api("POST", "/api/v1/projects/group%2Fapp/schedules", map[string]any{
		"description": `<img src=x onerror="document.title='pwned-schedule'">`, "ref": "main", "cron": "0 3 * * *",
	}, nil)

	b := newTab(t, browser, e)
	b.login()
	b.do("the projects list, then the project",
		b.open("/projects"),
		chromedp.WaitVisible(chromedp.CSS(fmt.Sprintf(`a[href="/projects/%d"]`, id))),
		chromedp.Click(chromedp.CSS(fmt.Sprintf(`a[href="/projects/%d"]`, id))),
		chromedp.WaitVisible(chromedp.CSS("#run-form")),
	)
	if got := eval[string](b, `document.querySelector('#run-form input[name="ref"]').value`); got != "main" {
		t.Errorf("the form's ref = %q, want the default branch main", got)
	}
	if title := eval[string](b, "document.title"); strings.Contains(title, "pwned") {
		t.Fatalf("a hostile schedule description ran: title %q", title)
	}
	if n := eval[int](b, `document.querySelectorAll('main img:not([alt="pipeline status"])').length`); n != 0 {
		t.Errorf("the page has %d img elements made of text", n)
	}
	b.do("run the pipeline",
		chromedp.SendKeys(chromedp.CSS(`#run-form textarea[name="variables"]`), "GREETING=hello from the form"),
		chromedp.Click(chromedp.CSS("#run-pipeline")),
		chromedp.WaitVisible(chromedp.CSS("svg.pipeline-graph")),
	)
	path := eval[string](b, "location.pathname")
	m := regexp.MustCompile(`^/pipelines/(\d+)$`).FindStringSubmatch(path)
	if m == nil {
		t.Fatalf("after the form the page is %q, want a pipeline's", path)
	}
	pid, _ := strconv.ParseInt(m[1], 10, 64)
	p := e.pipeline(pid)
	var run struct {
		Source      string `json:"source"`
		TriggeredBy string `json:"triggered_by"`
	}
	e.api("GET", "/api/v1/pipelines/"+m[1], nil, &run)
	if run.Source != "web" || run.TriggeredBy != "admin" {
		t.Errorf("the pipeline's source %q, triggered by %q; want web, admin", run.Source, run.TriggeredBy)
	}
	b.do("its job has the variable",
		b.open(fmt.Sprintf("/jobs/%d", p.job(t, "build"))),
		until(`document.querySelector('main')?.textContent.includes('GREETING')`),
	)
}

// TestBrowserProjectForms: the admin registers a project with the form
// on /projects, is shown its webhook secret, edits its default branch,
// adds a masked variable by the checkboxes and removes it by its button,
// all by clicks.
func TestBrowserProjectForms(t *testing.T) {
	t.Parallel()
	browser := startBrowser(t)
	e := newEnv(t)
	repo := ciRepo(t, "ci", map[string]string{".gitlab-ci.yml": accessCI})

	b := newTab(t, browser, e)
	b.login()
	b.do("register a project",
		b.open("/projects"),
		chromedp.WaitVisible(chromedp.CSS("#create-form")),
		chromedp.SendKeys(chromedp.CSS(`#create-form input[name="name"]`), "team/web"),
		chromedp.SendKeys(chromedp.CSS(`#create-form input[name="repo_url"]`), repo),
		chromedp.Click(chromedp.CSS("#create-project")),
		chromedp.WaitVisible(chromedp.CSS("#new-secret")),
	)
	if got, want := eval[string](b, `document.getElementById('new-secret').textContent`), e.webhookSecret("team/web"); got != want {
		t.Errorf("the page shows secret %q, the API has %q", got, want)
	}
	if p := e.projectJSON("team/web"); p.RepoURL != repo || p.DefaultBranch != "main" {
		t.Errorf("registered: %+v, want the repository and the default branch main", p)
	}

	b.do("edit the default branch",
		chromedp.Click(chromedp.CSS("#edit-settings summary")),
		chromedp.WaitVisible(chromedp.CSS(`#settings-form input[name="default_branch"]`)),
		script(`document.querySelector('#settings-form input[name="default_branch"]').value = ''`),
		chromedp.SendKeys(chromedp.CSS(`#settings-form input[name="default_branch"]`), "release"),
		chromedp.Click(chromedp.CSS("#save-settings")),
	)
	b.afterReload("the saved settings", `location.hash === '#settings' && !!document.querySelector('#settings dl')?.textContent.includes('release')`)
	if got := e.projectJSON("team/web").DefaultBranch; got != "release" {
		t.Errorf("default branch after the form = %q, want release", got)
	}
	if eval[bool](b, `!!document.getElementById('new-secret')`) {
		t.Error("the secret is still shown after the registration's page was left")
	}

	b.do("add a masked variable",
		chromedp.SendKeys(chromedp.CSS(`#variable-form input[name="key"]`), "DEPLOY_KEY"),
		chromedp.SendKeys(chromedp.CSS(`#variable-form textarea[name="value"]`), "s3cret-value"),
		chromedp.Click(chromedp.CSS(`#variable-form input[name="masked"]`)),
		chromedp.Click(chromedp.CSS("#set-variable")),
	)
	b.afterReload("the variable's row", `!!document.querySelector('button.remove-variable[data-key="DEPLOY_KEY"]')`)
	if vs := e.projectJSON("team/web").Variables; len(vs) != 1 || vs[0].Key != "DEPLOY_KEY" || !vs[0].Masked || vs[0].Protected {
		t.Errorf("variables after the form = %+v, want DEPLOY_KEY masked", vs)
	}
	if eval[bool](b, `document.body.textContent.includes('s3cret-value')`) {
		t.Error("the page shows the variable's value")
	}
	b.do("remove it", chromedp.Click(chromedp.CSS(`button.remove-variable[data-key="DEPLOY_KEY"]`)))
	b.afterReload("no variables", `location.hash === '#variables' && !document.querySelector('button.remove-variable')`)
	if vs := e.projectJSON("team/web").Variables; len(vs) != 0 {
		t.Errorf("variables after Remove = %+v, want none", vs)
	}
}
