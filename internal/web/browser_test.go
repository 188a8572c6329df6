package web_test

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/web"
)

// The pages in a real browser: headless Chromium driven over the DevTools
// protocol (chromedp), against a real coordinator. The tests wait on
// conditions in the page, never for a fixed time; the deadline of each is
// generous for a loaded machine.

// browserTimeout bounds each browser subtest.
const browserTimeout = 3 * time.Minute

// chromePath is the browser to drive: $DROVER_CHROME, or the first of the
// usual names on PATH; "" when there is none.
func chromePath() string {
	if p := os.Getenv("DROVER_CHROME"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// startBrowser starts headless Chromium for the test, or skips it when
// there is none; the browser stops when the test ends.
func startBrowser(t testing.TB) context.Context {
	t.Helper()
	path := chromePath()
	if path == "" {
		t.Skip("no Chromium or Chrome found (install the chromium package, or set DROVER_CHROME): the browser tests are skipped")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.NoSandbox, // as root in a container
		chromedp.WindowSize(1200, 800),
		chromedp.Flag("disable-gpu", true),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.WithoutCancel(t.Context()), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	// The first Run starts the browser; it must have no deadline of its
	// own (the browser would stop with it).
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start %s: %v", path, err)
	}
	return ctx
}

// tab is a browser tab with a cookie jar of its own (a new browser
// context), on env e's coordinator.
type tab struct {
	t   testing.TB
	e   *env
	ctx context.Context
}

func newTab(t testing.TB, browser context.Context, e *env) *tab {
	t.Helper()
	ctx, cancel := chromedp.NewContext(browser, chromedp.WithNewBrowserContext())
	ctx, cancelT := context.WithTimeout(ctx, browserTimeout)
	t.Cleanup(func() { cancelT(); cancel() })
	return &tab{t: t, e: e, ctx: ctx}
}

// do runs steps in the tab; a failure ends the test.
func (b *tab) do(what string, steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	if err := chromedp.Do(b.ctx, steps...); err != nil {
		b.t.Fatalf("browser: %s: %v", what, err)
	}
}

// eval returns the value of JavaScript expression js in the page.
func eval[T any](b *tab, js string) T {
	b.t.Helper()
	v, err := chromedp.Run(b.ctx, chromedp.Evaluate[T](js))
	if err != nil {
		b.t.Fatalf("browser: evaluate %s: %v", js, err)
	}
	return v
}

// until waits until JavaScript expression js is true in the page.
func until(js string) chromedp.Action[chromedp.Void] {
	return func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
		_, err := chromedp.Poll[bool](js, chromedp.WithPollingInterval(50*time.Millisecond), chromedp.WithPollingTimeout(0))(ctx, t)
		if err != nil {
			return chromedp.Void{}, fmt.Errorf("waiting for %s: %w", js, err)
		}
		return chromedp.Void{}, nil
	}
}

// afterReload waits until js is true in a page that has just been
// reloaded or navigated away from: a wait that starts while chromedp still has the old page's
// JavaScript context fails, and is tried again.
func (b *tab) afterReload(what, js string) {
	b.t.Helper()
	for {
		err := chromedp.Do(b.ctx, until(js))
		if err == nil {
			return
		}
		if b.ctx.Err() != nil || !navigating(err) {
			b.t.Fatalf("browser: %s: %v", what, err)
		}
	}
}

// navigating reports whether err is of a wait that ran into a
// navigation: the page's JavaScript context went away under it.
func navigating(err error) bool {
	for _, s := range []string{"Cannot find context", "context was destroyed", "Inspected target navigated or closed"} {
		if strings.Contains(err.Error(), s) {
			return true
		}
	}
	return false
}

// click clicks the element sel selects, as chromedp.Click does, again
// when the node it found was replaced before the click reached it: a
// live section (live.js) swaps its whole HTML for every event, so a
// button found in one version may be gone when the mouse comes.
// chromedp fails such a click before it sends the mouse events, so
// trying again never clicks twice.
func click(sel string) chromedp.Action[chromedp.Void] {
	return func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
		for {
			v, err := chromedp.Click(chromedp.CSS(sel))(ctx, t)
			if err == nil || ctx.Err() != nil || !replaced(err) {
				return v, err
			}
		}
	}
}

