package web_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/drover-ci/drover/internal/api"
)

// The pipeline's page in the browser: the graph, a manual job played by
// a click, the graph following the pipeline live, hostile text shown as
// text.

// nodeStatus is JavaScript: the status of job name's node in the graph,
// "" when there is none.
func nodeStatus(name string) string {
	return fmt.Sprintf(`(Array.from(document.querySelectorAll('svg.pipeline-graph a.node')).find(a => a.dataset.job === %s) || {dataset: {status: ''}}).dataset.status`, strconv.Quote(name))
}

func TestBrowserPipeline(t *testing.T) {
	t.Parallel()
	browser := startBrowser(t)
	t.Run("Graph", func(t *testing.T) { testBrowserPipelineGraph(t, browser) })
	t.Run("Play", func(t *testing.T) { testBrowserPipelinePlay(t, browser) })
	t.Run("Live", func(t *testing.T) { testBrowserPipelineLive(t, browser) })
}

// testBrowserPipelineGraph: every job is a node with its status, the
// needs are edges, and a hostile job name and commit title are text: no
// script of theirs runs.
func testBrowserPipelineGraph(t *testing.T, browser context.Context) {
	e := newEnv(t)
	e.run()
	repo := ciRepo(t, hostileTitle, map[string]string{".gitlab-ci.yml": graphCI})
	p := e.runPipeline("group/app", repo, nil)
	b := newTab(t, browser, e)
	b.login()
	b.do("the pipeline page",
		b.open(fmt.Sprintf("/pipelines/%d", p.ID)),
		until(`document.querySelectorAll('svg.pipeline-graph a.node').length === 5`),
	)
	// The advance queues build and lint; the page follows.
	b.do("build and lint pending", until(nodeStatus("build")+` === 'pending' && `+nodeStatus("lint")+` === 'pending'`))
	got := eval[[]string](b, `Array.from(document.querySelectorAll('svg.pipeline-graph a.node')).map(a => a.dataset.job + '=' + a.dataset.status)`)
	want := []string{"build=pending", "lint=pending", "unit=created", hostileJob + "=created", "deploy=created"}
	if !slices.Equal(got, want) {
		t.Errorf("nodes = %q, want %q", got, want)
	}
	if n := eval[int](b, `document.querySelectorAll('svg.pipeline-graph path.edge').length`); n != 3 {
		t.Errorf("%d edges, want 3", n)
	}
	// Each node is drawn: a box with a size of its own.
	if w := eval[float64](b, `document.querySelector('svg.pipeline-graph a.node rect').getBBox().width`); w != 210 {
		t.Errorf("a node's box is %v wide, want 210", w)
	}
	if title := eval[string](b, "document.title"); strings.Contains(title, "pwned") {
		t.Fatalf("a hostile name ran: title %q", title)
	}
	if n := eval[int](b, `document.querySelectorAll('main script, main img, svg.pipeline-graph img').length`); n != 0 {
		t.Errorf("the page has %d script or img elements made of names", n)
	}
	if h1 := eval[string](b, `document.querySelector('h1').textContent`); !strings.Contains(h1, "<script>document.title='pwned-commit'</script>") {
		t.Errorf("the heading = %q, want the commit's title as text", h1)
	}
	if label := eval[string](b, fmt.Sprintf(`Array.from(document.querySelectorAll('svg.pipeline-graph a.node')).find(a => a.dataset.job === %s).querySelector('text.name').textContent`, strconv.Quote(hostileJob))); !strings.HasPrefix(label, "<img src=x") {
		t.Errorf("the hostile job's label = %q, want its name as text", label)
	}
}

// testBrowserPipelinePlay: the manual job's Play button queues it, and
// its node turns pending.
func testBrowserPipelinePlay(t *testing.T, browser context.Context) {
	e := newEnv(t)
	e.run()
	repo := ciRepo(t, "play", map[string]string{".gitlab-ci.yml": "a:\n  script: [true]\nb:\n  when: manual\n  script: [true]\n"})
	p := e.runPipeline("group/app", repo, nil)
	b := newTab(t, browser, e)
	b.login()
	b.do("the manual job",
		b.open(fmt.Sprintf("/pipelines/%d", p.ID)),
		until(nodeStatus("b")+` === 'manual'`),
		click(`button.play[data-job="b"]`),
	)
	b.afterReload("the played job", nodeStatus("b")+` === 'pending'`)
	if got := e.status(p.job(t, "b")); got != "pending" {
		t.Errorf("the played job is %s, want pending", got)
	}
	if eval[bool](b, `document.querySelector('button.play[data-job="b"]') !== null`) {
		t.Error("the played job still has a Play button")
	}
}

// testBrowserPipelineLive: the page, left open, shows a job's end and the
// pipeline's without a reload.
func testBrowserPipelineLive(t *testing.T, browser context.Context) {
	e := newEnv(t)
	e.run()
	repo := ciRepo(t, "live", map[string]string{".gitlab-ci.yml": "only:\n  script: [true]\n"})
	p := e.runPipeline("group/app", repo, nil)
	tok := e.newRunner()
	b := newTab(t, browser, e)
	b.login()
	b.do("the pipeline page",
		b.open(fmt.Sprintf("/pipelines/%d", p.ID)),
		until(nodeStatus("only")+` === 'pending'`),
		script(`window.notReloaded = true`),
	)
	id, jt := e.take(tok)
	b.do("the job running", until(nodeStatus("only")+` === 'running'`))
	e.finish(id, jt, api.UpdateJobRequest{State: "success"})
	b.do("the job's and the pipeline's end",
		until(nodeStatus("only")+` === 'success'`),
		until(`document.getElementById('pipeline-status').dataset.status === 'success'`),
	)
	if !eval[bool](b, `window.notReloaded === true`) {
		t.Error("the page was reloaded: the live section should have changed in place")
	}
}
