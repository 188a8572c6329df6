package web_test

import (
	"encoding/xml"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/autoscale"
	"github.com/drover-ci/drover/internal/clock"
	"github.com/drover-ci/drover/internal/fleet"
	"github.com/drover-ci/drover/internal/fleet/sim"
	"github.com/drover-ci/drover/internal/web"
)

// simFleet is one autoscaled runner on the sim provider and a fake clock.
type simFleet struct {
	clk  *clock.Fake
	pool *autoscale.Pool
	name string
}

func (f *simFleet) FleetRunners() []autoscale.RunnerStatus {
	return []autoscale.RunnerStatus{{Name: f.name, ShortToken: "abc123", Plugin: "sim", Status: f.pool.Status()}}
}

func (f *simFleet) FleetTrace(string) (autoscale.JobTrace, bool) { return f.pool.JobTrace(), true }

// openFleet is the sign-in of a fleet page open to everyone (a
// listener on loopback, nothing configured).
var openFleet = web.FleetSignIn{Open: func() bool { return true }}

func newSimFleet(t *testing.T, name string) (*simFleet, *httptest.Server) {
	t.Helper()
	clk := clock.NewFake(time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC))
	pool, err := autoscale.NewPool(autoscale.PoolOptions{
		Policy: &autoscale.Policy{
			Dialect: autoscale.DialectAutoscaler, CapacityPerInstance: 1, MaxInstances: 4,
			Base:    autoscale.Schedule{IdleCount: 2, IdleTime: time.Hour, Preemptive: true},
			Billing: autoscale.Billing{Increment: time.Hour},
		},
		Provider: sim.New(sim.Options{Clock: clk, BootTime: time.Minute}),
		Settings: fleet.Settings{Name: "abc123"},
		Clock:    clk,
	})
	if err != nil {
		t.Fatal(err)
	}
	f := &simFleet{clk: clk, pool: pool, name: name}
	page, err := web.NewFleetPage(nil, web.FleetConfig{Fleet: f, Clock: clk, SignIn: openFleet})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	page.Mount(mux)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return f, srv
}

// advance moves the clock by d in scaling passes of at most 15 s.
func (f *simFleet) advance(t *testing.T, d time.Duration) {
	for d > 0 {
		step := min(d, 15*time.Second)
		f.clk.Advance(step)
		f.pool.Tick(t.Context())
		d -= step
	}
}

// acquire has a job take a slot on a ready instance.
func (f *simFleet) acquire(t *testing.T) *autoscale.Acquisition {
	t.Helper()
	r, err := f.pool.Reserve()
	if err != nil {
		t.Fatal(err)
	}
	a, err := f.pool.TryAcquire(r)
	if err != nil || a == nil {
		t.Fatalf("TryAcquire = %v, %v", a, err)
	}
	return a
}

func get(t *testing.T, url string) string {
	t.Helper()
	code, body := getStatus(t, url)
	if code != http.StatusOK {
		t.Fatalf("GET %s = %d", url, code)
	}
	return body
}

var countRE = regexp.MustCompile(`class="count-(\w+)">(\d+)<`)

// counts reads the page's summary: instances by state, jobs waiting.
func counts(page string) map[string]string {
	out := map[string]string{}
	for _, m := range countRE.FindAllStringSubmatch(page, -1) {
		out[m[1]] = m[2]
	}
	return out
}

// chart is the SVG as encoding/xml reads it.
type chart struct {
	XMLName   xml.Name `xml:"svg"`
	Title     string   `xml:"title"`
	Polylines []struct {
		Series string `xml:"data-series,attr"`
		Points string `xml:"points,attr"`
	} `xml:"polyline"`
}

func parseChart(t *testing.T, page string) chart {
	t.Helper()
	start, end := strings.Index(page, "<svg"), strings.Index(page, "</svg>")
	if start < 0 || end < start {
		t.Fatalf("page has no chart:\n%s", page)
	}
	var c chart
	if err := xml.Unmarshal([]byte(page[start:end+len("</svg>")]), &c); err != nil {
		t.Fatalf("chart is not XML: %v\n%s", err, page[start:end])
	}
	return c
}

