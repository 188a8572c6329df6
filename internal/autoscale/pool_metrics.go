package autoscale

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/drover-ci/drover/internal/fleet"
)

// MachineExecutor is the executor whose pools report in GitLab Runner's
// docker+machine families (gitlab_runner_autoscaling_*) instead of
// fleeting's and taskscaler's.
const MachineExecutor = "docker+machine"

// PoolMetrics are the Prometheus collectors of every Pool of a process.
// One PoolMetrics serves many pools; each series carries the pool's
// runner (its short token, fleet.Settings.Name).
//
// Besides drover's own drover_autoscaler_* families, a pool reports in
// the families GitLab Runner's autoscaling executors have, so that
// dashboards built for them work:
//
//   - a pool of any executor but docker+machine, as GitLab's
//     docker-autoscaler and instance executors do: fleeting's provisioner
//     (fleeting_provisioner_*) and the taskscaler's
//     (fleeting_taskscaler_*), labelled as gitlab-runner's
//     executors/internal/autoscaler/provider.go labels them: runner (the
//     short token), runner_name, system_id;
//   - a pool of the docker+machine executor, as GitLab's
//     executors/docker/machine/provider.go and collector.go do:
//     gitlab_runner_autoscaling_*, with the constant label executor and
//     the target_* labels (empty: drover's providers do not tell a zone,
//     region, project or machine type). These have no runner label in
//     GitLab: every docker+machine runner of the process adds to the same
//     series.
type PoolMetrics struct {
	// Instances is the number of instances by state (creating, idle,
	// busy, removing).
	Instances *prometheus.GaugeVec
	// Creations counts instances asked for, by reason (idle_target,
	// demand).
	Creations *prometheus.CounterVec
	// Removals counts instances whose removal was decided, by reason.
	Removals *prometheus.CounterVec
	// ProviderErrors counts failed provider calls by operation (init,
	// update, increase, decrease, connect_info, heartbeat, ready_command).
	ProviderErrors *prometheus.CounterVec
	// DeletionRetries counts deletion requests repeated after a failure
	// or a provider that did not act on one.
	DeletionRetries *prometheus.CounterVec
	// Decisions counts scaling passes.
	Decisions *prometheus.CounterVec
	// Provider is 1 for each pool's provider, labelled with what its Init
	// answered: the group id, version and build info (a fleeting plugin's).
	Provider *prometheus.GaugeVec

	// Fleeting's provisioner. FleetingInstances is by fleeting's states:
	// requested (always 0: drover asks the provider in the pass that
	// decides), pending (asked for, not yet reported), creating (the
	// provider says so), running (the provider says so, whether or not
	// the instance is ready for jobs yet), suspending, suspended and
	// resuming (always 0: drover removes such instances), deleting (the
	// pool is removing it). FleetingMaxInstances is max_instances (0:
	// unlimited).
	FleetingInstances    *prometheus.GaugeVec
	FleetingMaxInstances *prometheus.GaugeVec
	// FleetingInstanceOperations counts instances that appeared (create)
	// and went away (delete); fleeting's suspend and resume never happen.
	FleetingInstanceOperations *prometheus.CounterVec
	// FleetingInternalOperations counts the pool's provider calls as
	// fleeting names its passes: reconcile (Update), provision (Increase),
	// removal (Decrease).
	FleetingInternalOperations *prometheus.CounterVec
	// FleetingMissedUpdates counts instances an update no longer
	// reported although the pool was not deleting them.
	FleetingMissedUpdates *prometheus.CounterVec
	// FleetingCreationTime is from the request to the provider's first
	// report of the instance; FleetingIsRunningTime from the request to
	// its first report as running; FleetingDeletionTime from the deletion
	// request to its disappearance; FleetingLifeDuration from the request
	// (or its discovery) to its disappearance.
	FleetingCreationTime  *prometheus.HistogramVec
	FleetingIsRunningTime *prometheus.HistogramVec
	FleetingDeletionTime  *prometheus.HistogramVec
	FleetingLifeDuration  *prometheus.HistogramVec

	// The taskscaler's (the pool is drover's taskscaler). TaskscalerTasks
	// are job slots by state: idle (free on a ready, healthy instance),
	// reserved (promised to a job being requested), pending (jobs
	// received and waiting for a slot), acquired (a job holds it),
	// unavailable (free on an instance that reached max_use_count or is
	// being removed), unhealthy (free on an instance whose last heartbeat
	// failed).
	TaskscalerTasks                 *prometheus.GaugeVec
	TaskscalerDesiredInstances      *prometheus.GaugeVec
	TaskscalerMaxUseCount           *prometheus.GaugeVec
	TaskscalerMaxTasksPerInstance   *prometheus.GaugeVec
	TaskscalerScaleOperations       *prometheus.CounterVec
	TaskscalerTaskOperations        *prometheus.CounterVec
	TaskscalerInstanceReadinessTime *prometheus.HistogramVec

	// docker+machine's. MachineActions counts created (an instance became
	// ready), creation-failed, used (a job took it) and removed.
	// MachineCreation is from the request to ready; MachineFailedCreation
	// from the request to the failure; MachineRemoval from the deletion
	// request to the instance's disappearance; MachineStopping is never
	// observed, as drover's providers delete an instance without stopping
	// it first. Machine states are machineStates.
	MachineActions        *prometheus.CounterVec
	MachineCreation       prometheus.Histogram
	MachineStopping       prometheus.Histogram
	MachineRemoval        prometheus.Histogram
	MachineFailedCreation prometheus.Histogram
	machineStates         *machineStates
}

