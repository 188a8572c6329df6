package simulate

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// WriteText writes the report for people.
func (r *Report) WriteText(w io.Writer) error {
	h := func(s float64) string { return fmt.Sprintf("%.1f h", s/3600) }
	_, err := fmt.Fprintf(w, `jobs              %d (%d still queued at the end)
queue wait        p50 %s  p95 %s  p99 %s  max %s
instance time     busy %s  idle %s  creating %s  removing %s
billed            %s  (%s)
instances         peak %d  final %d  created %d  removed %d
`,
		r.Jobs, r.Unstarted,
		FormatWait(r.WaitP50), FormatWait(r.WaitP95), FormatWait(r.WaitP99), FormatWait(r.WaitMax),
		h(r.BusyInstanceS), h(r.IdleInstanceS), h(r.CreatingInstanceS), h(r.RemovingInstanceS),
		h(r.BilledInstanceS), r.Billing,
		r.PeakInstances, r.FinalInstances, r.Created, r.Removed)
	if err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	return nil
}

// WriteSweepText writes the results of a sweep for people: one row per
// configuration (idle_count, idle_time, preemptive mode; p95 and longest
// wait, idle and busy instance-hours), then the best one when there is
// one. Waits are written as in WriteText. The billed instance-hours
// are in the billing model of the runs (Report.Billing).
func WriteSweepText(w io.Writer, all []SweepResult, best *SweepResult) error {
	if _, err := fmt.Fprintf(w, "%10s %9s %10s %12s %12s %12s %12s %12s %14s\n", "idle_count", "idle_time", "preemptive", "p95_wait", "max_wait", "idle_inst_h", "busy_inst_h", "boot_inst_h", "billed_inst_h"); err != nil {
		return fmt.Errorf("write sweep: %w", err)
	}
	for _, r := range all {
		if _, err := fmt.Fprintf(w, "%10d %9s %10s %12s %12s %12.1f %12.1f %12.1f %14.1f\n", r.IdleCount, r.IdleTime, onOff(r.Preemptive), FormatWait(r.Report.WaitP95), FormatWait(r.Report.WaitMax),
			r.Report.IdleInstanceS/3600, r.Report.BusyInstanceS/3600, r.Report.CreatingInstanceS/3600, r.Report.BilledInstanceS/3600); err != nil {
			return fmt.Errorf("write sweep: %w", err)
		}
	}
	if best == nil {
		return nil
	}
	if _, err := fmt.Fprintf(w, "best: %s (p95 wait %s, idle %.1f instance-hours)\n", best.Setting(), FormatWait(best.Report.WaitP95), best.Report.IdleInstanceS/3600); err != nil {
		return fmt.Errorf("write sweep: %w", err)
	}
	return nil
}

