package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
)

// poolMetrics is the store's Prometheus collector: the pool's use, read
// from pgxpool at scrape time, and query latency, observed by a pgx query
// tracer on every pooled connection.
type poolMetrics struct {
	store   *Store
	queries prometheus.Histogram
	errors  prometheus.Counter

	acquired, idle, total, max *prometheus.Desc
	acquires, emptyAcquires    *prometheus.Desc
	acquireWait, notes         *prometheus.Desc
}

const metricPrefix = "drover_coordinator_db_"

func newPoolMetrics() *poolMetrics {
	d := func(name, help string) *prometheus.Desc { return prometheus.NewDesc(metricPrefix+name, help, nil, nil) }
	return &poolMetrics{
		queries: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    metricPrefix + "query_seconds",
			Help:    "Latency of the coordinator's PostgreSQL statements (each statement of a transaction on its own).",
			Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10),
		}),
		errors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: metricPrefix + "query_errors_total", Help: "PostgreSQL statements that failed.",
		}),
		acquired:      d("pool_acquired_connections", "Pool connections in use."),
		idle:          d("pool_idle_connections", "Idle pool connections."),
		total:         d("pool_connections", "Pool connections open (in use, idle and being opened)."),
		max:           d("pool_max_connections", "The pool's size limit (pool_max_conns)."),
		acquires:      d("pool_acquires_total", "Connections taken from the pool."),
		emptyAcquires: d("pool_empty_acquires_total", "Acquires that found no idle connection and waited for one."),
		acquireWait:   d("pool_acquire_wait_seconds_total", "Time spent waiting for a pool connection."),
		notes:         d("queue_notifications_total", "Queue notifications received from other coordinators."),
	}
}

// Collector returns the store's metrics, for the coordinator to register.
func (s *Store) Collector() prometheus.Collector { return s.metrics }

func (m *poolMetrics) Describe(ch chan<- *prometheus.Desc) {
	m.queries.Describe(ch)
	m.errors.Describe(ch)
	for _, d := range []*prometheus.Desc{m.acquired, m.idle, m.total, m.max, m.acquires, m.emptyAcquires, m.acquireWait, m.notes} {
		ch <- d
	}
}

func (m *poolMetrics) Collect(ch chan<- prometheus.Metric) {
	m.queries.Collect(ch)
	m.errors.Collect(ch)
	st := m.store.pool.Stat()
	g := func(d *prometheus.Desc, v float64) { ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v) }
	c := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v)
	}
	g(m.acquired, float64(st.AcquiredConns()))
	g(m.idle, float64(st.IdleConns()))
	g(m.total, float64(st.TotalConns()))
	g(m.max, float64(st.MaxConns()))
	c(m.acquires, float64(st.AcquireCount()))
	c(m.emptyAcquires, float64(st.EmptyAcquireCount()))
	c(m.acquireWait, st.AcquireDuration().Seconds())
	c(m.notes, float64(m.store.notes.Load()))
}

type queryStartKey struct{}

// TraceQueryStart implements pgx.QueryTracer.
func (m *poolMetrics) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return context.WithValue(ctx, queryStartKey{}, time.Now())
}

// TraceQueryEnd implements pgx.QueryTracer.
func (m *poolMetrics) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryEndData) {
	if t, ok := ctx.Value(queryStartKey{}).(time.Time); ok {
		m.queries.Observe(time.Since(t).Seconds())
	}
	if data.Err != nil {
		m.errors.Inc()
	}
}
