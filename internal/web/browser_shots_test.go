package web_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// The screenshots of the runners, fleet and what-if pages, taken by the
// Screenshots subtest with the others.

// screenshotRunners: the runners page with a runner whose manager has
// taken a job that is still running.
func screenshotRunners(t *testing.T, browser context.Context) {
	e := newEnv(t)
	var rn struct {
		ID    int64  `json:"id"`
		Token string `json:"token"`
	}
	e.api("POST", "/api/v1/runners", map[string]any{"description": "build-host-1", "tag_list": []string{"linux", "docker"}, "run_untagged": true}, &rn)
	e.api("POST", "/api/v1/runners", map[string]any{"description": "arm-builder", "tag_list": []string{"arm64"}}, nil)
	e.api("POST", "/api/v1/jobs", map[string]any{"name": "test:unit", "project": "group/app", "stage": "test", "script": []string{"go test ./..."}}, nil)
	e.request(rn.Token, "s_build1")
	b := newTab(t, browser, e)
	b.do("a 1200×800 viewport", chromedp.EmulateViewport(1200, 800))
	b.login()
	b.do("the runners page",
		b.open("/runners"),
		until(fmt.Sprintf(`document.querySelector('#runner-%d') !== null && document.getElementById('runner-list').textContent.includes('s_build1')`, rn.ID)),
	)
	b.screenshot("web-runners.png")
}

// screenshotFleet: the fleet page of a sim pool with an instance in use,
// one idle and one being created.
func screenshotFleet(t *testing.T, browser context.Context) {
	f, srv := newSimFleet(t, "docker-autoscaler")
	b := newTab(t, browser, &env{t: t, srv: srv})
	b.do("a 1200×800 viewport", chromedp.EmulateViewport(1200, 800))
	b.do("the fleet page", b.open("/fleet"), until(`document.getElementById('fleet-runners') !== null`))
	f.advance(t, 15*time.Second)
	f.advance(t, 2*time.Minute)
	f.acquire(t)
	f.advance(t, 15*time.Second)
	b.untilTicking("1 creating, 1 idle, 1 in use", fleetCounts+` === "1,1,1,0"`, func() { f.clk.Advance(2 * time.Second) })
	b.screenshot("web-fleet.png")
}

// screenshotWhatIf: the what-if of a recorded synthetic day, the current
// policy and idle_count 3 side by side.
func screenshotWhatIf(t *testing.T, browser context.Context) {
	srv, _ := newTraceFleet(t, nil)
	b := newTab(t, browser, &env{t: t, srv: srv})
	b.do("a 1200×800 viewport", chromedp.EmulateViewport(1200, 800))
	b.do("the what-if page",
		chromedp.Navigate(whatIfURL(srv, map[string]string{"idle_count": "3"})),
		until(`document.querySelectorAll('.whatif-run svg').length === 2`),
	)
	b.screenshot("web-whatif.png")
}