// replaced reports whether err is of a node that left the page between
// its query and its use.
func replaced(err error) bool {
	for _, s := range []string{"Could not find node with given id", "No node with given id found", "Node is detached from document"} {
		if strings.Contains(err.Error(), s) {
			return true
		}
	}
	return false
}

// script runs JavaScript statements js in the page.
func script(js string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		_, err := chromedp.Evaluate[bool]("(() => { "+js+"; return true })()")(ctx, t)
		if err != nil {
			return fmt.Errorf("run %s: %w", js, err)
		}
		return nil
	})
}

// open loads path of the coordinator.
func (b *tab) open(path string) chromedp.Action[chromedp.Void] {
	return chromedp.Navigate(b.e.srv.URL + path)
}

// login signs the tab in through /login?token=&next=/jobs.
func (b *tab) login() {
	b.t.Helper()
	b.do("sign in",
		b.open("/login?"+url.Values{"token": {b.e.token}, "next": {"/jobs"}}.Encode()),
		chromedp.WaitVisible(chromedp.CSS("#job-rows")),
	)
}

// logHas is JavaScript: the log's text contains s.
func logHas(s string) string {
	return fmt.Sprintf("document.getElementById('log').textContent.includes(%s)", strconv.Quote(s))
}

func TestBrowser(t *testing.T) {
	t.Parallel()
	browser := startBrowser(t)
	t.Run("Login", func(t *testing.T) { testBrowserLogin(t, browser) })
	t.Run("LiveLog", func(t *testing.T) { testBrowserLiveLog(t, browser) })
	t.Run("LiveTail", func(t *testing.T) { testBrowserLiveTail(t, browser) })
	t.Run("Sections", func(t *testing.T) { testBrowserSections(t, browser) })
	t.Run("LoadEarlier", func(t *testing.T) { testBrowserLoadEarlier(t, browser) })
	t.Run("Cancel", func(t *testing.T) { testBrowserCancel(t, browser) })
	t.Run("XSS", func(t *testing.T) { testBrowserXSS(t, browser) })
	t.Run("Screenshots", func(t *testing.T) { testBrowserScreenshots(t, browser) })
	t.Run("RunnersLive", func(t *testing.T) { testBrowserRunnersLive(t, browser) })
	t.Run("FleetLive", func(t *testing.T) { testBrowserFleetLive(t, browser) })
	t.Run("FleetSignIn", func(t *testing.T) { testBrowserFleetSignIn(t, browser) })
	t.Run("BilledTime", func(t *testing.T) { testBrowserBilledTime(t, browser) })
}

// testBrowserLogin: a page without a session leads to the form, which
// signs in; /login?token= signs in at once and lands on next.
func testBrowserLogin(t *testing.T, browser context.Context) {
	e := newEnv(t)
	var job struct {
		ID int64 `json:"id"`
	}
	e.api("POST", "/api/v1/jobs", map[string]any{"name": "build-login", "project": "group/app", "script": []string{"true"}}, &job)

	b := newTab(t, browser, e)
	b.do("the login form",
		b.open("/jobs?status=pending"),
		chromedp.WaitVisible(chromedp.CSS(`input[name="token"]`)),
		chromedp.SendKeys(chromedp.CSS(`input[name="token"]`), e.token),
		chromedp.Submit(chromedp.CSS(`form.login`)),
		chromedp.WaitVisible(chromedp.CSS("#job-rows")),
	)
	if got := eval[string](b, "location.pathname + location.search"); got != "/jobs?status=pending" {
		t.Errorf("after the login form the page is %q, want /jobs?status=pending", got)
	}

	b = newTab(t, browser, e)
	b.login()
	if got := eval[string](b, "location.pathname"); got != "/jobs" {
		t.Errorf("after /login?token= the page is %q, want /jobs", got)
	}
	if title := eval[string](b, "document.title"); title != "Jobs · drover" {
		t.Errorf("title = %q", title)
	}
	b.do("the job in the table", until(fmt.Sprintf(`document.querySelector('#job-rows a[href="/jobs/%d"]') !== null && document.getElementById('job-rows').textContent.includes('build-login')`, job.ID)))
}

