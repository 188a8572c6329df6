// Package vboxstandin is a stand-in for VBoxManage, which cannot run
// here (no VirtualBox on this machine): the program cmd/VBoxManage,
// which the virtualbox executor's tests put first on PATH, answers
// exactly the VBoxManage commands that executor runs, on QEMU (package
// internal/vm/qemu). It is a test fixture, kept thin: the executor's
// code is what is under test, not this.
//
// # What stands for what
//
//   - The stand-in's home (package standin) is $VBOX_USER_HOME
//     (VirtualBox's own variable for its settings directory); it must be
//     set.
//   - A registered VM is a directory (under --basefolder, else
//     $VBOX_USER_HOME/machines) with its settings, NAT rules, snapshots
//     and qcow2 disk. RegisterBase makes a base VM of a guest image
//     (VirtualBox would import an appliance).
//   - clonevm --options link is a qcow2 overlay of the base's disk (the
//     base never runs, so its disk is its snapshot's); a full clone is a
//     qemu-img convert of it.
//   - modifyvm --natpf1 is the QEMU guest's hostfwd: a real port on
//     127.0.0.1.
//   - startvm is a real QEMU guest (daemonized: it outlives the
//     command); from a "saved" state (an online snapshot restored) it
//     starts with -loadvm.
//   - snapshot take is savevm on a running VM, qemu-img snapshot -c on
//     one that is off; restorecurrent makes the next startvm load the
//     current snapshot (online) or applies it to the disk (offline).
//   - controlvm poweroff is QMP quit; unregistervm --delete removes the
//     directory.
//
// Every invocation is appended to the home's call log (CallLog reads
// it); invocations never interleave.
package vboxstandin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/drover-ci/drover/internal/vm/qemu"
	"github.com/drover-ci/drover/internal/vm/standin"
)

// HomeEnv names the stand-in's home directory.
const HomeEnv = "VBOX_USER_HOME"

// Version is what --version prints.
const Version = "7.1.4r165100"

// settings are a VM's VirtualBox settings besides the common ones: the
// NAT rules of its first network card.
type settings struct {
	Forwards []forward `json:"forwards,omitempty"`
}

type forward struct {
	Name, Proto, HostIP string
	HostPort            int
	GuestIP             string
	GuestPort           int
}

// Main runs VBoxManage args, writing to stdout and stderr, and returns
// the exit code.
func Main(args []string, stdout, stderr io.Writer) int {
	return standin.Main(HomeEnv, "VBoxManage: error: ", args, stderr, func(ctx context.Context, h *standin.Home) (int, error) {
		return 0, (&vbox{h: h, out: stdout}).run(ctx, args)
	})
}

// CallLog returns the invocations recorded in home, oldest first.
func CallLog(home string) ([][]string, error) { return standin.CallLog(home) }

// RegisterBase registers the powered off VM name in home, its disk a
// qcow2 overlay of image (which stays untouched) and its hardware m.
func RegisterBase(ctx context.Context, home, name, image string, m qemu.Machine) error {
	return standin.RegisterBaseIn(ctx, home, name, image, m, nil)
}

// PowerOffAll kills the QEMU of every VM registered in home: a test's
// cleanup.
func PowerOffAll(ctx context.Context, home string) error { return standin.KillAll(ctx, home) }

type vbox struct {
	h   *standin.Home
	out io.Writer
}

func (s *vbox) run(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return errors.New("no command (the stand-in answers: --version, showvminfo, list vms, snapshot, clonevm, modifyvm, startvm, controlvm poweroff, unregistervm)")
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "--version":
		fmt.Fprintln(s.out, Version)
		return nil
	case "list":
		return s.list(rest)
	}
	if len(rest) == 0 {
		return fmt.Errorf("%s: no VM named", cmd)
	}
	name, opts := rest[0], rest[1:]
	if cmd == "clonevm" {
		return s.clone(ctx, name, opts)
	}
	vm, err := s.load(name)
	if err != nil {
		return err
	}
	switch cmd {
	case "showvminfo":
		if slices.Contains(opts, "--machinereadable") {
			s.machineReadable(vm)
		} else {
			s.human(vm)
		}
		return nil
	case "snapshot":
		return s.snapshot(ctx, vm, opts)
	case "modifyvm":
		return s.modify(vm, opts)
	case "startvm":
		return s.start(ctx, vm)
	case "controlvm":
		if len(opts) != 1 || opts[0] != "poweroff" {
			return fmt.Errorf("controlvm %v: the stand-in answers controlvm <vm> poweroff only", opts)
		}
		if !vm.Running() {
			return vboxError("Machine '%s' is not currently running", vm.Name)
		}
		if err := vm.PowerOff(ctx); err != nil {
			return err
		}
		fmt.Fprintln(s.out, "0%...10%...20%...30%...40%...50%...60%...70%...80%...90%...100%")
		return nil
	case "unregistervm":
		if vm.Running() {
			return vboxError("Cannot unregister the machine '%s' while it is locked", vm.Name)
		}
		return s.h.Unregister(vm, slices.Contains(opts, "--delete"))
	}
	return fmt.Errorf("%s: a command the stand-in for VBoxManage does not answer", cmd)
}

