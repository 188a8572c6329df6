package main

import (
	"fmt"
	"io"

	"github.com/drover-ci/drover/internal/config"
)

// qemuFlags are the --qemu-* flags of register, spelled as gitlab-runner
// spells its --virtualbox-* flags, for [runners.qemu].
func qemuFlags() []dockerFlag {
	return []dockerFlag{
		{"qemu-base-name", "base_name", "QEMU_BASE_NAME", kindString, "qcow2 or raw image the job VMs are cloned from (with --qemu-allowed-images: or a directory of images) (required with --executor qemu)"},
		{"qemu-base-snapshot", "base_snapshot", "QEMU_BASE_SNAPSHOT", kindString, "saved running state in the base to start VMs from instead of booting (drover vm snapshot makes one)"},
		{"qemu-base-folder", "base_folder", "QEMU_BASE_FOLDER", kindString, "directory of the VMs (default: qemu next to config.toml)"},
		{"qemu-disable-snapshots", "disable_snapshots", "QEMU_DISABLE_SNAPSHOTS", kindBool, "a fresh clone per job, deleted after it (default: one VM per slot, reverted before each job)"},
		{"qemu-allowed-images", "allowed_images", "QEMU_ALLOWED_IMAGES", kindList, "regular expression of the images: a job may name"},
		{"qemu-memory", "memory", "QEMU_MEMORY", kindInt, "guest memory in MiB (default 512)"},
		{"qemu-cpus", "cpus", "QEMU_CPUS", kindInt, "virtual CPUs (default 1)"},
		{"qemu-accel", "accel", "QEMU_ACCEL", kindString, "auto (kvm when usable, else tcg), kvm or tcg"},
		{"qemu-kernel", "kernel", "QEMU_KERNEL", kindString, "kernel to boot directly (else the disk's boot loader)"},
		{"qemu-initrd", "initrd", "QEMU_INITRD", kindString, "initrd of --qemu-kernel"},
		{"qemu-append", "append", "QEMU_APPEND", kindString, "kernel command line of --qemu-kernel"},
		{"qemu-boot-timeout", "boot_timeout", "QEMU_BOOT_TIMEOUT", kindString, "how long a VM may take to answer SSH (default 5m)"},
	}
}

// qemuNotes says what a registered qemu runner still needs.
func qemuNotes(out io.Writer, rc *config.RunnerConfig) {
	if rc.Qemu["base_name"] == nil {
		fmt.Fprintf(out, "Executor %q needs base_name in the [runners.qemu] table of this runner before drover run (--qemu-base-name; drover vm image build makes a base image).\n", rc.Executor)
	}
	if rc.SSH["user"] == nil || (rc.SSH["identity_file"] == nil && rc.SSH["password"] == nil) {
		fmt.Fprintf(out, "Executor %q needs user and identity_file (or password) in the [runners.ssh] table: how to log into the guests (--ssh-user, --ssh-identity-file).\n", rc.Executor)
	}
}
