// Package vboxstandin is a stand-in for VBoxManage, which cannot run
// here (no VirtualBox on this machine): the program cmd/VBoxManage,
// which the virtualbox executor's tests put first on PATH, answers
// exactly the VBoxManage commands that executor runs, on QEMU (package
// internal/vm/qemu). It is a test fixture, kept thin: the executor's
// code is what is under test, not this.
//
// # What stands for what
//
//   - The stand-in's home is $VBOX_USER_HOME (VirtualBox's own variable
//     for its settings directory); it must be set.
//   - A registered VM is a directory (under --basefolder, else
//     $VBOX_USER_HOME/machines) holding vm.json (its settings, NAT rules
//     and snapshots) and disk.qcow2; $VBOX_USER_HOME/registry.json maps
//     names to directories. RegisterBase makes a base VM of a guest
//     image (VirtualBox would import an appliance).
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
// Every invocation is appended to $VBOX_USER_HOME/calls.log, one JSON
// array of its arguments a line (CallLog reads it). Invocations hold an
// exclusive lock on the home for their whole run, so they never
// interleave.
package vboxstandin

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/drover-ci/drover/internal/vm/qemu"
)

// HomeEnv names the stand-in's home directory.
const HomeEnv = "VBOX_USER_HOME"

// Version is what --version prints.
const Version = "7.1.4r165100"

// Files of the home and of a VM's directory.
const (
	fileCalls    = "calls.log"
	fileRegistry = "registry.json"
	fileLock     = "lock"
	fileVM       = "vm.json"
	fileDisk     = "disk.qcow2"
)

// Machine is a registered VM's vm.json.
type Machine struct {
	Name    string       `json:"name"`
	UUID    string       `json:"uuid"`
	Machine qemu.Machine `json:"machine"`
	// State is the state while QEMU does not run: poweroff or saved.
	State     string     `json:"state"`
	Forwards  []Forward  `json:"forwards,omitempty"`
	Snapshots []Snapshot `json:"snapshots,omitempty"`
	// Current is the UUID of the current snapshot.
	Current string `json:"current,omitempty"`
	// LoadVM is the QEMU tag the next startvm loads ("saved" state).
	LoadVM string `json:"loadvm,omitempty"`
}

// Forward is a NAT rule of the VM's first network card.
type Forward struct {
	Name, Proto, HostIP string
	HostPort            int
	GuestIP             string
	GuestPort           int
}

// Snapshot is a VirtualBox snapshot: Tag is its QEMU internal snapshot.
type Snapshot struct {
	Name   string `json:"name"`
	UUID   string `json:"uuid"`
	Tag    string `json:"tag"`
	Online bool   `json:"online"`
}

// Main runs VBoxManage args, writing to stdout and stderr, and returns
// the exit code.
func Main(args []string, stdout, stderr io.Writer) int {
	home := os.Getenv(HomeEnv)
	if home == "" {
		fmt.Fprintf(stderr, "VBoxManage: error: the stand-in for VBoxManage needs $%s\n", HomeEnv)
		return 1
	}
	unlock, err := lock(home)
	if err != nil {
		fmt.Fprintf(stderr, "VBoxManage: error: %v\n", err)
		return 1
	}
	defer unlock()
	if err := appendCall(home, args); err != nil {
		fmt.Fprintf(stderr, "VBoxManage: error: %v\n", err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	s := &standin{home: home, out: stdout}
	if err := s.run(ctx, args); err != nil {
		fmt.Fprintf(stderr, "VBoxManage: error: %v\n", err)
		return 1
	}
	return 0
}

// lock takes the home's lock (flock), making the home first.
func lock(home string) (func(), error) {
	if err := os.MkdirAll(home, 0o700); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(home, fileLock), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, err
	}
	return func() { f.Close() }, nil
}

func appendCall(home string, args []string) error {
	b, err := json.Marshal(append([]string{}, args...))
	if err != nil {
		return err
	}
	f, err := os.OpenFile(filepath.Join(home, fileCalls), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = f.Write(append(b, '\n'))
	return err
}

// CallLog returns the invocations recorded in home, oldest first.
func CallLog(home string) ([][]string, error) {
	f, err := os.Open(filepath.Join(home, fileCalls))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var calls [][]string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var c []string
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			return nil, err
		}
		calls = append(calls, c)
	}
	return calls, sc.Err()
}

