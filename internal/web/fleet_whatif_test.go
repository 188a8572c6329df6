package web_test

import (
	"context"
	"encoding/xml"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/autoscale"
	"github.com/drover-ci/drover/internal/web"
)

// traceFleet is one autoscaled runner whose recorded jobs are given
// directly: a synthetic day of traffic.
type traceFleet struct {
	now  time.Time
	pol  *autoscale.Policy
	jobs []autoscale.JobRecord
}

func (f *traceFleet) FleetRunners() []autoscale.RunnerStatus {
	return []autoscale.RunnerStatus{{Name: "day <b>", ShortToken: "tok123", Plugin: "sim", Status: autoscale.PoolStatus{Now: f.now}}}
}

func (f *traceFleet) FleetTrace(token string) (autoscale.JobTrace, bool) {
	if token != "tok123" {
		return autoscale.JobTrace{}, false
	}
	return autoscale.JobTrace{Now: f.now, Policy: f.pol, BootTime: 45 * time.Second, Jobs: f.jobs}, true
}

// newTraceFleet serves the what-if of a day with a job every 4 min during
// the working hours (an hour of 5 min jobs each), policy idle_count 1.
func newTraceFleet(t *testing.T, hook func(context.Context)) (*httptest.Server, *traceFleet) {
	t.Helper()
	return newTraceFleetConfig(t, hook, web.FleetConfig{})
}