// Label sets of GitLab's families.
var (
	gitlabPoolLabels     = []string{"runner", "runner_name", "system_id"}
	machineTargetLabels  = []string{"target_zone", "target_region", "target_project", "target_machine_type"}
	machineConstLabels   = prometheus.Labels{"executor": MachineExecutor}
	fleetingTimeBuckets  = []float64{1, 5, 10, 20, 30, 45, 60, 90, 120, 180, 240, 300, 600}
	fleetingLifeBuckets  = []float64{60, 300, 600, 1800, 3600, 7200, 14400, 28800, 86400}
	machineRemoveBuckets = []float64{1, 3, 5, 10, 30, 50, 60, 80, 90, 120}
)

func withLabels(extra ...string) []string {
	return append(append([]string(nil), gitlabPoolLabels...), extra...)
}

// NewPoolMetrics creates the collectors and registers them with reg when
// it is not nil.
func NewPoolMetrics(reg prometheus.Registerer) *PoolMetrics {
	m := &PoolMetrics{
		Instances: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "drover_autoscaler_instances", Help: "Instances of the pool by state.",
		}, []string{"runner", "state"}),
		Creations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "drover_autoscaler_instance_creations_total", Help: "Instances requested from the provider, by reason.",
		}, []string{"runner", "reason"}),
		Removals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "drover_autoscaler_instance_removals_total", Help: "Instance removals decided, by reason.",
		}, []string{"runner", "reason"}),
		ProviderErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "drover_autoscaler_provider_errors_total", Help: "Failed provider calls, by operation.",
		}, []string{"runner", "op"}),
		DeletionRetries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "drover_autoscaler_deletion_retries_total", Help: "Instance deletion requests repeated.",
		}, []string{"runner"}),
		Decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "drover_autoscaler_decisions_total", Help: "Scaling passes run.",
		}, []string{"runner"}),
		Provider: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "drover_autoscaler_provider_info", Help: "The pool's fleet provider as its Init described it (1).",
		}, []string{"runner", "id", "version", "build_info"}),

		FleetingInstances: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "fleeting_provisioner_instances", Help: "Instances by fleeting state.",
		}, withLabels("state")),
		FleetingMaxInstances: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "fleeting_provisioner_max_instances", Help: "The pool's max_instances (0: unlimited).",
		}, gitlabPoolLabels),
		FleetingInstanceOperations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fleeting_provisioner_instance_operations_total", Help: "Instance operations: create (an instance appeared), delete (one went away).",
		}, withLabels("operation")),
		FleetingInternalOperations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fleeting_provisioner_internal_operations_total", Help: "Provider calls: reconcile (update), provision (increase), removal (decrease).",
		}, withLabels("operation")),
		FleetingMissedUpdates: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fleeting_provisioner_missed_updates_total", Help: "Instances an update stopped reporting while the pool was not deleting them.",
		}, gitlabPoolLabels),
		FleetingCreationTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "fleeting_provisioner_instance_creation_time_seconds", Help: "Time from an instance's request to its first report.", Buckets: fleetingTimeBuckets,
		}, gitlabPoolLabels),
		FleetingIsRunningTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "fleeting_provisioner_instance_is_running_time_seconds", Help: "Time from an instance's request to its first report as running.", Buckets: fleetingTimeBuckets,
		}, gitlabPoolLabels),
		FleetingDeletionTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "fleeting_provisioner_instance_deletion_time_seconds", Help: "Time from an instance's deletion request to its disappearance.", Buckets: fleetingTimeBuckets,
		}, gitlabPoolLabels),
		FleetingLifeDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "fleeting_provisioner_instance_life_duration_seconds", Help: "Time from an instance's request to its disappearance.", Buckets: fleetingLifeBuckets,
		}, gitlabPoolLabels),

		TaskscalerTasks: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "fleeting_taskscaler_tasks", Help: "Job slots by state: idle, reserved, pending, acquired, unavailable, unhealthy.",
		}, withLabels("state")),
		TaskscalerDesiredInstances: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "fleeting_taskscaler_desired_instances", Help: "Instances the last scaling pass wanted.",
		}, gitlabPoolLabels),
		TaskscalerMaxUseCount: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "fleeting_taskscaler_max_use_count_per_instance", Help: "max_use_count (0: unlimited).",
		}, gitlabPoolLabels),
		TaskscalerMaxTasksPerInstance: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "fleeting_taskscaler_max_tasks_per_instance", Help: "capacity_per_instance.",
		}, gitlabPoolLabels),
		TaskscalerScaleOperations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fleeting_taskscaler_scale_operations_total", Help: "Scaling passes that asked for instances (up) or removed idle ones (down).",
		}, withLabels("operation")),
		TaskscalerTaskOperations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fleeting_taskscaler_task_operations_total", Help: "Slot operations: reserve, unreserve, acquire, release, reserve_available_capacity_failure, reserve_iop_capacity_failure.",
		}, withLabels("operation")),
		TaskscalerInstanceReadinessTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "fleeting_taskscaler_task_instance_readiness_time_seconds", Help: "Time from an instance's request until it is ready for jobs.", Buckets: fleetingTimeBuckets,
		}, gitlabPoolLabels),

		MachineActions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gitlab_runner_autoscaling_actions_total", Help: "The total number of actions executed by the provider.", ConstLabels: machineConstLabels,
		}, append([]string{"action"}, machineTargetLabels...)),
		MachineCreation: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "gitlab_runner_autoscaling_machine_creation_duration_seconds", Help: "Histogram of machine creation time.",
			Buckets: prometheus.ExponentialBuckets(30, 1.25, 10), ConstLabels: machineConstLabels,
		}),
		MachineStopping: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "gitlab_runner_autoscaling_machine_stopping_duration_seconds", Help: "Histogram of machine stopping time (drover never stops a machine before removing it).",
			Buckets: machineRemoveBuckets, ConstLabels: machineConstLabels,
		}),
		MachineRemoval: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "gitlab_runner_autoscaling_machine_removal_duration_seconds", Help: "Histogram of machine removal time.",
			Buckets: machineRemoveBuckets, ConstLabels: machineConstLabels,
		}),
		MachineFailedCreation: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "gitlab_runner_autoscaling_machine_failed_creation_duration_seconds", Help: "Histogram of machine failed creation timings.",
			Buckets: machineRemoveBuckets, ConstLabels: machineConstLabels,
		}),
		machineStates: newMachineStates(),
	}
	if reg != nil {
		reg.MustRegister(m.Instances, m.Creations, m.Removals, m.ProviderErrors, m.DeletionRetries, m.Decisions, m.Provider,
			m.FleetingInstances, m.FleetingMaxInstances, m.FleetingInstanceOperations, m.FleetingInternalOperations,
			m.FleetingMissedUpdates, m.FleetingCreationTime, m.FleetingIsRunningTime, m.FleetingDeletionTime, m.FleetingLifeDuration,
			m.TaskscalerTasks, m.TaskscalerDesiredInstances, m.TaskscalerMaxUseCount, m.TaskscalerMaxTasksPerInstance,
			m.TaskscalerScaleOperations, m.TaskscalerTaskOperations, m.TaskscalerInstanceReadinessTime,
			m.MachineActions, m.MachineCreation, m.MachineStopping, m.MachineRemoval, m.MachineFailedCreation, m.machineStates)
	}
	return m
}