// RegisterBase registers the powered off VM name in home, its disk a
// qcow2 overlay of image (which stays untouched) and its hardware m (Disk
// is set here).
func RegisterBase(ctx context.Context, home, name, image string, m qemu.Machine) error {
	unlock, err := lock(home)
	if err != nil {
		return err
	}
	defer unlock()
	s := &standin{home: home}
	dir := filepath.Join(home, "machines", name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	disk := filepath.Join(dir, fileDisk)
	if err := (qemu.Images{}).CreateOverlay(ctx, image, "qcow2", disk); err != nil {
		return err
	}
	m.Disk, m.DiskFormat = disk, "qcow2"
	vm := &Machine{Name: name, UUID: newUUID(), Machine: m, State: "poweroff"}
	if err := writeMachine(dir, vm); err != nil {
		return err
	}
	return s.register(name, dir)
}

type standin struct {
	home string
	out  io.Writer
}

func (s *standin) run(ctx context.Context, args []string) error {
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
	switch cmd {
	case "clonevm":
		return s.clone(ctx, name, opts)
	}
	vm, dir, err := s.load(name)
	if err != nil {
		return err
	}
	switch cmd {
	case "showvminfo":
		if slices.Contains(opts, "--machinereadable") {
			s.machineReadable(vm, dir)
		} else {
			s.human(vm, dir)
		}
		return nil
	case "snapshot":
		return s.snapshot(ctx, vm, dir, opts)
	case "modifyvm":
		return s.modify(vm, dir, opts)
	case "startvm":
		return s.start(ctx, vm, dir)
	case "controlvm":
		if len(opts) != 1 || opts[0] != "poweroff" {
			return fmt.Errorf("controlvm %v: the stand-in answers controlvm <vm> poweroff only", opts)
		}
		return s.powerOff(ctx, vm, dir)
	case "unregistervm":
		return s.unregister(vm, dir, slices.Contains(opts, "--delete"))
	}
	return fmt.Errorf("%s: a command the stand-in for VBoxManage does not answer", cmd)
}

// registry maps VM names to directories.
func (s *standin) registry() (map[string]string, error) {
	reg := map[string]string{}
	b, err := os.ReadFile(filepath.Join(s.home, fileRegistry))
	if errors.Is(err, fs.ErrNotExist) {
		return reg, nil
	}
	if err != nil {
		return nil, err
	}
	return reg, json.Unmarshal(b, &reg)
}

func (s *standin) saveRegistry(reg map[string]string) error {
	b, err := json.MarshalIndent(reg, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(s.home, fileRegistry), b, 0o600)
}

func (s *standin) register(name, dir string) error {
	reg, err := s.registry()
	if err != nil {
		return err
	}
	reg[name] = dir
	return s.saveRegistry(reg)
}

// load reads the registered VM name, or fails as VBoxManage does for an
// unknown one.
func (s *standin) load(name string) (*Machine, string, error) {
	reg, err := s.registry()
	if err != nil {
		return nil, "", err
	}
	dir, ok := reg[name]
	if !ok {
		return nil, "", vboxError("Could not find a registered machine named '%s'\nVBoxManage: error: Details: code VBOX_E_OBJECT_NOT_FOUND (0x80bb0001), component VirtualBoxWrap, interface IVirtualBox, callee nsISupports", name)
	}
	b, err := os.ReadFile(filepath.Join(dir, fileVM))
	if err != nil {
		return nil, "", err
	}
	var vm Machine
	return &vm, dir, json.Unmarshal(b, &vm)
}

func writeMachine(dir string, vm *Machine) error {
	b, err := json.MarshalIndent(vm, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, fileVM+".tmp")
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, fileVM))
}

