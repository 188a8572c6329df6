package qemu

import (
	"context"
	"log/slog"
	"os/exec"
	"path/filepath"

	"github.com/drover-ci/drover/internal/config"
	"github.com/drover-ci/drover/internal/executor/vm"
)

// PluginName is the qemu autoscaler plugin: [runners.autoscaler] plugin
// = "qemu" scales VMs of this host for the instance and docker-autoscaler
// executors.
const PluginName = "qemu"

// fleetOnly are the keys of [runners.qemu] the autoscaler plugin does not
// take: its VMs are the autoscaler's instances, not a job's.
var fleetOnly = map[string]string{
	"allowed_images":    "the image of an instance is base_name's",
	"disable_snapshots": "the autoscaler deletes instances after max_use_count jobs",
}

// ParseFleet reads the qemu autoscaler plugin's plugin_config m: the keys
// of [runners.qemu] that describe a VM (base_name, base_snapshot,
// base_folder, boot_timeout, memory, cpus, accel, kernel, initrd, append),
// with relative paths taken from dir (config.toml's directory), and
// checks them as [runners.qemu]'s are. Messages name section+"."+key;
// QEMU missing is reported at toolKey. base_folder defaults to
// dir/qemu-fleet. SSH is the autoscaler's connector_config.
func ParseFleet(ctx context.Context, rd *config.RawReader, section, toolKey, dir string, m map[string]any, lookPath func(string) (string, error)) Config {
	if lookPath == nil {
		lookPath = exec.LookPath
	}
	rel := func(p string) string {
		if p == "" || filepath.IsAbs(p) {
			return p
		}
		return filepath.Join(dir, p)
	}
	c := Config{VM: vm.Config{Executor: Name, Section: section}}
	for _, k := range config.SortedKeys(m) {
		key := section + "." + k
		if why, ok := fleetOnly[k]; ok {
			rd.Warn(key, "ignored by the qemu autoscaler plugin: %s", why)
			continue
		}
		if !parseCommonKey(rd, key, k, m[k], &c, rel) {
			rd.Warn(key, "unknown key, ignored (known: accel, append, base_folder, base_name, base_snapshot, boot_timeout, cpus, initrd, kernel, memory)")
		}
	}
	if c.BaseFolder == "" {
		c.BaseFolder = filepath.Join(dir, "qemu-fleet")
	}
	c.check(ctx, rd, section, toolKey, false, lookPath)
	return c
}

// Fleet returns the autoscaler's provider of c's VMs, holding at most
// maxSize (0: no limit of its own).
func (c Config) Fleet(maxSize int, logger *slog.Logger) *vm.Fleet {
	return &vm.Fleet{
		HV: hypervisorOf(c), Base: c.VM.BaseName, Snapshot: c.VM.BaseSnapshot,
		BootTimeout: c.VM.BootTimeout, MaxSize: maxSize, Logger: logger,
	}
}
