package main

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"time"

	"github.com/spf13/cobra"

	"github.com/drover-ci/drover/internal/executor/qemu"
	"github.com/drover-ci/drover/internal/vm/guestimage"
	qemuvm "github.com/drover-ci/drover/internal/vm/qemu"
)

// newVMSnapshotCmd is drover vm snapshot: a base image's saved running
// state, for the qemu executor's base_snapshot.
func newVMSnapshotCmd() *cobra.Command {
	var o qemu.SnapshotOptions
	var guestDir, output, identity string
	var bootTimeout time.Duration
	cmd := &cobra.Command{
		Use:   "snapshot",
		Short: "Save a base image's running state for the qemu executor's base_snapshot",
		Long: `Boots a qcow2 base image under QEMU, waits until its guest lets the SSH user
in, pauses it and saves its running state in the image (QEMU's savevm) under
--name, then powers it off. A qemu runner with base_snapshot = NAME starts its
VMs from that state (about a second and a half to SSH under emulation)
instead of booting them.

The image is booted itself: with --output it is first copied there and the
copy gets the state (a base made by drover vm image build is read-only: use
--output). The VMs must have the machine the state was saved in: give the
runner the same memory, cpus, kernel, initrd and append as here.

--guest-image takes kernel, initrd, append, user and key from a directory
that drover vm image build made.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if guestDir != "" {
				img, err := guestimage.Load(guestDir)
				if err != nil {
					return usageError(err)
				}
				if o.Base == "" {
					o.Base = img.Disk
				}
				o.Machine.Kernel = cmp.Or(o.Machine.Kernel, img.Kernel)
				o.Machine.Initrd = cmp.Or(o.Machine.Initrd, img.Initrd)
				o.Machine.Append = cmp.Or(o.Machine.Append, img.Append)
				o.SSH.User = cmp.Or(o.SSH.User, img.User)
				identity = cmp.Or(identity, img.IdentityFile)
			}
			if o.Base == "" {
				return usageError(errors.New("--base (or --guest-image) is required"))
			}
			if o.SSH.User == "" {
				o.SSH.User = "root"
			}
			if identity != "" {
				key, err := os.ReadFile(identity)
				if err != nil {
					return usageError(err)
				}
				o.SSH.Key = key
			}
			if len(o.SSH.Key) == 0 && o.SSH.Password == "" {
				return usageError(errors.New("--identity-file or --password is required to tell when the guest is up"))
			}
			if _, err := exec.LookPath(qemuvm.Binary); err != nil {
				return fmt.Errorf("%s is not on PATH: install the %s package (apt-get install %s)", qemuvm.Binary, qemuvm.Package, qemuvm.Package)
			}
			if output != "" {
				if _, err := os.Stat(output); err == nil {
					return usageError(fmt.Errorf("--output %s exists: remove it first", output))
				}
				fmt.Fprintf(cmd.OutOrStdout(), "Copying %s to %s...\n", o.Base, output)
				if err := (qemuvm.Images{}).Copy(cmd.Context(), o.Base, output); err != nil {
					return err
				}
				if err := os.Chmod(output, 0o644); err != nil {
					return err
				}
				o.Base = output
			}
			o.BootTimeout = bootTimeout
			o.Progress = cmd.OutOrStdout()
			if _, err := qemu.SnapshotBase(cmd.Context(), o); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "\nIn config.toml:\n  [runners.qemu]\n    base_name = %q\n    base_snapshot = %q\n    memory = %d\n    cpus = %d\n",
				o.Base, cmp.Or(o.Name, qemu.DefaultSnapshotName), o.Machine.MemoryMiB, o.Machine.CPUs)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Base, "base", "", "qcow2 base image to save the state in (or to copy, with --output)")
	f.StringVar(&guestDir, "guest-image", "", "directory of a guest image made by drover vm image build (its disk is the default --base)")
	f.StringVar(&output, "output", "", "copy the base here first and save the state in the copy")
	f.StringVar(&o.Name, "name", qemu.DefaultSnapshotName, "name of the saved state (the runner's base_snapshot)")
	f.IntVar(&o.Machine.MemoryMiB, "memory", 512, "guest memory in MiB (the runner's memory)")
	f.IntVar(&o.Machine.CPUs, "cpus", 1, "virtual CPUs (the runner's cpus)")
	f.StringVar(&o.Machine.Accel, "accel", "auto", "auto, kvm or tcg")
	f.StringVar(&o.Machine.Kernel, "kernel", "", "kernel to boot directly (the runner's kernel)")
	f.StringVar(&o.Machine.Initrd, "initrd", "", "its initrd (the runner's initrd)")
	f.StringVar(&o.Machine.Append, "append", "", "its command line (the runner's append)")
	f.IntVar(&o.Machine.GuestSSHPort, "port", 22, "the guest's SSH port")
	f.StringVar(&o.SSH.User, "user", "", "SSH user (default root)")
	f.StringVar(&identity, "identity-file", "", "SSH private key of that user")
	f.StringVar(&o.SSH.Password, "password", "", "SSH password of that user")
	f.DurationVar(&bootTimeout, "boot-timeout", 0, "how long the guest may take to answer SSH (default 5m)")
	return cmd
}