// state is VirtualBox's VMState of the VM: running while its QEMU runs,
// aborted when QEMU ended without a poweroff.
func state(vm *Machine, dir string) string {
	info, err := qemu.Inspect(dir)
	switch {
	case err == nil && info.Running:
		return "running"
	case vm.State == "running":
		return "aborted"
	}
	return vm.State
}

func (s *standin) machineReadable(vm *Machine, dir string) {
	fmt.Fprintf(s.out, "name=%q\nUUID=%q\nmemory=%d\nVMState=%q\n", vm.Name, vm.UUID, vm.Machine.MemoryMiB, state(vm, dir))
	for i, f := range vm.Forwards {
		fmt.Fprintf(s.out, "Forwarding(%d)=\"%s,%s,%s,%d,%s,%d\"\n", i, f.Name, f.Proto, f.HostIP, f.HostPort, f.GuestIP, f.GuestPort)
	}
	if cur := vm.current(); cur != nil {
		fmt.Fprintf(s.out, "CurrentSnapshotName=%q\nCurrentSnapshotUUID=%q\n", cur.Name, cur.UUID)
	}
}

func (s *standin) human(vm *Machine, dir string) {
	fmt.Fprintf(s.out, "Name:                        %s\nUUID:                        %s\nMemory size:                 %dMB\nState:                       %s\n",
		vm.Name, vm.UUID, vm.Machine.MemoryMiB, state(vm, dir))
	fmt.Fprintf(s.out, "NIC 1:                       MAC: 080027000001, Attachment: NAT, Cable connected: on\n")
	for i, f := range vm.Forwards {
		fmt.Fprintf(s.out, "NIC 1 Rule(%d):   name = %s, protocol = %s, host ip = %s, host port = %d, guest ip = %s, guest port = %d\n",
			i, f.Name, f.Proto, f.HostIP, f.HostPort, f.GuestIP, f.GuestPort)
	}
}

func (s *standin) list(opts []string) error {
	if len(opts) == 0 || opts[0] != "vms" {
		return fmt.Errorf("list %v: the stand-in answers list vms [-l] only", opts)
	}
	reg, err := s.registry()
	if err != nil {
		return err
	}
	long := slices.Contains(opts, "-l") || slices.Contains(opts, "--long")
	for _, name := range slices.Sorted(maps.Keys(reg)) {
		vm, dir, err := s.load(name)
		if err != nil {
			return err
		}
		if long {
			s.human(vm, dir)
			fmt.Fprintln(s.out)
		} else {
			fmt.Fprintf(s.out, "%q {%s}\n", vm.Name, vm.UUID)
		}
	}
	return nil
}

func (vm *Machine) current() *Snapshot {
	for i := range vm.Snapshots {
		if vm.Snapshots[i].UUID == vm.Current {
			return &vm.Snapshots[i]
		}
	}
	return nil
}

func (vm *Machine) snapshotNamed(name string) *Snapshot {
	for i := range vm.Snapshots {
		if vm.Snapshots[i].Name == name || vm.Snapshots[i].UUID == name {
			return &vm.Snapshots[i]
		}
	}
	return nil
}

func (s *standin) snapshot(ctx context.Context, vm *Machine, dir string, opts []string) error {
	if len(opts) == 0 {
		return errors.New("snapshot: no subcommand")
	}
	switch {
	case opts[0] == "list" && slices.Contains(opts, "--machinereadable"):
		if len(vm.Snapshots) == 0 {
			fmt.Fprintln(s.out, "This machine does not have any snapshots")
			return vboxError("This machine does not have any snapshots")
		}
		// A chain: each snapshot is the child of the one before.
		node := "SnapshotName"
		for i, sn := range vm.Snapshots {
			if i > 0 {
				node += "-1"
			}
			uuidNode := "SnapshotUUID" + strings.TrimPrefix(node, "SnapshotName")
			fmt.Fprintf(s.out, "%s=%q\n%s=%q\n", node, sn.Name, uuidNode, sn.UUID)
		}
		if cur := vm.current(); cur != nil {
			fmt.Fprintf(s.out, "CurrentSnapshotName=%q\nCurrentSnapshotUUID=%q\n", cur.Name, cur.UUID)
		}
		return nil
	case opts[0] == "take" && len(opts) >= 2:
		return s.take(ctx, vm, dir, opts[1])
	case opts[0] == "restorecurrent":
		return s.restoreCurrent(ctx, vm, dir)
	}
	return fmt.Errorf("snapshot %v: the stand-in answers snapshot <vm> list --machinereadable, take <name>, restorecurrent", opts)
}