// load reads the VM name, or fails as VBoxManage does for an unknown
// one.
func (s *vbox) load(name string) (*standin.VM, error) {
	vm, err := s.h.Load(name)
	if errors.Is(err, standin.ErrNoVM) {
		return nil, vboxError("Could not find a registered machine named '%s'\nVBoxManage: error: Details: code VBOX_E_OBJECT_NOT_FOUND (0x80bb0001), component VirtualBoxWrap, interface IVirtualBox, callee nsISupports", name)
	}
	return vm, err
}

func forwards(vm *standin.VM) []forward {
	var st settings
	vm.GetExtra(&st)
	return st.Forwards
}

// vmState is VirtualBox's VMState of the VM.
func vmState(vm *standin.VM) string {
	switch {
	case vm.Running():
		return "running"
	case vm.Aborted():
		return "aborted"
	case vm.Saved:
		return "saved"
	}
	return "poweroff"
}

func (s *vbox) machineReadable(vm *standin.VM) {
	fmt.Fprintf(s.out, "name=%q\nUUID=%q\nmemory=%d\nVMState=%q\n", vm.Name, vm.UUID, vm.Machine.MemoryMiB, vmState(vm))
	for i, f := range forwards(vm) {
		fmt.Fprintf(s.out, "Forwarding(%d)=\"%s,%s,%s,%d,%s,%d\"\n", i, f.Name, f.Proto, f.HostIP, f.HostPort, f.GuestIP, f.GuestPort)
	}
	if cur := vm.CurrentSnapshot(); cur != nil {
		fmt.Fprintf(s.out, "CurrentSnapshotName=%q\nCurrentSnapshotUUID=%q\n", cur.Name, cur.UUID)
	}
}

func (s *vbox) human(vm *standin.VM) {
	fmt.Fprintf(s.out, "Name:                        %s\nUUID:                        %s\nMemory size:                 %dMB\nState:                       %s\n",
		vm.Name, vm.UUID, vm.Machine.MemoryMiB, vmState(vm))
	fmt.Fprintf(s.out, "NIC 1:                       MAC: 080027000001, Attachment: NAT, Cable connected: on\n")
	for i, f := range forwards(vm) {
		fmt.Fprintf(s.out, "NIC 1 Rule(%d):   name = %s, protocol = %s, host ip = %s, host port = %d, guest ip = %s, guest port = %d\n",
			i, f.Name, f.Proto, f.HostIP, f.HostPort, f.GuestIP, f.GuestPort)
	}
}

func (s *vbox) list(opts []string) error {
	if len(opts) == 0 || opts[0] != "vms" {
		return fmt.Errorf("list %v: the stand-in answers list vms [-l] only", opts)
	}
	names, err := s.h.Names()
	if err != nil {
		return err
	}
	long := slices.Contains(opts, "-l") || slices.Contains(opts, "--long")
	for _, name := range names {
		vm, err := s.load(name)
		if err != nil {
			return err
		}
		if long {
			s.human(vm)
			fmt.Fprintln(s.out)
		} else {
			fmt.Fprintf(s.out, "%q {%s}\n", vm.Name, vm.UUID)
		}
	}
	return nil
}

func (s *vbox) snapshot(ctx context.Context, vm *standin.VM, opts []string) error {
	switch {
	case len(opts) >= 2 && opts[0] == "list" && opts[1] == "--machinereadable":
		if len(vm.Snapshots) == 0 {
			fmt.Fprintln(s.out, "This machine does not have any snapshots")
			return vboxError("This machine does not have any snapshots")
		}
		// A chain: each snapshot is the child of the one before.
		suffix := ""
		for i, sn := range vm.Snapshots {
			if i > 0 {
				suffix += "-1"
			}
			fmt.Fprintf(s.out, "SnapshotName%s=%q\nSnapshotUUID%s=%q\n", suffix, sn.Name, suffix, sn.UUID)
		}
		if cur := vm.CurrentSnapshot(); cur != nil {
			fmt.Fprintf(s.out, "CurrentSnapshotName=%q\nCurrentSnapshotUUID=%q\n", cur.Name, cur.UUID)
		}
		return nil
	case len(opts) >= 2 && opts[0] == "take":
		sn, err := vm.TakeSnapshot(ctx, opts[1])
		if err != nil {
			return err
		}
		fmt.Fprintf(s.out, "Snapshot taken. UUID: %s\n", sn.UUID)
		return nil
	case len(opts) == 1 && opts[0] == "restorecurrent":
		if vm.Running() {
			return vboxError("Machine in invalid state 5 -- running\nVBoxManage: error: Details: code VBOX_E_INVALID_VM_STATE (0x80bb0002)")
		}
		cur := vm.CurrentSnapshot()
		if cur == nil {
			return vboxError("This machine does not have any snapshots")
		}
		fmt.Fprintf(s.out, "Restoring snapshot '%s' (%s)\n", cur.Name, cur.UUID)
		return vm.RestoreSnapshot(ctx, cur)
	}
	return fmt.Errorf("snapshot %v: the stand-in answers snapshot <vm> list --machinereadable, take <name>, restorecurrent", opts)
}

