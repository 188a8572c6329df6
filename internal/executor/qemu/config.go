package qemu

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/drover-ci/drover/internal/config"
	"github.com/drover-ci/drover/internal/executor/vm"
	qemuvm "github.com/drover-ci/drover/internal/vm/qemu"
)

// Config is [runners.qemu] (with [runners.ssh]) of one runner.
type Config struct {
	// VM is what the slot logic needs (base_name, base_snapshot,
	// disable_snapshots, allowed_images, boot_timeout, [runners.ssh]).
	VM vm.Config
	// BaseFolder holds the VMs' directories (default: <config dir>/qemu).
	BaseFolder string
	// Machine is the VMs' hardware and boot: memory (MiB, default 512),
	// cpus (default 1), accel (auto, kvm, tcg), kernel, initrd, append.
	Machine qemuvm.Machine
	// Binary is the QEMU binary found on PATH, QemuImg qemu-img.
	Binary, QemuImg string
}

// The tools the executor needs and the Debian packages that have them.
var tools = []struct{ bin, pkg string }{
	{qemuvm.Binary, qemuvm.Package},
	{"qemu-img", "qemu-utils"},
}

// ParseConfig reads the [runners.qemu] and [runners.ssh] of r (from
// file), reporting problems at their file, line and key. Relative paths
// are relative to the directory of file. It checks what a job would
// otherwise find out late: QEMU and qemu-img on PATH, base_name an
// existing qcow2 or raw image (or, with allowed_images, a directory),
// base_snapshot a saved running state in it, kernel and initrd readable.
func ParseConfig(ctx context.Context, file string, r *config.RunnerConfig, lookPath func(string) (string, error)) (Config, []config.Warning, error) {
	if lookPath == nil {
		lookPath = exec.LookPath
	}
	rd := &config.RawReader{File: file, Lines: r.KeyLine}
	dir := filepath.Dir(file)
	rel := func(p string) string {
		if p == "" || filepath.IsAbs(p) {
			return p
		}
		return filepath.Join(dir, p)
	}
	c := Config{VM: vm.Config{Executor: Name, Section: "qemu"}}
	if r.Qemu == nil {
		rd.Fail("executor", "executor %q needs a [runners.qemu] table with at least base_name", Name)
		return c, nil, rd.Err()
	}
	var allowedSet bool
	for _, k := range config.SortedKeys(r.Qemu) {
		v, key := r.Qemu[k], "qemu."+k
		switch k {
		case "disable_snapshots":
			c.VM.DisableSnapshots = rd.Bool(key, v)
		case "allowed_images":
			c.VM.AllowedImages = vm.ParseAllowedImages(rd, key, v)
			allowedSet = true
		default:
			if parseCommonKey(rd, key, k, v, &c, rel) {
				continue
			}
			rd.Warn(key, "unknown key, ignored (known: accel, allowed_images, append, base_folder, base_name, base_snapshot, boot_timeout, cpus, disable_snapshots, initrd, kernel, memory)")
		}
	}
	vm.ParseSSH(rd, Name, dir, r.SSH, &c.VM)
	c.Machine.GuestSSHPort = c.VM.SSH.Port
	if c.BaseFolder == "" {
		c.BaseFolder = filepath.Join(dir, "qemu")
	}
	c.check(ctx, rd, "qemu", "executor", allowedSet, lookPath)
	if !rd.OK() {
		return c, rd.Warnings, rd.Err()
	}
	return c, rd.Warnings, nil
}

