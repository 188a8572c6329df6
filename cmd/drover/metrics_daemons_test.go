package main

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/client"
)

// scrapeWith GETs url's /metrics with Authorization: Bearer bearer (none
// when empty) and parses it.
func scrapeWith(t *testing.T, url, bearer string) map[string]*dto.MetricFamily {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s/metrics: %s", url, resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse %s/metrics: %v", url, err)
	}
	return mfs
}

// checkFamilies checks every family of want is in mfs with its type and,
// on every series, its labels.
func checkFamilies(t *testing.T, who string, mfs map[string]*dto.MetricFamily, want []gitlabFamily) {
	t.Helper()
	for _, f := range want {
		mf := mfs[f.name]
		if mf == nil {
			t.Errorf("%s: %s: not exported", who, f.name)
			continue
		}
		if mf.GetType() != f.typ {
			t.Errorf("%s: %s: type %v, want %v", who, f.name, mf.GetType(), f.typ)
		}
		if len(mf.GetMetric()) == 0 {
			t.Errorf("%s: %s: no series", who, f.name)
		}
		for _, m := range mf.GetMetric() {
			have := map[string]bool{}
			for _, lp := range m.GetLabel() {
				have[lp.GetName()] = true
			}
			for _, l := range f.labels {
				if !have[l] {
					t.Errorf("%s: %s: series %v has no label %s", who, f.name, m.GetLabel(), l)
				}
			}
		}
	}
}

// daemonFamilies are what every daemon's /metrics has: client_golang's Go
// and process collectors and drover_build_info.
var daemonFamilies = []gitlabFamily{
	{"go_goroutines", dto.MetricType_GAUGE, nil},
	{"go_memstats_alloc_bytes", dto.MetricType_GAUGE, nil},
	{"process_resident_memory_bytes", dto.MetricType_GAUGE, nil},
	{"process_start_time_seconds", dto.MetricType_GAUGE, nil},
	{"drover_build_info", dto.MetricType_GAUGE, []string{"version", "revision", "built_at", "go_version"}},
}

