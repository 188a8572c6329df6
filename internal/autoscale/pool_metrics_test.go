package autoscale

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/drover-ci/drover/internal/fleet"
	"github.com/drover-ci/drover/internal/fleet/sim"
)

// A docker+machine pool counts a machine whose ready command fails as
// creation-failed, timed from its request on the fake clock, and reports
// nothing in fleeting's families.
func TestPoolMachineFailedCreationMetrics(t *testing.T) {
	fail := func(context.Context, fleet.ConnectInfo) error { return errors.New("exit status 1") }
	h := newPoolHarness(t, poolTestPolicy(1, 1, time.Hour, 0), sim.Options{BootTime: 10 * time.Second}, func(o *PoolOptions) {
		o.InstanceReady = fail
		o.Executor = MachineExecutor
	})
	h.pool.Tick(t.Context())
	h.advance(10 * time.Second)
	poolWaitFor(t, "ready command failure", func() bool { return h.count(StateRemoving) == 1 })
	if got := testutil.ToFloat64(h.m.MachineActions.WithLabelValues("creation-failed", "", "", "", "")); got != 1 {
		t.Errorf("actions_total{creation-failed} = %v, want 1", got)
	}
	var hm dto.Metric
	if err := h.m.MachineFailedCreation.Write(&hm); err != nil {
		t.Fatal(err)
	}
	if n, s := hm.GetHistogram().GetSampleCount(), hm.GetHistogram().GetSampleSum(); n != 1 || s != 10 {
		t.Errorf("failed creation duration: %d observations, sum %v s; want 1, 10 s (the boot on the fake clock)", n, s)
	}
	if n := testutil.CollectAndCount(h.m.FleetingInstanceOperations); n != 0 {
		t.Errorf("a docker+machine pool has %d fleeting_provisioner_instance_operations_total series", n)
	}
	h.pool.Tick(t.Context())
	if n := testutil.CollectAndCount(h.m.machineStates); n != len(machineStateNames) {
		t.Errorf("machine states: %d series, want %d", n, len(machineStateNames))
	}
	h.m.machineStates.mu.Lock()
	c := h.m.machineStates.by[h.pool]
	h.m.machineStates.mu.Unlock()
	if c[4]+c[5] != 1 { // removing or stuck-on-removing
		t.Errorf("machine states of the pool = %v, want the failed machine removing", c)
	}
}

// An instance the provider stops reporting is a missed update and a
// delete; a refused Reserve at max_instances is the taskscaler's
// reserve_iop_capacity_failure, below it reserve_available_capacity_failure.
func TestPoolFleetingMissedUpdateAndReserveFailures(t *testing.T) {
	h := newPoolHarness(t, poolTestPolicy(1, 0, time.Hour, 1), sim.Options{BootTime: 10 * time.Second}, func(o *PoolOptions) {
		o.RunnerName, o.SystemID = "name", "sys"
	})
	labels := func(extra ...string) []string { return append([]string{"r1", "name", "sys"}, extra...) }
	h.pool.Tick(t.Context())
	r, err := h.pool.Reserve()
	if err != nil {
		t.Fatalf("Reserve = %v", err)
	}
	if _, err := h.pool.Reserve(); !errors.Is(err, ErrNoCapacity) {
		t.Fatalf("second Reserve with max_instances 1 = %v, want ErrNoCapacity", err)
	}
	h.pool.Unreserve(r)
	// The one slot max_instances allows is promised: no capacity could come.
	for op, want := range map[string]float64{"reserve": 1, "unreserve": 1, "reserve_iop_capacity_failure": 1, "reserve_available_capacity_failure": 0} {
		if got := testutil.ToFloat64(h.m.TaskscalerTaskOperations.WithLabelValues(labels(op)...)); got != want {
			t.Errorf("task_operations_total{%s} = %v, want %v", op, got, want)
		}
	}

	// An instance of idle_count 1, then gone behind the pool's back.
	h.pool.SetPolicy(poolTestPolicy(1, 1, time.Hour, 1))
	h.pool.Tick(t.Context())
	h.advance(10 * time.Second)
	poolWaitFor(t, "instance ready", func() bool { return h.count(StateIdle) == 1 })
	insts, _ := h.pool.Snapshot()
	h.prov.Vanish(insts[0].ID)
	h.advance(time.Minute)
	if got := testutil.ToFloat64(h.m.FleetingMissedUpdates.WithLabelValues(labels()...)); got != 1 {
		t.Errorf("missed_updates_total = %v, want 1", got)
	}
	if got := testutil.ToFloat64(h.m.FleetingInstanceOperations.WithLabelValues(labels("delete")...)); got != 1 {
		t.Errorf("instance_operations_total{delete} = %v, want 1", got)
	}
	if got := testutil.ToFloat64(h.m.TaskscalerMaxUseCount.WithLabelValues(labels()...)); got != 0 {
		t.Errorf("max_use_count_per_instance = %v, want 0", got)
	}
}
