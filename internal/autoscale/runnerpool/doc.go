// Package runnerpool gives every [[runners]] entry with executor
// "instance", "docker-autoscaler" or "docker+machine" its autoscaler pool:
// it reads the pool's configuration from config.toml (Parse, ParseAll),
// builds the fleet provider and the autoscale.Pool, runs the pool's
// scaling loop, publishes the pool to the executors (instance.Runners, by
// the runner's short token) and keeps all of that in step with config
// reloads (Set.Apply). One Set serves one `drover run`.
//
// The keys it reads, and the policy keys autoscale.FromRunner reads, are
// described for users in docs/autoscaler.md: every key of
// [runners.autoscaler] and [runners.machine] with its type, default and
// meaning, the differences from GitLab Runner, and how errors, warnings
// and reloads behave. Keep that page in step with this package.
//
// Every mistake is a *config.Error ("file:line: key: what is wrong")
// reported when the configuration is loaded, never on a later scaling
// pass. Warnings, the policy's included (a pool that concurrent or the
// runner's limit keeps from filling, Policy.CapWarning), are in
// Spec.Warnings; Set.Apply logs them at start and at every reload.
package runnerpool
