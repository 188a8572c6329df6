package web

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"html/template"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/drover-ci/drover/internal/autoscale"
	"github.com/drover-ci/drover/internal/clock"
)

// The fleet page is the runner manager's (drover run's listen_address,
// next to /metrics): for each autoscaled runner, its instances by state,
// the policy's last decision and a chart of the last hour. It is
// read-only; who may see it is FleetConfig.SignIn (fleet_auth.go). It
// shares the UI's layout and static files, and is followed as a live
// section (live.go).

// Fleet is the autoscaled runners of a runner manager.
type Fleet interface {
	// FleetRunners returns each autoscaled runner with its pool's status.
	FleetRunners() []autoscale.RunnerStatus
	// FleetTrace returns the jobs the pool of the runner with short token
	// shortToken served in the last day, for the what-if page
	// (fleet_whatif.go); false when there is no such runner.
	FleetTrace(shortToken string) (autoscale.JobTrace, bool)
}

// FleetConfig configures NewFleetPage.
type FleetConfig struct {
	Fleet Fleet // required
	// SignIn is who may see the page; its zero value refuses everyone.
	SignIn FleetSignIn
	Clock  clock.Clock   // nil = real
	Poll   time.Duration // how often the live page checks; default 2s
	// WhatIfTimeout bounds a what-if's simulations; 0 =
	// DefaultWhatIfTimeout.
	WhatIfTimeout time.Duration
	// WhatIfMaxJobs is the most jobs (the latest) a what-if replays; 0 =
	// DefaultWhatIfMaxJobs.
	WhatIfMaxJobs int
}

// FleetPage serves the fleet page. Create it with NewFleetPage and Mount
// it.
type FleetPage struct {
	log  *slog.Logger
	cfg  FleetConfig
	tmpl *template.Template
	auth *fleetAuth
	// simulating holds the one what-if running at a time.
	simulating chan struct{}
	// whatIfHook, when set (tests), runs before a what-if's simulations
	// with their context, its turn taken.
	whatIfHook func(ctx context.Context)
}

// NewFleetPage returns the fleet page of cfg.
func NewFleetPage(logger *slog.Logger, cfg FleetConfig) (*FleetPage, error) {
	if cfg.Fleet == nil {
		return nil, errors.New("web: fleet page: Fleet is required")
	}
	cfg.Clock = clock.OrReal(cfg.Clock)
	if cfg.Poll <= 0 {
		cfg.Poll = 2 * time.Second
	}
	if cfg.WhatIfTimeout <= 0 {
		cfg.WhatIfTimeout = DefaultWhatIfTimeout
	}
	if cfg.WhatIfMaxJobs <= 0 {
		cfg.WhatIfMaxJobs = DefaultWhatIfMaxJobs
	}
	t, err := parseTemplates()
	if err != nil {
		return nil, err
	}
	return &FleetPage{log: cmp.Or(logger, slog.New(slog.DiscardHandler)), cfg: cfg, tmpl: t, auth: newFleetAuth(cfg.SignIn), simulating: make(chan struct{}, 1)}, nil
}

// Mount registers GET /fleet, GET /fleet/events, GET /fleet/whatif (for
// the signed in), the sign-in (GET and POST /fleet/login, GET
// /fleet/signin), the sign-out (POST /fleet/logout) and GET /static/ on
// m.
func (f *FleetPage) Mount(m Mounter) {
	m.Handle("GET /fleet", secure(f.guard(true, f.handlePage)))
	m.Handle("GET /fleet/events", secure(f.guard(false, f.handleEvents)))
	m.Handle("GET /fleet/whatif", secure(f.guard(true, f.handleWhatIf)))
	m.Handle("GET /fleet/login", secure(f.handleLogin))
	m.Handle("POST /fleet/login", secure(f.handleLogin))
	m.Handle("GET /fleet/signin", secure(f.handleSignIn))
	m.Handle("POST /fleet/logout", secure(f.handleLogout))
	m.Handle("GET /static/", secure(http.StripPrefix("/static/", http.FileServerFS(assets())).ServeHTTP))
}