// Machine states of GitLab's docker+machine provider, in its order.
var machineStateNames = [...]string{"acquired", "creating", "idle", "used", "removing", "stuck-on-removing"}

// machineStuckAttempts is when a removing machine counts as
// stuck-on-removing: GitLab's removeRetryTries.
const machineStuckAttempts = 3

// machineStates is gitlab_runner_autoscaling_machine_states: the machines
// of every docker+machine pool of the process, summed, as GitLab's one
// machine provider per process reports them. Each pool sets its own
// counts; a pool shut down is forgotten.
type machineStates struct {
	desc *prometheus.Desc
	mu   sync.Mutex
	by   map[*Pool][len(machineStateNames)]int
}

func newMachineStates() *machineStates {
	return &machineStates{
		desc: prometheus.NewDesc("gitlab_runner_autoscaling_machine_states", "The current number of machines per state in this provider.",
			append([]string{"state"}, machineTargetLabels...), machineConstLabels),
		by: map[*Pool][len(machineStateNames)]int{},
	}
}

func (s *machineStates) set(p *Pool, c [len(machineStateNames)]int) {
	s.mu.Lock()
	s.by[p] = c
	s.mu.Unlock()
}

func (s *machineStates) forget(p *Pool) {
	s.mu.Lock()
	delete(s.by, p)
	s.mu.Unlock()
}