// clone is clonevm <base> --mode machine --name <vm> --register
// [--snapshot <snap> --options link] [--basefolder <dir>].
func (s *vbox) clone(ctx context.Context, baseName string, opts []string) error {
	var name, snap, folder string
	var link, register bool
	for i := 0; i < len(opts); i++ {
		arg := func() string {
			if i+1 < len(opts) {
				i++
				return opts[i]
			}
			return ""
		}
		switch opts[i] {
		case "--name":
			name = arg()
		case "--snapshot":
			snap = arg()
		case "--basefolder":
			folder = arg()
		case "--options":
			link = arg() == "link"
		case "--mode":
			if m := arg(); m != "machine" {
				return fmt.Errorf("clonevm --mode %s: the stand-in clones --mode machine only", m)
			}
		case "--register":
			register = true
		default:
			return fmt.Errorf("clonevm %s: an option the stand-in does not answer", opts[i])
		}
	}
	if name == "" || !register {
		return errors.New("clonevm: the stand-in needs --name and --register")
	}
	if link && snap == "" {
		return errors.New("clonevm: linked clones need a snapshot (--snapshot)")
	}
	base, err := s.load(baseName)
	if err != nil {
		return err
	}
	if snap != "" && base.FindSnapshot(snap) == nil {
		return vboxError("Could not find a snapshot named '%s'", snap)
	}
	if _, err := s.h.Clone(ctx, base, name, folder, link); err != nil {
		return err
	}
	fmt.Fprintf(s.out, "0%%...10%%...20%%...30%%...40%%...50%%...60%%...70%%...80%%...90%%...100%%\nMachine has been successfully cloned as \"%s\"\n", name)
	return nil
}

// modify is modifyvm <vm> --natpf1 <name,proto,host ip,host port,guest
// ip,guest port>.
func (s *vbox) modify(vm *standin.VM, opts []string) error {
	if len(opts) != 2 || opts[0] != "--natpf1" {
		return fmt.Errorf("modifyvm %v: the stand-in answers modifyvm <vm> --natpf1 <rule> only", opts)
	}
	if vm.Running() {
		return vboxError("The machine is not mutable (state is Running)")
	}
	p := strings.Split(opts[1], ",")
	if len(p) != 6 {
		return fmt.Errorf("--natpf1 %q: want name,proto,host ip,host port,guest ip,guest port", opts[1])
	}
	hp, err1 := strconv.Atoi(p[3])
	gp, err2 := strconv.Atoi(p[5])
	if err1 != nil || err2 != nil || p[1] != "tcp" {
		return fmt.Errorf("--natpf1 %q: want a tcp rule with numeric ports", opts[1])
	}
	fs := forwards(vm)
	for _, f := range fs {
		if f.Name == p[0] {
			return vboxError("A NAT rule of this name already exists")
		}
	}
	fs = append(fs, forward{Name: p[0], Proto: p[1], HostIP: p[2], HostPort: hp, GuestIP: p[4], GuestPort: gp})
	if err := vm.SetExtra(settings{Forwards: fs}); err != nil {
		return err
	}
	return vm.Save()
}

// start starts the VM's QEMU: its first NAT rule is the forward.
func (s *vbox) start(ctx context.Context, vm *standin.VM) error {
	if vm.Running() {
		return vboxError("The machine '%s' is already locked for a session (or being unlocked)", vm.Name)
	}
	host, hostPort, guestPort := "", 0, 0
	if fs := forwards(vm); len(fs) > 0 {
		if fs[0].HostIP != "" && fs[0].HostIP != "127.0.0.1" {
			return fmt.Errorf("NAT rule %s: the stand-in forwards from 127.0.0.1 only, not %s", fs[0].Name, fs[0].HostIP)
		}
		host, hostPort, guestPort = "127.0.0.1", fs[0].HostPort, fs[0].GuestPort
	}
	fmt.Fprintf(s.out, "Waiting for VM \"%s\" to power on...\n", vm.Name)
	if err := vm.Start(ctx, host, hostPort, guestPort); err != nil {
		return err
	}
	fmt.Fprintf(s.out, "VM \"%s\" has been successfully started.\n", vm.Name)
	return nil
}

// vboxError is an error worded as VirtualBox words it (capitalized).
func vboxError(format string, args ...any) error { return fmt.Errorf(format, args...) }
