package simulate

import (
	"fmt"
	"io"
	"time"
)

// WriteText writes the report for people.
func (r *Report) WriteText(w io.Writer) error {
	h := func(s float64) string { return fmt.Sprintf("%.1f h", s/3600) }
	_, err := fmt.Fprintf(w, `jobs              %d (%d still queued at the end)
queue wait        p50 %s  p95 %s  p99 %s  max %s
instance time     busy %s  idle %s  creating %s  removing %s
instances         peak %d  final %d  created %d  removed %d
`,
		r.Jobs, r.Unstarted,
		secs(r.WaitP50), secs(r.WaitP95), secs(r.WaitP99), secs(r.WaitMax),
		h(r.BusyInstanceS), h(r.IdleInstanceS), h(r.CreatingInstanceS), h(r.RemovingInstanceS),
		r.PeakInstances, r.FinalInstances, r.Created, r.Removed)
	if err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	return nil
}

func secs(s float64) string {
	return time.Duration(s * float64(time.Second)).Round(time.Second / 10).String()
}
