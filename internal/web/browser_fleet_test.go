package web_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"testing"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/fleetticket"
	"github.com/drover-ci/drover/internal/web"
)

// testBrowserFleetSignIn: one place to look, in a real browser. Signed
// in on the coordinator, the runners page's link to a manager's fleet
// page (a real one on another loopback port, so both sites' cookies live
// on the host 127.0.0.1) lands on that page signed in, with the fleet
// shown and no sign-in form, and a reload keeps the session. The fleet
// page's sign-out goes to its sign-in form and leaves the coordinator's
// session alone; the link signs in again.
func testBrowserFleetSignIn(t *testing.T, browser context.Context) {
	e := newEnv(t)
	var rn struct {
		ID    int64  `json:"id"`
		Token string `json:"token"`
	}
	e.api("POST", "/api/v1/runners", map[string]any{"description": "fleet-browser", "run_untagged": true}, &rn)
	fleetSrv := fleetServer(t, web.FleetSignIn{
		Token:      "fleet-secret",
		SystemID:   "s_fleet",
		TicketKeys: func() []string { return []string{fleetticket.HashToken(rn.Token)} },
	}, nil, false)
	// The manager takes a job, reporting its fleet page's URL.
	e.api("POST", "/api/v1/jobs", map[string]any{"name": "fleet-job", "script": []string{"true"}}, nil)
	js, _ := json.Marshal(api.JobRequest{Token: rn.Token, SystemID: "s_fleet", Info: api.VersionInfo{Name: "drover", Version: "1.0", FleetURL: fleetSrv.URL}})
	if resp, b := e.do(e.srv.Client(), "POST", "/api/v4/jobs/request", map[string]string{"Content-Type": "application/json"}, bytes.NewReader(js)); resp.StatusCode != http.StatusCreated {
		t.Fatalf("jobs/request = %d %s", resp.StatusCode, b)
	}

	// onFleet is JavaScript: the fleet page's content is shown, not a
	// sign-in form.
	onFleet := fmt.Sprintf(`location.origin === %s && location.pathname === '/fleet' && document.getElementById('fleet-runners') !== null && document.getElementById('fleet-runners').textContent.includes('fleet-one') && document.querySelector('input[name="token"]') === null`,
		strconv.Quote(fleetSrv.URL))
	onForm := fmt.Sprintf(`location.origin === %s && location.pathname === '/fleet/login' && document.querySelector('form.login input[name="token"]') !== null && document.getElementById('fleet-runners') === null`,
		strconv.Quote(fleetSrv.URL))
	link := chromedp.CSS(fmt.Sprintf(`#runner-%d a.fleet-link`, rn.ID))

	b := newTab(t, browser, e)
	b.login()
	b.do("the runners page", b.open("/runners"), chromedp.WaitVisible(link))
	b.do("follow the fleet link", chromedp.Click(link))
	b.afterReload("the fleet page, signed in", onFleet)

	// Both sessions are cookies of the host 127.0.0.1, side by side.
	cookies, err := chromedp.Run(b.ctx, chromedp.Action[network.GetCookiesResult](func(ctx context.Context, tg *chromedp.Target) (network.GetCookiesResult, error) {
		return cdp.Call(ctx, tg, network.GetCookies, network.GetCookiesParams{URLs: []string{fleetSrv.URL, e.srv.URL}})
	}))
	if err != nil {
		t.Fatalf("browser: the cookies: %v", err)
	}
	names := map[string]bool{}
	for _, c := range cookies.Cookies {
		names[c.Name] = true
		if c.Name == "drover_fleet_session" && (!c.HTTPOnly || c.SameSite != network.CookieSameSiteLax) {
			t.Errorf("drover_fleet_session: HttpOnly %v, SameSite %q; want HttpOnly, Lax", c.HTTPOnly, c.SameSite)
		}
	}
	if !names["drover_session"] || !names["drover_fleet_session"] {
		t.Errorf("the browser's cookies for 127.0.0.1 are %v, want drover_session and drover_fleet_session", names)
	}

	b.do("reload the fleet page", chromedp.Reload())
	b.afterReload("the fleet page after a reload, signed in", onFleet)

	b.do("sign out of the fleet page", chromedp.Click(chromedp.CSS(`header form.logout[action="/fleet/logout"] button`)))
	b.afterReload("the fleet page's sign-in form after sign-out", onForm)
	b.do("the fleet page after sign-out", chromedp.Navigate(fleetSrv.URL+"/fleet"))
	b.afterReload("the fleet page after sign-out: the sign-in form", onForm)

	// The coordinator's session is still there; its link signs in again.
	b.do("the runners page after the fleet page's sign-out", b.open("/runners"), chromedp.WaitVisible(link))
	b.do("follow the fleet link again", chromedp.Click(link))
	b.afterReload("the fleet page, signed in again", onFleet)
}