// Describe implements prometheus.Collector.
func (s *machineStates) Describe(ch chan<- *prometheus.Desc) { ch <- s.desc }

// Collect implements prometheus.Collector: every state, zeros included,
// as GitLab always emits them.
func (s *machineStates) Collect(ch chan<- prometheus.Metric) {
	var total [len(machineStateNames)]int
	s.mu.Lock()
	for _, c := range s.by {
		for i, n := range c {
			total[i] += n
		}
	}
	s.mu.Unlock()
	for i, name := range machineStateNames {
		ch <- prometheus.MustNewConstMetric(s.desc, prometheus.GaugeValue, float64(total[i]), name, "", "", "", "")
	}
}

// machine reports whether the pool reports in docker+machine's families
// rather than fleeting's and the taskscaler's.
func (p *Pool) machine() bool { return p.o.Executor == MachineExecutor }

// gitlabLabels are the values of gitlabPoolLabels for p, then extra.
func (p *Pool) gitlabLabels(extra ...string) []string {
	return append([]string{p.runner, p.o.RunnerName, p.o.SystemID}, extra...)
}

// The hooks below record one event each in GitLab's families of the
// pool's executor; all are no-ops without metrics.

// metricTaskOp counts a taskscaler slot operation.
func (p *Pool) metricTaskOp(op string) {
	if m := p.o.Metrics; m != nil && !p.machine() {
		m.TaskscalerTaskOperations.WithLabelValues(p.gitlabLabels(op)...).Inc()
	}
}

// metricProviderCall counts a provider call as fleeting's internal
// operation (reconcile, provision, removal).
func (p *Pool) metricProviderCall(op string) {
	if m := p.o.Metrics; m != nil && !p.machine() {
		m.FleetingInternalOperations.WithLabelValues(p.gitlabLabels(op)...).Inc()
	}
}