// fleetPage is the page and its live section.
type fleetPage struct {
	base
	Runners []fleetRunner
}

type fleetRunner struct {
	autoscale.RunnerStatus
	Counts []stateCount
	Groups []instanceGroup
	Chart  template.HTML // SVG made by chartSVG from numbers only
	Usage  *usageView    // nil before the pool's first pass
}

// usageView is the pool's instance time of the last hour, by state and
// billed, as the page writes it.
type usageView struct {
	Idle, Creating, Busy, Billed, Billing string
}

// stateCount is how many instances are in a state, for the summary.
type stateCount struct {
	State, Label string
	N            int
}

// instanceGroup is the instances of one state.
type instanceGroup struct {
	stateCount
	Instances []instanceRow
}

type instanceRow struct {
	ID, ProviderState, Reason string
	Age, IdleFor              string
	UseCount, Acquired        int
}

// fleetStates are the instance states in the page's order, with their
// labels.
var fleetStates = []struct {
	state autoscale.State
	label string
}{
	{autoscale.StateCreating, "creating"},
	{autoscale.StateIdle, "idle"},
	{autoscale.StateBusy, "in use"},
	{autoscale.StateRemoving, "removing"},
}

func (f *FleetPage) page() fleetPage {
	p := fleetPage{base: base{Title: "Fleet", Home: "/fleet"}}
	rs := f.cfg.Fleet.FleetRunners()
	slices.SortFunc(rs, func(a, b autoscale.RunnerStatus) int { return cmp.Compare(a.Name+a.ShortToken, b.Name+b.ShortToken) })
	for _, r := range rs {
		p.Runners = append(p.Runners, fleetView(r))
	}
	return p
}

func fleetView(r autoscale.RunnerStatus) fleetRunner {
	st := &r.Status
	v := fleetRunner{RunnerStatus: r, Chart: template.HTML(chartSVG(st.Now, st.History))}
	if u := st.Usage; !u.Until.IsZero() {
		v.Usage = &usageView{
			Idle: formatDuration(u.Idle), Creating: formatDuration(u.Creating), Busy: formatDuration(u.Busy),
			Billed: formatDuration(u.Billed), Billing: u.Billing.String(),
		}
	}
	for _, s := range fleetStates {
		g := instanceGroup{stateCount: stateCount{State: s.state.String(), Label: s.label}}
		for _, in := range st.Instances {
			if in.State != s.state {
				continue
			}
			row := instanceRow{
				ID: cmp.Or(in.ID, "(requested)"), ProviderState: string(in.ProviderState), Reason: in.Reason,
				Age: formatDuration(st.Now.Sub(in.Created)), UseCount: in.UseCount, Acquired: in.Acquired,
			}
			if in.State == autoscale.StateIdle {
				row.IdleFor = formatDuration(st.Now.Sub(cmp.Or(in.LastUsed, in.Ready)))
			}
			g.Instances = append(g.Instances, row)
		}
		g.N = len(g.Instances)
		v.Counts = append(v.Counts, g.stateCount)
		v.Groups = append(v.Groups, g)
	}
	return v
}

func (f *FleetPage) render(name string, data any) (string, error) {
	var buf bytes.Buffer
	if err := f.tmpl.ExecuteTemplate(&buf, name, data); err != nil {
		return "", fmt.Errorf("render %s: %w", name, err)
	}
	return buf.String(), nil
}