// take is savevm on a running VM, qemu-img snapshot -c on one that is
// off.
func (s *standin) take(ctx context.Context, vm *Machine, dir, name string) error {
	sn := Snapshot{Name: name, UUID: newUUID()}
	sn.Tag = "vbox-" + sn.UUID[:8]
	if state(vm, dir) == "running" {
		v, err := qemu.Find(ctx, dir)
		if err != nil {
			return err
		}
		defer v.Close()
		if err := v.Monitor().SaveVM(ctx, sn.Tag); err != nil {
			return err
		}
		sn.Online = true
	} else if out, err := exec.CommandContext(ctx, "qemu-img", "snapshot", "-c", sn.Tag, vm.Machine.Disk).CombinedOutput(); err != nil {
		return fmt.Errorf("qemu-img snapshot: %v: %s", err, out)
	}
	vm.Snapshots = append(vm.Snapshots, sn)
	vm.Current = sn.UUID
	fmt.Fprintf(s.out, "Snapshot taken. UUID: %s\n", sn.UUID)
	return writeMachine(dir, vm)
}

func (s *standin) restoreCurrent(ctx context.Context, vm *Machine, dir string) error {
	if state(vm, dir) == "running" {
		return vboxError("Machine in invalid state 5 -- running\nVBoxManage: error: Details: code VBOX_E_INVALID_VM_STATE (0x80bb0002)")
	}
	cur := vm.current()
	if cur == nil {
		return vboxError("This machine does not have any snapshots")
	}
	if cur.Online {
		vm.State, vm.LoadVM = "saved", cur.Tag
	} else {
		if out, err := exec.CommandContext(ctx, "qemu-img", "snapshot", "-a", cur.Tag, vm.Machine.Disk).CombinedOutput(); err != nil {
			return fmt.Errorf("qemu-img snapshot: %v: %s", err, out)
		}
		vm.State, vm.LoadVM = "poweroff", ""
	}
	fmt.Fprintf(s.out, "Restoring snapshot '%s' (%s)\n0%%...10%%...20%%...30%%...40%%...50%%...60%%...70%%...80%%...90%%...100%%\n", cur.Name, cur.UUID)
	return writeMachine(dir, vm)
}