// liveJobPage opens, signed in, the page of a running job whose log is
// first, once it shows text and follows the log: the coordinator, the
// tab, the job's id and token.
func liveJobPage(t *testing.T, browser context.Context, first, text string) (*env, *tab, int64, string) {
	t.Helper()
	e := newEnv(t)
	id, tok := e.running(map[string]any{"name": t.Name(), "script": []string{"true"}})
	e.patch(id, tok, 0, first)
	b := newTab(t, browser, e)
	b.login()
	b.do("the job page",
		b.open(fmt.Sprintf("/jobs/%d", id)),
		until(logHas(text)),
		until(`document.getElementById('log-state').textContent === 'live'`),
	)
	return e, b, id, tok
}

// testBrowserLiveLog: a running job's page shows the log so far, and then
// the lines PATCHed after it loaded, in their open section, and the end.
func testBrowserLiveLog(t *testing.T, browser context.Context) {
	first := "section_start:100:step_script\r\x1b[0K\x1b[32;1mExecuting step_script\x1b[0m\nfirst line\n"
	e, b, id, tok := liveJobPage(t, browser, first, "first line")
	b.do("the section", chromedp.WaitVisible(chromedp.CSS(`details.sec[data-name="step_script"]`)))
	if got := eval[bool](b, logHas("second line")); got {
		t.Fatal("the page shows a line not yet sent")
	}

	second := "second line\n"
	e.patch(id, tok, len(first), second)
	b.do("the new line, in the open section", until(`(document.querySelector('details.sec[data-name="step_script"] > .sec-body') || {textContent: ''}).textContent.includes('second line')`))

	third := "section_end:107:step_script\r\x1b[0K\n"
	e.patch(id, tok, len(first)+len(second), third)
	e.patch(id, tok, len(first)+len(second)+len(third), "Job succeeded")
	e.finish(id, tok, api.UpdateJobRequest{State: "success"})
	b.do("the end of the job",
		until(logHas("Job succeeded")),
		until(`document.querySelector('details.sec[data-name="step_script"] .sec-dur')?.textContent === '7s'`),
		until(`document.getElementById('job-status').dataset.status === 'success'`),
		until(`document.getElementById('log-state').textContent === ''`),
	)
	if n := eval[int](b, `document.querySelectorAll('#log .ln').length`); n != 3 {
		t.Errorf("the log has %d lines, want 3 (first, second, Job succeeded)", n)
	}
}

// testBrowserLiveTail: a followed log that grows by 8 tails past the
// page's start has the page start over at its new tail.
func testBrowserLiveTail(t *testing.T, browser context.Context) {
	first := "the first line\n"
	e, b, id, tok := liveJobPage(t, browser, first, "the first line")
	// Long lines: few nodes for the 4 MiB the page takes in before it
	// reloads.
	line := strings.Repeat("y", 4000) + "\n"
	chunk := strings.Repeat(line, (1<<20)/len(line))
	grow := chromedp.Func(func(context.Context, *chromedp.Target) error {
		at := len(first)
		for ; at <= 8*web.DefaultLogTail+len(first); at += len(chunk) {
			e.patch(id, tok, at, chunk)
		}
		e.patch(id, tok, at, "the newest line\n")
		return nil
	})
	if _, err := chromedp.Run(b.ctx, chromedp.WaitEvent(page.LoadEventFired, nil, grow)); err != nil {
		t.Fatalf("browser: the page's reload: %v", err)
	}
	b.afterReload("the new tail", logHas("the newest line")+` && document.getElementById('log-state').textContent === 'live'`)
	if eval[bool](b, logHas("the first line")) || !eval[bool](b, `document.querySelector('#log button[data-range]') !== null`) {
		t.Error("after the reload the page does not start at the log's tail with a load earlier button")
	}
}

// sectionsLog is a finished job's log with colours, an open section and a
// collapsed one.
const sectionsLog = "\x1b[0KRunning with gitlab-runner 19.4.0\n" +
	"section_start:1700000000:prepare_executor\r\x1b[0K\x1b[0K\x1b[36;1mPreparing the \"shell\" executor\x1b[0;m\n" +
	"Using Shell (bash) executor...\n" +
	"section_end:1700000002:prepare_executor\r\x1b[0K\n" +
	"section_start:1700000002:get_sources[collapsed=true]\r\x1b[0K\x1b[0K\x1b[36;1mGetting source from Git repository\x1b[0;m\n" +
	"\x1b[32;1mFetching changes...\x1b[0;m\n" +
	"section_end:1700000005:get_sources\r\x1b[0K\n" +
	"section_start:1700000005:step_script\r\x1b[0K\x1b[0K\x1b[36;1mExecuting \"step_script\" stage of the job script\x1b[0;m\n" +
	"\x1b[32;1m$ go test ./...\x1b[0;m\n" +
	"ok  \tgithub.com/example/app\t0.412s\n" +
	"\x1b[33;1mWARNING: 2 tests skipped\x1b[0;m\n" +
	"\x1b[31;1mFAIL\x1b[0m github.com/example/app/api \x1b[1m(exit status 1)\x1b[0m\n" +
	"section_end:1700000047:step_script\r\x1b[0K\n" +
	"\x1b[31;1mERROR: Job failed: exit status 1\x1b[0;m\n"

