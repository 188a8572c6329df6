package parallels

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/drover-ci/drover/internal/config"
	"github.com/drover-ci/drover/internal/executor/vm"
)

// Name is the executor's name in config.toml.
const Name = "parallels"

// LeasesFileEnv names the environment variable that, when set, replaces
// DefaultLeasesFile: only for tests, whose stand-in for prlctl keeps its
// leases elsewhere. It is not a setting.
const LeasesFileEnv = "DROVER_TEST_PARALLELS_DHCP_LEASES"

// Config is [runners.parallels] (with [runners.ssh]) of one runner.
type Config struct {
	// VM is what the slot logic needs (base_name, disable_snapshots,
	// allowed_images, boot_timeout, [runners.ssh]).
	VM vm.Config
	// TemplateName and TimeServer are template_name and time_server.
	TemplateName, TimeServer string
	// Prlctl is the prlctl binary found on PATH.
	Prlctl string
	// LeasesFile is Parallels' DHCP leases file.
	LeasesFile string
}

// ParseConfig reads the [runners.parallels] and [runners.ssh] of r (from
// file), reporting problems at their file, line and key; unknown keys
// are warnings. prlctl must be on PATH (lookPath, nil = exec.LookPath).
// Whether the base VM exists is a job's business.
func ParseConfig(file string, r *config.RunnerConfig, lookPath func(string) (string, error)) (Config, []config.Warning, error) {
	if lookPath == nil {
		lookPath = exec.LookPath
	}
	rd := &config.RawReader{File: file, Lines: r.KeyLine}
	c := Config{VM: vm.Config{Executor: Name, Section: Name, ProjectNames: true}, LeasesFile: DefaultLeasesFile}
	if f := os.Getenv(LeasesFileEnv); f != "" {
		c.LeasesFile = f
	}
	if r.Parallels == nil {
		rd.Fail("executor", "executor %q needs a [runners.parallels] table with at least base_name", Name)
		return c, nil, rd.Err()
	}
	for _, k := range config.SortedKeys(r.Parallels) {
		v, key := r.Parallels[k], Name+"."+k
		if c.VM.ParseTableKey(rd, key, k, v) {
			continue
		}
		switch k {
		case "template_name":
			c.TemplateName = rd.Str(key, v)
		case "time_server":
			c.TimeServer = rd.Str(key, v)
		default:
			rd.Warn(key, "unknown key, ignored (known: allowed_images, base_name, boot_timeout, disable_snapshots, template_name, time_server)")
		}
	}
	c.VM.FinishTable(rd, filepath.Dir(file), r.SSH, "the Parallels VM that job VMs are cloned from")
	if rd.OK() {
		p, err := lookPath(Program)
		if err != nil {
			rd.Fail("executor", "executor %q needs %s, which is not on PATH: install Parallels Desktop for Mac (Pro or Business edition, which has prlctl: https://www.parallels.com/products/desktop/)", Name, Program)
		}
		c.Prlctl = p
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
		Prl: NewCtl(c.Prlctl), TemplateName: c.TemplateName, TimeServer: c.TimeServer,
		SSHPort: c.VM.SSH.Port, LeasesFile: c.LeasesFile,
	}
}

// NewRunners returns the table of the parallels runners.
func NewRunners() *vm.Runners {
	return &vm.Runners{Executor: Name, Parse: Parse}
}
