// Package standin is the common part of drover's stand-ins for
// hypervisor programs that cannot run here (VBoxManage: package
// vboxstandin; prlctl: package prlstandin): registered VMs that are QEMU
// guests (package internal/vm/qemu), and the call log the tests read.
// Only tests run the stand-ins; each stand-in's own package turns its
// program's command line into these operations.
//
// # Home
//
// A stand-in's home directory holds registry.json (VM names to their
// directories), calls.log (one JSON array of arguments per invocation)
// and a lock file: an invocation holds the lock for its whole run, so
// invocations never interleave. A VM's directory holds standin.json (VM),
// disk.qcow2 and QEMU's files while it runs (its vm.json among them).
package standin

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
	"syscall"
	"time"

	"github.com/drover-ci/drover/internal/vm/qemu"
)

// Files of a home and of a VM's directory.
const (
	fileCalls    = "calls.log"
	fileRegistry = "registry.json"
	fileLock     = "lock"
	fileVM       = "standin.json"
	fileDisk     = "disk.qcow2"
)

// ErrNoVM is returned (wrapped) for a name no VM is registered under.
var ErrNoVM = errors.New("no such VM")

// stopGrace is how long a powered off QEMU gets to quit before it is
// killed.
const stopGrace = 30 * time.Second

// Home is a stand-in's home directory, locked by Open.
type Home struct {
	Dir  string
	lock *os.File
}

// Open makes and locks the home dir (flock, exclusive) and appends args
// to its call log when args is not nil. Close unlocks it.
func Open(dir string, args []string) (*Home, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(dir, fileLock), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, err
	}
	h := &Home{Dir: dir, lock: f}
	if args != nil {
		if err := h.appendCall(args); err != nil {
			h.Close()
			return nil, err
		}
	}
	return h, nil
}

// Close unlocks the home.
func (h *Home) Close() error { return h.lock.Close() }

func (h *Home) appendCall(args []string) error {
	b, err := json.Marshal(args)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(filepath.Join(h.Dir, fileCalls), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = f.Write(append(b, '\n'))
	return err
}

// CallLog returns the invocations recorded in the home dir, oldest
// first.
func CallLog(dir string) ([][]string, error) {
	f, err := os.Open(filepath.Join(dir, fileCalls))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var calls [][]string
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var c []string
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			return nil, err
		}
		calls = append(calls, c)
	}
	return calls, sc.Err()
}

// VM is a registered VM's standin.json.
type VM struct {
	Name string `json:"name"`
	UUID string `json:"uuid"`
	// Dir is its directory (not stored).
	Dir     string       `json:"-"`
	Machine qemu.Machine `json:"machine"`
	// Saved is set while it is off with a running state to resume (an
	// online snapshot restored): its next Start loads LoadVM.
	Saved  bool   `json:"saved,omitempty"`
	LoadVM string `json:"loadvm,omitempty"`
	// Started is set from Start to PowerOff: a VM whose QEMU is gone
	// while it is set was aborted.
	Started   bool       `json:"started,omitempty"`
	Snapshots []Snapshot `json:"snapshots,omitempty"`
	// Current is the UUID of the current snapshot.
	Current string `json:"current,omitempty"`
	// Extra is the stand-in's own settings (NAT rules, MAC address, ...).
	Extra json.RawMessage `json:"extra,omitempty"`
}

// Snapshot is a snapshot of a VM: Tag is its QEMU internal snapshot.
type Snapshot struct {
	Name   string `json:"name"`
	UUID   string `json:"uuid"`
	Parent string `json:"parent,omitempty"`
	Tag    string `json:"tag"`
	Online bool   `json:"online"`
}

func (h *Home) registry() (map[string]string, error) {
	reg := map[string]string{}
	b, err := os.ReadFile(filepath.Join(h.Dir, fileRegistry))
	if errors.Is(err, fs.ErrNotExist) {
		return reg, nil
	}
	if err != nil {
		return nil, err
	}
	return reg, json.Unmarshal(b, &reg)
}

func (h *Home) saveRegistry(reg map[string]string) error {
	b, err := json.MarshalIndent(reg, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(h.Dir, fileRegistry), b, 0o600)
}

// Names returns the registered VMs' names, sorted.
func (h *Home) Names() ([]string, error) {
	reg, err := h.registry()
	if err != nil {
		return nil, err
	}
	return slices.Sorted(maps.Keys(reg)), nil
}

// Load reads the VM registered as name (ErrNoVM if none).
func (h *Home) Load(name string) (*VM, error) {
	reg, err := h.registry()
	if err != nil {
		return nil, err
	}
	dir, ok := reg[name]
	if !ok {
		return nil, fmt.Errorf("%w: %s", ErrNoVM, name)
	}
	b, err := os.ReadFile(filepath.Join(dir, fileVM))
	if err != nil {
		return nil, err
	}
	vm := &VM{Dir: dir}
	return vm, json.Unmarshal(b, vm)
}

