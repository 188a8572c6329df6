package coordinator

import (
	"context"
	"fmt"
	"time"

	"github.com/drover-ci/drover/internal/runnerapi"
	"github.com/drover-ci/drover/internal/store"
	"github.com/prometheus/client_golang/prometheus"
)

const metricPrefix = "drover_coordinator_"

type metrics struct {
	submitted prometheus.Counter
	finished  *prometheus.CounterVec
	queueWait prometheus.Histogram
	waiters   prometheus.Gauge
	watches   prometheus.Gauge
	// api counts requests by endpoint and status, and serves /metrics.
	api *runnerapi.Metrics
	// provisioning counts how two-phase hand-outs ended: accepted,
	// declined, expired.
	provisioning *prometheus.CounterVec
	// unavailable counts requests answered 503 because the database could
	// not be reached.
	unavailable prometheus.Counter
	// Artifacts: bytes stored and served, uploads refused as too large,
	// artifacts deleted on expiry, files no record named removed.
	artifactsUploaded   prometheus.Counter
	artifactsDownloaded prometheus.Counter
	artifactsTooLarge   prometheus.Counter
	artifactsExpired    prometheus.Counter
	artifactsOrphaned   prometheus.Counter
	// lowDisk counts writes (trace, artifact) answered 507 because the
	// data directory's disk was under --min-free-disk.
	lowDisk *prometheus.CounterVec
	// forgeStatuses counts commit status posts by forge and result:
	// delivered, retried, failed.
	forgeStatuses *prometheus.CounterVec
}

// jobsCollector reports jobs by status from the store at scrape time, so
// the gauge is right after a restart and never drifts.
type jobsCollector struct {
	c    *Coordinator
	desc *prometheus.Desc
}

func (jc jobsCollector) Describe(ch chan<- *prometheus.Desc) { ch <- jc.desc }

// Outcomes of a two-phase hand-out (label of provisioning_total).
const (
	outcomeAccepted = "accepted"
	outcomeDeclined = "declined"
	outcomeExpired  = "expired"
)

func (jc jobsCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	counts, err := jc.c.st.CountJobs(ctx)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(jc.desc, err)
		return
	}
	for _, s := range store.AllStatuses {
		ch <- prometheus.MustNewConstMetric(jc.desc, prometheus.GaugeValue, float64(counts[s]), string(s))
	}
}

func newMetrics(reg prometheus.Registerer, c *Coordinator) (*metrics, error) {
	m := &metrics{
		submitted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: metricPrefix + "jobs_submitted_total", Help: "Jobs submitted through the admin API.",
		}),
		finished: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: metricPrefix + "jobs_finished_total", Help: "Jobs that reached a final status, by status.",
		}, []string{"status"}),
		queueWait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: metricPrefix + "job_queue_wait_seconds", Help: "Time from enqueue to hand-out to a runner.",
			Buckets: prometheus.ExponentialBuckets(0.01, 4, 10),
		}),
		waiters: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: metricPrefix + "long_poll_waiters", Help: "jobs/request calls currently held.",
		}),
		watches: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: metricPrefix + "job_watches", Help: "jobs/watch calls currently held (drover managers waiting to hear of cancels).",
		}),
		provisioning: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: metricPrefix + "provisioning_total",
			Help: "Two-phase hand-outs by outcome: accepted, declined, expired (ack deadline passed).",
		}, []string{"outcome"}),
		unavailable: prometheus.NewCounter(prometheus.CounterOpts{
			Name: metricPrefix + "database_unavailable_total",
			Help: "Requests answered 503 because the database could not be reached.",
		}),
		lowDisk: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: metricPrefix + "writes_refused_low_disk_total",
			Help: "Trace PATCHes and artifact uploads answered 507: the data directory's disk was under --min-free-disk.",
		}, []string{"what"}),
		forgeStatuses: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: metricPrefix + "forge_statuses_total",
			Help: "Commit status posts to forges, by forge and result: delivered, retried (failed, tried again), failed (given up).",
		}, []string{"forge", "result"}),
	}
	// The artifact counters, by name and help.
	for _, a := range []struct {
		counter    *prometheus.Counter
		name, help string
	}{
		{&m.artifactsUploaded, "artifacts_uploaded_bytes_total", "Bytes of artifacts uploaded and stored."},
		{&m.artifactsDownloaded, "artifacts_downloaded_bytes_total", "Bytes of artifacts served (runner and admin downloads)."},
		{&m.artifactsTooLarge, "artifacts_rejected_too_large_total", "Artifact uploads answered 413: over --max-artifact-size."},
		{&m.artifactsExpired, "artifacts_expired_total", "Artifacts deleted because they expired."},
		{&m.artifactsOrphaned, "artifacts_orphaned_files_removed_total", "Files of the artifacts directory that no record named (left by a crash), removed by the reaper."},
	} {
		*a.counter = prometheus.NewCounter(prometheus.CounterOpts{Name: metricPrefix + a.name, Help: a.help})
	}
	for _, o := range []string{outcomeAccepted, outcomeDeclined, outcomeExpired} {
		m.provisioning.WithLabelValues(o) // report zeros from the start
	}
	for _, w := range []string{writeTrace, writeArtifact} {
		m.lowDisk.WithLabelValues(w)
	}
	jobs := jobsCollector{c: c, desc: prometheus.NewDesc(metricPrefix+"jobs", "Jobs by status.", []string{"status"}, nil)}

	cs := []prometheus.Collector{m.submitted, m.finished, m.queueWait, m.waiters, m.watches, m.provisioning, m.unavailable, m.lowDisk, m.forgeStatuses,
		m.artifactsUploaded, m.artifactsDownloaded, m.artifactsTooLarge, m.artifactsExpired, m.artifactsOrphaned, jobs}
	if sc, ok := c.st.(interface{ Collector() prometheus.Collector }); ok {
		// The store's own: a database pool and query latency.
		cs = append(cs, sc.Collector())
	}
	var err error
	if m.api, err = runnerapi.NewMetrics(reg, metricPrefix, cs...); err != nil {
		return nil, fmt.Errorf("coordinator: %w", err)
	}
	return m, nil
}