// testBrowserSections: a click on a section's summary folds and unfolds
// it; a collapsed=true section starts folded; the bar's buttons act on all.
func testBrowserSections(t *testing.T, browser context.Context) {
	e := newEnv(t)
	id, tok := e.running(map[string]any{"name": "sections", "script": []string{"true"}})
	e.patch(id, tok, 0, sectionsLog)
	exit := 1
	e.finish(id, tok, api.UpdateJobRequest{State: "failed", FailureReason: "script_failure", ExitCode: &exit})

	b := newTab(t, browser, e)
	b.login()
	isOpen := func(name string) string {
		return fmt.Sprintf(`document.querySelector('details.sec[data-name=%q]').hasAttribute('open')`, name)
	}
	summary := func(name string) chromedp.CSS {
		return chromedp.CSS(fmt.Sprintf(`details.sec[data-name=%q] > summary`, name))
	}
	b.do("the job page",
		b.open(fmt.Sprintf("/jobs/%d", id)),
		chromedp.WaitVisible(summary("step_script")),
	)
	if !eval[bool](b, isOpen("step_script")) || eval[bool](b, isOpen("get_sources")) {
		t.Fatalf("step_script open %v, get_sources (collapsed=true) open %v: want open and closed",
			eval[bool](b, isOpen("step_script")), eval[bool](b, isOpen("get_sources")))
	}
	if got := eval[string](b, `document.querySelector('details.sec[data-name="step_script"] .sec-dur').textContent`); got != "42s" {
		t.Errorf("step_script's duration = %q, want 42s", got)
	}
	b.do("fold step_script", chromedp.Click(summary("step_script")), until("!"+isOpen("step_script")))
	b.do("unfold step_script", chromedp.Click(summary("step_script")), until(isOpen("step_script")))
	b.do("unfold get_sources", chromedp.Click(summary("get_sources")), until(isOpen("get_sources")))
	all := `Array.from(document.querySelectorAll('#log details.sec')).every(d => d.open === %s)`
	b.do("collapse all", chromedp.Click(chromedp.CSS("#collapse-all")), until(fmt.Sprintf(all, "false")))
	b.do("expand all", chromedp.Click(chromedp.CSS("#expand-all")), until(fmt.Sprintf(all, "true")))
}

// testBrowserLoadEarlier: a log of three pieces opens at its tail; "load
// earlier" brings the pieces before it, above, until its first line.
func testBrowserLoadEarlier(t *testing.T, browser context.Context) {
	e := newEnv(t)
	id, tok := e.running(map[string]any{"name": "long", "script": []string{"true"}})
	var log strings.Builder
	n := 0
	for ; log.Len() < 2*web.DefaultLogTail+web.DefaultLogTail/2; n++ {
		fmt.Fprintf(&log, "line %06d %s\n", n, strings.Repeat("-", 60))
	}
	raw := log.String()
	for off := 0; off < len(raw); off += 512 << 10 {
		e.patch(id, tok, off, raw[off:min(off+512<<10, len(raw))])
	}
	e.finish(id, tok, api.UpdateJobRequest{State: "success"})

	b := newTab(t, browser, e)
	b.login()
	lines := `document.querySelectorAll('#log .ln').length`
	b.do("the job page", b.open(fmt.Sprintf("/jobs/%d", id)), until(logHas(fmt.Sprintf("line %06d ", n-1))))
	if eval[bool](b, logHas("line 000000 ")) {
		t.Fatal("the page shows the log's start")
	}
	shown := eval[int](b, lines)
	for piece := 0; eval[int](b, `document.querySelectorAll('#log button[data-range]').length`) > 0; piece++ {
		if piece == 3 {
			t.Fatal("still a load earlier button after 3 pieces")
		}
		// A click from the page's script: once chromedp queried a node of
		// #log (as its Click does), it mirrors every node inserted there,
		// and thousands of them hold up its next calls for long.
		b.do("load earlier",
			script(`document.querySelector('#log button[data-range]').click()`),
			until(fmt.Sprintf("%s > %d", lines, shown)),
		)
		shown = eval[int](b, lines)
	}
	if shown != n || !eval[bool](b, `document.querySelector('#log .ln').textContent.startsWith('line 000000 ')`) {
		t.Errorf("after loading all pieces the log has %d lines, want %d from line 0", shown, n)
	}
}

