// Package runnerpool gives every [[runners]] entry with executor
// "instance" its autoscaler pool: it reads the pool's configuration from
// config.toml, builds the fleet provider and the autoscale.Pool, runs the
// pool's scaling loop, publishes the pool to the instance executor
// (instance.Runners, by the runner's short token) and keeps all of that in
// step with config reloads. One Set serves one `drover run`.
//
// # Configuration
//
// The policy keys of [runners.autoscaler] (capacity_per_instance,
// max_use_count, max_instances, [[runners.autoscaler.policy]], ...) are
// read by autoscale.FromRunner. This package reads the others:
//
//	[runners.autoscaler]
//	  plugin = "docker"        # required: docker, static, sim, or a fleet
//	                           # plugin program (a path, or a name looked up
//	                           # in PATH as given and as drover-fleet-<name>)
//	  instance_ready_command = "cloud-init status --wait"  # over SSH on each
//	                           # new instance; failure removes the instance.
//	                           # Without it the instance is still connected
//	                           # to (SSH login) before its first job.
//	  instance_acquire_timeout = "15m"   # wait for a slot once a job came
//	  update_interval = "1m"             # scaling pass / provider sync
//	  update_interval_when_expecting = "2s"  # while instances boot or go
//	  deletion_retry_interval = "1m"
//	  shutdown_deletion_interval = "10s"
//	  failure_threshold = 3              # failed heartbeats before removal
//	  delete_instances_on_shutdown = false
//	  [runners.autoscaler.plugin_config]   # given to the provider as is
//	  [runners.autoscaler.connector_config]
//	    os, arch, protocol ("ssh" only), protocol_port, username, password,
//	    key_path, use_static_credentials, keepalive, timeout, use_external_addr
//	  [runners.autoscaler.state_storage]
//	    enabled = true                   # the default
//	    dir = "<config dir>/.drover-fleet"   # relative: to config.toml's dir
//
// Durations are Go duration strings; a bare integer is an error (GitLab
// Runner would read nanoseconds). log_internal_ip, log_external_ip,
// shutdown_deletion_retries, scale_throttle, vm_isolation and the
// *_buckets keys are accepted and ignored, with a warning.
//
// # The state file is on by default
//
// "No orphaned instance, ever": each pool records its instances in
// <state dir>/<short token>/state.json. A manager that was killed finds
// them there at its next start and re-adopts them; every other instance
// the provider reports for the runner's group is deleted. Turning
// state_storage off is allowed (with a warning) but then a crash leaves
// instances that nothing deletes. The static provider's hosts are not
// created by drover: hosts the state file does not list are adopted, not
// deleted.
//
// # [runners.machine]
//
// A runner with executor "instance" and only a [runners.machine] table
// uses the machine dialect of the policy (IdleCount, IdleTime, limit,
// MaxBuilds, [[runners.machine.autoscaling]]) and takes its provider from
// MachineDriver (docker, static, sim or a plugin). MachineOptions
// "key=value" strings become plugin_config entries ("true"/"false" are
// booleans, integers are integers, hosts is split at commas, a leading
// "--" is dropped). MachineName, MachineOptionsWithName and
// MaxRemovalAttempts are ignored with a warning; the connector, the
// intervals and the state file keep their defaults.
//
// # Errors
//
// Every mistake is reported when the configuration is loaded, never on a
// later scaling pass: a missing table or plugin, an unknown plugin, a
// plugin_config the docker, static or sim provider refuses, values of the
// wrong type or sign, two instance runners with one token. Errors are
// *config.Error: "file:line: key: what is wrong".
//
// # Reloads
//
// Set.Apply parses the whole new configuration first and changes nothing
// when any runner is wrong. Then: a new runner gets a pool; a runner whose
// policy alone changed keeps its pool (SetPolicy); a runner whose
// provider, connector, intervals or state file changed gets a new pool,
// the old one handing its instances over through the state file, or
// deleting them when the provider (plugin, plugin_config) changed, since
// the new one could not re-adopt them; a runner that left config.toml has
// its pool shut down in the background, deleting its instances only with
// delete_instances_on_shutdown.
package runnerpool
