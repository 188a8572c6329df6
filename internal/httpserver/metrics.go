package httpserver

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics counts the connections of a daemon's servers: one per registry,
// shared by the servers that follow one another on a reload.
type Metrics struct {
	open     prometheus.Gauge
	rejected *prometheus.CounterVec
}

// NewMetrics registers with reg drover_<subsystem>_connections (open
// connections) and drover_<subsystem>_connections_rejected_total by
// reason: per_client (answered 429), server (answered 503).
func NewMetrics(reg prometheus.Registerer, subsystem string) (*Metrics, error) {
	m := &Metrics{
		open: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "drover", Subsystem: subsystem, Name: "connections",
			Help: "HTTP connections open on the API listener (refused ones not included).",
		}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "drover", Subsystem: subsystem, Name: "connections_rejected_total",
			Help: "HTTP connections refused at accept, by reason: per_client (too many from one client address, answered 429), server (too many in all, answered 503).",
		}, []string{"reason"}),
	}
	for _, r := range []string{reasonClient, reasonServer} {
		m.rejected.WithLabelValues(r) // report zeros from the start
	}
	for _, c := range []prometheus.Collector{m.open, m.rejected} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("httpserver: register %s metrics: %w", subsystem, err)
		}
	}
	return m, nil
}

func (m *Metrics) opened() {
	if m != nil {
		m.open.Inc()
	}
}

func (m *Metrics) closed() {
	if m != nil {
		m.open.Dec()
	}
}

func (m *Metrics) refused(reason string) {
	if m != nil {
		m.rejected.WithLabelValues(reason).Inc()
	}
}