// testBrowserCancel: the cancel button cancels the job.
func testBrowserCancel(t *testing.T, browser context.Context) {
	e := newEnv(t)
	var job struct {
		ID int64 `json:"id"`
	}
	e.api("POST", "/api/v1/jobs", map[string]any{"name": "to-cancel", "script": []string{"true"}}, &job)

	b := newTab(t, browser, e)
	b.login()
	b.do("cancel from the job page",
		b.open(fmt.Sprintf("/jobs/%d", job.ID)),
		chromedp.WaitVisible(chromedp.CSS(`#job-status[data-status="pending"]`)),
		click(`#facts form[action$="/cancel"] button`),
		chromedp.WaitVisible(chromedp.CSS(`#job-status[data-status="canceled"]`)),
	)
	if got := e.status(job.ID); got != "canceled" {
		t.Errorf("status after the cancel button = %q, want canceled", got)
	}
	if n := eval[int](b, `document.querySelectorAll('#facts form[action$="/cancel"]').length`); n != 0 {
		t.Errorf("a canceled job's page still has %d cancel buttons", n)
	}
}

// xss are markup that runs script if a page ever took a job's text as
// HTML.
const xss = `<script>window.__xss=1</script><img src=x onerror="window.__xss=1">`

// testBrowserXSS: a job's name (in the live jobs table, on its page) and
// log (on the page, streamed live, in a section header, in colour) run no
// script and make no elements. The page's Content-Security-Policy is
// bypassed, so that it is the escaping that is tested, not the CSP that
// would stop inline script anyway.
func testBrowserXSS(t *testing.T, browser context.Context) {
	e := newEnv(t)
	id, tok := e.running(map[string]any{"name": "name " + xss, "script": []string{"true"}})
	first := "page " + xss + "\n\x1b[31m" + xss + "\x1b[0m\n"
	e.patch(id, tok, 0, first)

	b := newTab(t, browser, e)
	b.do("bypass the CSP", chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		_, err := cdp.Call(ctx, t, page.SetBypassCSP, page.SetBypassCSPParams{Enabled: true})
		return err
	}))
	b.login()
	// A job submitted after the page loaded reaches it over the live
	// table.
	var later struct {
		ID int64 `json:"id"`
	}
	e.api("POST", "/api/v1/jobs", map[string]any{"name": "later " + xss, "script": []string{"true"}}, &later)
	b.do("the new job in the live table", until(fmt.Sprintf(`document.querySelector('#job-rows a[href="/jobs/%d"]') !== null`, later.ID)))
	noXSS(b, "name "+xss, "later "+xss)

	b.do("the job page",
		b.open(fmt.Sprintf("/jobs/%d", id)),
		until(`document.querySelectorAll('#log .ln').length >= 2`),
		until(`document.getElementById('log-state').textContent === 'live'`),
	)
	second := "live " + xss + "\nsection_start:1:s\r\x1b[0Kheader " + xss + "\nlast line\n"
	e.patch(id, tok, len(first), second)
	b.do("the streamed lines", until(`document.querySelector('details.sec[data-name="s"] .ln') !== null`))
	noXSS(b, "name "+xss, "page "+xss, "live "+xss, "header "+xss)
}

