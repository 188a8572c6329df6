package virtualbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/drover-ci/drover/internal/executor/vm"
)

// DefaultBaseSnapshot is the snapshot GitLab Runner takes of a base VM
// that has none, so that job VMs are linked clones of it.
const DefaultBaseSnapshot = "Base State"

// How often, and how many times, a started VM's state is read until it
// runs (GitLab Runner's WaitForStatus: 60 times a second apart).
const (
	statusPollInterval = time.Second
	statusPolls        = 60
)

// Hypervisor is vm.Hypervisor on VirtualBox, with GitLab Runner's
// VBoxManage commands. Job VMs are clones of the base VM (linked to its
// base_snapshot, else its current snapshot, else a "Base State" snapshot
// taken of it), reached over a NAT rule "guestssh" from 127.0.0.1.
type Hypervisor struct {
	// VBox runs VBoxManage.
	VBox Manage
	// BaseSnapshot is base_snapshot: the base's snapshot clones are
	// linked to ("" = its current one).
	BaseSnapshot string
	// BaseFolder is base_folder: where clones' files go ("" =
	// VirtualBox's default machine folder).
	BaseFolder string
	// StartType is start_type (startvm --type; "" = headless).
	StartType string
	// GuestSSHPort is the guest's SSH port (default 22).
	GuestSSHPort int
	// DisableSnapshots is disable_snapshots: a base without snapshots
	// is then fully cloned rather than given a "Base State" snapshot.
	DisableSnapshots bool
	// PollInterval paces the wait for a started VM to run (0 = a
	// second).
	PollInterval time.Duration

	version vm.Version
}

var (
	_ vm.Hypervisor = (*Hypervisor)(nil)
)

// Product is "VirtualBox" with the version VBoxManage last reported.
func (h *Hypervisor) Product() string { return h.version.Product("VirtualBox") }

// Base reads VirtualBox's version (GitLab Runner prints it before each
// job) and checks that the VM name exists.
func (h *Hypervisor) Base(ctx context.Context, name string) (vm.Base, error) {
	v, err := h.VBox.Version(ctx)
	if err != nil {
		return vm.Base{}, err
	}
	h.version.Set(v)
	ok, err := h.VBox.Exists(ctx, name)
	if err != nil {
		return vm.Base{}, err
	}
	if !ok {
		return vm.Base{}, fmt.Errorf("%w: VirtualBox has no VM %q (VBoxManage list vms)", vm.ErrBaseNotFound, name)
	}
	return vm.Base{ID: name, Name: name}, nil
}

// baseSnapshot is the base's snapshot a clone is linked to, as GitLab
// Runner's determineBaseSnapshot picks it: base_snapshot, else the base's
// current snapshot, else "Base State"; one the base lacks is taken now
// (with disable_snapshots the clone is full instead). "" = a full clone.
func (h *Hypervisor) baseSnapshot(ctx context.Context, base string) (string, error) {
	snap := h.BaseSnapshot
	if snap == "" {
		cur, err := h.VBox.CurrentSnapshot(ctx, base)
		switch {
		case err == nil:
			snap = cur
		case ctx.Err() != nil:
			return "", ctx.Err()
		case h.DisableSnapshots:
			return "", nil
		default:
			snap = DefaultBaseSnapshot
		}
	}
	if h.VBox.HasSnapshot(ctx, base, snap) {
		return snap, nil
	}
	if h.DisableSnapshots {
		return "", nil
	}
	if err := h.VBox.TakeSnapshot(ctx, base, snap); err != nil {
		return "", fmt.Errorf("snapshot %q of the base VM %s: %w", snap, base, err)
	}
	return snap, nil
}

