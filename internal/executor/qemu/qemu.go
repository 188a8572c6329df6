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
	"errors"
	"fmt"
	"sync"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/config"
	"github.com/drover-ci/drover/internal/executor"
	"github.com/drover-ci/drover/internal/executor/instance"
	"github.com/drover-ci/drover/internal/executor/vm"
	"github.com/drover-ci/drover/internal/sshx"
	qemuvm "github.com/drover-ci/drover/internal/vm/qemu"
)

// Name is the executor's name in config.toml.
const Name = "qemu"

// ErrUnknownRunner is returned (wrapped) by Lookup for a runner without
// [runners.qemu].
var ErrUnknownRunner = errors.New("no [runners.qemu] for this runner")

// Runners holds the qemu runners, kept in step with config.toml by Apply;
// Lookup is the provider's runner lookup. HostKeys keeps the first host
// key each base's guests present (set its Path to keep it across
// restarts). Safe for concurrent use.
type Runners struct {
	HostKeys *sshx.TOFU
	// LookPath finds the tools (nil: exec.LookPath); tests replace it.
	LookPath func(string) (string, error)

	mu sync.RWMutex
	m  map[string]instance.Runner
}

// Apply parses the [runners.qemu] of every qemu runner of cfg (read
// from file) and, when all are right, makes them the table's. It returns
// the warnings and the first error (a *config.Error naming file, line and
// key).
func (rs *Runners) Apply(ctx context.Context, file string, cfg *config.Config) ([]config.Warning, error) {
	m := map[string]instance.Runner{}
	var warns []config.Warning
	for i := range cfg.Runners {
		r := &cfg.Runners[i]
		if r.Executor != Name {
			continue
		}
		c, w, err := ParseConfig(ctx, file, r, rs.LookPath)
		warns = append(warns, w...)
		if err != nil {
			return warns, err
		}
		token := api.ShortToken(r.Token)
		m[token] = rs.runner(c, token)
	}
	rs.mu.Lock()
	rs.m = m
	rs.mu.Unlock()
	return warns, nil
}

// runner is the instance runner of c's VMs.
func (rs *Runners) runner(c Config, shortToken string) instance.Runner {
	hv := &Hypervisor{
		Folder: c.BaseFolder, Binary: c.Binary, Images: qemuvm.Images{QemuImg: c.QemuImg},
		Machine: c.Machine, BaseName: c.VM.BaseName,
	}
	hk := rs.HostKeys
	if hk == nil {
		hk = &sshx.TOFU{}
	}
	return vm.NewSlots(hv, c.VM, vm.Options{ShortToken: shortToken, HostKeys: hk}).Runner()
}

// Lookup returns the runner of s, by its ShortToken.
func (rs *Runners) Lookup(s executor.Settings) (instance.Runner, error) {
	rs.mu.RLock()
	defer rs.mu.RUnlock()
	r, ok := rs.m[s.ShortToken]
	if !ok {
		return instance.Runner{}, fmt.Errorf("%w: %s", ErrUnknownRunner, s.ShortToken)
	}
	return r, nil
}

// Provider is the qemu executor's provider: the instance executor's over
// the runners' VM slots.
type Provider struct {
	*instance.Provider
}

// NewProvider returns the qemu executor's provider over rs.
func NewProvider(rs *Runners) *Provider {
	p, err := instance.NewProvider(instance.Options{Lookup: rs.Lookup, HostKeys: rs.HostKeys})
	if err != nil {
		panic(err) // only for a nil Lookup
	}
	return &Provider{p}
}

// Features are the instance executor's, but a job's VM is not shared (it
// is reverted or deleted after the job), and a job's image: is taken:
// with allowed_images it names the job's base image.
func (p *Provider) Features(f *api.FeaturesInfo) {
	p.Provider.Features(f)
	f.Shared = false
	f.Image = true
}
