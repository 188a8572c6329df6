package manager

import (
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/config"
)

// metrics uses GitLab Runner's metric names where one exists, so existing
// dashboards and alerts keep working when drover replaces it.
type metrics struct {
	jobsTotal   *prometheus.CounterVec
	modeTotal   *prometheus.CounterVec
	queueDur    *prometheus.HistogramVec
	queueSize   *prometheus.GaugeVec
	queueDepth  *prometheus.GaugeVec
	apiDuration *prometheus.HistogramVec
	reqConc     *prometheus.GaugeVec
	reqExceeded *prometheus.CounterVec
	reqHard     *prometheus.GaugeVec
	reqUsed     *prometheus.GaugeVec
	feeds       *prometheus.CounterVec
	feedFails   *prometheus.CounterVec
	slots       prometheus.Gauge
	slotOps     *prometheus.CounterVec
	procFails   *prometheus.CounterVec
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

// jobModeTraditional is the mode label of GitLab Runner's job metrics:
// drover runs every job's scripts the traditional way (GitLab's other
// mode, steps, runs CI steps, which drover has not).
const jobModeTraditional = "traditional"

// The label sets below are GitLab Runner's (commands/builds_helper.go,
// commands/multi.go, network/api_requests_collector.go,
// helpers/prometheus/failures_collector.go), where runner is the short
// token and runner_name the [[runners]] name. gitlab_runner_jobs is a
// collector of its own (jobsCollector).
func newMetrics(reg prometheus.Registerer, systemID string) *metrics {
	rl := []string{"runner", "runner_name", "system_id"}
	m := &metrics{
		systemID: systemID,
		jobsTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gitlab_runner_jobs_total", Help: "Total number of handled jobs",
		}, rl),
		modeTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gitlab_runner_job_execution_mode_total", Help: "Total number of jobs grouped by execution mode and executor",
		}, []string{"mode", "executor"}),
		failedTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gitlab_runner_failed_jobs_total", Help: "Total number of failed jobs, by failure reason",
		}, []string{"runner", "runner_name", "failure_reason", "mode"}),
		// state (drover's addition) is the job's end: success, failed,
		// canceled, or what became of a job that never ran (declined,
		// dropped, aborted).
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "gitlab_runner_job_duration_seconds", Help: "Histogram of job durations",
			Buckets: []float64{0.1, 0.5, 1, 5, 30, 60, 300, 600, 1800, 3600, 7200, 10800, 18000, 36000},
		}, []string{"runner", "runner_name", "system_id", "mode", "state"}),
		// project_jobs_running is GitLab's
		// project_jobs_running_on_instance_runners_count of the job
		// payload; drover's coordinator does not send it, so it is "".
		queueDur: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "gitlab_runner_job_queue_duration_seconds", Help: "A histogram representing job queue duration (the coordinator's time_in_queue_seconds of each job).",
			Buckets: []float64{1, 3, 10, 30, 60, 120, 300, 900, 1800, 3600},
		}, []string{"runner", "runner_name", "system_id", "project_jobs_running"}),
		queueSize: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "gitlab_runner_job_queue_size", Help: "A gauge representing the size of the queue for the runner (as the last job's payload said)",
		}, rl),
		queueDepth: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "gitlab_runner_job_queue_depth", Help: "A gauge representing the search depth in the queue for the runner (as the last job's payload said)",
		}, rl),
		concurrent: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "gitlab_runner_concurrent", Help: "The current value of concurrent setting",
		}),
		limit: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "gitlab_runner_limit", Help: "The current value of limit setting",
		}, rl),
		apiStatuses: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gitlab_runner_api_request_statuses_total", Help: "The total number of API requests, partitioned by runner, system_id, endpoint, status (0: no answer) and method.",
		}, []string{"runner", "system_id", "endpoint", "status", "method"}),
		apiDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "gitlab_runner_api_request_duration_seconds", Help: "Latency histogram of API requests, partitioned by runner, system_id, endpoint, status_class and method.",
			Buckets: []float64{0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60},
		}, []string{"runner", "system_id", "endpoint", "status_class", "method"}),
		reqConc: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "gitlab_runner_request_concurrency", Help: "The current number of concurrent requests for a new job",
		}, []string{"runner", "system_id"}),
		reqExceeded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gitlab_runner_request_concurrency_exceeded_total", Help: "Count of excess requests above the configured request_concurrency limit",
		}, []string{"runner", "system_id"}),
		reqHard: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "gitlab_runner_request_concurrency_hard_limit", Help: "Configured request_concurrency limit",
		}, []string{"runner", "system_id"}),
		// drover has no adaptive request concurrency: the limit used is
		// always the configured one, and no
		// gitlab_runner_request_concurrency_adaptive_limit is exported.
		reqUsed: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "gitlab_runner_request_concurrency_used_limit", Help: "Used request concurrency limit",
		}, []string{"runner", "system_id"}),
		feeds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gitlab_runner_worker_feeds_total", Help: "Total number of times that runner worker is fed to the main loop",
		}, rl),
		feedFails: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gitlab_runner_worker_feed_failures_total", Help: "Total number of times that runner worker feeding have failed (every worker busy for the whole feed step)",
		}, rl),
		slots: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "gitlab_runner_worker_slots_number", Help: "Current number of runner worker slots",
		}),
		slotOps: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gitlab_runner_worker_slot_operations_total", Help: "Total number of runner workers slot operations (starting and stopping slots)",
		}, []string{"operation"}),
		procFails: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gitlab_runner_worker_processing_failures_total", Help: "Total number of failures when processing runner worker",
		}, []string{"failure_type", "runner", "runner_name", "system_id"}),
	}
	for _, op := range []string{slotStarted, slotStopped} {
		m.slotOps.WithLabelValues(op)
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
	reg.MustRegister(m.jobsTotal, m.modeTotal, m.failedTotal, m.duration, m.queueDur, m.queueSize, m.queueDepth,
		m.concurrent, m.limit, m.apiStatuses, m.apiDuration, m.reqConc, m.reqExceeded, m.reqHard, m.reqUsed,
		m.feeds, m.feedFails, m.slots, m.slotOps, m.procFails)
	return m
}

