package router

import (
	"fmt"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

const metricPrefix = "drover_router_"

type metrics struct {
	upstream  *prometheus.CounterVec // upstream calls by endpoint and status
	pulled    prometheus.Counter
	handedOut prometheus.Counter
	routed    prometheus.Counter
	declines  *prometheus.CounterVec
	requests  *prometheus.CounterVec
	handler   http.Handler
}

func newMetrics(reg prometheus.Registerer, r *Router) (*metrics, error) {
	m := &metrics{
		upstream: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: metricPrefix + "upstream_requests_total", Help: "Requests the router sent upstream, by endpoint and status code (or error).",
		}, []string{"endpoint", "code"}),
		pulled: prometheus.NewCounter(prometheus.CounterOpts{
			Name: metricPrefix + "jobs_pulled_total", Help: "Jobs the upstream handed to the router.",
		}),
		handedOut: prometheus.NewCounter(prometheus.CounterOpts{
			Name: metricPrefix + "jobs_handed_out_total", Help: "Job offers to downstream runners (a declined job is offered again).",
		}),
		routed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: metricPrefix + "jobs_routed_total", Help: "Jobs accepted by a downstream runner.",
		}),
		declines: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: metricPrefix + "declines_total", Help: "Offers that came back: downstream (a runner declined), expired (a runner went silent), router (declined upstream: no runner for it).",
		}, []string{"source"}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: metricPrefix + "api_requests_total", Help: "Requests served by the router, by endpoint and status code.",
		}, []string{"endpoint", "code"}),
	}
	queue := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: metricPrefix + "queue_size", Help: "Jobs queued at the router, waiting for a downstream runner.",
	}, func() float64 { return float64(r.QueueLen()) })
	held := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: metricPrefix + "held_jobs", Help: "Jobs the router holds: queued or offered, not yet accepted.",
	}, func() float64 {
		r.mu.Lock()
		defer r.mu.Unlock()
		return float64(len(r.jobs))
	})
	waiting := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: metricPrefix + "waiting_requests", Help: "Downstream jobs/request calls held right now.",
	}, func() float64 { return float64(r.Waiting()) })

	var gatherer prometheus.Gatherer
	if reg == nil {
		pr := prometheus.NewRegistry()
		reg, gatherer = pr, pr
	} else if g, ok := reg.(prometheus.Gatherer); ok {
		gatherer = g
	}
	for _, c := range []prometheus.Collector{m.upstream, m.pulled, m.handedOut, m.routed, m.declines, m.requests, queue, held, waiting} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("router: register metrics: %w", err)
		}
	}
	if gatherer != nil {
		m.handler = promhttp.HandlerFor(gatherer, promhttp.HandlerOpts{})
	} else {
		m.handler = http.NotFoundHandler()
	}
	return m, nil
}
