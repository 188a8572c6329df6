// Package metrics holds the Prometheus collectors every drover daemon
// (drover run, drover coordinator, drover router) serves besides its own:
// the Go runtime and process collectors, the build's identity, and a count
// of the warnings and errors the daemon logged.
//
// The runner manager names these as GitLab Runner does
// (gitlab_runner_version_info, gitlab_runner_errors_total), so dashboards
// built for GitLab Runner work unchanged; the coordinator and the router,
// which GitLab Runner has no counterpart of, use drover_ names.
package metrics

import (
	"context"
	"log/slog"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/drover-ci/drover/internal/buildinfo"
)

// Register adds to reg the Go runtime collector (go_*), the process
// collector (process_*), drover_build_info and, when gitlab is true,
// GitLab Runner's gitlab_runner_version_info. A registry takes them once:
// a second Register on the same reg fails.
func Register(reg prometheus.Registerer, gitlab bool) error {
	cs := []prometheus.Collector{
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		BuildInfo(buildinfo.Get()),
	}
	if gitlab {
		cs = append(cs, VersionInfo(buildinfo.Get()))
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// BuildInfo is drover_build_info: 1, labelled with the build's version,
// revision (commit), build date and Go version.
func BuildInfo(in buildinfo.Info) prometheus.Collector {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "drover_build_info",
		Help: "1, labelled with the version, commit (revision) and build date (built_at) of this drover and the Go that built it.",
	}, []string{"version", "revision", "built_at", "go_version"})
	g.WithLabelValues(in.Version, in.Commit, in.Built, in.GoVersion).Set(1)
	return g
}

// VersionInfo is GitLab Runner's gitlab_runner_version_info with its label
// set (GitLab Runner: common/version.go, NewMetricsCollector). name is
// "drover"; branch is "unknown", since a drover build records no branch.
func VersionInfo(in buildinfo.Info) prometheus.Collector {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "gitlab_runner_version_info",
		Help: "A metric with a constant '1' value labeled by different build stats fields.",
	}, []string{"name", "version", "revision", "branch", "go_version", "built_at", "os", "architecture"})
	g.WithLabelValues("drover", in.Version, in.Commit, "unknown", in.GoVersion, in.Built, in.OS, in.Arch).Set(1)
	return g
}

// ErrorCounter counts the warnings and errors a daemon logs, by level
// ("warning", "error"), as GitLab Runner's gitlab_runner_errors_total does
// for its log lines (GitLab Runner: helpers/prometheus/log_hook.go). It is
// a prometheus.Collector; Handler puts it in front of a slog.Handler.
type ErrorCounter struct {
	desc          *prometheus.Desc
	warnings, err atomic.Int64
}

// NewErrorCounter returns a counter exported as name (a counter family
// with the one label level).
func NewErrorCounter(name string) *ErrorCounter {
	return &ErrorCounter{desc: prometheus.NewDesc(name, "The number of caught errors: log records at warning level and above, by level.", []string{"level"}, nil)}
}

// Describe implements prometheus.Collector.
func (c *ErrorCounter) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

// Collect implements prometheus.Collector. Both levels are present from
// the start, at 0, so rate() over them has a series to work on.
func (c *ErrorCounter) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(c.desc, prometheus.CounterValue, float64(c.warnings.Load()), "warning")
	ch <- prometheus.MustNewConstMetric(c.desc, prometheus.CounterValue, float64(c.err.Load()), "error")
}

// Handler returns h counting, into c, each record at warning level or
// above that h is enabled for.
func (c *ErrorCounter) Handler(h slog.Handler) slog.Handler { return &countingHandler{next: h, c: c} }

// Logger is l with its handler wrapped by Handler.
func (c *ErrorCounter) Logger(l *slog.Logger) *slog.Logger { return slog.New(c.Handler(l.Handler())) }

type countingHandler struct {
	next slog.Handler
	c    *ErrorCounter
}

func (h *countingHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.next.Enabled(ctx, l)
}

func (h *countingHandler) Handle(ctx context.Context, r slog.Record) error {
	switch {
	case r.Level >= slog.LevelError:
		h.c.err.Add(1)
	case r.Level >= slog.LevelWarn:
		h.c.warnings.Add(1)
	}
	return h.next.Handle(ctx, r)
}

func (h *countingHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &countingHandler{next: h.next.WithAttrs(as), c: h.c}
}

func (h *countingHandler) WithGroup(name string) slog.Handler {
	return &countingHandler{next: h.next.WithGroup(name), c: h.c}
}