// Worker slot operations (gitlab_runner_worker_slot_operations_total).
const (
	slotStarted = "start"
	slotStopped = "stop"
)

// Worker processing failures (gitlab_runner_worker_processing_failures_total),
// GitLab Runner's failure_type values.
const (
	procNoFreeExecutor = "no_free_executor"
	procJobFailure     = "job_failure"
	procOther          = "other"
)

func (m *metrics) setConfig(c *config.Config) {
	m.concurrent.Set(float64(c.Concurrent))
	for i := range c.Runners {
		r := &c.Runners[i]
		t, n := labelsOf(r)
		m.limit.WithLabelValues(t, n, m.systemID).Set(float64(r.Limit))
		m.reqHard.WithLabelValues(t, m.systemID).Set(float64(r.RequestConcurrency))
		m.reqUsed.WithLabelValues(t, m.systemID).Set(float64(max(1, r.RequestConcurrency)))
		m.reqConc.WithLabelValues(t, m.systemID)
		m.reqExceeded.WithLabelValues(t, m.systemID)
		m.feeds.WithLabelValues(t, n, m.systemID)
		m.feedFails.WithLabelValues(t, n, m.systemID)
		m.jobsTotal.WithLabelValues(t, n, m.systemID)
		for _, f := range []string{procNoFreeExecutor, procJobFailure, procOther} {
			m.procFails.WithLabelValues(f, t, n, m.systemID)
		}
	}
}

func labelsOf(r *config.RunnerConfig) (string, string) {
	if r == nil {
		return "", ""
	}
	return api.ShortToken(r.Token), r.Name
}

// jobStarted counts a job received (or resumed) by runner r; job, when
// not nil, is its payload, whose queue figures are recorded.
func (m *metrics) jobStarted(r *config.RunnerConfig, job *api.JobResponse) {
	t, n := labelsOf(r)
	m.jobsTotal.WithLabelValues(t, n, m.systemID).Inc()
	exec := ""
	if r != nil {
		exec = r.Executor
	}
	m.modeTotal.WithLabelValues(jobModeTraditional, exec).Inc()
	if job != nil {
		m.queueDur.WithLabelValues(t, n, m.systemID, "").Observe(max(0, job.JobInfo.TimeInQueueSeconds))
		m.queueSize.WithLabelValues(t, n, m.systemID).Set(float64(job.JobInfo.QueueSize))
		m.queueDepth.WithLabelValues(t, n, m.systemID).Set(float64(job.JobInfo.QueueDepth))
	}
}

func (m *metrics) jobFinished(r *config.RunnerConfig, state string, d time.Duration) {
	t, n := labelsOf(r)
	m.duration.WithLabelValues(t, n, m.systemID, jobModeTraditional, state).Observe(d.Seconds())
}

func (m *metrics) jobFailed(r *config.RunnerConfig, reason string) {
	t, n := labelsOf(r)
	m.failedTotal.WithLabelValues(t, n, reason, jobModeTraditional).Inc()
	m.procFails.WithLabelValues(procJobFailure, t, n, m.systemID).Inc()
}

// apiRequest records one coordinator call of runner r (nil: none in
// particular) to endpoint: its status (0 when no answer came) and, when
// an answer came, how long it took.
func (m *metrics) apiRequest(r *config.RunnerConfig, endpoint, method string, resp *api.Response) {
	t, _ := labelsOf(r)
	method = strings.ToLower(method)
	status := statusOf(resp)
	m.apiStatuses.WithLabelValues(t, m.systemID, endpoint, strconv.Itoa(status), method).Inc()
	if resp != nil {
		m.apiDuration.WithLabelValues(t, m.systemID, endpoint, strconv.Itoa(status/100)+"xx", method).Observe(resp.Duration.Seconds())
	}
}

// requests sets gitlab_runner_request_concurrency of runner r.
func (m *metrics) requests(r *config.RunnerConfig, n int) {
	t, _ := labelsOf(r)
	m.reqConc.WithLabelValues(t, m.systemID).Set(float64(n))
}

// requestRefused counts a job request of r not made because
// request_concurrency requests were in flight.
func (m *metrics) requestRefused(r *config.RunnerConfig) {
	t, _ := labelsOf(r)
	m.reqExceeded.WithLabelValues(t, m.systemID).Inc()
}

// fed counts runner r offered to a worker (ok) or not taken by any (!ok).
func (m *metrics) fed(r *config.RunnerConfig, ok bool) {
	t, n := labelsOf(r)
	if ok {
		m.feeds.WithLabelValues(t, n, m.systemID).Inc()
	} else {
		m.feedFails.WithLabelValues(t, n, m.systemID).Inc()
	}
}

// slot records a worker started (delta 1) or stopped (-1).
func (m *metrics) slot(delta int) {
	m.slots.Add(float64(delta))
	if delta > 0 {
		m.slotOps.WithLabelValues(slotStarted).Inc()
	} else {
		m.slotOps.WithLabelValues(slotStopped).Inc()
	}
}

// processingFailed counts a worker iteration of r that failed before a
// job: failureType is procNoFreeExecutor or procOther.
func (m *metrics) processingFailed(r *config.RunnerConfig, failureType string) {
	t, n := labelsOf(r)
	m.procFails.WithLabelValues(failureType, t, n, m.systemID).Inc()
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