func TestFleetPage(t *testing.T) {
	t.Parallel()
	f, srv := newSimFleet(t, "autoscaled")
	page := get(t, srv.URL+"/fleet")
	if !strings.Contains(page, "No scaling decision yet.") || !strings.Contains(page, `data-live="/fleet/events"`) {
		t.Errorf("fleet page before the first pass:\n%s", page)
	}

	// The first pass asks for two instances (idle_count 2): creating.
	f.advance(t, 15*time.Second)
	page = get(t, srv.URL+"/fleet")
	if c := counts(page); c["creating"] != "2" || c["idle"] != "0" {
		t.Errorf("after the first pass: counts %v, want 2 creating", c)
	}
	// Two instances asked for: two started hours billed, 30 s booting.
	for _, want := range []string{`billed <b class="usage-billed">2h 00m</b>`, `<span class="hint usage-billing">(billing_increment 1h0m0s)</span>`,
		"Last decision", "create 2", "idle target 2 slots", "<h3>creating (2)</h3>", "(abc123, sim)", `Provider <code class="provider-id">sim/`, `version <span class="provider-version">sim</span>`} {
		if !strings.Contains(page, want) {
			t.Errorf("fleet page lacks %q:\n%s", want, page)
		}
	}

	// Booted, then one in use by a job.
	f.advance(t, 2*time.Minute)
	defer f.pool.Release(f.acquire(t))
	f.advance(t, 15*time.Second)
	page = get(t, srv.URL+"/fleet")
	// One in use; the policy creates one more for the idle target.
	if c := counts(page); c["busy"] != "1" || c["idle"] != "1" || c["creating"] != "1" {
		t.Errorf("with a job: counts %v, want 1 in use, 1 idle, 1 creating", c)
	}
	// Three started hours; the first two booted a minute each.
	for _, want := range []string{`billed <b class="usage-billed">3h 00m</b>`, `booting <b class="usage-booting">2m 00s</b>`} {
		if !strings.Contains(page, want) {
			t.Errorf("fleet page lacks %q:\n%s", want, page)
		}
	}
	if !strings.Contains(page, "<h3>in use (1)</h3>") || !strings.Contains(page, "<h3>idle (1)</h3>") {
		t.Errorf("fleet page does not group the instances by state:\n%s", page)
	}

	c := parseChart(t, page)
	var series []string
	for _, p := range c.Polylines {
		series = append(series, p.Series)
		if p.Series != "waiting" && len(strings.Fields(p.Points)) < 3 {
			t.Errorf("series %s has points %q, want one a sample", p.Series, p.Points)
		}
	}
	if got := strings.Join(series, ","); got != "creating,idle,busy,removing,waiting" {
		t.Errorf("chart series %s", got)
	}
	if c.Title == "" {
		t.Error("chart has no title")
	}

	// An hour and more later, the chart still holds an hour of samples.
	f.advance(t, 90*time.Minute)
	c = parseChart(t, get(t, srv.URL+"/fleet"))
	if n := len(strings.Fields(c.Polylines[0].Points)); n < 200 || n > 250 {
		t.Errorf("chart has %d points after 90 min, want about an hour of 15 s samples", n)
	}
}

func TestFleetPageEscapesNames(t *testing.T) {
	t.Parallel()
	_, srv := newSimFleet(t, `<script>alert(1)</script>`)
	page := get(t, srv.URL+"/fleet")
	if strings.Contains(page, "<script>alert") || !strings.Contains(page, "&lt;script&gt;alert(1)&lt;/script&gt;") {
		t.Errorf("fleet page does not escape the runner's name")
	}
	resp, err := http.Get(srv.URL + "/static/live.js")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Security-Policy") == "" {
		t.Errorf("GET /static/live.js = %d, CSP %q", resp.StatusCode, resp.Header.Get("Content-Security-Policy"))
	}
}

// TestFleetLive follows /fleet/events: a scaling pass changes the section.
func TestFleetLive(t *testing.T) {
	t.Parallel()
	f, srv := newSimFleet(t, "live")
	req, _ := http.NewRequestWithContext(t.Context(), "GET", srv.URL+"/fleet/events", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	events := readEvents(resp.Body)
	if ev := next(t, events, "html"); !strings.Contains(ev.data, "No scaling decision yet.") {
		t.Fatalf("first message: %s", ev.data)
	}
	// A scaling pass now, then the stream's next poll sends the change.
	f.pool.Tick(t.Context())
	for f.clk.Pending() == 0 {
		time.Sleep(time.Millisecond)
	}
	f.clk.Advance(2 * time.Second)
	if ev := next(t, events, "html"); !strings.Contains(ev.data, `class="count-creating">2<`) {
		t.Fatalf("message after a scaling pass: %s", ev.data)
	}
}
