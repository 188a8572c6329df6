// Package qemu is the qemu executor (executor = "qemu", drover's own;
// GitLab Runner has none): each job runs in a QEMU virtual machine, over
// SSH.
//
// It is the VM core (package internal/executor/vm: one VM per
// concurrency slot, reverted to its "Started" snapshot before each job,
// or a fresh linked clone per job with disable_snapshots; allowed_images;
// boot timeout and console tail) on a Hypervisor of QEMU processes
// (package internal/vm/qemu), and the instance executor's stages over
// SSH on top.
//
// # Configuration
//
//	[[runners]]
//	  executor = "qemu"
//	  shell = "sh"                    # the busybox guest has no bash
//	  [runners.qemu]
//	    base_name = "/var/lib/drover/images/busybox.qcow2"
//	    base_snapshot = "ready"       # optional: start from a saved state
//	    base_folder = "/var/lib/drover/qemu"   # default <config dir>/qemu
//	    disable_snapshots = false
//	    allowed_images = ["^busybox$", "^debian$"]
//	    memory = 512                  # MiB
//	    cpus = 1
//	    accel = "auto"                # kvm when /dev/kvm is usable, else tcg
//	    kernel = "/var/lib/drover/images/vmlinuz"    # optional direct boot
//	    initrd = "/var/lib/drover/images/initrd.img"
//	    append = "console=ttyS0 root=/dev/vda rw"
//	    boot_timeout = "5m"
//	  [runners.ssh]
//	    user = "root"
//	    identity_file = "/var/lib/drover/images/id_ed25519"
//
// Relative paths are relative to config.toml's directory. base_name is a
// qcow2 or raw image; with allowed_images a job's image: picks an image
// of that name in base_name's directory (or base_name itself when it is a
// directory): <image>, <image>.qcow2, <image>.img or <image>.raw.
//
// # Starting from a saved state
//
// Under emulation (no KVM) a cold boot to SSH takes 10-20 s. A base
// whose qcow2 holds a saved running state (drover vm snapshot makes one)
// named by base_snapshot starts in about a second and a half: the slot's
// VM is then a copy of the base (an overlay does not see the base's saved
// states), started with -loadvm. memory, cpus and the devices must be
// those the state was saved with.
//
// # Files
//
// Each VM is a directory of base_folder named after it: its disk
// (disk.qcow2), drover-vm.json (how to start it) and QEMU's files (QMP
// socket, pid file, console.log). VMs run detached from drover: a
// restarted manager finds them there.
package qemu

import (
	"context"

	"github.com/drover-ci/drover/internal/config"
	"github.com/drover-ci/drover/internal/executor/vm"
	qemuvm "github.com/drover-ci/drover/internal/vm/qemu"
)

// Name is the executor's name in config.toml.
const Name = "qemu"

// NewRunners returns the qemu runners' table: the VM executors' table
// (vm.Runners, kept in step with config.toml by its Apply) reading
// [runners.qemu] with ParseConfig. lookPath finds the tools (nil:
// exec.LookPath); tests replace it. Its provider is vm.NewProvider's.
func NewRunners(lookPath func(string) (string, error)) *vm.Runners {
	return &vm.Runners{Executor: Name, Parse: func(ctx context.Context, file string, r *config.RunnerConfig) (vm.Hypervisor, vm.Config, []config.Warning, error) {
		c, w, err := ParseConfig(ctx, file, r, lookPath)
		if err != nil {
			return nil, vm.Config{}, w, err
		}
		return hypervisorOf(c), c.VM, w, nil
	}}
}

// hypervisorOf is the Hypervisor of c's VMs.
func hypervisorOf(c Config) *Hypervisor {
	return &Hypervisor{
		Folder: c.BaseFolder, Binary: c.Binary, Images: qemuvm.Images{QemuImg: c.QemuImg},
		Machine: c.Machine, BaseName: c.VM.BaseName,
	}
}
