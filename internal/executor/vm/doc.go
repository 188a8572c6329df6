// Package vm is the core of drover's VM executors (qemu now; virtualbox
// and parallels next): what GitLab Runner's executors/vm and virtualbox
// executor do, over a Hypervisor of primitives.
//
// A VM executor is the instance executor (package instance) whose
// instance is a VM: Slots is its capacity (instance.JobSlots), so stages
// run over SSH with the instance executor's stage wrapper, cancellation
// (the stage's process group killed in the guest), helper install for the
// cache and artifact stages, and failure mapping.
//
// # Slots
//
// Each concurrency slot of a runner has one VM, named
// <base>-runner-<short token>-concurrent-<slot> as GitLab Runner names
// them. The first job of a slot clones it from the base (a linked clone;
// from base_snapshot's saved state when set), starts it, waits until its
// guest lets the SSH user in (boot_timeout, default 5 minutes), and saves
// its running state as the snapshot "Started". Every later job reverts
// the VM to "Started" and starts it from there: what a job wrote is gone.
// After each job the VM is powered off. A VM that cannot be restored is
// deleted and made anew.
//
// With disable_snapshots each job gets a fresh clone, deleted after it.
//
// # Images
//
// The job's image: names its base when allowed_images (regular
// expressions, matched anywhere in the name as GitLab Runner does) allows
// it; a job without image: uses base_name. Without allowed_images the
// image is ignored with a warning (GitLab Runner's behaviour). A refused
// image fails the job with runner_configuration_error, naming the rules.
//
// # Failures
//
// A guest that does not answer SSH within the boot timeout, or a VM that
// stops while booting, fails the job with runner_system_failure: the last
// 20 lines of the guest's console (when the hypervisor keeps it,
// Console) go to the job log, and the VM is deleted.
//
// # Host keys
//
// Every clone of a base has the base's host keys: the first key a base's
// guest presents is kept (Options.HostKeys, keyed by the base) and a
// different one later is refused. disable_strict_host_key_checking in
// [runners.ssh] accepts any key.
//
// # Coordinator on loopback
//
// A job whose coordinator URL is on the host's loopback
// (http://127.0.0.1:PORT) reaches it from the guest through a remote port
// forward on its SSH connection (ForwardLoopback).
package vm
