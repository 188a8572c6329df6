package web_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/autoscale"
	"github.com/drover-ci/drover/internal/clock"
	"github.com/drover-ci/drover/internal/coordinator"
)

// The live pages on a fake clock, in the browser: their SSE streams
// render anew on every poll of the page's clock, so the tests move that
// clock on while they wait for the page to show a change.

// untilTicking waits until JavaScript expression js is true in the page,
// calling tick (which moves a fake clock on) whenever it is still false
// after a short while.
func (b *tab) untilTicking(what, js string, tick func()) {
	b.t.Helper()
	for {
		_, err := chromedp.Run(b.ctx, chromedp.Poll[bool](js, chromedp.WithPollingInterval(20*time.Millisecond), chromedp.WithPollingTimeout(250*time.Millisecond)))
		if err == nil {
			return
		}
		if b.ctx.Err() != nil || !errors.Is(err, chromedp.ErrPollingTimeout) {
			b.t.Fatalf("browser: %s: waiting for %s: %v", what, js, err)
		}
		tick()
	}
}

// request has runner manager systemID of the runner with token take a
// job with jobs/request; there must be one pending (on a fake clock the
// long poll for none would not end).
func (e *env) request(token, systemID string) {
	e.t.Helper()
	js, _ := json.Marshal(api.JobRequest{Token: token, SystemID: systemID, Info: api.VersionInfo{Name: "gitlab-runner", Version: "19.4.0", Executor: "docker"}})
	resp, b := e.do(e.srv.Client(), "POST", "/api/v4/jobs/request", map[string]string{"Content-Type": "application/json"}, bytes.NewReader(js))
	if resp.StatusCode != http.StatusCreated {
		e.t.Fatalf("jobs/request = %d %s", resp.StatusCode, b)
	}
}

// managerContact is JavaScript: the text of the last contact cell of
// runner manager sys on the runners page, "" when it is not shown.
func managerContact(sys string) string {
	return fmt.Sprintf(`(() => {
		const tr = Array.from(document.querySelectorAll('table.managers tbody tr')).find(tr => (tr.querySelector('code') || {}).textContent === %s);
		return tr ? tr.cells[1].textContent : '';
	})()`, strconv.Quote(sys))
}

// testBrowserRunnersLive: on the runners page, left open, a runner's new
// manager appears when it first asks for a job; its last contact ages as
// the clock moves on, and is new again when it asks for another.
func testBrowserRunnersLive(t *testing.T, browser context.Context) {
	clk := clock.NewFake(time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC))
	e := newEnvWith(t, coordinator.Config{Clock: clk})
	var rn struct {
		ID    int64  `json:"id"`
		Token string `json:"token"`
	}
	e.api("POST", "/api/v1/runners", map[string]any{"description": "live-runner", "run_untagged": true}, &rn)
	tick := func() { clk.Advance(2 * time.Second) }

	b := newTab(t, browser, e)
	b.login()
	b.do("the runners page",
		b.open("/runners"),
		until(fmt.Sprintf(`document.querySelector('#runner-%d') !== null && document.getElementById('runner-list').textContent.includes('No manager has used')`, rn.ID)),
	)
	contact := managerContact("s_live")

	e.api("POST", "/api/v1/jobs", map[string]any{"name": "first", "script": []string{"true"}}, nil)
	e.request(rn.Token, "s_live")
	b.untilTicking("the new manager", fmt.Sprintf(`/^\d+ s ago /.test(%s)`, contact), tick)
	first := eval[string](b, contact)
	if !eval[bool](b, `document.getElementById('runner-list').textContent.includes('docker')`) {
		t.Error("the runners page does not show the manager's executor")
	}

	clk.Advance(10 * time.Minute)
	b.untilTicking("the contact aged", fmt.Sprintf(`/^1\d min ago /.test(%s)`, contact), tick)

	e.api("POST", "/api/v1/jobs", map[string]any{"name": "second", "script": []string{"true"}}, nil)
	e.request(rn.Token, "s_live")
	b.untilTicking("the new contact", fmt.Sprintf(`(c => /^\d+ s ago /.test(c) && c !== %s)(%s)`, strconv.Quote(first), contact), tick)
	if n := eval[int](b, `document.querySelectorAll('table.managers tbody tr').length`); n != 1 {
		t.Errorf("the runners page shows %d manager rows, want 1", n)
	}
}

// fleetCounts is JavaScript: the fleet page's counts, as
// "creating,idle,busy,removing".
const fleetCounts = `['creating', 'idle', 'busy', 'removing'].map(s => (document.querySelector('#fleet-runners .count-' + s) || {textContent: '?'}).textContent).join(',')`

