package web_test

import (
	"context"
	"database/sql"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	_ "modernc.org/sqlite" // the "sqlite" driver, to seed the store in bulk

	"github.com/drover-ci/drover/internal/store"
	"github.com/drover-ci/drover/internal/store/sqlite"
)

// The server's time for the pages at scale: the handler called in
// process (no network), each request timed, p50 and p99 reported. See
// docs/BENCHMARKS.md.

// benchJobs is how many jobs BenchmarkJobsPage's store holds.
const benchJobs = 100_000

// seedJobs fills the SQLite store in dir with n jobs over 10 projects: one
// job through the store (its schema), the rest copied from it in one SQL
// statement.
func seedJobs(b *testing.B, dir string, n int) {
	b.Helper()
	ctx := b.Context()
	path := filepath.Join(dir, "coordinator.db")
	st, err := sqlite.Open(ctx, path)
	if err != nil {
		b.Fatal(err)
	}
	now := time.Now()
	for p := range 10 {
		if _, err := st.CreateJob(ctx, store.Job{
			Name: "seed", Project: fmt.Sprintf("group/p%d", p), Stage: "test", Status: store.StatusSuccess,
			CreatedAt: now, QueuedAt: now, StartedAt: now, FinishedAt: now, UpdatedAt: now,
		}); err != nil {
			b.Fatal(err)
		}
	}
	if err := st.Close(); err != nil {
		b.Fatal(err)
	}
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	start := time.Now()
	// Mostly successes, some failures and cancels, no job in progress (a
	// store with runners to run them is not what is measured).
	_, err = db.ExecContext(ctx, `INSERT INTO jobs (name, project_id, stage, status, failure_reason, exit_code, spec,
			created_at, queued_at, started_at, finished_at, updated_at, queued_ns)
		WITH RECURSIVE seq(i) AS (SELECT 11 UNION ALL SELECT i + 1 FROM seq WHERE i < ?1)
		SELECT 'job-' || i, 1 + i % 10, 'test',
			CASE WHEN i % 50 = 0 THEN 'canceled' WHEN i % 10 = 0 THEN 'failed' ELSE 'success' END,
			CASE WHEN i % 10 = 0 AND i % 50 != 0 THEN 'script_failure' ELSE '' END,
			CASE WHEN i % 10 = 0 AND i % 50 != 0 THEN 1 END,
			'{}', ?2 + i, ?2 + i, ?2 + i + 1000000, ?2 + i + 9000000000, ?2 + i + 9000000000, 1000000
		FROM seq`, n, now.Add(-time.Duration(n)*time.Minute).UnixNano())
	if err != nil {
		b.Fatalf("seed %d jobs: %v", n, err)
	}
	b.Logf("seeded %d jobs in %v", n, time.Since(start))
}

