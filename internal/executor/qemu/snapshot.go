package qemu

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/drover-ci/drover/internal/executor/vm"
	"github.com/drover-ci/drover/internal/sshx"
	qemuvm "github.com/drover-ci/drover/internal/vm/qemu"
)

// SnapshotOptions say how to make a base's saved running state.
type SnapshotOptions struct {
	// Base is the qcow2 image to boot and save the state in. It is
	// booted itself (not an overlay): no VM may use it meanwhile.
	Base string
	// Name is the saved state's name (base_snapshot); default "ready".
	Name string
	// Machine is the hardware and boot the executor's VMs will have
	// (memory, cpus, kernel, initrd, append, guest SSH port): a state
	// loads only into the machine it was saved in. Its Disk is Base.
	Machine qemuvm.Machine
	// Binary is the QEMU binary ("" = from PATH).
	Binary string
	// QemuImg is the qemu-img binary ("" = from PATH).
	QemuImg string
	// SSH logs into the guest to tell that it is up (Addr is set here);
	// its HostKey nil accepts any key.
	SSH sshx.Config
	// BootTimeout bounds the boot to SSH (default vm.DefaultBootTimeout).
	BootTimeout time.Duration
	// Progress receives a line per step; nil discards.
	Progress io.Writer
}

// DefaultSnapshotName is the saved state's name when none is given.
const DefaultSnapshotName = "ready"

// SnapshotBase boots the base, waits until its guest lets the SSH user
// in, pauses it and saves its running state in the base as o.Name
// (savevm), then powers it off. VMs of a runner with base_snapshot =
// o.Name then start from that moment instead of booting.
func SnapshotBase(ctx context.Context, o SnapshotOptions) (time.Duration, error) {
	if o.Name == "" {
		o.Name = DefaultSnapshotName
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	if o.BootTimeout <= 0 {
		o.BootTimeout = vm.DefaultBootTimeout
	}
	if err := qemuvm.CheckSnapshotName(o.Name); err != nil {
		return 0, err
	}
	info, err := qemuvm.Images{QemuImg: o.QemuImg}.CheckBase(ctx, o.Base)
	if err != nil {
		return 0, err
	}
	if info.Format != "qcow2" {
		return 0, fmt.Errorf("%s is %s: a saved state needs a qcow2 image (qemu-img convert -O qcow2 %s NEW.qcow2)", o.Base, info.Format, o.Base)
	}
	if info.BackingFile != "" {
		return 0, fmt.Errorf("%s is an overlay of %s: save the state in a standalone image (qemu-img convert -O qcow2 %s NEW.qcow2), as VMs started from it are copies of it", o.Base, info.BackingFile, o.Base)
	}
	dir, err := os.MkdirTemp("", "drover-vm-snapshot-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	m := o.Machine
	m.Disk, m.DiskFormat = o.Base, "qcow2"
	fmt.Fprintf(o.Progress, "Booting %s...\n", o.Base)
	start := time.Now()
	v, err := qemuvm.Start(ctx, filepath.Join(dir, "vm"), m, qemuvm.StartOptions{Name: "drover-vm-snapshot", Binary: o.Binary})
	if err != nil {
		return 0, err
	}
	defer v.Stop(context.WithoutCancel(ctx), 30*time.Second)

	cfg := o.SSH
	cfg.Addr = v.SSHAddr()
	if cfg.HostKey == nil {
		cfg.HostKey = ssh.InsecureIgnoreHostKey()
	}
	fmt.Fprintf(o.Progress, "Waiting for SSH (at most %v)...\n", o.BootTimeout)
	bctx, cancel := context.WithTimeout(ctx, o.BootTimeout)
	defer cancel()
	if err := vm.WaitSSH(bctx, cfg, func() bool { return !v.Running() }, nil); err != nil {
		lines, _ := qemuvm.ConsoleTail(v.Dir, 20)
		for _, l := range lines {
			fmt.Fprintf(o.Progress, "  | %s\n", l)
		}
		return 0, fmt.Errorf("%s: the guest did not come up: %w", o.Base, err)
	}
	boot := time.Since(start)
	fmt.Fprintf(o.Progress, "Guest up after %v; saving its state as %q...\n", boot.Round(10*time.Millisecond), o.Name)
	mon := v.Monitor()
	// Paused first, so that the disk's current state is the saved one.
	if err := mon.Stop(ctx); err != nil {
		return 0, err
	}
	if err := mon.SaveVM(ctx, o.Name); err != nil {
		return 0, err
	}
	if err := v.Stop(ctx, 30*time.Second); err != nil {
		return 0, err
	}
	after, err := qemuvm.Images{QemuImg: o.QemuImg}.Info(ctx, o.Base)
	if err != nil {
		return 0, err
	}
	if !after.HasSnapshot(o.Name, true) {
		return 0, errors.New("savevm said nothing, but the image has no such state")
	}
	fmt.Fprintf(o.Progress, "Saved state %q in %s.\n", o.Name, o.Base)
	return boot, nil
}
