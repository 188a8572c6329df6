package main

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/drover-ci/drover/internal/client"
	"github.com/drover-ci/drover/internal/lockedbuf"
)

// gitlabFamily is one metric family of GitLab Runner's that drover run
// exports under the same name, type and (at least) labels.
type gitlabFamily struct {
	name   string
	typ    dto.MetricType
	labels []string
}

// gitlabFamilies are the families GitLab Runner's /metrics has (the source
// file of each named in its comment, gitlab-org/gitlab-runner at
// d79f3e7b89ab; the list of docs/fleet_scaling/_index.md, "Monitoring
// runners") that drover run exports, with GitLab's label names. Those it
// does not export, and why, are in deploy/monitoring/README.md.
var gitlabFamilies = []gitlabFamily{
	// commands/builds_helper.go
	{"gitlab_runner_jobs", dto.MetricType_GAUGE, []string{"runner", "runner_name", "system_id", "state", "stage", "executor_stage"}},
	{"gitlab_runner_jobs_total", dto.MetricType_COUNTER, []string{"runner", "runner_name", "system_id"}},
	{"gitlab_runner_job_execution_mode_total", dto.MetricType_COUNTER, []string{"mode", "executor"}},
	{"gitlab_runner_job_duration_seconds", dto.MetricType_HISTOGRAM, []string{"runner", "runner_name", "system_id", "mode"}},
	{"gitlab_runner_job_queue_duration_seconds", dto.MetricType_HISTOGRAM, []string{"runner", "runner_name", "system_id", "project_jobs_running"}},
	{"gitlab_runner_job_queue_size", dto.MetricType_GAUGE, []string{"runner", "runner_name", "system_id"}},
	{"gitlab_runner_job_queue_depth", dto.MetricType_GAUGE, []string{"runner", "runner_name", "system_id"}},
	{"gitlab_runner_request_concurrency", dto.MetricType_GAUGE, []string{"runner", "system_id"}},
	{"gitlab_runner_request_concurrency_exceeded_total", dto.MetricType_COUNTER, []string{"runner", "system_id"}},
	{"gitlab_runner_request_concurrency_hard_limit", dto.MetricType_GAUGE, []string{"runner", "system_id"}},
	{"gitlab_runner_request_concurrency_used_limit", dto.MetricType_GAUGE, []string{"runner", "system_id"}},
	// helpers/prometheus/failures_collector.go
	{"gitlab_runner_failed_jobs_total", dto.MetricType_COUNTER, []string{"runner", "runner_name", "failure_reason", "mode"}},
	// commands/multi.go
	{"gitlab_runner_concurrent", dto.MetricType_GAUGE, nil},
	{"gitlab_runner_limit", dto.MetricType_GAUGE, []string{"runner", "runner_name", "system_id"}},
	{"gitlab_runner_worker_feeds_total", dto.MetricType_COUNTER, []string{"runner", "runner_name", "system_id"}},
	{"gitlab_runner_worker_feed_failures_total", dto.MetricType_COUNTER, []string{"runner", "runner_name", "system_id"}},
	{"gitlab_runner_worker_slots_number", dto.MetricType_GAUGE, nil},
	{"gitlab_runner_worker_slot_operations_total", dto.MetricType_COUNTER, []string{"operation"}},
	{"gitlab_runner_worker_processing_failures_total", dto.MetricType_COUNTER, []string{"failure_type", "runner", "runner_name", "system_id"}},
	// network/api_requests_collector.go
	{"gitlab_runner_api_request_statuses_total", dto.MetricType_COUNTER, []string{"runner", "system_id", "endpoint", "status", "method"}},
	{"gitlab_runner_api_request_duration_seconds", dto.MetricType_HISTOGRAM, []string{"runner", "system_id", "endpoint", "status_class", "method"}},
	// helpers/prometheus/log_hook.go
	{"gitlab_runner_errors_total", dto.MetricType_COUNTER, []string{"level"}},
	// common/version.go
	{"gitlab_runner_version_info", dto.MetricType_GAUGE, []string{"name", "version", "revision", "branch", "go_version", "built_at", "os", "architecture"}},
	// client_golang's Go and process collectors (docs/monitoring/_index.md)
	{"go_goroutines", dto.MetricType_GAUGE, nil},
	{"go_memstats_alloc_bytes", dto.MetricType_GAUGE, nil},
	{"go_gc_duration_seconds", dto.MetricType_SUMMARY, nil},
	{"process_cpu_seconds_total", dto.MetricType_COUNTER, nil},
	{"process_resident_memory_bytes", dto.MetricType_GAUGE, nil},
	{"process_open_fds", dto.MetricType_GAUGE, nil},
	{"process_max_fds", dto.MetricType_GAUGE, nil},
	{"process_start_time_seconds", dto.MetricType_GAUGE, nil},
	{"process_virtual_memory_bytes", dto.MetricType_GAUGE, nil},
	// drover's own
	{"drover_build_info", dto.MetricType_GAUGE, []string{"version", "revision", "built_at", "go_version"}},
}