// noXSS checks that the page ran none of xss, made no element of it, and
// shows each of texts as text.
func noXSS(b *tab, texts ...string) {
	b.t.Helper()
	// Broken images fire their error events in order: once a probe the
	// test makes failed, an injected one would have.
	b.do("a probe image's error",
		script(`window.__probe = 0; const i = new Image(); i.onerror = () => { window.__probe = 1 }; i.src = 'x?probe=' + Math.random()`),
		until(`window.__probe === 1`))
	if got := eval[string](b, "typeof window.__xss"); got != "undefined" {
		b.t.Errorf("window.__xss is %s: a job's text ran as script", got)
	}
	if n := eval[int](b, `document.querySelectorAll('img, main script').length`); n != 0 {
		b.t.Errorf("the page has %d img or script elements made of a job's text", n)
	}
	for _, want := range texts {
		js := fmt.Sprintf("document.body.textContent.includes(%s)", strconv.Quote(want))
		if !eval[bool](b, js) {
			b.t.Errorf("the page does not show %q as text", want)
		}
	}
}

// testBrowserScreenshots takes the pictures of the README: the jobs page
// and a job page. They are written to the test's artifact directory, and
// to docs/img when DROVER_UPDATE_SCREENSHOTS=1.
func testBrowserScreenshots(t *testing.T, browser context.Context) {
	e := newEnv(t)
	exit := 1
	for _, j := range []struct {
		name, project string
		end           api.UpdateJobRequest
	}{
		{"build", "group/app", api.UpdateJobRequest{State: "success"}},
		{"test:unit", "group/app", api.UpdateJobRequest{State: "failed", FailureReason: "script_failure", ExitCode: &exit}},
		{"lint", "group/app", api.UpdateJobRequest{State: "success"}},
		{"docs", "group/site", api.UpdateJobRequest{State: "success"}},
	} {
		id, tok := e.running(map[string]any{"name": j.name, "project": j.project, "stage": "test", "script": []string{"true"}})
		e.patch(id, tok, 0, "ok\n")
		e.finish(id, tok, j.end)
	}
	shown, tok := e.running(map[string]any{"name": "test:integration", "project": "group/app", "stage": "test", "script": []string{"go test ./..."}})
	e.patch(shown, tok, 0, sectionsLog)
	e.finish(shown, tok, api.UpdateJobRequest{State: "failed", FailureReason: "script_failure", ExitCode: &exit})
	live, tok := e.running(map[string]any{"name": "deploy:staging", "project": "group/app", "stage": "deploy", "script": []string{"./deploy"}})
	e.patch(live, tok, 0, "section_start:1700000100:step_script\r\x1b[0K\x1b[36;1mExecuting \"step_script\"\x1b[0;m\nuploading...\n")
	e.api("POST", "/api/v1/jobs", map[string]any{"name": "package", "project": "group/app", "stage": "deploy", "tags": []string{"arm64"}, "script": []string{"true"}}, nil)

	b := newTab(t, browser, e)
	b.do("a 1200×800 viewport", chromedp.EmulateViewport(1200, 800))
	b.login()
	shot := func(name string) { t.Helper(); b.screenshot(name) }
	b.do("the jobs page", until(`document.querySelectorAll('#job-rows tr').length === 7`))
	shot("web-jobs.png")
	b.do("the job page",
		b.open(fmt.Sprintf("/jobs/%d", shown)),
		chromedp.WaitVisible(chromedp.CSS(`details.sec[data-name="step_script"]`)),
		chromedp.Click(chromedp.CSS(`details.sec[data-name="get_sources"] > summary`)),
		until(`document.querySelector('details.sec[data-name="get_sources"]').open`),
		script(`window.scrollTo(0, 0)`),
	)
	shot("web-job.png")
	screenshotRunners(t, browser)
	screenshotFleet(t, browser)
	screenshotWhatIf(t, browser)
}

// screenshot saves the tab's viewport as PNG name in the test's artifact
// directory, and in docs/img when DROVER_UPDATE_SCREENSHOTS=1.
func (b *tab) screenshot(name string) {
	b.t.Helper()
	dirs := []string{b.t.ArtifactDir()}
	if os.Getenv("DROVER_UPDATE_SCREENSHOTS") == "1" {
		dirs = append(dirs, filepath.Join("..", "..", "docs", "img"))
	}
	png, err := chromedp.Run(b.ctx, chromedp.CaptureScreenshot())
	if err != nil {
		b.t.Fatalf("screenshot %s: %v", name, err)
	}
	for _, d := range dirs {
		if err := os.WriteFile(filepath.Join(d, name), png, 0o644); err != nil {
			b.t.Fatal(err)
		}
	}
	b.t.Logf("%s: %d bytes in %v", name, len(png), dirs)
}
