package runnerpool

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/drover-ci/drover/internal/config"
	"github.com/drover-ci/drover/internal/executor"
	"github.com/drover-ci/drover/internal/executor/instance"
)

// gathered sums the values of the series of family name whose labels
// include want: a counter's or gauge's value, a histogram's observations.
func gathered(t *testing.T, reg *prometheus.Registry, name string, want map[string]string) (total float64, found bool) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
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
			found = true
			switch mf.GetType() {
			case dto.MetricType_COUNTER:
				total += m.GetCounter().GetValue()
			case dto.MetricType_GAUGE:
				total += m.GetGauge().GetValue()
			case dto.MetricType_HISTOGRAM:
				total += float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return total, found
}

// TestSetGitLabAutoscalingMetrics drives a real Set, on the sim provider
// (the stand-in for a cloud), with one runner of the instance executor
// and one of docker+machine, each through an instance's creation,
// readiness, a job (reserve, acquire, release) and, max_use_count being
// 1, its removal; then checks fleeting's and the taskscaler's families
// moved for the first runner, with GitLab's labels, and docker+machine's
// for the second, and neither for the other.
func TestSetGitLabAutoscalingMetrics(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "config.toml")
	cfg, _, err := config.Parse(file, []byte(`concurrent = 4
[[runners]]
  name = "fleet"
  url = "http://127.0.0.1:1"
  token = "glrt-fleetaxxxx"
  executor = "instance"
  [runners.autoscaler]
    plugin = "sim"
    plugin_config = { delete_time = "20ms" }
    max_instances = 2
    max_use_count = 1
    update_interval = "50ms"
    update_interval_when_expecting = "10ms"
    [[runners.autoscaler.policy]]
      idle_count = 1
      idle_time = "1h"
[[runners]]
  name = "machines"
  url = "http://127.0.0.1:1"
  token = "glrt-machinexxxx"
  executor = "docker+machine"
  [runners.docker]
    image = "busybox"
  [runners.machine]
    MachineDriver = "sim"
    MachineOptions = ["delete_time=20ms"]
    IdleCount = 1
    IdleTime = 3600
    MaxBuilds = 1
`))
	if err != nil {
		t.Fatal(err)
	}
	runners := &instance.Runners{}
	reg := prometheus.NewRegistry()
	set, err := New(Options{ConfigPath: file, Registerer: reg, Runners: runners, SystemID: "s_0123456789ab"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	if err := set.Apply(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	defer set.Shutdown(context.WithoutCancel(ctx))

	fl := map[string]string{"runner": "fleetaxxx", "runner_name": "fleet", "system_id": "s_0123456789ab"}
	dm := map[string]string{"executor": "docker+machine"}
	with := func(base map[string]string, kv ...string) map[string]string {
		out := map[string]string{}
		for k, v := range base {
			out[k] = v
		}
		for i := 0; i+1 < len(kv); i += 2 {
			out[kv[i]] = kv[i+1]
		}
		return out
	}

	// One job on each runner, the way the executors take a slot.
	for _, short := range []string{"fleetaxxx", "machinexx"} {
		r, err := runners.Lookup(executor.Settings{ShortToken: short})
		if err != nil {
			t.Fatalf("runner %s: %v", short, err)
		}
		var res instance.Reservation
		// Reserve is refused until the idle instance is ready: a minute
		// is only a guard against a hang (it takes a few seconds).
		waitFor(t, time.Minute, func() bool { res, err = r.Slots.Reserve(); return err == nil })
		acq, err := r.Slots.Acquire(ctx, res)
		if err != nil {
			t.Fatalf("runner %s: Acquire: %v", short, err)
		}
		r.Slots.Release(acq)
	}
	// max_use_count (MaxBuilds) 1: the used instances are removed and
	// deleted.
	waitFor(t, time.Minute, func() bool {
		v, _ := gathered(t, reg, "fleeting_provisioner_instance_operations_total", with(fl, "operation", "delete"))
		w, _ := gathered(t, reg, "gitlab_runner_autoscaling_actions_total", with(dm, "action", "removed"))
		return v >= 1 && w >= 1
	})

	for _, tc := range []struct {
		name   string
		labels map[string]string
		min    float64
	}{
		{"fleeting_provisioner_instance_operations_total", with(fl, "operation", "create"), 1},
		{"fleeting_provisioner_internal_operations_total", with(fl, "operation", "reconcile"), 1},
		{"fleeting_provisioner_internal_operations_total", with(fl, "operation", "provision"), 1},
		{"fleeting_provisioner_internal_operations_total", with(fl, "operation", "removal"), 1},
		{"fleeting_provisioner_instance_creation_time_seconds", fl, 1},
		{"fleeting_provisioner_instance_is_running_time_seconds", fl, 1},
		{"fleeting_provisioner_instance_deletion_time_seconds", fl, 1},
		{"fleeting_provisioner_instance_life_duration_seconds", fl, 1},
		{"fleeting_provisioner_max_instances", fl, 2},
		{"fleeting_taskscaler_task_operations_total", with(fl, "operation", "reserve"), 1},
		{"fleeting_taskscaler_task_operations_total", with(fl, "operation", "acquire"), 1},
		{"fleeting_taskscaler_task_operations_total", with(fl, "operation", "release"), 1},
		{"fleeting_taskscaler_task_operations_total", with(fl, "operation", "reserve_available_capacity_failure"), 0},
		{"fleeting_taskscaler_scale_operations_total", with(fl, "operation", "up"), 1},
		{"fleeting_taskscaler_task_instance_readiness_time_seconds", fl, 1},
		{"fleeting_taskscaler_max_use_count_per_instance", fl, 1},
		{"fleeting_taskscaler_max_tasks_per_instance", fl, 1},
		{"fleeting_taskscaler_desired_instances", fl, 0},
		{"gitlab_runner_autoscaling_actions_total", with(dm, "action", "created", "target_zone", ""), 1},
		{"gitlab_runner_autoscaling_actions_total", with(dm, "action", "used"), 1},
		{"gitlab_runner_autoscaling_machine_creation_duration_seconds", dm, 1},
		{"gitlab_runner_autoscaling_machine_removal_duration_seconds", dm, 1},
		{"gitlab_runner_autoscaling_machine_stopping_duration_seconds", dm, 0},
		{"gitlab_runner_autoscaling_machine_failed_creation_duration_seconds", dm, 0},
	} {
		v, found := gathered(t, reg, tc.name, tc.labels)
		if !found || v < tc.min {
			t.Errorf("%s%v = %v (found %v), want >= %v", tc.name, tc.labels, v, found, tc.min)
		}
	}
	// Every state of each, as GitLab emits them.
	for _, s := range []string{"requested", "pending", "creating", "running", "suspending", "suspended", "resuming", "deleting"} {
		if _, found := gathered(t, reg, "fleeting_provisioner_instances", with(fl, "state", s)); !found {
			t.Errorf("fleeting_provisioner_instances{state=%q}: no series", s)
		}
	}
	for _, s := range []string{"idle", "reserved", "pending", "acquired", "unavailable", "unhealthy"} {
		if _, found := gathered(t, reg, "fleeting_taskscaler_tasks", with(fl, "state", s)); !found {
			t.Errorf("fleeting_taskscaler_tasks{state=%q}: no series", s)
		}
	}
	for _, s := range []string{"acquired", "creating", "idle", "used", "removing", "stuck-on-removing"} {
		if _, found := gathered(t, reg, "gitlab_runner_autoscaling_machine_states", with(dm, "state", s, "target_machine_type", "")); !found {
			t.Errorf("gitlab_runner_autoscaling_machine_states{state=%q}: no series", s)
		}
	}
	// The next idle instance of each runner replaced the used one.
	waitFor(t, time.Minute, func() bool {
		v, _ := gathered(t, reg, "fleeting_taskscaler_tasks", with(fl, "state", "idle"))
		w, _ := gathered(t, reg, "gitlab_runner_autoscaling_machine_states", with(dm, "state", "idle"))
		return v == 1 && w == 1
	})
	// Each runner reports in its executor's families only.
	if _, found := gathered(t, reg, "fleeting_provisioner_instances", map[string]string{"runner": "machinexx"}); found {
		t.Error("the docker+machine runner has fleeting_provisioner_instances series")
	}
	if _, found := gathered(t, reg, "fleeting_taskscaler_tasks", map[string]string{"runner": "machinexx"}); found {
		t.Error("the docker+machine runner has fleeting_taskscaler_tasks series")
	}
}
