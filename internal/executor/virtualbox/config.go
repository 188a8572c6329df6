package virtualbox

import (
	"context"
	"os/exec"
	"path/filepath"
	"slices"

	"github.com/drover-ci/drover/internal/config"
	"github.com/drover-ci/drover/internal/executor/vm"
)

// Name is the executor's name in config.toml.
const Name = "virtualbox"

// startTypes are the values of startvm --type.
var startTypes = []string{"gui", "headless", "sdl", "separate"}

// Config is [runners.virtualbox] (with [runners.ssh]) of one runner.
type Config struct {
	// VM is what the slot logic needs (base_name, disable_snapshots,
	// allowed_images, boot_timeout, [runners.ssh]).
	VM vm.Config
	// BaseSnapshot, BaseFolder and StartType are base_snapshot,
	// base_folder and start_type.
	BaseSnapshot, BaseFolder, StartType string
	// VBoxManage is the VBoxManage binary found on PATH.
	VBoxManage string
}

// ParseConfig reads the [runners.virtualbox] and [runners.ssh] of r
// (from file), reporting problems at their file, line and key; unknown
// keys are warnings. VBoxManage must be on PATH (lookPath, nil =
// exec.LookPath). Whether the base VM exists is a job's business: jobs
// may name other bases (allowed_images), and VirtualBox may be set up
// after the runner.
func ParseConfig(file string, r *config.RunnerConfig, lookPath func(string) (string, error)) (Config, []config.Warning, error) {
	if lookPath == nil {
		lookPath = exec.LookPath
	}
	rd := &config.RawReader{File: file, Lines: r.KeyLine}
	c := Config{VM: vm.Config{Executor: Name, Section: Name, ProjectNames: true}}
	if r.VirtualBox == nil {
		rd.Fail("executor", "executor %q needs a [runners.virtualbox] table with at least base_name", Name)
		return c, nil, rd.Err()
	}
	for _, k := range config.SortedKeys(r.VirtualBox) {
		v, key := r.VirtualBox[k], Name+"."+k
		if c.VM.ParseTableKey(rd, key, k, v) {
			continue
		}
		switch k {
		case "base_snapshot":
			c.BaseSnapshot = rd.Str(key, v)
		case "base_folder":
			c.BaseFolder = rd.Str(key, v)
			if c.BaseFolder != "" && !filepath.IsAbs(c.BaseFolder) {
				c.BaseFolder = filepath.Join(filepath.Dir(file), c.BaseFolder)
			}
		case "start_type":
			c.StartType = rd.Str(key, v)
			if c.StartType != "" && !slices.Contains(startTypes, c.StartType) {
				rd.Fail(key, "want gui, headless, sdl or separate (startvm --type), got %q", c.StartType)
			}
		default:
			rd.Warn(key, "unknown key, ignored (known: allowed_images, base_folder, base_name, base_snapshot, boot_timeout, disable_snapshots, start_type)")
		}
	}
	c.VM.FinishTable(rd, filepath.Dir(file), r.SSH, "the VirtualBox VM that job VMs are cloned from")
	if rd.OK() {
		for _, prog := range []string{Program, "vboxmanage"} {
			if p, err := lookPath(prog); err == nil {
				c.VBoxManage = p
				break
			}
		}
		if c.VBoxManage == "" {
			rd.Fail("executor", "executor %q needs %s, which is not on PATH: install VirtualBox (https://www.virtualbox.org/wiki/Downloads; on Debian and Ubuntu the virtualbox-7.1 package of VirtualBox's apt repository)", Name, Program)
		}
	}
	if !rd.OK() {
		return c, rd.Warnings, rd.Err()
	}
	return c, rd.Warnings, nil
}

// Parse is the executor's vm.ParseFunc: r's Hypervisor and slot Config.
func Parse(_ context.Context, file string, r *config.RunnerConfig) (vm.Hypervisor, vm.Config, []config.Warning, error) {
	c, w, err := ParseConfig(file, r, nil)
	if err != nil {
		return nil, c.VM, w, err
	}
	return c.Hypervisor(), c.VM, w, nil
}

// Hypervisor returns the Hypervisor of c's VMs.
func (c Config) Hypervisor() *Hypervisor {
	return &Hypervisor{
		VBox: NewManage(c.VBoxManage), BaseSnapshot: c.BaseSnapshot, BaseFolder: c.BaseFolder,
		StartType: c.StartType, GuestSSHPort: c.VM.SSH.Port, DisableSnapshots: c.VM.DisableSnapshots,
	}
}

// NewRunners returns the table of the virtualbox runners.
func NewRunners() *vm.Runners {
	return &vm.Runners{Executor: Name, Parse: Parse}
}
