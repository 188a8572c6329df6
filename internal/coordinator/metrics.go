package coordinator

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/drover-ci/drover/internal/coordinator/store"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

const metricPrefix = "drover_coordinator_"

type metrics struct {
	submitted prometheus.Counter
	finished  *prometheus.CounterVec
	queueWait prometheus.Histogram
	waiters   prometheus.Gauge
	watches   prometheus.Gauge
	requests  *prometheus.CounterVec
	// provisioning counts how two-phase hand-outs ended: accepted,
	// declined, expired.
	provisioning *prometheus.CounterVec
	// unavailable counts requests answered 503 because the database could
	// not be reached.
	unavailable prometheus.Counter
	handler     http.Handler
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
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: metricPrefix + "api_requests_total", Help: "API requests by endpoint and status code.",
		}, []string{"endpoint", "code"}),
		provisioning: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: metricPrefix + "provisioning_total",
			Help: "Two-phase hand-outs by outcome: accepted, declined, expired (ack deadline passed).",
		}, []string{"outcome"}),
		unavailable: prometheus.NewCounter(prometheus.CounterOpts{
			Name: metricPrefix + "database_unavailable_total",
			Help: "Requests answered 503 because the database could not be reached.",
		}),
	}
	for _, o := range []string{outcomeAccepted, outcomeDeclined, outcomeExpired} {
		m.provisioning.WithLabelValues(o) // report zeros from the start
	}
	jobs := jobsCollector{c: c, desc: prometheus.NewDesc(metricPrefix+"jobs", "Jobs by status.", []string{"status"}, nil)}

	var gatherer prometheus.Gatherer
	if reg == nil {
		r := prometheus.NewRegistry()
		reg, gatherer = r, r
	} else if g, ok := reg.(prometheus.Gatherer); ok {
		gatherer = g
	}
	for _, col := range []prometheus.Collector{m.submitted, m.finished, m.queueWait, m.waiters, m.watches, m.requests, m.provisioning, m.unavailable, jobs} {
		if err := reg.Register(col); err != nil {
			return nil, fmt.Errorf("coordinator: register metrics: %w", err)
		}
	}
	if sc, ok := c.st.(interface{ Collector() prometheus.Collector }); ok {
		// The store's own: a database pool and query latency.
		if err := reg.Register(sc.Collector()); err != nil {
			return nil, fmt.Errorf("coordinator: register store metrics: %w", err)
		}
	}
	if gatherer != nil {
		m.handler = promhttp.HandlerFor(gatherer, promhttp.HandlerOpts{})
	} else {
		// The embedding program serves its own registry.
		m.handler = http.NotFoundHandler()
	}
	return m, nil
}
