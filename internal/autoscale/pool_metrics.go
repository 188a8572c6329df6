package autoscale

import "github.com/prometheus/client_golang/prometheus"

// PoolMetrics are the Prometheus collectors of every Pool of a process.
// One PoolMetrics serves many pools; each series carries the pool's
// runner name (fleet.Settings.Name).
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

	// FleetingInstances and FleetingMaxInstances are Instances and the
	// policy's max_instances in the names and states of GitLab's fleeting
	// provisioner (fleeting_provisioner_instances: creating, running,
	// deleting; idle and busy instances are both running), for
	// dashboards built for GitLab Runner's docker-autoscaler. Their runner
	// label is the runner's name, as in drover_autoscaler_*; max 0 means
	// unlimited.
	FleetingInstances    *prometheus.GaugeVec
	FleetingMaxInstances *prometheus.GaugeVec
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
			Name: "fleeting_provisioner_instances", Help: "Instances by fleeting state: creating, running (idle or busy), deleting.",
		}, []string{"runner", "state"}),
		FleetingMaxInstances: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "fleeting_provisioner_max_instances", Help: "The pool's max_instances (0: unlimited).",
		}, []string{"runner"}),
	}
	if reg != nil {
		reg.MustRegister(m.Instances, m.Creations, m.Removals, m.ProviderErrors, m.DeletionRetries, m.Decisions, m.Provider, m.FleetingInstances, m.FleetingMaxInstances)
	}
	return m
}
