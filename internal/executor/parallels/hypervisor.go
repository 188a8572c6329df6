package parallels

import (
	"context"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/drover-ci/drover/internal/executor/vm"
)

// DefaultTimeServer is the guests' time server (GitLab Runner's).
const DefaultTimeServer = "time.apple.com"

// How often and how many times prlctl is asked while a VM comes up, as
// GitLab Runner asks: its state until it runs (60 times), exec exit 0
// until the guest answers (120), its address until leased (120), and a
// time sync until it works (20); a second apart.
const (
	pollInterval = time.Second
	statusPolls  = 60
	execPolls    = 120
	addressPolls = 120
	timePolls    = 20
)

// Hypervisor is vm.Hypervisor on Parallels Desktop, with GitLab Runner's
// prlctl commands. Job VMs are created from a template, a linked clone
// of the base; the guest is reached at the address its MAC address was
// leased in Parallels' DHCP leases, on [runners.ssh]'s port.
type Hypervisor struct {
	// Prl runs prlctl.
	Prl Ctl
	// TemplateName is template_name ("" = <base>-template).
	TemplateName string
	// TimeServer is time_server ("" = DefaultTimeServer).
	TimeServer string
	// SSHPort is the guests' SSH port (default 22).
	SSHPort int
	// LeasesFile is Parallels' DHCP leases ("" = DefaultLeasesFile).
	LeasesFile string
	// PollInterval paces the waits (0 = a second).
	PollInterval time.Duration

	version vm.Version
	mu      sync.Mutex
	// created are the VMs Clone made that have not started yet: their
	// first Start waits until Parallels Tools answer, as GitLab Runner's
	// createVM does.
	created map[string]bool
}

var (
	_ vm.Hypervisor = (*Hypervisor)(nil)
	_ vm.Readier    = (*Hypervisor)(nil)
)

// Product is "Parallels" with the version prlctl last reported.
func (h *Hypervisor) Product() string { return h.version.Product("Parallels") }

// Base reads Parallels' version (GitLab Runner prints it before each
// job) and checks that the VM name exists.
func (h *Hypervisor) Base(ctx context.Context, name string) (vm.Base, error) {
	v, err := h.Prl.Version(ctx)
	if err != nil {
		return vm.Base{}, err
	}
	h.version.Set(v)
	ok, err := h.Prl.Exists(ctx, name)
	if err != nil {
		return vm.Base{}, err
	}
	if !ok {
		return vm.Base{}, fmt.Errorf("%w: Parallels has no VM %q (prlctl list -a)", vm.ErrBaseNotFound, name)
	}
	return vm.Base{ID: name, Name: name}, nil
}

func (h *Hypervisor) interval() time.Duration {
	if h.PollInterval > 0 {
		return h.PollInterval
	}
	return pollInterval
}

// poll calls try up to n times, an interval apart, until it succeeds;
// it returns the last error.
func (h *Hypervisor) poll(ctx context.Context, n int, try func() error) error {
	var err error
	for i := 0; i < n; i++ {
		if i > 0 {
			select {
			case <-ctx.Done():
				return fmt.Errorf("%w (last attempt: %w)", ctx.Err(), err)
			case <-time.After(h.interval()):
			}
		}
		if err = try(); err == nil || ctx.Err() != nil {
			return err
		}
	}
	return err
}

// template is the name of base's template.
func (h *Hypervisor) template(base string) string {
	if h.TemplateName != "" {
		return h.TemplateName
	}
	return base + "-template"
}

// Clone creates the VM name from the base's template (prlctl create
// --ostemplate), making the template first when it does not exist (clone
// --template --linked); an invalid template is unregistered first. The
// snapshot argument is the core's saved-state start, which Parallels'
// VMs do not use: it must be "".
func (h *Hypervisor) Clone(ctx context.Context, base vm.Base, snapshot, name string) error {
	if snapshot != "" {
		return fmt.Errorf("parallels: a VM does not start from a saved state (%q)", snapshot)
	}
	t := h.template(base.ID)
	if s, err := h.Prl.Status(ctx, t); err == nil && s == Invalid {
		h.Prl.Unregister(ctx, t)
	}
	ok, err := h.Prl.Exists(ctx, t)
	if err != nil {
		return err
	}
	if !ok {
		if err := h.Prl.CloneTemplate(ctx, base.ID, t); err != nil {
			return fmt.Errorf("%w (image: %q)", err, base.ID)
		}
	}
	if err := h.Prl.Create(ctx, name, t); err != nil {
		return err
	}
	h.mu.Lock()
	if h.created == nil {
		h.created = map[string]bool{}
	}
	h.created[name] = true
	h.mu.Unlock()
	return nil
}

// Exists reports whether prlctl knows the VM.
func (h *Hypervisor) Exists(ctx context.Context, name string) (bool, error) {
	return h.Prl.Exists(ctx, name)
}