// Save writes the VM's standin.json.
func (vm *VM) Save() error {
	b, err := json.MarshalIndent(vm, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(vm.Dir, fileVM+".tmp")
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(vm.Dir, fileVM))
}

// register saves vm and registers it under its name.
func (h *Home) register(vm *VM) error {
	if err := vm.Save(); err != nil {
		return err
	}
	reg, err := h.registry()
	if err != nil {
		return err
	}
	reg[vm.Name] = vm.Dir
	return h.saveRegistry(reg)
}

// Unregister forgets the VM, and with del removes its directory.
func (h *Home) Unregister(vm *VM, del bool) error {
	reg, err := h.registry()
	if err != nil {
		return err
	}
	delete(reg, vm.Name)
	if err := h.saveRegistry(reg); err != nil {
		return err
	}
	if del {
		return os.RemoveAll(vm.Dir)
	}
	return nil
}

// RegisterBase registers the powered off VM name under the home's
// machines/, its disk a qcow2 overlay of image (which stays untouched)
// and its hardware m (Disk is set here).
func (h *Home) RegisterBase(ctx context.Context, name, image string, m qemu.Machine, extra any) (*VM, error) {
	dir := filepath.Join(h.Dir, "machines", name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	disk := filepath.Join(dir, fileDisk)
	if err := (qemu.Images{}).CreateOverlay(ctx, image, "qcow2", disk); err != nil {
		return nil, err
	}
	m.Disk, m.DiskFormat = disk, "qcow2"
	vm := &VM{Name: name, UUID: NewUUID(), Dir: dir, Machine: m}
	if err := vm.SetExtra(extra); err != nil {
		return nil, err
	}
	return vm, h.register(vm)
}

// Clone registers a new VM name in folder/name (folder "" = the home's
// machines/) with base's hardware and extra settings: its disk a qcow2
// overlay of the base's (link; the base never runs, so its disk is its
// snapshot's) or a full copy of it.
func (h *Home) Clone(ctx context.Context, base *VM, name, folder string, link bool) (*VM, error) {
	if _, err := h.Load(name); err == nil {
		return nil, fmt.Errorf("a VM named %q exists", name)
	}
	if folder == "" {
		folder = filepath.Join(h.Dir, "machines")
	}
	dir := filepath.Join(folder, name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	disk := filepath.Join(dir, fileDisk)
	var err error
	if link {
		err = (qemu.Images{}).CreateOverlay(ctx, base.Machine.Disk, "qcow2", disk)
	} else if out, cerr := exec.CommandContext(ctx, "qemu-img", "convert", "-O", "qcow2", base.Machine.Disk, disk).CombinedOutput(); cerr != nil {
		err = fmt.Errorf("qemu-img convert: %v: %s", cerr, out)
	}
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	m := base.Machine
	m.Disk = disk
	vm := &VM{Name: name, UUID: NewUUID(), Dir: dir, Machine: m, Extra: base.Extra}
	return vm, h.register(vm)
}

// SetExtra stores the stand-in's own settings v.
func (vm *VM) SetExtra(v any) error {
	if v == nil {
		vm.Extra = nil
		return nil
	}
	b, err := json.Marshal(v)
	vm.Extra = b
	return err
}

// GetExtra reads the stand-in's own settings into v.
func (vm *VM) GetExtra(v any) error {
	if len(vm.Extra) == 0 {
		return nil
	}
	return json.Unmarshal(vm.Extra, v)
}

// Running reports whether the VM's QEMU runs.
func (vm *VM) Running() bool {
	info, err := qemu.Inspect(vm.Dir)
	return err == nil && info.Running
}

// Aborted reports whether the VM's QEMU ended without a PowerOff.
func (vm *VM) Aborted() bool { return vm.Started && !vm.Running() }

// CurrentSnapshot returns the current snapshot, nil if none.
func (vm *VM) CurrentSnapshot() *Snapshot { return vm.FindSnapshot(vm.Current) }

// FindSnapshot returns the snapshot of that name or UUID, nil if none.
func (vm *VM) FindSnapshot(nameOrUUID string) *Snapshot {
	if nameOrUUID == "" {
		return nil
	}
	for i := range vm.Snapshots {
		if vm.Snapshots[i].Name == nameOrUUID || vm.Snapshots[i].UUID == nameOrUUID {
			return &vm.Snapshots[i]
		}
	}
	return nil
}

// TakeSnapshot takes snapshot name (savevm on a running VM, qemu-img
// snapshot -c on one that is off), the child of the current one, and
// makes it current.
func (vm *VM) TakeSnapshot(ctx context.Context, name string) (*Snapshot, error) {
	sn := Snapshot{Name: name, UUID: NewUUID(), Parent: vm.Current}
	sn.Tag = "standin-" + sn.UUID[:8]
	if vm.Running() {
		v, err := qemu.Find(ctx, vm.Dir)
		if err != nil {
			return nil, err
		}
		defer v.Close()
		if err := v.Monitor().SaveVM(ctx, sn.Tag); err != nil {
			return nil, err
		}
		sn.Online = true
	} else if out, err := exec.CommandContext(ctx, "qemu-img", "snapshot", "-c", sn.Tag, vm.Machine.Disk).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("qemu-img snapshot: %v: %s", err, out)
	}
	vm.Snapshots = append(vm.Snapshots, sn)
	vm.Current = sn.UUID
	return &vm.Snapshots[len(vm.Snapshots)-1], vm.Save()
}

// RestoreSnapshot returns the VM, which must be off, to sn: an online
// snapshot is loaded at the next Start (Saved), an offline one applied
// to the disk now. sn becomes current.
func (vm *VM) RestoreSnapshot(ctx context.Context, sn *Snapshot) error {
	if vm.Running() {
		return errors.New("the VM runs")
	}
	if sn.Online {
		vm.Saved, vm.LoadVM = true, sn.Tag
	} else {
		if out, err := exec.CommandContext(ctx, "qemu-img", "snapshot", "-a", sn.Tag, vm.Machine.Disk).CombinedOutput(); err != nil {
			return fmt.Errorf("qemu-img snapshot: %v: %s", err, out)
		}
		vm.Saved, vm.LoadVM = false, ""
	}
	vm.Current, vm.Started = sn.UUID, false
	return vm.Save()
}

// Start starts the VM's QEMU (from its saved state when Saved) with its
// guest's port guestPort forwarded from host:hostPort.
func (vm *VM) Start(ctx context.Context, host string, hostPort, guestPort int) error {
	if vm.Running() {
		return errors.New("the VM runs")
	}
	m := vm.Machine
	if guestPort > 0 {
		m.GuestSSHPort = guestPort
	}
	v, err := qemu.Start(ctx, vm.Dir, m, qemu.StartOptions{Name: vm.Name, LoadVM: vm.LoadVM, SSHHost: host, SSHPort: hostPort})
	if err != nil {
		return err
	}
	v.Close()
	vm.Saved, vm.LoadVM, vm.Started = false, "", true
	return vm.Save()
}

// PowerOff ends the VM's QEMU (QMP quit; killed if it does not answer)
// and forgets a saved state.
func (vm *VM) PowerOff(ctx context.Context) error {
	if vm.Running() {
		v, err := qemu.Find(ctx, vm.Dir)
		if err != nil {
			if err := qemu.KillDir(ctx, vm.Dir); err != nil {
				return err
			}
		} else if err := v.Stop(ctx, stopGrace); err != nil {
			return err
		}
	}
	vm.Saved, vm.LoadVM, vm.Started = false, "", false
	return vm.Save()
}

// KillAll kills the QEMU of every VM registered in the home dir: a
// test's cleanup.
func KillAll(ctx context.Context, dir string) error {
	h, err := Open(dir, nil)
	if err != nil {
		return err
	}
	defer h.Close()
	reg, err := h.registry()
	if err != nil {
		return err
	}
	var errs []error
	for _, d := range reg {
		errs = append(errs, qemu.KillDir(ctx, d))
	}
	return errors.Join(errs...)
}

// NewUUID returns a random (version 4) UUID.
func NewUUID() string {
	var b [16]byte
	rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// Main is a stand-in program's main: it opens the home named by the
// environment variable homeEnv (recording args), runs run within ten
// minutes and returns its exit code, writing an error to stderr after
// prefix (1 when run returns 0 with an error).
func Main(homeEnv, prefix string, args []string, stderr io.Writer, run func(context.Context, *Home) (int, error)) int {
	dir := os.Getenv(homeEnv)
	if dir == "" {
		fmt.Fprintf(stderr, "%sthe stand-in needs $%s\n", prefix, homeEnv)
		return 1
	}
	h, err := Open(dir, args)
	if err != nil {
		fmt.Fprintf(stderr, "%s%v\n", prefix, err)
		return 1
	}
	defer h.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	code, err := run(ctx, h)
	if err != nil {
		fmt.Fprintf(stderr, "%s%v\n", prefix, err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

// RegisterBaseIn is Home.RegisterBase on the home dir, opened for it.
func RegisterBaseIn(ctx context.Context, dir, name, image string, m qemu.Machine, extra func(*Home) (any, error)) error {
	h, err := Open(dir, nil)
	if err != nil {
		return err
	}
	defer h.Close()
	var x any
	if extra != nil {
		if x, err = extra(h); err != nil {
			return err
		}
	}
	_, err = h.RegisterBase(ctx, name, image, m, x)
	return err
}
