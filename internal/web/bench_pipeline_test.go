package web_test

import (
	"fmt"
	"strings"
	"testing"
)

// The 300-job pipeline's page: the server's render time (in process, as
// BenchmarkJobsPage) and the time Chromium takes to show it, each with
// the jobs list measured in the same run as the baseline.

// bigPipelineCI is a 300-job configuration: 100 jobs in build, and 20
// parallel:matrix jobs of 10 combinations each in test, each needing one
// build job (200 edges).
func bigPipelineCI() string {
	var b strings.Builder
	b.WriteString("stages: [build, test]\n")
	for j := range 100 {
		fmt.Fprintf(&b, "job-%d:\n  stage: build\n  script: [make target-%d]\n", j, j)
	}
	for j := range 20 {
		fmt.Fprintf(&b, "matrix-%d:\n  stage: test\n  needs: [job-%d]\n  script: [echo $A $B]\n  parallel:\n    matrix:\n      - A: [a1, a2, a3, a4, a5]\n        B: [b1, b2]\n", j, j*5)
	}
	return b.String()
}

// bigPipeline runs the 300-job pipeline on e: its id.
func bigPipeline(b *testing.B, e *env) int64 {
	b.Helper()
	repo := ciRepo(b, "a pipeline of 300 jobs", map[string]string{".gitlab-ci.yml": bigPipelineCI()})
	p := e.runPipeline("group/big", repo, nil)
	if len(p.Jobs) != 300 {
		b.Fatalf("the pipeline has %d jobs, want 300", len(p.Jobs))
	}
	return p.ID
}

// BenchmarkPipelinePage300 is the page of a 300-job pipeline (its graph
// of 300 nodes and 200 edges), and, as the baseline, /jobs (50 rows) of
// the same store.
func BenchmarkPipelinePage300(b *testing.B) {
	e := newEnv(b)
	id := bigPipeline(b, e)
	h := e.c.Handler()
	b.Run("pipeline", func(b *testing.B) { timeRequests(b, h, e.token, fmt.Sprintf("/pipelines/%d", id)) })
	b.Run("jobs-baseline", func(b *testing.B) { timeRequests(b, h, e.token, "/jobs") })
	b.Run("pipelines-list", func(b *testing.B) { timeRequests(b, h, e.token, "/pipelines") })
}

// BenchmarkPipelinePageOpenBrowser is the 300-job pipeline's page opened
// in headless Chromium over loopback, signed in, and /jobs (50 rows of
// the same store) as the baseline: per load, navigation start to the
// first contentful paint, to DOMContentLoaded and to the load event;
// p50 and the largest reported.
func BenchmarkPipelinePageOpenBrowser(b *testing.B) {
	browser := startBrowser(b)
	e := newEnv(b)
	id := bigPipeline(b, e)
	for _, c := range []struct{ name, path, ready string }{
		{"pipeline", fmt.Sprintf("/pipelines/%d", id), `document.querySelectorAll('svg.pipeline-graph a.node').length === 300`},
		{"jobs-baseline", "/jobs", `document.querySelectorAll('#job-rows tr').length === 50`},
	} {
		b.Run(c.name, func(b *testing.B) {
			pg := newTab(b, browser, e)
			pg.login()
			type load struct {
				FCP   float64 `json:"fcp"`
				DCL   float64 `json:"dcl"`
				Load  float64 `json:"load"`
				Nodes float64 `json:"nodes"`
			}
			var loads []load
			for b.Loop() {
				pg.do("the page",
					pg.open(c.path),
					until(`document.readyState === 'complete' && performance.getEntriesByType('navigation')[0].loadEventEnd > 0 && performance.getEntriesByName('first-contentful-paint').length > 0`),
					until(c.ready),
				)
				loads = append(loads, eval[load](pg, `(() => {
					const n = performance.getEntriesByType('navigation')[0];
					return {
						fcp: performance.getEntriesByName('first-contentful-paint')[0].startTime,
						dcl: n.domContentLoadedEventEnd - n.startTime,
						load: n.loadEventEnd - n.startTime,
						nodes: document.getElementsByTagName('*').length,
					};
				})()`))
			}
			reportSpread(b, loads, "fcp-ms", func(l load) float64 { return l.FCP })
			reportSpread(b, loads, "dcl-ms", func(l load) float64 { return l.DCL })
			reportSpread(b, loads, "load-ms", func(l load) float64 { return l.Load })
			reportSpread(b, loads, "elements", func(l load) float64 { return l.Nodes })
		})
	}
}
