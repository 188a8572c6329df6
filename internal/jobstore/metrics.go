package jobstore

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics counts and times store operations per backend.
type metrics struct {
	ops      *prometheus.CounterVec
	duration *prometheus.HistogramVec
	corrupt  *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		ops: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "drover_jobstore_operations_total",
			Help: "Job store operations by backend, operation and result (ok, not_found, not_owner, conflict, corrupt, closed, invalid, error).",
		}, []string{"backend", "op", "result"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "drover_jobstore_operation_duration_seconds",
			Help:    "Time job store operations take, by backend and operation.",
			Buckets: []float64{0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5},
		}, []string{"backend", "op"}),
		corrupt: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "drover_jobstore_corrupt_records_total",
			Help: "Job records that could not be decoded and were moved aside.",
		}, []string{"backend"}),
	}
	if reg == nil {
		return m, nil
	}
	// Every runner with a store opens one; they share the collectors.
	var err error
	if m.ops, err = register(reg, m.ops); err != nil {
		return nil, err
	}
	if m.duration, err = register(reg, m.duration); err != nil {
		return nil, err
	}
	if m.corrupt, err = register(reg, m.corrupt); err != nil {
		return nil, err
	}
	return m, nil
}

// register registers c, or returns the equal collector already there.
func register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing, nil
			}
		}
		return c, err
	}
	return c, nil
}

// observe records one operation that started at start and ended with err.
func (m *metrics) observe(backend, op string, start time.Time, err error) {
	m.duration.WithLabelValues(backend, op).Observe(time.Since(start).Seconds())
	m.ops.WithLabelValues(backend, op, resultOf(err)).Inc()
}

func resultOf(err error) string {
	var perm *permanentError
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, ErrNotFound):
		return "not_found"
	case errors.Is(err, ErrNotOwner):
		return "not_owner"
	case errors.Is(err, ErrConflict):
		return "conflict"
	case errors.Is(err, ErrCorrupt):
		return "corrupt"
	case errors.Is(err, ErrClosed):
		return "closed"
	case errors.As(err, &perm):
		return "invalid"
	}
	return "error"
}