// handlePage is GET /fleet.
func (f *FleetPage) handlePage(w http.ResponseWriter, r *http.Request) {
	p := f.page()
	p.FleetCSRF = f.auth.signOutCSRF(r, f.cfg.Clock.Now())
	html, err := f.render("fleet", p)
	if err != nil {
		f.log.Error("web: fleet page", "err", err)
		http.Error(w, "render the fleet page: internal error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Write([]byte(html))
}

// handleEvents is GET /fleet/events: the runners' section whenever it
// changes.
func (f *FleetPage) handleEvents(w http.ResponseWriter, r *http.Request) {
	streamHTML(r.Context(), w, f.log, f.wait, func(context.Context) (string, error) {
		return f.render("fleet-runners", f.page())
	})
}

// wait blocks for Poll; false when ctx is done first.
func (f *FleetPage) wait(ctx context.Context) bool {
	t := f.cfg.Clock.NewTimer(f.cfg.Poll)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C():
		return true
	}
}

// The chart: instances by state and the jobs waiting for a slot over the
// last autoscale.HistoryWindow, one polyline each, drawn here so that the
// page needs no chart library (and the CSP no inline script).

const (
	chartW, chartH         = 720, 200
	chartLeft, chartRight  = 36, 8
	chartTop, chartBottom  = 8, 22
	chartPlotW, chartPlotH = chartW - chartLeft - chartRight, chartH - chartTop - chartBottom
)

// chartSeries are the chart's lines: name (CSS class s-name) and value.
var chartSeries = []struct {
	name  string
	value func(s *autoscale.Sample) int
}{
	{"creating", func(s *autoscale.Sample) int { return s.Creating }},
	{"idle", func(s *autoscale.Sample) int { return s.Idle }},
	{"busy", func(s *autoscale.Sample) int { return s.Busy }},
	{"removing", func(s *autoscale.Sample) int { return s.Removing }},
	{"waiting", func(s *autoscale.Sample) int { return s.Waiting }},
}

// chartSVG draws samples (oldest first) over the window ending at now.
// It writes numbers and fixed text only: nothing in it needs escaping.
func chartSVG(now time.Time, samples []autoscale.Sample) string {
	top := 1
	for i := range samples {
		for _, s := range chartSeries {
			top = max(top, s.value(&samples[i]))
		}
	}
	top = niceCeil(top)
	from := now.Add(-autoscale.HistoryWindow)
	x := func(t time.Time) float64 {
		return chartLeft + float64(chartPlotW)*float64(t.Sub(from))/float64(autoscale.HistoryWindow)
	}
	y := func(v int) float64 { return chartTop + float64(chartPlotH)*(1-float64(v)/float64(top)) }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" class="chart" viewBox="0 0 %d %d" role="img" aria-label="instances by state and waiting jobs, last hour">`, chartW, chartH)
	b.WriteString(`<title>Instances by state and jobs waiting for a slot, last hour</title>`)
	for _, v := range []int{0, top / 2, top} {
		fmt.Fprintf(&b, `<line class="grid" x1="%d" y1="%.1f" x2="%d" y2="%.1f"/>`, chartLeft, y(v), chartW-chartRight, y(v))
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end">%d</text>`, chartLeft-4, y(v)+4, v)
	}
	fmt.Fprintf(&b, `<line class="axis" x1="%d" y1="%d" x2="%d" y2="%d"/>`, chartLeft, chartTop+chartPlotH, chartW-chartRight, chartTop+chartPlotH)
	for i, label := range []string{"-60 min", "-45 min", "-30 min", "-15 min", "now"} {
		anchor := "middle"
		if i == 4 {
			anchor = "end"
		}
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="%s">%s</text>`, chartLeft+float64(chartPlotW*i)/4, chartH-6, anchor, label)
	}
	for _, s := range chartSeries {
		fmt.Fprintf(&b, `<polyline class="s-%s" data-series="%s" points="`, s.name, s.name)
		for i := range samples {
			if samples[i].At.Before(from) {
				continue
			}
			fmt.Fprintf(&b, "%.1f,%.1f ", x(samples[i].At), y(s.value(&samples[i])))
		}
		b.WriteString(`"/>`)
	}
	b.WriteString(`</svg>`)
	return b.String()
}

// niceCeil rounds n up to 1, 2, 5 or 10 times a power of ten (and at
// least 2, so that the middle line is a whole number).
func niceCeil(n int) int {
	for p := 1; ; p *= 10 {
		for _, m := range []int{1, 2, 5} {
			if v := m * p; v >= n && v >= 2 {
				return v
			}
		}
	}
}
