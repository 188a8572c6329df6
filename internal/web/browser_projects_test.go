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
		until(`document.querySelector('main').textContent.includes('GREETING')`),
	)
}