// WriteComparisonText writes the policy's row (the adaptive one) beside
// the best static configuration of c, and the ratio of their idle
// instance time: what `drover autoscale sweep` ends with.
func WriteComparisonText(w io.Writer, c *Comparison) error {
	row := func(name string, r *Report) string {
		return fmt.Sprintf("%-9s p95 wait %-8s idle %7.1f h  booting %6.1f h  busy %7.1f h  billed %7.1f h", name,
			FormatWait(r.WaitP95), r.IdleInstanceS/3600, r.CreatingInstanceS/3600, r.BusyInstanceS/3600, r.BilledInstanceS/3600)
	}
	var b strings.Builder
	fmt.Fprintln(&b, row("adaptive", &c.Policy))
	if c.BestStatic == nil {
		fmt.Fprintf(&b, "static    no configuration meets p95 wait %s\n", c.TargetP95)
	} else {
		fmt.Fprintf(&b, "%s  (%s)\n", row("static", &c.BestStatic.Report), c.BestStatic.Setting())
		verdict := "meets"
		if !c.PolicyMeetsTarget {
			verdict = "MISSES"
		}
		fmt.Fprintf(&b, "ratio     adaptive idle / best static idle = %.2f (adaptive %s p95 wait %s)\n", c.IdleRatio(), verdict, c.TargetP95)
		if lb := BestBilled(c.Static, c.TargetP95); lb != nil && lb.Report.BilledInstanceS > 0 {
			fmt.Fprintf(&b, "billed    %s: least billed static %.1f h (%s); adaptive billed / least billed static = %.2f\n",
				c.Policy.Billing, lb.Report.BilledInstanceS/3600, lb.Setting(), c.Policy.BilledInstanceS/lb.Report.BilledInstanceS)
		}
	}
	if _, err := io.WriteString(w, b.String()); err != nil {
		return fmt.Errorf("write comparison: %w", err)
	}
	return nil
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

// FormatWait is the one way the reports of simulate and sweep (and the
// fleet page's what-if) write a wait of s seconds: a Go duration to the tenth of a second ("0s",
// "28.3s", "4m27.7s"), the form --boot-time and --target-p95 take.
func FormatWait(s float64) string {
	return time.Duration(s * float64(time.Second)).Round(time.Second / 10).String()
}

// WriteHoursText writes a run hour by hour for people: the jobs that
// arrived in each hour, how many of them were late (waited longer than
// the run's Options.LateAfter), their p95 wait, and the mean number of
// instances busy, idle and booting over the hour.
func WriteHoursText(w io.Writer, hours []Hour) error {
	n := time.Hour.Seconds()
	var b strings.Builder
	fmt.Fprintf(&b, "%-5s %6s %6s %9s %7s %7s %8s\n", "hour", "jobs", "late", "p95_wait", "busy", "idle", "booting")
	for _, h := range hours {
		fmt.Fprintf(&b, "%-5s %6d %6d %9s %7.1f %7.1f %8.1f\n", clockHour(h.Start), h.Jobs, h.Late,
			FormatWait(h.WaitP95), h.BusyS/n, h.IdleS/n, h.CreatingS/n)
	}
	if _, err := io.WriteString(w, b.String()); err != nil {
		return fmt.Errorf("write hours: %w", err)
	}
	return nil
}

// WriteHoursComparisonText writes two runs of the same trace hour by
// hour side by side (the adaptive policy and the best static
// configuration): per hour the jobs, then for each run the late jobs and
// the mean idle and booting instances, and the ratio of their idle time.
// It shows where one policy spends the idle time the other saves.
func WriteHoursComparisonText(w io.Writer, nameA string, a []Hour, nameB string, b []Hour) error {
	n := time.Hour.Seconds()
	var sb strings.Builder
	fmt.Fprintf(&sb, "%-5s %6s | %-24s | %-24s | %s\n", "", "", nameA, nameB, "idle")
	fmt.Fprintf(&sb, "%-5s %6s | %6s %7s %9s | %6s %7s %9s | %s\n", "hour", "jobs", "late", "idle", "booting", "late", "idle", "booting", "ratio")
	for i := range min(len(a), len(b)) {
		ha, hb := a[i], b[i]
		ratio := "-"
		if hb.IdleS > 0 {
			ratio = fmt.Sprintf("%.2f", ha.IdleS/hb.IdleS)
		}
		fmt.Fprintf(&sb, "%-5s %6d | %6d %7.1f %9.1f | %6d %7.1f %9.1f | %s\n", clockHour(ha.Start), ha.Jobs,
			ha.Late, ha.IdleS/n, ha.CreatingS/n, hb.Late, hb.IdleS/n, hb.CreatingS/n, ratio)
	}
	if _, err := io.WriteString(w, sb.String()); err != nil {
		return fmt.Errorf("write hours: %w", err)
	}
	return nil
}

// clockHour writes an offset from the start as hh:00 (25:00 and on past
// a day).
func clockHour(d time.Duration) string {
	return fmt.Sprintf("%02d:00", int(d/time.Hour))
}

// WriteHindsightText writes a hindsight schedule as run: the setting of
// each hour (hours from the start, as the hourly tables count them), then
// its p95 wait and idle time against the best static configuration (nil:
// none met the target).
func WriteHindsightText(w io.Writer, hs *Hindsight, best *SweepResult) error {
	var b strings.Builder
	fmt.Fprintln(&b, "hindsight schedule: one static setting per hour, each picked knowing how the whole day went")
	for h, r := range hs.Plan.Hours {
		fmt.Fprintf(&b, "%-5s %s\n", clockHour(time.Duration(h)*time.Hour), r.Setting())
	}
	fmt.Fprintf(&b, "hindsight p95 wait %-8s idle %7.1f h  booting %6.1f h  (the hours' own runs predicted %.1f h idle, %d late; plans tried: %d)\n",
		FormatWait(hs.Report.WaitP95), hs.Report.IdleInstanceS/3600, hs.Report.CreatingInstanceS/3600,
		hs.Plan.PredictedIdleS/3600, hs.Plan.PredictedLate, hs.Tries)
	if best != nil && best.Report.IdleInstanceS > 0 {
		fmt.Fprintf(&b, "ratio     hindsight idle / best static idle = %.2f\n", hs.Report.IdleInstanceS/best.Report.IdleInstanceS)
	}
	if _, err := io.WriteString(w, b.String()); err != nil {
		return fmt.Errorf("write hindsight: %w", err)
	}
	return nil
}
