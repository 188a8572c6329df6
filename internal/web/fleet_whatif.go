package web

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/drover-ci/drover/internal/autoscale"
	"github.com/drover-ci/drover/internal/autoscale/simulate"
)

// The fleet page's "what if": GET /fleet/whatif?runner=TOKEN shows a form
// with the runner's policy now (idle_count, idle_time, preemptive mode,
// adaptive sizing and its target wait) and the boot time it observed;
// submitted (run=1, still a GET: it changes nothing), it replays the last
// day of the runner's own jobs (autoscale.JobTrace) in the simulator
// twice, under the policy as it is and under the form's values, and shows
// both plots and reports side by side. The work is bounded: at most
// WhatIfMaxJobs jobs (the most recent), WhatIfTimeout for both runs, and
// one what-if at a time per page — another gets 429.

const (
	// DefaultWhatIfTimeout bounds the two simulations of a what-if.
	DefaultWhatIfTimeout = 30 * time.Second
	// DefaultWhatIfMaxJobs is the most jobs a what-if replays.
	DefaultWhatIfMaxJobs = autoscale.DefaultJobLogSize
	// whatIfBootTime is the boot time the form offers when the pool has
	// not seen an instance become ready (as drover autoscale simulate).
	whatIfBootTime = 30 * time.Second
	// whatIfMaxIdleCount bounds the form's idle_count.
	whatIfMaxIdleCount = 10_000
	// whatIfMaxDuration bounds the form's durations.
	whatIfMaxDuration = 24 * time.Hour
)

// whatIfForm is the form's values as typed (to show them again) and as
// read.
type whatIfForm struct {
	Runner                                                string
	IdleCount, IdleTime, Preemptive, Adaptive, TargetWait string
	BootTime                                              string
	alt                                                   simulate.Alternative
	boot                                                  time.Duration
}