func newTraceFleetConfig(t *testing.T, hook func(context.Context), cfg web.FleetConfig) (*httptest.Server, *traceFleet) {
	t.Helper()
	now := time.Date(2026, 3, 3, 0, 0, 0, 0, time.UTC)
	f := &traceFleet{now: now, pol: &autoscale.Policy{
		Dialect: autoscale.DialectAutoscaler, CapacityPerInstance: 1, MaxInstances: 20,
		Base: autoscale.Schedule{IdleCount: 1, IdleTime: 10 * time.Minute, Preemptive: true},
	}}
	day := now.Add(-autoscale.JobLogWindow)
	for at := day.Add(8 * time.Hour); at.Before(day.Add(18 * time.Hour)); at = at.Add(4 * time.Minute) {
		f.jobs = append(f.jobs, autoscale.JobRecord{Arrival: at, Duration: 5 * time.Minute})
	}
	cfg.Fleet = f
	cfg.SignIn.Open = func() bool { return true }
	page, err := web.NewFleetPage(nil, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if hook != nil {
		web.SetWhatIfHook(page, hook)
	}
	mux := http.NewServeMux()
	page.Mount(mux)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv, f
}

func getStatus(t *testing.T, u string) (int, string) {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

var (
	inputRE  = regexp.MustCompile(`<input name="(\w+)" value="([^"]*)"`)
	selectRE = regexp.MustCompile(`<select name="(\w+)">.*?<option value="(\w+)" selected>`)
)

// formValues reads the what-if form's values.
func formValues(page string) map[string]string {
	out := map[string]string{}
	for _, m := range inputRE.FindAllStringSubmatch(page, -1) {
		out[m[1]] = m[2]
	}
	for _, m := range selectRE.FindAllStringSubmatch(page, -1) {
		out[m[1]] = m[2]
	}
	return out
}

func whatIfURL(srv *httptest.Server, v map[string]string) string {
	q := url.Values{"runner": {"tok123"}, "run": {"1"}}
	for k, x := range map[string]string{"idle_count": "1", "idle_time": "10m", "preemptive": "on", "adaptive": "off", "target_wait": "30s", "boot_time": "45s"} {
		q.Set(k, x)
	}
	for k, x := range v {
		q.Set(k, x)
	}
	return srv.URL + "/fleet/whatif?" + q.Encode()
}

func TestWhatIfForm(t *testing.T) {
	t.Parallel()
	srv, _ := newTraceFleet(t, nil)
	if fleet := get(t, srv.URL+"/fleet"); !strings.Contains(fleet, `href="/fleet/whatif?runner=tok123"`) {
		t.Errorf("the fleet page does not link the what-if:\n%s", fleet)
	}
	page := get(t, srv.URL+"/fleet/whatif?runner=tok123")
	if !strings.Contains(page, `name="runner" value="tok123"`) || !strings.Contains(page, `name="run" value="1"`) {
		t.Errorf("form lacks the runner or run:\n%s", page)
	}
	want := map[string]string{"idle_count": "1", "idle_time": "10m0s", "preemptive": "on", "adaptive": "off", "target_wait": "30s", "boot_time": "45s"}
	got := formValues(page)
	for k, v := range want {
		if got[k] != v {
			t.Errorf("form %s = %q, want %q (the policy now)", k, got[k], v)
		}
	}
	if strings.Contains(page, "<svg") || !strings.Contains(page, "Replays the 150 jobs") || strings.Contains(page, "day <b>") {
		t.Errorf("form page:\n%s", page)
	}
	if code, _ := getStatus(t, srv.URL+"/fleet/whatif?runner=nope"); code != http.StatusNotFound {
		t.Errorf("unknown runner = %d, want 404", code)
	}
}

// svgDoc is enough of simulate.WriteSVG's plot to know it parses.
type svgDoc struct {
	XMLName xml.Name `xml:"svg"`
	Paths   []struct {
		Title string `xml:"title"`
	} `xml:"path"`
}

var (
	idleRE   = regexp.MustCompile(`class="r-idle" data-seconds="([0-9.e+]+)"`)
	billedRE = regexp.MustCompile(`class="r-billed" data-seconds="([0-9.e+]+)"`)
)

func TestWhatIfRuns(t *testing.T) {
	t.Parallel()
	srv, _ := newTraceFleet(t, nil)
	code, page := getStatus(t, whatIfURL(srv, map[string]string{"idle_count": "6"}))
	if code != http.StatusOK {
		t.Fatalf("what if = %d:\n%s", code, page)
	}
	// Two plots that parse as XML.
	rest := page
	for i := range 2 {
		start, end := strings.Index(rest, "<svg"), strings.Index(rest, "</svg>")
		if start < 0 || end < start {
			t.Fatalf("plot %d missing:\n%s", i, page)
		}
		var d svgDoc
		if err := xml.Unmarshal([]byte(rest[start:end+len("</svg>")]), &d); err != nil {
			t.Fatalf("plot %d is not XML: %v", i, err)
		}
		if len(d.Paths) < 4 {
			t.Errorf("plot %d has %d paths", i, len(d.Paths))
		}
		rest = rest[end+len("</svg>"):]
	}
	if strings.Contains(rest, "<svg") {
		t.Error("more than two plots")
	}
	// Two reports; the alternative keeps more instances idle.
	for _, want := range []string{"Current policy", "What if", "idle_count 1, idle_time 10m0s, preemptive on; boot time 45s", "idle_count 6, idle_time 10m0s"} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	for _, class := range []string{"r-p50", "r-p95", "r-idle", "r-booting", "r-created"} {
		if n := strings.Count(page, `class="`+class+`"`); n != 2 {
			t.Errorf("%d cells %s, want 2", n, class)
		}
	}
	idle := idleRE.FindAllStringSubmatch(page, -1)
	if len(idle) != 2 {
		t.Fatalf("idle cells %v", idle)
	}
	cur, _ := strconv.ParseFloat(idle[0][1], 64)
	alt, _ := strconv.ParseFloat(idle[1][1], 64)
	if !(alt > cur) || cur <= 0 {
		t.Errorf("idle instance time: current %.0f s, idle_count 6 %.0f s; want more with more idle", cur, alt)
	}
	// Billed per second (the default): more than idle, the jobs' 12.5
	// hours of busy time included.
	billed := billedRE.FindAllStringSubmatch(page, -1)
	if len(billed) != 2 || !strings.Contains(page, "(billing_increment 1s)") {
		t.Fatalf("billed cells %v", billed)
	}
	for i, idle := range []float64{cur, alt} {
		b, _ := strconv.ParseFloat(billed[i][1], 64)
		if !(b > idle+12.5*3600) {
			t.Errorf("run %d: billed %.0f s, want more than idle %.0f s + the jobs' 12.5 h", i, b, idle)
		}
	}
	// The form shows what was asked.
	if v := formValues(page); v["idle_count"] != "6" {
		t.Errorf("form after the run: %v", v)
	}
}

func TestWhatIfBadInput(t *testing.T) {
	t.Parallel()
	srv, _ := newTraceFleet(t, nil)
	for field, value := range map[string]string{
		"idle_count": "-1", "idle_time": "ten minutes", "target_wait": "0s", "boot_time": "-5s", "preemptive": "maybe",
	} {
		code, page := getStatus(t, whatIfURL(srv, map[string]string{field: value}))
		if code != http.StatusBadRequest || !strings.Contains(page, `<p class="error" id="whatif-error">`+field+":") {
			t.Errorf("%s=%q: %d, want 400 naming the field:\n%s", field, value, code, page)
		}
		if strings.Contains(page, "<svg") {
			t.Errorf("%s=%q: simulated anyway", field, value)
		}
	}
	// What was typed is shown again, escaped.
	_, page := getStatus(t, whatIfURL(srv, map[string]string{"idle_time": `"><script>`}))
	if strings.Contains(page, "<script>") || !strings.Contains(page, "&#34;&gt;&lt;script&gt;") {
		t.Errorf("bad value not escaped:\n%s", page)
	}
}

// TestWhatIfOneAtATime holds a what-if in the test hook: another gets 429
// meanwhile, and runs once it is done.
func TestWhatIfOneAtATime(t *testing.T) {
	t.Parallel()
	entered, release := make(chan struct{}), make(chan struct{})
	held := true
	srv, _ := newTraceFleet(t, func(ctx context.Context) {
		if held {
			held = false // only the first; the turn serialises the hook
			close(entered)
			<-release
		}
	})
	first := make(chan int, 1)
	go func() {
		resp, err := http.Get(whatIfURL(srv, nil))
		if err != nil {
			first <- 0
			return
		}
		resp.Body.Close()
		first <- resp.StatusCode
	}()
	<-entered
	resp, err := http.Get(whatIfURL(srv, nil))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
		t.Errorf("second what-if while one runs = %d (Retry-After %q), want 429", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	// The form alone does not simulate: not refused.
	if code, _ := getStatus(t, srv.URL+"/fleet/whatif?runner=tok123"); code != http.StatusOK {
		t.Errorf("form while a what-if runs = %d", code)
	}
	close(release)
	if code := <-first; code != http.StatusOK {
		t.Errorf("first what-if = %d", code)
	}
	if code, _ := getStatus(t, whatIfURL(srv, nil)); code != http.StatusOK {
		t.Errorf("what-if after the first = %d", code)
	}
}

// TestWhatIfBounds: the trace is cut to WhatIfMaxJobs, the latest; the
// simulations stop at WhatIfTimeout (the hook outwaits it) with 503.
func TestWhatIfBounds(t *testing.T) {
	t.Parallel()
	srv, _ := newTraceFleetConfig(t, nil, web.FleetConfig{WhatIfMaxJobs: 100})
	code, page := getStatus(t, whatIfURL(srv, nil))
	if code != http.StatusOK || strings.Count(page, `<td class="r-jobs">100</td>`) != 2 || !strings.Contains(page, "The 50 oldest jobs were left out.") {
		t.Errorf("capped what-if = %d:\n%s", code, page)
	}

	srv, _ = newTraceFleetConfig(t, func(ctx context.Context) { <-ctx.Done() }, web.FleetConfig{WhatIfTimeout: time.Millisecond})
	code, page = getStatus(t, whatIfURL(srv, nil))
	if code != http.StatusServiceUnavailable || !strings.Contains(page, "longer than 1ms") {
		t.Errorf("timed out what-if = %d: %s", code, page)
	}
}