// timeRequests serves GET path to h (with the admin token) as often as
// b asks, and reports the p50 and p99 of the server's time and the
// answer's size.
func timeRequests(b *testing.B, h http.Handler, token, path string) {
	b.Helper()
	var took []time.Duration
	var size int
	for b.Loop() {
		req := httptest.NewRequestWithContext(context.WithoutCancel(b.Context()), "GET", path, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		rec := httptest.NewRecorder()
		start := time.Now()
		h.ServeHTTP(rec, req)
		took = append(took, time.Since(start))
		if rec.Code != http.StatusOK {
			b.Fatalf("GET %s = %d %.300s", path, rec.Code, rec.Body.String())
		}
		size = rec.Body.Len()
		if strings.Contains(rec.Body.String(), "No jobs.") {
			b.Fatalf("GET %s shows no jobs", path)
		}
	}
	slices.Sort(took)
	ms := func(q float64) float64 {
		return float64(took[int(q*float64(len(took)-1))]) / float64(time.Millisecond)
	}
	b.ReportMetric(ms(0.5), "p50-ms")
	b.ReportMetric(ms(0.99), "p99-ms")
	b.ReportMetric(float64(size), "page-bytes")
}

// BenchmarkJobsPage is /jobs, filtered and paged, over 100,000 jobs in
// SQLite.
func BenchmarkJobsPage(b *testing.B) {
	dir := b.TempDir()
	seedJobs(b, dir, benchJobs)
	e := newEnvIn(b, dir)
	h := e.c.Handler()
	for _, c := range []struct{ name, path string }{
		{"newest", "/jobs"},
		{"status", "/jobs?status=failed"},
		{"project", "/jobs?project=group/p3"},
		{"status+project", "/jobs?status=canceled&project=group/p0"},
		{"older-page", fmt.Sprintf("/jobs?before=%d", benchJobs/2)},
		{"newer-page", "/jobs?after=100"},
	} {
		b.Run(c.name, func(b *testing.B) { timeRequests(b, h, e.token, c.path) })
	}
}

// BenchmarkLogPage100MB is the page of a job whose log is 100 MB (lines
// of 100 bytes, some coloured, in sections), and a piece before its tail.
func BenchmarkLogPage100MB(b *testing.B) {
	e := newEnv(b)
	id, size := seedBigLog(b, e)
	h := e.c.Handler()
	b.Run("page", func(b *testing.B) { timeRequests(b, h, e.token, fmt.Sprintf("/jobs/%d", id)) })
	b.Run("earlier", func(b *testing.B) {
		timeRequests(b, h, e.token, fmt.Sprintf("/jobs/%d/log/range?to=%d", id, size/2))
	})
	b.Run("raw", func(b *testing.B) { timeRequests(b, h, e.token, fmt.Sprintf("/jobs/%d/raw", id)) })
}

// seedBigLog has a running job send a 100 MB log (lines of 100 bytes,
// some coloured, in sections of 5,000 lines) in 1 MiB trace PATCHes; it
// returns the job and the log's size.
func seedBigLog(b *testing.B, e *env) (int64, int) {
	b.Helper()
	id, tok := e.running(map[string]any{"name": "big", "script": []string{"true"}})
	var chunk strings.Builder
	size, line, section := 0, 0, 0
	start := time.Now()
	for size < 100<<20 {
		chunk.Reset()
		for chunk.Len() < 1<<20-200 {
			switch {
			case line%5000 == 0:
				fmt.Fprintf(&chunk, "section_start:%d:step_%d\r\x1b[0K\x1b[36;1mstep %d\x1b[0;m\n", 1700000000+line, section, section)
			case line%5000 == 4999:
				fmt.Fprintf(&chunk, "section_end:%d:step_%d\r\x1b[0K\n", 1700000000+line, section)
				section++
			case line%7 == 0:
				fmt.Fprintf(&chunk, "\x1b[32;1mline %09d\x1b[0;m %s\n", line, strings.Repeat("=", 70))
			default:
				fmt.Fprintf(&chunk, "line %09d %s\n", line, strings.Repeat("-", 84))
			}
			line++
		}
		e.patch(id, tok, size, chunk.String())
		size += chunk.Len()
	}
	b.Logf("a %d-byte log of %d lines sent in %v", size, line, time.Since(start))
	return id, size
}

// pageLoad is what the browser reports of one load of a page.
type pageLoad struct {
	DOMContentLoaded float64 `json:"dcl"`   // ms from navigation start
	Load             float64 `json:"load"`  // ms from navigation start
	Heap             float64 `json:"heap"`  // used JS heap, bytes (-1 when unknown)
	Nodes            float64 `json:"nodes"` // elements in the document
	AtTail           bool    `json:"tail"`  // the log shows its last line
}

// BenchmarkLogPageOpenBrowser is the job page of a 100 MB log opened in
// headless Chromium over loopback, signed in: per load, navigation start
// to DOMContentLoaded and to the load event (Navigation Timing), the used
// JS heap after the load (performance.memory) and the document's element
// count; p50 and the largest over the loads reported.
func BenchmarkLogPageOpenBrowser(b *testing.B) {
	browser := startBrowser(b)
	e := newEnv(b)
	id, _ := seedBigLog(b, e)
	pg := newTab(b, browser, e)
	pg.login()
	var loads []pageLoad
	for b.Loop() {
		pg.do("the job page",
			pg.open(fmt.Sprintf("/jobs/%d", id)),
			until(`document.readyState === 'complete' && performance.getEntriesByType('navigation')[0].loadEventEnd > 0`),
		)
		loads = append(loads, eval[pageLoad](pg, `(() => {
			const n = performance.getEntriesByType('navigation')[0];
			const log = document.getElementById('log');
			return {
				dcl: n.domContentLoadedEventEnd - n.startTime,
				load: n.loadEventEnd - n.startTime,
				heap: performance.memory ? performance.memory.usedJSHeapSize : -1,
				nodes: document.getElementsByTagName('*').length,
				tail: log.textContent.trimEnd().endsWith('section_end') || /line 0*\d+ -+\s*$/.test(log.textContent.slice(-400)),
			};
		})()`))
	}
	reportSpread(b, loads, "dcl-ms", func(l pageLoad) float64 { return l.DOMContentLoaded })
	reportSpread(b, loads, "load-ms", func(l pageLoad) float64 { return l.Load })
	reportSpread(b, loads, "heap-MB", func(l pageLoad) float64 { return l.Heap / (1 << 20) })
	reportSpread(b, loads, "nodes", func(l pageLoad) float64 { return l.Nodes })
	for _, l := range loads {
		if !l.AtTail {
			b.Errorf("a load did not show the log's tail: %+v", l)
			break
		}
	}
}

// BenchmarkLiveLogLatency is the time from a runner's PATCH of a trace
// chunk to its line in a browser that follows the job's page: headless
// Chromium, a MutationObserver on the log recording when each marker
// line appears (performance.timeOrigin + performance.now(), the same wall
// clock as the test's time.Now just before the PATCH). One line per
// iteration, each awaited before the next; p50 and p99 reported.
func BenchmarkLiveLogLatency(b *testing.B) {
	browser := startBrowser(b)
	e := newEnv(b)
	id, tok := e.running(map[string]any{"name": "latency", "script": []string{"true"}})
	first := "the first line\n"
	e.patch(id, tok, 0, first)
	pg := newTab(b, browser, e)
	pg.login()
	pg.do("the job page",
		pg.open(fmt.Sprintf("/jobs/%d", id)),
		until(logHas("the first line")),
		until(`document.getElementById('log-state').textContent === 'live'`),
		script(`window.__seen = {};
			new MutationObserver(records => {
				const at = performance.timeOrigin + performance.now();
				for (const r of records) {
					const nodes = r.type === 'characterData' ? [r.target] : Array.from(r.addedNodes);
					for (const n of nodes) {
						for (const m of (n.textContent || '').matchAll(/mark-(\d+)-end/g)) {
							if (!(m[1] in window.__seen)) window.__seen[m[1]] = at;
						}
					}
				}
			}).observe(document.getElementById('log'), {childList: true, subtree: true, characterData: true})`),
	)
	size := len(first)
	var lat []time.Duration
	i := 0
	for b.Loop() {
		line := fmt.Sprintf("line %d mark-%d-end\n", i, i)
		sent := time.Now()
		e.patch(id, tok, size, line)
		size += len(line)
		pg.do("the line", until(fmt.Sprintf(`window.__seen[%d] !== undefined`, i)))
		seen := eval[float64](pg, fmt.Sprintf(`window.__seen[%d]`, i))
		lat = append(lat, time.Duration(seen*float64(time.Millisecond))-time.Duration(sent.UnixNano()))
		i++
	}
	slices.Sort(lat)
	q := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))]) / float64(time.Millisecond) }
	b.ReportMetric(q(0.5), "p50-ms")
	b.ReportMetric(q(0.99), "p99-ms")
}

// reportSpread reports the median and the maximum of f over loads, as the
// metrics p50-unit and max-unit.
func reportSpread[L any](b *testing.B, loads []L, unit string, f func(L) float64) {
	v := make([]float64, len(loads))
	for i, l := range loads {
		v[i] = f(l)
	}
	slices.Sort(v)
	b.ReportMetric(v[len(v)/2], "p50-"+unit)
	b.ReportMetric(v[len(v)-1], "max-"+unit)
}