// metricAppearedLocked records a new instance the provider reported;
// asked says it answers one of the pool's requests (made at in.created).
func (p *Pool) metricAppearedLocked(in *poolInstance, asked bool, now time.Time) {
	in.asked = asked
	m := p.o.Metrics
	if m == nil || p.machine() {
		return
	}
	m.FleetingInstanceOperations.WithLabelValues(p.gitlabLabels("create")...).Inc()
	if asked {
		m.FleetingCreationTime.WithLabelValues(p.gitlabLabels()...).Observe(now.Sub(in.created).Seconds())
	}
}

// metricRunningLocked records the first report of in as running.
func (p *Pool) metricRunningLocked(in *poolInstance, now time.Time) {
	if in.runningSeen {
		return
	}
	in.runningSeen = true
	if m := p.o.Metrics; m != nil && !p.machine() && in.asked {
		m.FleetingIsRunningTime.WithLabelValues(p.gitlabLabels()...).Observe(now.Sub(in.created).Seconds())
	}
}

// metricReadyLocked records in becoming ready for jobs.
func (p *Pool) metricReadyLocked(in *poolInstance, now time.Time) {
	m := p.o.Metrics
	if m == nil {
		return
	}
	d := now.Sub(in.created).Seconds()
	if p.machine() {
		m.MachineActions.WithLabelValues("created", "", "", "", "").Inc()
		m.MachineCreation.Observe(d)
		return
	}
	m.TaskscalerInstanceReadinessTime.WithLabelValues(p.gitlabLabels()...).Observe(d)
}

// metricCreationFailed records n creations that failed after d.
func (p *Pool) metricCreationFailed(n int, d time.Duration) {
	if m := p.o.Metrics; m != nil && p.machine() {
		for range n {
			m.MachineActions.WithLabelValues("creation-failed", "", "", "", "").Inc()
			m.MachineFailedCreation.Observe(d.Seconds())
		}
	}
}

// metricUsedLocked records a job taking a slot.
func (p *Pool) metricUsedLocked() {
	if m := p.o.Metrics; m != nil && p.machine() {
		m.MachineActions.WithLabelValues("used", "", "", "", "").Inc()
	}
	p.metricTaskOp("acquire")
}

// metricGoneLocked records in going away: deleted says the pool was
// removing it (or the provider deleting it).
func (p *Pool) metricGoneLocked(in *poolInstance, deleted bool, now time.Time) {
	m := p.o.Metrics
	if m == nil {
		return
	}
	if p.machine() {
		if deleted {
			m.MachineActions.WithLabelValues("removed", "", "", "", "").Inc()
			if !in.deleteAt.IsZero() {
				m.MachineRemoval.Observe(now.Sub(in.deleteAt).Seconds())
			}
		}
		return
	}
	if !deleted {
		m.FleetingMissedUpdates.WithLabelValues(p.gitlabLabels()...).Inc()
	}
	m.FleetingInstanceOperations.WithLabelValues(p.gitlabLabels("delete")...).Inc()
	if !in.deleteAt.IsZero() {
		m.FleetingDeletionTime.WithLabelValues(p.gitlabLabels()...).Observe(now.Sub(in.deleteAt).Seconds())
	}
	m.FleetingLifeDuration.WithLabelValues(p.gitlabLabels()...).Observe(now.Sub(in.created).Seconds())
}

// metricScaleLocked records a scaling pass's outcome: desired instances,
// and whether it scaled up (asked for instances) or down (removed some).
func (p *Pool) metricScaleLocked(desired int, up, down bool) {
	m := p.o.Metrics
	if m == nil || p.machine() {
		return
	}
	m.TaskscalerDesiredInstances.WithLabelValues(p.gitlabLabels()...).Set(float64(desired))
	if up {
		m.TaskscalerScaleOperations.WithLabelValues(p.gitlabLabels("up")...).Inc()
	}
	if down {
		m.TaskscalerScaleOperations.WithLabelValues(p.gitlabLabels("down")...).Inc()
	}
}