// scrape GETs url's /metrics and parses it.
func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	return scrapeWith(t, url, "")
}

// series are the metrics of family name whose labels include want.
func series(mfs map[string]*dto.MetricFamily, name string, want map[string]string) []*dto.Metric {
	var out []*dto.Metric
	mf := mfs[name]
	if mf == nil {
		return nil
	}
next:
	for _, m := range mf.GetMetric() {
		have := map[string]string{}
		for _, lp := range m.GetLabel() {
			have[lp.GetName()] = lp.GetValue()
		}
		for k, v := range want {
			if hv, ok := have[k]; !ok || hv != v {
				continue next
			}
		}
		out = append(out, m)
	}
	return out
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Histogram != nil:
		return float64(m.Histogram.GetSampleCount())
	}
	return 0
}

func sum(ms []*dto.Metric) float64 {
	s := 0.0
	for _, m := range ms {
		s += value(m)
	}
	return s
}

// TestRunMetricsParity runs drover run against a coordinator: a job that
// succeeds, one that fails, and one held running, then scrapes the
// manager's listen_address and checks every family of gitlabFamilies is
// there with its type and labels, that the counts moved, and that every
// metric the Grafana dashboard and the alert rules of deploy/monitoring use
// is exported by the manager or the coordinator.
func TestRunMetricsParity(t *testing.T) {
	clearRegisterEnv(t)
	c, url := testCoordinator(t)
	dir := t.TempDir()
	t.Chdir(dir)
	if out, code, err := drover(t, "register", "-c", "config.toml", "-u", url, "-r", c.RegistrationToken(), "--name", "metrics"); code != 0 {
		t.Fatalf("register = exit %d (%v)\n%s", code, err, out)
	}
	writeTestFile(t, "config.toml", "listen_address = \"127.0.0.1:0\"\nlog_format = \"text\"\n"+readFile(t, "config.toml"))

	addr, out, done := startRun(t, "-c", "config.toml")
	metricsURL := "http://" + addr

	cl := client.New(url, c.AdminToken(), nil)
	if j, trace := runJob(t, cl, client.JobSpec{Name: "ok", Script: []string{"true"}}, done, out); j.Status != "success" {
		t.Fatalf("job ok: %s\n%s", j.Status, trace)
	}
	if j, trace := runJob(t, cl, client.JobSpec{Name: "fails", Script: []string{"exit 3"}}, done, out); j.Status != "failed" {
		t.Fatalf("job fails: %s\n%s", j.Status, trace)
	}
	// A job held in its script until the test lets it go, for
	// gitlab_runner_jobs.
	gate := filepath.Join(dir, "gate")
	held, err := cl.Submit(t.Context(), client.JobSpec{Name: "held", Script: []string{"while [ ! -e " + gate + " ]; do sleep 0.05; done"}})
	if err != nil {
		t.Fatal(err)
	}
	var mfs map[string]*dto.MetricFamily
	running := map[string]string{"state": "running", "stage": "step_script", "executor_stage": "run"}
	for deadline := time.Now().Add(time.Minute); ; {
		mfs = scrape(t, metricsURL)
		if sum(series(mfs, "gitlab_runner_jobs", running)) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("gitlab_runner_jobs never showed the held job in step_script: %v\n%s", mfs["gitlab_runner_jobs"], out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if j, trace := runJob(t, cl, client.JobSpec{Name: "after", Script: []string{"true"}}, done, out); j.Status != "success" {
		t.Fatalf("job after: %s\n%s", j.Status, trace)
	}
	if j, err := cl.Job(t.Context(), held.ID); err != nil || j.Status != "success" {
		t.Fatalf("held job: %v, %v", j, err)
	}

	checkFamilies(t, "drover run", mfs, gitlabFamilies)
	for _, tc := range []struct {
		name   string
		labels map[string]string
		check  func(float64) bool
		want   string
	}{
		{"gitlab_runner_jobs_total", nil, func(v float64) bool { return v >= 3 }, ">= 3"},
		{"gitlab_runner_failed_jobs_total", map[string]string{"failure_reason": "script_failure"}, func(v float64) bool { return v == 1 }, "1"},
		{"gitlab_runner_job_duration_seconds", nil, func(v float64) bool { return v >= 2 }, ">= 2 observations"},
		{"gitlab_runner_job_queue_duration_seconds", nil, func(v float64) bool { return v >= 3 }, ">= 3 observations"},
		{"gitlab_runner_api_request_statuses_total", map[string]string{"endpoint": "request_job", "status": "201", "method": "post"}, func(v float64) bool { return v >= 3 }, ">= 3"},
		{"gitlab_runner_api_request_statuses_total", map[string]string{"endpoint": "update_job"}, func(v float64) bool { return v >= 2 }, ">= 2"},
		{"gitlab_runner_api_request_statuses_total", map[string]string{"endpoint": "patch_trace"}, func(v float64) bool { return v >= 1 }, ">= 1"},
		{"gitlab_runner_api_request_duration_seconds", map[string]string{"endpoint": "request_job", "status_class": "2xx"}, func(v float64) bool { return v >= 3 }, ">= 3 observations"},
		{"gitlab_runner_worker_feeds_total", nil, func(v float64) bool { return v >= 1 }, ">= 1"},
		{"gitlab_runner_worker_slots_number", nil, func(v float64) bool { return v >= 1 }, ">= 1"},
		{"gitlab_runner_worker_processing_failures_total", map[string]string{"failure_type": "job_failure"}, func(v float64) bool { return v == 1 }, "1"},
		{"gitlab_runner_version_info", map[string]string{"name": "drover"}, func(v float64) bool { return v == 1 }, "1"},
	} {
		if v := sum(series(mfs, tc.name, tc.labels)); !tc.check(v) {
			t.Errorf("%s%v = %v, want %s", tc.name, tc.labels, v, tc.want)
		}
	}

	// The dashboard and the alert rules use only what is exported: by the
	// manager (this scrape) or the coordinator.
	coord := scrape(t, url)
	checkMonitoringFiles(t, mfs, coord)
}

// waitLog waits until out has a line re matches and returns its first
// group.
func waitLog(t *testing.T, out *lockedbuf.Buffer, re *regexp.Regexp, done <-chan error) string {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; {
		if m := re.FindStringSubmatch(out.String()); m != nil {
			return m[1]
		}
		select {
		case err := <-done:
			t.Fatalf("ended first: %v\n%s", err, out.String())
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("no line matching %s after a minute:\n%s", re, out.String())
		}
	}
}