// clone is clonevm <base> --mode machine --name <vm> --register
// [--snapshot <snap> --options link] [--basefolder <dir>].
func (s *standin) clone(ctx context.Context, baseName string, opts []string) error {
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
	base, _, err := s.load(baseName)
	if err != nil {
		return err
	}
	if snap != "" && base.snapshotNamed(snap) == nil {
		return vboxError("Could not find a snapshot named '%s'", snap)
	}
	if _, _, err := s.load(name); err == nil {
		return vboxError("Machine settings file of '%s' already exists", name)
	}
	if folder == "" {
		folder = filepath.Join(s.home, "machines")
	}
	dir := filepath.Join(folder, name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	disk := filepath.Join(dir, fileDisk)
	if link {
		err = (qemu.Images{}).CreateOverlay(ctx, base.Machine.Disk, "qcow2", disk)
	} else if out, cerr := exec.CommandContext(ctx, "qemu-img", "convert", "-O", "qcow2", base.Machine.Disk, disk).CombinedOutput(); cerr != nil {
		err = fmt.Errorf("qemu-img convert: %v: %s", cerr, out)
	}
	if err != nil {
		os.RemoveAll(dir)
		return err
	}
	m := base.Machine
	m.Disk = disk
	vm := &Machine{Name: name, UUID: newUUID(), Machine: m, State: "poweroff", Forwards: base.Forwards}
	if err := writeMachine(dir, vm); err != nil {
		return err
	}
	fmt.Fprintf(s.out, "0%%...10%%...20%%...30%%...40%%...50%%...60%%...70%%...80%%...90%%...100%%\nMachine has been successfully cloned as \"%s\"\n", name)
	return s.register(name, dir)
}

// modify is modifyvm <vm> --natpf1 <name,proto,host ip,host port,guest
// ip,guest port>.
func (s *standin) modify(vm *Machine, dir string, opts []string) error {
	if len(opts) != 2 || opts[0] != "--natpf1" {
		return fmt.Errorf("modifyvm %v: the stand-in answers modifyvm <vm> --natpf1 <rule> only", opts)
	}
	if state(vm, dir) == "running" {
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
	for _, f := range vm.Forwards {
		if f.Name == p[0] {
			return vboxError("A NAT rule of this name already exists")
		}
	}
	vm.Forwards = append(vm.Forwards, Forward{Name: p[0], Proto: p[1], HostIP: p[2], HostPort: hp, GuestIP: p[4], GuestPort: gp})
	return writeMachine(dir, vm)
}

// start starts the VM's QEMU: its first NAT rule is the hostfwd.
func (s *standin) start(ctx context.Context, vm *Machine, dir string) error {
	if state(vm, dir) == "running" {
		return vboxError("The machine '%s' is already locked for a session (or being unlocked)", vm.Name)
	}
	m := vm.Machine
	o := qemu.StartOptions{Name: vm.Name, LoadVM: vm.LoadVM}
	if len(vm.Forwards) > 0 {
		f := vm.Forwards[0]
		if f.HostIP != "" && f.HostIP != "127.0.0.1" {
			return vboxError("NAT rule %s: the stand-in forwards from 127.0.0.1 only, not %s", f.Name, f.HostIP)
		}
		o.SSHPort, m.GuestSSHPort = f.HostPort, f.GuestPort
	}
	fmt.Fprintf(s.out, "Waiting for VM \"%s\" to power on...\n", vm.Name)
	v, err := qemu.Start(ctx, dir, m, o)
	if err != nil {
		return err
	}
	v.Close()
	vm.State, vm.LoadVM = "running", ""
	fmt.Fprintf(s.out, "VM \"%s\" has been successfully started.\n", vm.Name)
	return writeMachine(dir, vm)
}

func (s *standin) powerOff(ctx context.Context, vm *Machine, dir string) error {
	if state(vm, dir) != "running" {
		return vboxError("Machine '%s' is not currently running", vm.Name)
	}
	v, err := qemu.Find(ctx, dir)
	if err != nil {
		if kerr := qemu.KillDir(ctx, dir); kerr != nil {
			return kerr
		}
	} else if err := v.Stop(ctx, 30*time.Second); err != nil {
		return err
	}
	vm.State = "poweroff"
	fmt.Fprintln(s.out, "0%...10%...20%...30%...40%...50%...60%...70%...80%...90%...100%")
	return writeMachine(dir, vm)
}

func (s *standin) unregister(vm *Machine, dir string, del bool) error {
	if state(vm, dir) == "running" {
		return vboxError("Cannot unregister the machine '%s' while it is locked", vm.Name)
	}
	reg, err := s.registry()
	if err != nil {
		return err
	}
	delete(reg, vm.Name)
	if err := s.saveRegistry(reg); err != nil {
		return err
	}
	if del {
		return os.RemoveAll(dir)
	}
	return nil
}

// newUUID returns a random (version 4) UUID.
func newUUID() string {
	var b [16]byte
	rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// vboxError is an error worded as VirtualBox words it (capitalized).
func vboxError(format string, args ...any) error { return fmt.Errorf(format, args...) }

// PowerOffAll kills the QEMU of every VM registered in home: a test's
// cleanup.
func PowerOffAll(ctx context.Context, home string) error {
	s := &standin{home: home}
	reg, err := s.registry()
	if err != nil {
		return err
	}
	var errs []error
	for _, dir := range reg {
		errs = append(errs, qemu.KillDir(ctx, dir))
	}
	return errors.Join(errs...)
}