// updateGaugesLocked sets the pool's gauges from its instances.
func (p *Pool) updateGaugesLocked() {
	m := p.o.Metrics
	if m == nil {
		return
	}
	var c [4]int
	for _, in := range p.insts {
		c[in.state]++
	}
	c[StateCreating] += len(p.pending)
	for s, name := range []string{"creating", "idle", "busy", "removing"} {
		m.Instances.WithLabelValues(p.runner, name).Set(float64(c[s]))
	}
	if p.machine() {
		var ms [len(machineStateNames)]int
		ms[1] = len(p.pending) // creating
		for _, in := range p.insts {
			switch {
			case in.state == StateCreating:
				ms[1]++
			case in.state == StateIdle:
				ms[2]++
			case in.state == StateBusy:
				ms[3]++
			case in.attempts >= machineStuckAttempts:
				ms[5]++
			default:
				ms[4]++
			}
		}
		m.machineStates.set(p, ms)
		return
	}
	fl := map[string]int{"requested": 0, "pending": len(p.pending), "creating": 0, "running": 0,
		"suspending": 0, "suspended": 0, "resuming": 0, "deleting": 0}
	tasks := map[string]int{"idle": 0, "reserved": p.reserved, "pending": p.waiting, "acquired": 0, "unavailable": 0, "unhealthy": 0}
	for _, in := range p.insts {
		switch {
		case in.state == StateRemoving:
			fl["deleting"]++
		case in.provState == fleet.StateRunning || in.state != StateCreating:
			fl["running"]++
		default:
			fl["creating"]++
		}
		if in.state == StateCreating {
			continue
		}
		tasks["acquired"] += in.acquired
		free := len(in.slots) - in.acquired
		switch {
		case in.state == StateRemoving || p.pol.MaxUseCount > 0 && in.useCount >= p.pol.MaxUseCount:
			tasks["unavailable"] += free
		case in.hbFails > 0:
			tasks["unhealthy"] += free
		default:
			tasks["idle"] += free
		}
	}
	for state, n := range fl {
		m.FleetingInstances.WithLabelValues(p.gitlabLabels(state)...).Set(float64(n))
	}
	for state, n := range tasks {
		m.TaskscalerTasks.WithLabelValues(p.gitlabLabels(state)...).Set(float64(n))
	}
	// Every slot operation's series is there from the start, at 0: a
	// rate() over a refusal that has not happened yet reads 0, not
	// nothing.
	for _, op := range []string{"reserve", "unreserve", "acquire", "release", "reserve_available_capacity_failure", "reserve_iop_capacity_failure"} {
		m.TaskscalerTaskOperations.WithLabelValues(p.gitlabLabels(op)...)
	}
	labels := p.gitlabLabels()
	m.FleetingMaxInstances.WithLabelValues(labels...).Set(float64(p.pol.MaxInstances))
	m.TaskscalerMaxUseCount.WithLabelValues(labels...).Set(float64(p.pol.MaxUseCount))
	m.TaskscalerMaxTasksPerInstance.WithLabelValues(labels...).Set(float64(max(1, p.pol.CapacityPerInstance)))
}

// reserveFailureLocked names a refused Reserve as the taskscaler does:
// reserve_iop_capacity_failure when no capacity could come either (the
// slots max_instances allows, less those of instances being removed, are
// all taken or promised), else reserve_available_capacity_failure (none
// free now, but instances could be created).
func (p *Pool) reserveFailureLocked() string {
	if p.pol.MaxInstances > 0 {
		per := max(1, p.pol.CapacityPerInstance)
		limit := p.pol.MaxInstances * per
		taken := p.reserved + p.waiting
		for _, in := range p.insts {
			if in.state == StateRemoving {
				limit -= per // counts toward max_instances until gone
			} else {
				taken += in.acquired
			}
		}
		if taken >= limit {
			return "reserve_iop_capacity_failure"
		}
	}
	return "reserve_available_capacity_failure"
}