// parseCommonKey reads key k (value v, named key in messages) of the keys
// [runners.qemu] shares with the qemu autoscaler plugin's plugin_config
// into c, and reports whether k is one of them.
func parseCommonKey(rd *config.RawReader, key, k string, v any, c *Config, rel func(string) string) bool {
	switch k {
	case "base_name":
		c.VM.BaseName = rel(rd.Str(key, v))
	case "base_snapshot":
		c.VM.BaseSnapshot = rd.Str(key, v)
		if c.VM.BaseSnapshot != "" {
			if err := qemuvm.CheckSnapshotName(c.VM.BaseSnapshot); err != nil {
				rd.Fail(key, "%v", err)
			}
		}
	case "base_folder":
		c.BaseFolder = rel(rd.Str(key, v))
	case "boot_timeout":
		c.VM.BootTimeout = vm.ParseDuration(rd, key, v)
	case "memory":
		if c.Machine.MemoryMiB = rd.Count(key, v); c.Machine.MemoryMiB == 0 && rd.OK() {
			rd.Fail(key, "want the guest's memory in MiB (at least 64), got 0")
		} else if c.Machine.MemoryMiB > 0 && c.Machine.MemoryMiB < 64 {
			rd.Fail(key, "want the guest's memory in MiB (at least 64), got %d", c.Machine.MemoryMiB)
		}
	case "cpus":
		if c.Machine.CPUs = rd.Count(key, v); c.Machine.CPUs == 0 && rd.OK() {
			rd.Fail(key, "want at least 1 CPU")
		}
	case "accel":
		c.Machine.Accel = rd.Str(key, v)
		if _, err := qemuvm.ResolveAccel(c.Machine.Accel); err != nil {
			rd.Fail(key, "want auto, kvm or tcg, got %q", c.Machine.Accel)
		}
	case "kernel":
		c.Machine.Kernel = rel(rd.Str(key, v))
	case "initrd":
		c.Machine.Initrd = rel(rd.Str(key, v))
	case "append":
		c.Machine.Append = rd.Str(key, v)
	default:
		return false
	}
	return true
}

// check checks what the keys named (base_name given and an image, its
// saved state, kernel and initrd readable, QEMU and qemu-img on PATH);
// section is where the keys are in config.toml ("qemu", or the autoscaler
// plugin's "autoscaler.plugin_config"), toolKey the key a missing QEMU is
// reported at.
func (c *Config) check(ctx context.Context, rd *config.RawReader, section, toolKey string, allowed bool, lookPath func(string) (string, error)) {
	who := fmt.Sprintf("executor %q", Name)
	if section != "qemu" {
		who = "the qemu autoscaler plugin"
	}
	if rd.OK() && c.VM.BaseName == "" {
		rd.Fail(section, "base_name is required: the qcow2 or raw image VMs are cloned from (or with allowed_images a directory of them)")
	}
	if rd.OK() {
		for _, t := range tools {
			p, err := lookPath(t.bin)
			if err != nil {
				rd.Fail(toolKey, "%s needs %s, which is not on PATH: install the %s package (apt-get install %s)", who, t.bin, t.pkg, t.pkg)
				break
			}
			if t.bin == qemuvm.Binary {
				c.Binary = p
			} else {
				c.QemuImg = p
			}
		}
	}
	if rd.OK() {
		checkBase(ctx, rd, c, section, allowed)
	}
	if rd.OK() {
		for key, p := range map[string]string{section + ".kernel": c.Machine.Kernel, section + ".initrd": c.Machine.Initrd} {
			if p == "" {
				continue
			}
			if f, err := os.Open(p); err != nil {
				rd.Fail(key, "%v", err)
			} else {
				f.Close()
			}
		}
	}
	if rd.OK() && c.Machine.Accel == "kvm" {
		if a, _ := qemuvm.ResolveAccel("auto"); a != "kvm" {
			rd.Warn(section+".accel", "kvm asked for, but /dev/kvm is not usable here (or the CPU lacks vmx/svm): QEMU will refuse to start VMs")
		}
	}
}

// checkBase checks base_name (and base_snapshot in it).
func checkBase(ctx context.Context, rd *config.RawReader, c *Config, section string, allowed bool) {
	fi, err := os.Stat(c.VM.BaseName)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		rd.Fail(section+".base_name", "%s does not exist: make a base image (drover vm image build, see docs/vm.md)", c.VM.BaseName)
		return
	case err != nil:
		rd.Fail(section+".base_name", "%v", err)
		return
	case fi.IsDir() && !allowed:
		rd.Fail(section+".base_name", "%s is a directory: base_name is an image, or with allowed_images a directory of images", c.VM.BaseName)
		return
	case fi.IsDir():
		if c.VM.BaseSnapshot != "" {
			rd.Warn(section+".base_snapshot", "every image a job names must have the saved state %q", c.VM.BaseSnapshot)
		}
		return
	}
	tctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	info, err := qemuvm.Images{QemuImg: c.QemuImg}.CheckBase(tctx, c.VM.BaseName)
	if err != nil {
		rd.Fail(section+".base_name", "%v", err)
		return
	}
	if c.VM.BaseSnapshot != "" && !info.HasSnapshot(c.VM.BaseSnapshot, true) {
		rd.Fail(section+".base_snapshot", "%s has no saved running state %q: make one with drover vm snapshot --base %s --name %s", c.VM.BaseName, c.VM.BaseSnapshot, c.VM.BaseName, c.VM.BaseSnapshot)
	}
}