// formOf is the form filled with alt and boot.
func formOf(runner string, alt simulate.Alternative, boot time.Duration) whatIfForm {
	return whatIfForm{
		Runner: runner, IdleCount: strconv.Itoa(alt.IdleCount), IdleTime: alt.IdleTime.String(),
		Preemptive: onOff(alt.Preemptive), Adaptive: onOff(alt.Adaptive),
		TargetWait: cmp.Or(alt.TargetWait, autoscale.DefaultTargetWait).String(), BootTime: boot.String(),
		alt: alt, boot: boot,
	}
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

// fieldError is a form value that cannot be used.
type fieldError struct{ Field, Msg string }

func (e *fieldError) Error() string { return e.Field + ": " + e.Msg }

// parseWhatIf reads the form of q.
func parseWhatIf(runner string, q url.Values) (whatIfForm, *fieldError) {
	f := whatIfForm{
		Runner: runner, IdleCount: q.Get("idle_count"), IdleTime: q.Get("idle_time"), Preemptive: q.Get("preemptive"),
		Adaptive: q.Get("adaptive"), TargetWait: q.Get("target_wait"), BootTime: q.Get("boot_time"),
	}
	n, err := strconv.Atoi(strings.TrimSpace(f.IdleCount))
	if err != nil || n < 0 || n > whatIfMaxIdleCount {
		return f, &fieldError{"idle_count", fmt.Sprintf("%q: want a whole number from 0 to %d", f.IdleCount, whatIfMaxIdleCount)}
	}
	f.alt.IdleCount = n
	durations := []struct {
		name, value string
		to          *time.Duration
		positive    bool
	}{
		{"idle_time", f.IdleTime, &f.alt.IdleTime, false},
		{"target_wait", f.TargetWait, &f.alt.TargetWait, true},
		{"boot_time", f.BootTime, &f.boot, false},
	}
	for _, d := range durations {
		v, err := time.ParseDuration(strings.TrimSpace(d.value))
		if err != nil || v < 0 || v > whatIfMaxDuration || d.positive && v == 0 {
			least := "0s"
			if d.positive {
				least = "above 0s"
			}
			return f, &fieldError{d.name, fmt.Sprintf("%q: want a duration such as 90s or 5m, %s to %s", d.value, least, whatIfMaxDuration)}
		}
		*d.to = v
	}
	for _, b := range []struct {
		name, value string
		to          *bool
	}{{"preemptive", f.Preemptive, &f.alt.Preemptive}, {"adaptive", f.Adaptive, &f.alt.Adaptive}} {
		switch b.value {
		case "on":
			*b.to = true
		case "off":
			*b.to = false
		default:
			return f, &fieldError{b.name, fmt.Sprintf("%q: want on or off", b.value)}
		}
	}
	return f, nil
}

// whatIfPage is the what-if page.
type whatIfPage struct {
	base
	Name, Plugin string
	Form         whatIfForm
	Error        *fieldError
	Jobs         int       // jobs recorded in the window
	Since        time.Time // start of the window
	Truncated    int       // jobs left out (WhatIfMaxJobs)
	Runs         []whatIfRun
}

// whatIfRun is one simulation as the page shows it.
type whatIfRun struct {
	Title, Setting string
	Report         simulate.Report
	Plot           template.HTML // made by simulate.WriteSVG: numbers and escaped text only
}

// Hours is seconds in hours, for the reports.
func (whatIfRun) Hours(s float64) string { return fmt.Sprintf("%.1f h", s/3600) }

// Wait is a wait in seconds, for the reports.
func (whatIfRun) Wait(s float64) string { return simulate.FormatWait(s) }

// setting describes alt and boot as the page's run titles do.
func setting(alt simulate.Alternative, boot time.Duration) string {
	s := fmt.Sprintf("idle_count %d, idle_time %s, preemptive %s", alt.IdleCount, alt.IdleTime, onOff(alt.Preemptive))
	if alt.Adaptive {
		s += fmt.Sprintf(", adaptive (target wait %s)", alt.TargetWait)
	}
	return s + fmt.Sprintf("; boot time %s", boot)
}

// handleWhatIf is GET /fleet/whatif.
func (f *FleetPage) handleWhatIf(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	token := q.Get("runner")
	var fr *autoscale.RunnerStatus
	for _, x := range f.cfg.Fleet.FleetRunners() {
		if x.ShortToken == token {
			fr = &x
			break
		}
	}
	tr, ok := f.cfg.Fleet.FleetTrace(token)
	if fr == nil || !ok || tr.Policy == nil {
		http.Error(w, fmt.Sprintf("what if: no autoscaled runner %q", token), http.StatusNotFound)
		return
	}
	since := tr.Now.Add(-autoscale.JobLogWindow)
	p := whatIfPage{
		base: base{Title: "What if · " + cmp.Or(fr.Name, token), Home: "/fleet", FleetCSRF: f.auth.signOutCSRF(r, f.cfg.Clock.Now())},
		Name: cmp.Or(fr.Name, token), Plugin: fr.Plugin, Jobs: len(tr.Jobs), Since: since,
		Form: formOf(token, simulate.AlternativeOf(tr.Policy.Active(tr.Now)), cmp.Or(tr.BootTime.Round(time.Second), whatIfBootTime)),
	}
	status := http.StatusOK
	if q.Get("run") != "" {
		form, fe := parseWhatIf(token, q)
		p.Form = form
		if fe != nil {
			p.Error, status = fe, http.StatusBadRequest
		} else {
			jobs := simulate.Recorded(since, tr.Jobs)
			if n := len(jobs) - f.cfg.WhatIfMaxJobs; n > 0 {
				jobs, p.Truncated = jobs[n:], n
			}
			if !f.trySimulate() {
				w.Header().Set("Retry-After", "10")
				http.Error(w, "what if: another simulation is running on this runner manager; try again in a moment", http.StatusTooManyRequests)
				return
			}
			runs, err := f.whatIf(r.Context(), tr, since, jobs, form)
			f.doneSimulating()
			if err != nil && r.Context().Err() != nil {
				return // the client went away: nobody to answer
			}
			if err != nil {
				code := http.StatusInternalServerError
				if errors.Is(err, context.DeadlineExceeded) {
					code = http.StatusServiceUnavailable
				}
				f.whatIfFailed(w, err, code)
				return
			}
			p.Runs = runs
		}
	}
	html, err := f.render("fleet-whatif", p)
	if err != nil {
		f.whatIfFailed(w, err, http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	w.Write([]byte(html))
}

func (f *FleetPage) whatIfFailed(w http.ResponseWriter, err error, code int) {
	f.log.Error("web: what if", "err", err)
	msg := "what if: internal error"
	if code == http.StatusServiceUnavailable {
		msg = fmt.Sprintf("what if: the simulations took longer than %s", f.cfg.WhatIfTimeout)
	}
	http.Error(w, msg, code)
}

// trySimulate takes the page's one simulation turn; false when it is
// taken.
func (f *FleetPage) trySimulate() bool {
	select {
	case f.simulating <- struct{}{}:
		return true
	default:
		return false
	}
}

func (f *FleetPage) doneSimulating() { <-f.simulating }

// whatIf simulates jobs (from since) under tr's policy and under form's,
// within WhatIfTimeout.
func (f *FleetPage) whatIf(ctx context.Context, tr autoscale.JobTrace, since time.Time, jobs []simulate.Job, form whatIfForm) ([]whatIfRun, error) {
	ctx, cancel := context.WithTimeout(ctx, f.cfg.WhatIfTimeout)
	defer cancel()
	if f.whatIfHook != nil {
		f.whatIfHook(ctx)
	}
	o := simulate.Options{BootTime: form.boot, Start: since, Seed: 1}
	cur := simulate.AlternativeOf(tr.Policy.Active(tr.Now))
	curSetting := setting(cur, form.boot)
	if len(tr.Policy.Schedules) > 0 {
		curSetting = "as configured, periods included; now " + curSetting
	}
	runs := []whatIfRun{
		{Title: "Current policy", Setting: curSetting},
		{Title: "What if", Setting: setting(form.alt, form.boot)},
	}
	for i, pol := range []*autoscale.Policy{tr.Policy, form.alt.Policy(tr.Policy)} {
		o.Policy = pol
		res, err := simulate.Run(ctx, o, jobs)
		if err != nil {
			return nil, fmt.Errorf("what if: simulate %s: %w", strings.ToLower(runs[i].Title), err)
		}
		var svg bytes.Buffer
		if err := simulate.WriteSVG(&svg, res); err != nil {
			return nil, fmt.Errorf("what if: plot: %w", err)
		}
		runs[i].Report = res.Report
		runs[i].Plot = template.HTML(svg.String())
	}
	return runs, nil
}
