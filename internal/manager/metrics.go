package manager

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/config"
)

// metrics uses GitLab Runner's metric names where one exists, so existing
// dashboards and alerts keep working when drover replaces it.
type metrics struct {
	jobs        *prometheus.GaugeVec
	jobsTotal   *prometheus.CounterVec
	failedTotal *prometheus.CounterVec
	duration    *prometheus.HistogramVec
	concurrent  prometheus.Gauge
	limit       *prometheus.GaugeVec
	apiStatuses *prometheus.CounterVec
	provision   *prometheus.CounterVec
	provisionT  *prometheus.HistogramVec
	storeOps    *prometheus.CounterVec
	resumed     *prometheus.CounterVec
	pending     *prometheus.GaugeVec
	abandoned   *prometheus.CounterVec
	systemID    string
}

// Why a final update was given up (drover_runner_final_updates_abandoned_total).
const (
	// abandonedRetryLimit: no job store keeps it, and
	// job_status_final_update_retry_limit rounds failed.
	abandonedRetryLimit = "retry_limit"
	// abandonedStaleTimeout: a job store kept it, but the coordinator did
	// not answer about the job for stale_timeout.
	abandonedStaleTimeout = "stale_timeout"
)

func newMetrics(reg prometheus.Registerer, systemID string) *metrics {
	m := &metrics{
		systemID: systemID,
		jobs: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "gitlab_runner_jobs", Help: "Jobs being run by this manager.",
		}, []string{"runner", "runner_name", "system_id"}),
		jobsTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gitlab_runner_jobs_total", Help: "Jobs received.",
		}, []string{"runner", "runner_name", "system_id"}),
		failedTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gitlab_runner_failed_jobs_total", Help: "Jobs that failed, by reason.",
		}, []string{"runner", "runner_name", "failure_reason"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "gitlab_runner_job_duration_seconds", Help: "Job durations.",
			Buckets: []float64{0.1, 0.5, 1, 5, 30, 60, 300, 600, 1800, 3600, 7200, 36000},
		}, []string{"runner", "runner_name", "system_id", "state"}),
		concurrent: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "gitlab_runner_concurrent", Help: "The concurrent setting.",
		}),
		limit: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "gitlab_runner_limit", Help: "The limit setting of each runner.",
		}, []string{"runner", "system_id"}),
		apiStatuses: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gitlab_runner_api_request_statuses_total", Help: "Coordinator API answers by endpoint and status (0 = transport error).",
		}, []string{"runner", "system_id", "endpoint", "status", "method"}),
	}
	m.provision = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "drover_runner_provisioning_total",
		Help: "Two-phase job starts by outcome: accepted, declined (given back), dropped (taken back by the coordinator).",
	}, []string{"outcome"})
	m.provisionT = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "drover_runner_provisioning_seconds",
		Help:    "Time from a two-phase job's receipt to its outcome (accept, decline or drop).",
		Buckets: []float64{0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900},
	}, []string{"outcome"})
	for _, o := range []string{outcomeAccepted, outcomeDeclined, outcomeDropped} {
		m.provision.WithLabelValues(o) // present from the start, at 0
	}
	m.storeOps = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "drover_runner_job_store_operations_total",
		Help: "Job store operations (save, heartbeat, claim, corrupt) by result.",
	}, []string{"op", "result"})
	m.resumed = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "drover_runner_jobs_resumed_total",
		Help: "Jobs resumed from the job store after a manager stopped.",
	}, []string{"runner"})
	m.pending = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "drover_runner_final_updates_pending",
		Help: "Jobs that ended whose final update the coordinator has not received yet, kept in the job store while this manager retries it.",
	}, []string{"runner"})
	m.abandoned = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "drover_runner_final_updates_abandoned_total",
		Help: "Final updates given up: retry_limit (no job store, job_status_final_update_retry_limit rounds failed), stale_timeout (kept in the job store, but the coordinator did not answer about the job for stale_timeout).",
	}, []string{"reason"})
	for _, r := range []string{abandonedRetryLimit, abandonedStaleTimeout} {
		m.abandoned.WithLabelValues(r) // present from the start, at 0
	}
	reg.MustRegister(m.provision, m.provisionT, m.storeOps, m.resumed, m.pending, m.abandoned)
	reg.MustRegister(m.jobs, m.jobsTotal, m.failedTotal, m.duration, m.concurrent, m.limit, m.apiStatuses)
	return m
}

func (m *metrics) setConfig(c *config.Config) {
	m.concurrent.Set(float64(c.Concurrent))
	for i := range c.Runners {
		m.limit.WithLabelValues(api.ShortToken(c.Runners[i].Token), m.systemID).Set(float64(c.Runners[i].Limit))
	}
}

func labelsOf(r *config.RunnerConfig) (string, string) {
	if r == nil {
		return "", ""
	}
	return api.ShortToken(r.Token), r.Name
}

func (m *metrics) jobStarted(r *config.RunnerConfig) {
	t, n := labelsOf(r)
	m.jobs.WithLabelValues(t, n, m.systemID).Inc()
	m.jobsTotal.WithLabelValues(t, n, m.systemID).Inc()
}

func (m *metrics) jobFinished(r *config.RunnerConfig, state string, d time.Duration) {
	t, n := labelsOf(r)
	m.jobs.WithLabelValues(t, n, m.systemID).Dec()
	m.duration.WithLabelValues(t, n, m.systemID, state).Observe(d.Seconds())
}

func (m *metrics) jobFailed(r *config.RunnerConfig, reason string) {
	t, n := labelsOf(r)
	m.failedTotal.WithLabelValues(t, n, reason).Inc()
}

func (m *metrics) apiRequest(r *config.RunnerConfig, endpoint, method string, status int) {
	t, _ := labelsOf(r)
	m.apiStatuses.WithLabelValues(t, m.systemID, endpoint, strconv.Itoa(status), method).Inc()
}

func (m *metrics) provisioned(outcome string, d time.Duration) {
	m.provision.WithLabelValues(outcome).Inc()
	m.provisionT.WithLabelValues(outcome).Observe(d.Seconds())
}

func (m *metrics) storeOp(op string, ok bool) {
	result := "ok"
	if !ok {
		result = "error"
	}
	m.storeOps.WithLabelValues(op, result).Inc()
}

func (m *metrics) jobResumed(r *config.RunnerConfig) {
	m.resumed.WithLabelValues(api.ShortToken(r.Token)).Inc()
}

// finalPending counts final updates of runner r that a job store keeps
// (delta 1) and their end (delta -1).
func (m *metrics) finalPending(r *config.RunnerConfig, delta float64) {
	t, _ := labelsOf(r)
	m.pending.WithLabelValues(t).Add(delta)
}

func (m *metrics) finalAbandoned(reason string) {
	m.abandoned.WithLabelValues(reason).Inc()
}