// Running reports whether the VM runs.
func (h *Hypervisor) Running(ctx context.Context, name string) (bool, error) {
	s, err := h.Prl.Status(ctx, name)
	if err != nil {
		return false, err
	}
	return s == Running, nil
}

// Revert stops the VM if it runs and switches it to its current
// snapshot (snapshot-list's *, as GitLab Runner does: the one taken once
// the VM first came up, Started).
func (h *Hypervisor) Revert(ctx context.Context, name, _ string) error {
	if err := h.Stop(ctx, name); err != nil {
		return err
	}
	id, err := h.Prl.DefaultSnapshot(ctx, name)
	if err != nil {
		return err
	}
	return h.Prl.SwitchSnapshot(ctx, name, id)
}

// Start starts the VM when it is stopped or suspended, waits until it
// runs and, the first time after Clone, until Parallels Tools answer in
// the guest (exec exit 0).
func (h *Hypervisor) Start(ctx context.Context, name string) error {
	s, err := h.Prl.Status(ctx, name)
	if err != nil {
		return err
	}
	if s == Stopped || s == Suspended {
		if err := h.Prl.Start(ctx, name); err != nil {
			return err
		}
	}
	err = h.poll(ctx, statusPolls, func() error {
		s, err := h.Prl.Status(ctx, name)
		if err == nil && s != Running {
			err = fmt.Errorf("VM %s is %s where it should be running", name, s)
		}
		return err
	})
	if err != nil {
		return err
	}
	h.mu.Lock()
	created := h.created[name]
	delete(h.created, name)
	h.mu.Unlock()
	if !created {
		return nil
	}
	return h.poll(ctx, execPolls, func() error {
		_, err := h.Prl.Exec(ctx, name, "exit", "0")
		return err
	})
}

// SSHAddr is the address the VM's MAC address was leased (waiting for
// the lease as GitLab Runner does) at the SSH port.
func (h *Hypervisor) SSHAddr(ctx context.Context, name string) (string, error) {
	leases := h.LeasesFile
	if leases == "" {
		leases = DefaultLeasesFile
	}
	mac, err := h.Prl.MAC(ctx, name)
	if err != nil {
		return "", err
	}
	var ip string
	err = h.poll(ctx, addressPolls, func() error {
		ip, err = IPFromLeases(leases, mac)
		return err
	})
	if err != nil {
		return "", err
	}
	port := h.SSHPort
	if port <= 0 {
		port = 22
	}
	return net.JoinHostPort(ip, strconv.Itoa(port)), nil
}

// Snapshot takes a snapshot of the running VM.
func (h *Hypervisor) Snapshot(ctx context.Context, name, snapshot string) error {
	return h.Prl.Snapshot(ctx, name, snapshot)
}

// Stop kills the VM (stop --kill) unless it is stopped.
func (h *Hypervisor) Stop(ctx context.Context, name string) error {
	s, err := h.Prl.Status(ctx, name)
	if err != nil {
		if ok, _ := h.Prl.Exists(ctx, name); !ok {
			return nil
		}
		return err
	}
	if s == Stopped {
		return nil
	}
	return h.Prl.Kill(ctx, name)
}

// Delete stops and deletes the VM.
func (h *Hypervisor) Delete(ctx context.Context, name string) error {
	ok, err := h.Prl.Exists(ctx, name)
	if err != nil || !ok {
		return err
	}
	if err := h.Stop(ctx, name); err != nil {
		return err
	}
	return h.Prl.Delete(ctx, name)
}

// List returns the VMs whose names start with prefix.
func (h *Hypervisor) List(ctx context.Context, prefix string) ([]string, error) {
	all, err := h.Prl.List(ctx)
	return vm.HasPrefix(all, prefix), err
}

// Ready syncs the guest's clock with the time server through Parallels
// Tools, as GitLab Runner does before each job: ntpdate where the guest
// has it (macOS before Mojave, many Unixes), else sntp (later macOS),
// else a warning in the job log.
func (h *Hypervisor) Ready(ctx context.Context, name string, trace io.Writer) error {
	server := h.TimeServer
	if server == "" {
		server = DefaultTimeServer
	}
	for _, sync := range [][]string{{"ntpdate", "-u", server}, {"sntp", "-sS", server}} {
		if _, err := h.Prl.Exec(ctx, name, "which", sync[0]); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			continue
		}
		err := h.poll(ctx, timePolls, func() error {
			_, err := h.Prl.Exec(ctx, name, append([]string{"sudo"}, sync...)...)
			return err
		})
		if err != nil {
			return fmt.Errorf("could not sync the guest's clock with %s: %w", server, err)
		}
		return nil
	}
	fmt.Fprintf(trace, "\033[0;33mWARNING: Neither sntp nor ntpdate are available in a guest VM. Proceeding without time synchronization ...\033[0;m\n")
	return nil
}