// testBrowserFleetLive: the fleet page of a manager with a sim pool, left
// open, follows the pool as it creates instances for demand and removes
// them when the demand is gone.
func testBrowserFleetLive(t *testing.T, browser context.Context) {
	f, srv := newSimFleet(t, "browser-fleet")
	tick := func() { f.clk.Advance(2 * time.Second) }
	b := newTab(t, browser, &env{t: t, srv: srv})
	b.do("the fleet page",
		b.open("/fleet"),
		until(`document.getElementById('fleet-runners').textContent.includes('No scaling decision yet.')`),
	)
	counts := func(what, want string) {
		t.Helper()
		b.untilTicking(what, fleetCounts+" === "+strconv.Quote(want), tick)
	}

	f.advance(t, 15*time.Second)
	counts("the first pass: 2 creating for idle_count 2", "2,0,0,0")
	f.advance(t, 2*time.Minute)
	counts("booted: 2 idle", "0,2,0,0")

	// Two jobs take both; the next pass creates two more for the idle
	// target, up to max_instances 4.
	var held []*autoscale.Acquisition
	for range 2 {
		held = append(held, f.acquire(t))
	}
	f.advance(t, 15*time.Second)
	counts("2 in use, 2 creating", "2,0,2,0")
	f.advance(t, 2*time.Minute)
	counts("2 in use, 2 idle", "0,2,2,0")
	if !eval[bool](b, `document.getElementById('fleet-runners').textContent.includes('in use (2)')`) {
		t.Error("the fleet page does not list the 2 instances in use")
	}

	// The jobs end; after idle_time the 2 above idle_count go.
	for _, a := range held {
		f.pool.Release(a)
	}
	f.advance(t, 15*time.Second)
	counts("4 idle", "0,4,0,0")
	f.advance(t, 90*time.Minute)
	counts("back to 2 idle", "0,2,0,0")
}

// usageBilled is JavaScript: the fleet page's billed time of the last
// hour, "" when it is not shown.
const usageBilled = `(document.querySelector('#fleet-runners .usage-billed') || {textContent: ''}).textContent`

// testBrowserBilledTime: in the browser, the fleet page (left open, its
// pool billed per started hour) shows the last hour's billed time beside
// booting and idle time and follows it as instances are made; the
// what-if page shows the billed instance-hours of both runs.
func testBrowserBilledTime(t *testing.T, browser context.Context) {
	f, srv := newSimFleet(t, "billed-fleet")
	tick := func() { f.clk.Advance(2 * time.Second) }
	b := newTab(t, browser, &env{t: t, srv: srv})
	b.do("the fleet page", b.open("/fleet"), until(`document.getElementById('fleet-runners') !== null`))
	f.advance(t, 15*time.Second)
	b.untilTicking("two instances asked for: two started hours", usageBilled+` === "2h 00m"`, tick)
	f.advance(t, 2*time.Minute)
	defer f.pool.Release(f.acquire(t))
	f.advance(t, 15*time.Second)
	b.untilTicking("a third made for the idle target: three started hours", usageBilled+` === "3h 00m"`, tick)
	if !eval[bool](b, `(() => { const u = document.querySelector('#fleet-runners p.usage'); return u !== null && u.textContent.includes('idle') && u.textContent.includes('booting') && u.textContent.includes('(billing_increment 1h0m0s)') })()`) {
		t.Error("the fleet page's usage line lacks idle, booting or the billing model")
	}

	wsrv, _ := newTraceFleet(t, nil)
	w := newTab(t, browser, &env{t: t, srv: wsrv})
	w.do("the what-if page",
		chromedp.Navigate(whatIfURL(wsrv, map[string]string{"idle_count": "3"})),
		until(`document.querySelectorAll('.whatif-run svg').length === 2`),
	)
	// Both runs bill more than they idle (the jobs' busy time is billed
	// too), per second as the policy has it.
	if !eval[bool](w, `(() => {
		const billed = Array.from(document.querySelectorAll('.whatif-run td.r-billed'));
		const idle = Array.from(document.querySelectorAll('.whatif-run td.r-idle'));
		return billed.length === 2 && idle.length === 2 && billed.every((c, i) => Number(c.dataset.seconds) > Number(idle[i].dataset.seconds) && c.textContent.includes(' h') && c.textContent.includes('billing_increment 1s'));
	})()`) {
		t.Error("the what-if page does not show billed instance-hours above idle ones for both runs")
	}
}