// TestCoordinatorAndRouterMetrics starts a real drover coordinator (its
// /metrics behind --metrics-token-file) and a real drover router in front
// of it, scrapes both over HTTP and checks the Go and process collectors,
// drover_build_info and each one's errors_total, which moves when each
// logs: the coordinator a warning (a runner's final update whose trace
// checksum does not match), the router an error (the coordinator refuses
// its token).
func TestCoordinatorAndRouterMetrics(t *testing.T) {
	t.Setenv("DROVER_DATABASE_URL", "")
	const admin = "admin-token-for-the-metrics-test"
	t.Setenv("DROVER_ADMIN_TOKEN", admin)
	const token = "metrics-token-for-the-test"
	tokenFile := filepath.Join(t.TempDir(), "metrics-token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cout, cdone := startDaemon(t, "coordinator", "--listen", "127.0.0.1:0", "--data", t.TempDir(), "--metrics-token-file", tokenFile)
	coord := "http://" + listeningAt(t, cout, "coordinator listening", cdone)

	// /metrics wants the token.
	resp, err := http.Get(coord + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("GET /metrics without the token = %s, want 401", resp.Status)
	}
	mfs := scrapeWith(t, coord, token)
	checkFamilies(t, "coordinator", mfs, append(daemonFamilies, gitlabFamily{"drover_coordinator_errors_total", dto.MetricType_COUNTER, []string{"level"}}))
	before := sum(series(mfs, "drover_coordinator_errors_total", map[string]string{"level": "warning"}))

	// A runner takes a job and reports it done with a checksum that is
	// not its log's: the coordinator warns and asks for the whole log.
	cl := client.New(coord, admin, nil)
	yes := true
	runner, err := cl.CreateRunner(t.Context(), client.RunnerSpec{RunUntagged: &yes})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Submit(t.Context(), client.JobSpec{Name: "checksum", Script: []string{"true"}}); err != nil {
		t.Fatal(err)
	}
	rc, err := api.NewClient(coord, api.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	job, _, err := rc.RequestJob(t.Context(), api.JobRequest{Token: runner.Token, SystemID: "s_metrics_test"})
	if err != nil || job == nil {
		t.Fatalf("jobs/request = %v, %v; want a job", job, err)
	}
	r, err := rc.UpdateJob(t.Context(), job.ID, api.UpdateJobRequest{Token: job.Token, State: api.StateSuccess, Output: api.JobOutput{Checksum: "crc32:deadbeef", Bytesize: 1}})
	if err != nil || r.StatusCode != http.StatusPreconditionFailed {
		t.Fatalf("PUT jobs/%d with a wrong checksum = %v, %v; want 412", job.ID, r, err)
	}
	if !strings.Contains(cout.String(), "trace checksum mismatch") {
		t.Fatalf("the coordinator did not warn of the checksum:\n%s", cout.String())
	}
	mfs = scrapeWith(t, coord, token)
	if after := sum(series(mfs, "drover_coordinator_errors_total", map[string]string{"level": "warning"})); after < before+1 {
		t.Errorf("drover_coordinator_errors_total{level=warning} = %v after a warning, want >= %v", after, before+1)
	}

	// A router whose token the coordinator refuses logs an error.
	rout, rdone := startDaemon(t, "router", "--upstream", coord, "--upstream-token", "glrt-not-a-runner-of-it",
		"--listen", "127.0.0.1:0", "--data", t.TempDir())
	rurl := "http://" + listeningAt(t, rout, "router listening", rdone)
	rejected := regexp.MustCompile(`upstream rejected the router's token`)
	for deadline := time.Now().Add(time.Minute); !rejected.MatchString(rout.String()); {
		if time.Now().After(deadline) {
			t.Fatalf("the router did not log the refused token:\n%s", rout.String())
		}
		select {
		case err := <-rdone:
			t.Fatalf("router ended: %v\n%s", err, rout.String())
		case <-time.After(10 * time.Millisecond):
		}
	}
	mfs = scrapeWith(t, rurl, "")
	checkFamilies(t, "router", mfs, append(daemonFamilies, gitlabFamily{"drover_router_errors_total", dto.MetricType_COUNTER, []string{"level"}}))
	if v := sum(series(mfs, "drover_router_errors_total", map[string]string{"level": "error"})); v < 1 {
		t.Errorf("drover_router_errors_total{level=error} = %v after an error, want >= 1", v)
	}
	for _, m := range series(mfs, "drover_build_info", nil) {
		for _, lp := range m.GetLabel() {
			if lp.GetName() == "go_version" && !strings.HasPrefix(lp.GetValue(), "go") {
				t.Errorf("drover_build_info go_version = %q", lp.GetValue())
			}
		}
	}
}

// gitlabAutoscalingFamilies are GitLab Runner's autoscaling families that
// drover run exports for its autoscaled runners, with GitLab's label
// names (gitlab-org/gitlab-runner at d79f3e7b89ab, and the families the
// fleeting and taskscaler collectors it wires there register).
var gitlabAutoscalingFamilies = []gitlabFamily{
	// The fleeting provisioner's (the metrics.Collector of
	// gitlab.com/gitlab-org/fleeting/fleeting@v0.0.0-20260630131728-ef4ba33c8ab8
	// metrics/collector.go; names as its Prometheus collector registers
	// them and GitLab's runbooks chart them), with the constant labels
	// executors/internal/autoscaler/provider.go gives it.
	{"fleeting_provisioner_instances", dto.MetricType_GAUGE, []string{"runner", "runner_name", "system_id", "state"}},
	{"fleeting_provisioner_max_instances", dto.MetricType_GAUGE, []string{"runner", "runner_name", "system_id"}},
	{"fleeting_provisioner_instance_operations_total", dto.MetricType_COUNTER, []string{"runner", "runner_name", "system_id", "operation"}},
	{"fleeting_provisioner_internal_operations_total", dto.MetricType_COUNTER, []string{"runner", "runner_name", "system_id", "operation"}},
	{"fleeting_provisioner_instance_creation_time_seconds", dto.MetricType_HISTOGRAM, []string{"runner", "runner_name", "system_id"}},
	{"fleeting_provisioner_instance_is_running_time_seconds", dto.MetricType_HISTOGRAM, []string{"runner", "runner_name", "system_id"}},
	// The taskscaler's (gitlab.com/gitlab-org/fleeting/taskscaler
	// metrics/prometheus, wired in executors/internal/autoscaler/provider.go).
	{"fleeting_taskscaler_tasks", dto.MetricType_GAUGE, []string{"runner", "runner_name", "system_id", "state"}},
	{"fleeting_taskscaler_desired_instances", dto.MetricType_GAUGE, []string{"runner", "runner_name", "system_id"}},
	{"fleeting_taskscaler_max_use_count_per_instance", dto.MetricType_GAUGE, []string{"runner", "runner_name", "system_id"}},
	{"fleeting_taskscaler_max_tasks_per_instance", dto.MetricType_GAUGE, []string{"runner", "runner_name", "system_id"}},
	{"fleeting_taskscaler_scale_operations_total", dto.MetricType_COUNTER, []string{"runner", "runner_name", "system_id", "operation"}},
	{"fleeting_taskscaler_task_operations_total", dto.MetricType_COUNTER, []string{"runner", "runner_name", "system_id", "operation"}},
	{"fleeting_taskscaler_task_instance_readiness_time_seconds", dto.MetricType_HISTOGRAM, []string{"runner", "runner_name", "system_id"}},
	// executors/docker/machine/provider.go and collector.go
	{"gitlab_runner_autoscaling_machine_states", dto.MetricType_GAUGE, []string{"executor", "state", "target_zone", "target_region", "target_project", "target_machine_type"}},
	{"gitlab_runner_autoscaling_actions_total", dto.MetricType_COUNTER, []string{"executor", "action", "target_zone", "target_region", "target_project", "target_machine_type"}},
	{"gitlab_runner_autoscaling_machine_creation_duration_seconds", dto.MetricType_HISTOGRAM, []string{"executor"}},
	{"gitlab_runner_autoscaling_machine_stopping_duration_seconds", dto.MetricType_HISTOGRAM, []string{"executor"}},
	{"gitlab_runner_autoscaling_machine_removal_duration_seconds", dto.MetricType_HISTOGRAM, []string{"executor"}},
	{"gitlab_runner_autoscaling_machine_failed_creation_duration_seconds", dto.MetricType_HISTOGRAM, []string{"executor"}},
}

// TestRunAutoscalingMetricsParity runs drover run with two autoscaled
// runners on the sim provider (the stand-in for a cloud), one of the
// instance executor and one of docker+machine, waits until each has its
// idle instance ready, then scrapes the manager's listen_address and
// checks every family of gitlabAutoscalingFamilies with its type and
// labels, that the creations were counted and timed, and that the
// dashboard and the alert rules of deploy/monitoring use only what is
// exported. A job and a removal on such a pool are
// runnerpool.TestSetGitLabAutoscalingMetrics's.
func TestRunAutoscalingMetricsParity(t *testing.T) {
	cfg := fleetSimConfig(t, "glrt-fleetmetrics", `[[runners]]
  name = "machine-sim"
  url = "http://127.0.0.1:1"
  token = "glrt-machinemetrics"
  executor = "docker+machine"
  [runners.docker]
    image = "busybox"
  [runners.machine]
    MachineDriver = "sim"
    IdleCount = 1
    IdleTime = 3600
`)
	addr, out, done := startRun(t, "--config", cfg)
	metricsURL := "http://" + addr

	fleet := map[string]string{"runner": "fleetmetr", "runner_name": "fleet-sim"}
	machine := map[string]string{"executor": "docker+machine"}
	var mfs map[string]*dto.MetricFamily
	wants := []struct {
		name   string
		labels map[string]string
		min    float64
	}{
		{"fleeting_provisioner_instance_operations_total", with(fleet, "operation", "create"), 1},
		{"fleeting_provisioner_instance_creation_time_seconds", fleet, 1},
		{"fleeting_provisioner_instance_is_running_time_seconds", fleet, 1},
		{"fleeting_provisioner_max_instances", fleet, 2},
		{"fleeting_taskscaler_tasks", with(fleet, "state", "idle"), 1},
		{"fleeting_taskscaler_scale_operations_total", with(fleet, "operation", "up"), 1},
		{"gitlab_runner_autoscaling_machine_states", with(machine, "state", "idle"), 1},
		{"gitlab_runner_autoscaling_machine_creation_duration_seconds", machine, 1},
	}
	// unmet lists the wanted values the scrape does not show yet.
	unmet := func() []string {
		var miss []string
		for _, tc := range wants {
			if v := sum(series(mfs, tc.name, tc.labels)); v < tc.min {
				miss = append(miss, fmt.Sprintf("%s%v = %v, want >= %v", tc.name, tc.labels, v, tc.min))
			}
		}
		return miss
	}
	// Both idle instances come up in a few seconds, and the gauges follow
	// at their own update interval (the machine dialect has GitLab's 2 s):
	// scrape until every wanted value is there. A minute is a guard
	// against a hang.
	for deadline := time.Now().Add(time.Minute); ; {
		mfs = scrape(t, metricsURL)
		miss := unmet()
		if len(miss) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after a minute:\n%s\n%s", strings.Join(miss, "\n"), out.String())
		}
		select {
		case err := <-done:
			t.Fatalf("drover run ended: %v\n%s", err, out.String())
		case <-time.After(50 * time.Millisecond):
		}
	}
	checkFamilies(t, "drover run", mfs, gitlabAutoscalingFamilies)
	// system_id is the manager's, as on gitlab_runner_* series.
	if ids := series(mfs, "fleeting_provisioner_max_instances", fleet); len(ids) != 1 || labelOf(ids[0], "system_id") == "" {
		t.Errorf("fleeting_provisioner_max_instances%v = %v, want one series with a system_id", fleet, ids)
	}
	// Every GitLab autoscaling family the dashboard and the alert rules
	// use is in this scrape (checkMonitoringFiles, run by
	// TestRunMetricsParity, sees them only registered, not served).
	names := monitoringNames(t)
	if len(names) == 0 {
		t.Fatal("no metric names in deploy/monitoring")
	}
	for _, n := range names {
		if strings.HasPrefix(n, "fleeting_") || strings.HasPrefix(n, "gitlab_runner_autoscaling_") {
			if !exportedName(n, []map[string]*dto.MetricFamily{mfs}) {
				t.Errorf("deploy/monitoring uses %s, which drover run with autoscaled runners does not export", n)
			}
		}
	}
}

// monitoringNames are the metric names deploy/monitoring's alert rules
// and dashboard use.
func monitoringNames(t *testing.T) []string {
	t.Helper()
	var names []string
	rules, d := monitoringFiles(t)
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			names = append(names, metricNames(t, "alerts.yaml "+r.Alert, r.Expr)...)
		}
	}
	for _, p := range d.Panels {
		for _, q := range p.Targets {
			names = append(names, metricNames(t, "grafana-dashboard.json "+p.Title, q.Expr)...)
		}
	}
	return names
}

// with is base plus the label pairs kv.
func with(base map[string]string, kv ...string) map[string]string {
	out := map[string]string{}
	for k, v := range base {
		out[k] = v
	}
	for i := 0; i+1 < len(kv); i += 2 {
		out[kv[i]] = kv[i+1]
	}
	return out
}

func labelOf(m *dto.Metric, name string) string {
	for _, lp := range m.GetLabel() {
		if lp.GetName() == name {
			return lp.GetValue()
		}
	}
	return ""
}
