package simulate

import (
	"bufio"
	"fmt"
	"html"
	"io"
	"math"
	"strings"
)

// Plot geometry (SVG user units).
const (
	plotW      = 1000
	plotLeft   = 70
	plotRight  = 20
	panelTop   = 50
	panelH     = 260
	panelGap   = 70
	queueTop   = panelTop + panelH + panelGap
	queueH     = 150
	plotBottom = queueTop + queueH + 50
)

var stateColors = []struct{ name, color string }{
	{"busy", "#d95f02"},
	{"idle", "#1b9e77"},
	{"creating", "#7570b3"},
	{"removing", "#999999"},
}

// WriteSVG plots the timeline: instances by state, stacked (busy, idle,
// creating, removing), and below it the queued jobs, over hours since the
// start. The plot is well-formed XML and fit to embed in HTML: its text
// is escaped and it has no script, style or id.
func WriteSVG(w io.Writer, r *Result) error {
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", plotW, plotBottom, plotW, plotBottom)
	fmt.Fprintf(bw, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(bw, `<text x="%d" y="25" font-size="16">Autoscaling simulation: %d jobs, p95 wait %s, idle %.1f instance-hours</text>`+"\n",
		plotLeft, r.Jobs, html.EscapeString(FormatWait(r.WaitP95)), r.IdleInstanceS/3600)
	hours := r.Duration.Hours()
	if hours <= 0 {
		hours = 1
	}
	x := func(h float64) float64 { return plotLeft + h/hours*(plotW-plotLeft-plotRight) }

	maxInst, maxQ := 1, 1
	for _, s := range r.Timeline {
		maxInst = max(maxInst, s.Creating+s.Idle+s.Busy+s.Removing)
		maxQ = max(maxQ, s.Queued)
	}
	instTop := niceCeil(maxInst)
	qTop := niceCeil(maxQ)
	yInst := func(v float64) float64 { return panelTop + panelH - v/float64(instTop)*panelH }
	yQ := func(v float64) float64 { return queueTop + queueH - v/float64(qTop)*queueH }

	// Stacked step areas, top layer first so lower layers paint over it.
	layer := func(s Sample, upto int) int {
		v := [4]int{s.Busy, s.Idle, s.Creating, s.Removing}
		sum := 0
		for i := 0; i <= upto; i++ {
			sum += v[i]
		}
		return sum
	}
	n := len(r.Timeline)
	for li := len(stateColors) - 1; li >= 0; li-- {
		var b strings.Builder
		fmt.Fprintf(&b, "M%.1f,%.1f", x(0), yInst(0))
		for i, s := range r.Timeline {
			x0 := x(s.At.Hours())
			x1 := x(hours)
			if i+1 < n {
				x1 = x(r.Timeline[i+1].At.Hours())
			}
			y := yInst(float64(layer(s, li)))
			fmt.Fprintf(&b, " L%.1f,%.1f L%.1f,%.1f", x0, y, x1, y)
		}
		fmt.Fprintf(&b, " L%.1f,%.1f Z", x(hours), yInst(0))
		fmt.Fprintf(bw, `<path d="%s" fill="%s" stroke="none"><title>%s</title></path>`+"\n", b.String(), stateColors[li].color, html.EscapeString(stateColors[li].name))
	}
	// Queue line.
	var q strings.Builder
	for i, s := range r.Timeline {
		cmd := "L"
		if i == 0 {
			cmd = "M"
		}
		x1 := x(hours)
		if i+1 < n {
			x1 = x(r.Timeline[i+1].At.Hours())
		}
		fmt.Fprintf(&q, "%s%.1f,%.1f L%.1f,%.1f ", cmd, x(s.At.Hours()), yQ(float64(s.Queued)), x1, yQ(float64(s.Queued)))
	}
	if q.Len() > 0 {
		fmt.Fprintf(bw, `<path d="%s" fill="none" stroke="#e7298a" stroke-width="1.5"><title>queued jobs</title></path>`+"\n", strings.TrimSpace(q.String()))
	}

	axes(bw, x, hours, panelTop, panelH, instTop, "instances")
	axes(bw, x, hours, queueTop, queueH, qTop, "queued jobs")
	fmt.Fprintf(bw, `<text x="%.1f" y="%d" text-anchor="middle">hours since start</text>`+"\n", x(hours/2), plotBottom-10)
	// Legend.
	lx := float64(plotLeft + 10)
	for _, c := range stateColors {
		fmt.Fprintf(bw, `<rect x="%.0f" y="%d" width="12" height="12" fill="%s"/><text x="%.0f" y="%d">%s</text>`+"\n", lx, panelTop+5, c.color, lx+16, panelTop+15, html.EscapeString(c.name))
		lx += 90
	}
	fmt.Fprintln(bw, "</svg>")
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("write plot: %w", err)
	}
	return nil
}

func axes(w io.Writer, x func(float64) float64, hours float64, top, height, ymax int, label string) {
	bottom := top + height
	fmt.Fprintf(w, `<g stroke="black" fill="none"><line x1="%.1f" y1="%d" x2="%.1f" y2="%d"/><line x1="%.1f" y1="%d" x2="%.1f" y2="%d"/></g>`+"\n",
		x(0), bottom, x(hours), bottom, x(0), top, x(0), bottom)
	stepH := niceStep(hours, 12)
	for h := 0.0; h <= hours+1e-9; h += stepH {
		fmt.Fprintf(w, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="black"/><text x="%.1f" y="%d" text-anchor="middle">%g</text>`+"\n",
			x(h), bottom, x(h), bottom+5, x(h), bottom+18, math.Round(h*100)/100)
	}
	stepY := niceStep(float64(ymax), 5)
	for v := 0.0; v <= float64(ymax)+1e-9; v += stepY {
		y := float64(bottom) - v/float64(ymax)*float64(height)
		fmt.Fprintf(w, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#dddddd"/><text x="%.1f" y="%.1f" text-anchor="end">%g</text>`+"\n",
			x(0), y, x(hours), y, x(0)-6, y+4, v)
	}
	fmt.Fprintf(w, `<text transform="translate(%d,%d) rotate(-90)" text-anchor="middle">%s</text>`+"\n", 18, top+height/2, html.EscapeString(label))
}

// niceStep returns a 1-2-5 step that cuts span into about n parts.
func niceStep(span float64, n int) float64 {
	raw := span / float64(n)
	if raw <= 0 {
		return 1
	}
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*mag >= raw {
			return m * mag
		}
	}
	return 10 * mag
}

// niceCeil rounds v up to a multiple of its 1-2-5 step.
func niceCeil(v int) int {
	s := niceStep(float64(v), 5)
	return int(math.Ceil(float64(v)/s) * s)
}