// Clone clones the base VM as name, linked to its snapshot (see
// baseSnapshot), and gives it the "guestssh" NAT rule when the clone
// lacks one. The snapshot argument is the core's saved-state start,
// which VirtualBox's clones do not use: it must be "".
func (h *Hypervisor) Clone(ctx context.Context, base vm.Base, snapshot, name string) error {
	if snapshot != "" {
		return fmt.Errorf("virtualbox: a clone does not start from a saved state (%q)", snapshot)
	}
	snap, err := h.baseSnapshot(ctx, base.ID)
	if err != nil {
		return err
	}
	if err := h.VBox.Clone(ctx, base.ID, snap, name, h.BaseFolder); err != nil {
		return err
	}
	if _, err := h.VBox.SSHPort(ctx, name); err == nil {
		return nil
	}
	_, err = h.VBox.ConfigureSSH(ctx, name, h.guestSSHPort())
	return err
}

func (h *Hypervisor) guestSSHPort() int {
	if h.GuestSSHPort > 0 {
		return h.GuestSSHPort
	}
	return 22
}

// Exists reports whether VirtualBox knows the VM.
func (h *Hypervisor) Exists(ctx context.Context, name string) (bool, error) {
	return h.VBox.Exists(ctx, name)
}

// Running reports whether the VM runs (or is on its way to or from
// running).
func (h *Hypervisor) Running(ctx context.Context, name string) (bool, error) {
	s, err := h.VBox.Status(ctx, name)
	if errors.Is(err, ErrNotFound) {
		return false, nil
	}
	return s.Online(), err
}

// Revert powers the VM off if it runs and restores its current snapshot
// (snapshot restorecurrent, as GitLab Runner does: the current snapshot
// is the one taken once the VM first came up, Started).
func (h *Hypervisor) Revert(ctx context.Context, name, _ string) error {
	if err := h.Stop(ctx, name); err != nil {
		return err
	}
	return h.VBox.RestoreCurrent(ctx, name)
}

// Start starts the VM unless it runs (startvm --type start_type) and
// waits until VirtualBox reports it running.
func (h *Hypervisor) Start(ctx context.Context, name string) error {
	s, err := h.VBox.Status(ctx, name)
	if err != nil {
		return err
	}
	if !s.Online() {
		startType := h.StartType
		if startType == "" {
			startType = "headless"
		}
		if err := h.VBox.Start(ctx, name, startType); err != nil {
			return err
		}
	}
	interval := h.PollInterval
	if interval <= 0 {
		interval = statusPollInterval
	}
	for i := 0; ; i++ {
		if s, err = h.VBox.Status(ctx, name); err != nil {
			return err
		}
		if s == Running {
			return nil
		}
		if i == statusPolls {
			return fmt.Errorf("VM %s is %s where it should be running", name, s)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(interval):
		}
	}
}

// SSHAddr is 127.0.0.1 at the host port of the VM's "guestssh" rule.
func (h *Hypervisor) SSHAddr(ctx context.Context, name string) (string, error) {
	port, err := h.VBox.SSHPort(ctx, name)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("127.0.0.1:%d", port), nil
}

// Snapshot takes a snapshot of the running VM (it becomes the current
// one).
func (h *Hypervisor) Snapshot(ctx context.Context, name, snapshot string) error {
	return h.VBox.TakeSnapshot(ctx, name, snapshot)
}

// Stop powers the VM off (controlvm poweroff) when it runs.
func (h *Hypervisor) Stop(ctx context.Context, name string) error {
	s, err := h.VBox.Status(ctx, name)
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if !s.Online() {
		return nil
	}
	return h.VBox.PowerOff(ctx, name)
}

// Delete powers the VM off and deletes it with its disks (unregistervm
// --delete).
func (h *Hypervisor) Delete(ctx context.Context, name string) error {
	ok, err := h.VBox.Exists(ctx, name)
	if err != nil || !ok {
		return err
	}
	if err := h.Stop(ctx, name); err != nil {
		return err
	}
	return h.VBox.Delete(ctx, name)
}

// List returns the registered VMs whose names start with prefix.
func (h *Hypervisor) List(ctx context.Context, prefix string) ([]string, error) {
	all, err := h.VBox.List(ctx)
	return vm.HasPrefix(all, prefix), err
}
