package router

import (
	"fmt"

	"github.com/drover-ci/drover/internal/runnerapi"
	"github.com/prometheus/client_golang/prometheus"
)

const metricPrefix = "drover_router_"

type metrics struct {
	upstream  *prometheus.CounterVec // upstream calls by endpoint and status
	pulled    prometheus.Counter
	handedOut prometheus.Counter
	routed    prometheus.Counter
	declines  *prometheus.CounterVec
	// api counts requests by endpoint and status, and serves /metrics.
	api *runnerapi.Metrics
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

	var err error
	if m.api, err = runnerapi.NewMetrics(reg, metricPrefix, m.upstream, m.pulled, m.handedOut, m.routed, m.declines, queue, held, waiting); err != nil {
		return nil, fmt.Errorf("router: %w", err)
	}
	return m, nil
}
