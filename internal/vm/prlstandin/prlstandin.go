// Package prlstandin is a stand-in for prlctl, which cannot run here
// (Parallels Desktop runs on macOS only): the program cmd/prlctl, which
// the parallels executor's tests put first on PATH, answers exactly the
// prlctl commands that executor runs, on QEMU guests (packages standin
// and internal/vm/qemu). It is a test fixture, kept thin: the executor's
// code is what is under test, not this.
//
// # What stands for what
//
//   - The stand-in's home (package standin) is $PRLCTL_STANDIN_HOME; it
//     must be set. RegisterBase makes a base VM of a guest image.
//   - clone --template --linked makes a template VM whose disk is a qcow2
//     overlay of the base's; create --ostemplate a VM whose disk is an
//     overlay of the template's.
//   - The network: each VM gets a MAC address (list -i shows it as net0)
//     and a loopback address of its own, 127.211.55.N (Parallels' shared
//     network is 10.211.55.0/24). start runs a real QEMU guest whose SSH
//     port is forwarded from that address, at the port
//     $PRLCTL_STANDIN_SSH_PORT (default 22), and appends a lease for the
//     MAC to the leases file (LeasesFile; GitLab Runner reads
//     /Library/Preferences/Parallels/parallels_dhcp_leases).
//   - exec <vm> exit 0 succeeds once the guest's SSH server greets on its
//     address (Parallels Tools answering); exec <vm> which <tool> fails
//     (the guest has neither ntpdate nor sntp); other commands are not
//     run: the stand-in has no way into the guest but SSH.
//   - snapshot is savevm on a running VM; snapshot-switch makes the VM
//     suspended and its next start load the snapshot; stop --kill is QMP
//     quit; delete removes the directory.
//
// Every invocation is appended to the home's call log (CallLog reads
// it); invocations never interleave.
package prlstandin

import (
	"bufio"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/drover-ci/drover/internal/vm/qemu"
	"github.com/drover-ci/drover/internal/vm/standin"
)

// Environment of the stand-in.
const (
	// HomeEnv names the stand-in's home directory.
	HomeEnv = "PRLCTL_STANDIN_HOME"
	// SSHPortEnv is the port the guests' SSH servers answer at on their
	// addresses (the runner's [runners.ssh] port).
	SSHPortEnv = "PRLCTL_STANDIN_SSH_PORT"
)

// Version is the Parallels Desktop version prlctl --version reports.
const Version = "19.4.1"

// leaseTime is the leases' duration, in seconds.
const leaseTime = 1800

// LeasesFile is the DHCP leases file of the stand-in's network in home.
func LeasesFile(home string) string { return filepath.Join(home, "parallels_dhcp_leases") }

// settings are a VM's Parallels settings besides the common ones.
type settings struct {
	Template bool   `json:"template,omitempty"`
	MAC      string `json:"mac"`
	IP       string `json:"ip"`
}

// Main runs prlctl args, writing to stdout and stderr, and returns the
// exit code.
func Main(args []string, stdout, stderr io.Writer) int {
	return standin.Main(HomeEnv, "", args, stderr, func(ctx context.Context, h *standin.Home) (int, error) {
		port := 22
		if p := os.Getenv(SSHPortEnv); p != "" {
			var err error
			if port, err = strconv.Atoi(p); err != nil {
				return 1, fmt.Errorf("$%s: %w", SSHPortEnv, err)
			}
		}
		return (&prl{h: h, out: stdout, sshPort: port}).run(ctx, args)
	})
}

// CallLog returns the invocations recorded in home, oldest first.
func CallLog(home string) ([][]string, error) { return standin.CallLog(home) }

// RegisterBase registers the stopped VM name in home, its disk a qcow2
// overlay of image (which stays untouched) and its hardware m.
func RegisterBase(ctx context.Context, home, name, image string, m qemu.Machine) error {
	return standin.RegisterBaseIn(ctx, home, name, image, m, func(h *standin.Home) (any, error) { return newSettings(h, false) })
}

// KillAll kills the QEMU of every VM registered in home: a test's
// cleanup.
func KillAll(ctx context.Context, home string) error { return standin.KillAll(ctx, home) }

type prl struct {
	h       *standin.Home
	out     io.Writer
	sshPort int
}

// newSettings gives a new VM a MAC address and the first free address
// of the stand-in's network.
func newSettings(h *standin.Home, template bool) (settings, error) {
	var b [3]byte
	rand.Read(b[:])
	st := settings{Template: template, MAC: fmt.Sprintf("001C42%02X%02X%02X", b[0], b[1], b[2])}
	names, err := h.Names()
	if err != nil {
		return st, err
	}
	used := map[string]bool{}
	for _, n := range names {
		if vm, err := h.Load(n); err == nil {
			used[vmSettings(vm).IP] = true
		}
	}
	for n := 2; n < 255; n++ {
		if ip := fmt.Sprintf("127.211.55.%d", n); !used[ip] {
			st.IP = ip
			return st, nil
		}
	}
	return st, errors.New("the stand-in's network is full")
}

func vmSettings(vm *standin.VM) settings {
	var st settings
	vm.GetExtra(&st)
	return st
}

func (s *prl) run(ctx context.Context, args []string) (int, error) {
	if len(args) == 0 {
		return 1, errors.New("no command (the stand-in answers: --version, list, clone, create, start, exec, snapshot, snapshot-list, snapshot-switch, stop --kill, delete, unregister)")
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "--version":
		fmt.Fprintf(s.out, "prlctl version %s (54985)\n", Version)
		return 0, nil
	case "list":
		return 0, s.list(rest)
	}
	if len(rest) == 0 {
		return 1, fmt.Errorf("%s: no VM named", cmd)
	}
	if cmd == "create" {
		return 0, s.create(ctx, rest[0], rest[1:])
	}
	vm, err := s.load(rest[0])
	if err != nil {
		return 255, err
	}
	opts := rest[1:]
	switch cmd {
	case "clone":
		return 0, s.clone(ctx, vm, opts)
	case "start":
		return 0, s.start(ctx, vm)
	case "exec":
		return s.exec(ctx, vm, opts)
	case "snapshot":
		if len(opts) != 2 || opts[0] != "--name" {
			return 1, fmt.Errorf("snapshot %v: the stand-in answers snapshot <vm> --name <name> only", opts)
		}
		fmt.Fprintln(s.out, "Creating the snapshot...")
		sn, err := vm.TakeSnapshot(ctx, opts[1])
		if err != nil {
			return 1, err
		}
		fmt.Fprintf(s.out, "The snapshot with id {%s} has been successfully created.\n", sn.UUID)
		return 0, nil
	case "snapshot-list":
		s.snapshotList(vm)
		return 0, nil
	case "snapshot-switch":
		if len(opts) != 2 || opts[0] != "--id" {
			return 1, fmt.Errorf("snapshot-switch %v: the stand-in answers snapshot-switch <vm> --id <id> only", opts)
		}
		sn := vm.FindSnapshot(strings.Trim(opts[1], "{}"))
		if sn == nil {
			return 1, prlError("Failed to switch to the snapshot: the snapshot %s does not exist", opts[1])
		}
		if vm.Running() {
			if err := vm.PowerOff(ctx); err != nil {
				return 1, err
			}
		}
		fmt.Fprintf(s.out, "Switch to the snapshot...\nThe VM has been successfully switched.\n")
		return 0, vm.RestoreSnapshot(ctx, sn)
	case "stop":
		if len(opts) != 1 || opts[0] != "--kill" {
			return 1, fmt.Errorf("stop %v: the stand-in answers stop <vm> --kill only", opts)
		}
		if status(vm) == "stopped" {
			return 1, prlError("The VM is not running.")
		}
		fmt.Fprintln(s.out, "Stopping the VM...\nThe VM has been successfully stopped.")
		return 0, vm.PowerOff(ctx)
	case "delete", "unregister":
		if vm.Running() {
			return 1, prlError("The VM is running: stop it first.")
		}
		return 0, s.h.Unregister(vm, cmd == "delete")
	}
	return 1, fmt.Errorf("%s: a command the stand-in for prlctl does not answer", cmd)
}

// load reads the VM name, or fails as prlctl does for an unknown one.
func (s *prl) load(name string) (*standin.VM, error) {
	vm, err := s.h.Load(name)
	if errors.Is(err, standin.ErrNoVM) {
		return nil, prlError("Failed to get VM config: The virtual machine could not be found.")
	}
	return vm, err
}

// status is prlctl's status of the VM.
func status(vm *standin.VM) string {
	switch {
	case vm.Running():
		return "running"
	case vm.Saved:
		return "suspended"
	}
	return "stopped"
}

// list is list <vm> --no-header --output status, list -i <vm> and list
// -a --no-header -o name.
func (s *prl) list(opts []string) error {
	switch {
	case len(opts) == 4 && opts[1] == "--no-header" && opts[2] == "--output" && opts[3] == "status":
		vm, err := s.load(opts[0])
		if err != nil {
			return err
		}
		fmt.Fprintln(s.out, status(vm))
		return nil
	case len(opts) == 2 && opts[0] == "-i":
		vm, err := s.load(opts[1])
		if err != nil {
			return err
		}
		st := vmSettings(vm)
		fmt.Fprintf(s.out, "ID: {%s}\nName: %s\nType: VM\nState: %s\nHardware:\n  cpus 1\n  memory %dMb\n  hdd0 (+) sata:0 image='%s'\n  net0 (+) type=shared mac=%s card=virtio\n",
			vm.UUID, vm.Name, status(vm), vm.Machine.MemoryMiB, vm.Machine.Disk, st.MAC)
		return nil
	case slices.Equal(opts, []string{"-a", "--no-header", "-o", "name"}):
		names, err := s.h.Names()
		if err != nil {
			return err
		}
		for _, n := range names {
			if vm, err := s.load(n); err == nil && !vmSettings(vm).Template {
				fmt.Fprintln(s.out, n)
			}
		}
		return nil
	}
	return fmt.Errorf("list %v: the stand-in answers list <vm> --no-header --output status, list -i <vm>, list -a --no-header -o name", opts)
}

// clone is clone <base> --name <template> --template --linked.
func (s *prl) clone(ctx context.Context, base *standin.VM, opts []string) error {
	if len(opts) != 4 || opts[0] != "--name" || opts[2] != "--template" || opts[3] != "--linked" {
		return fmt.Errorf("clone %v: the stand-in answers clone <vm> --name <template> --template --linked only", opts)
	}
	return s.cloneAs(ctx, base, opts[1], true)
}

// create is create <vm> --ostemplate <template>.
func (s *prl) create(ctx context.Context, name string, opts []string) error {
	if len(opts) != 2 || opts[0] != "--ostemplate" {
		return fmt.Errorf("create %v: the stand-in answers create <vm> --ostemplate <template> only", opts)
	}
	t, err := s.load(opts[1])
	if err != nil {
		return err
	}
	if !vmSettings(t).Template {
		return prlError("%s is not a template.", t.Name)
	}
	return s.cloneAs(ctx, t, name, false)
}

func (s *prl) cloneAs(ctx context.Context, base *standin.VM, name string, template bool) error {
	if _, err := s.h.Load(name); err == nil {
		return prlError("The virtual machine %s already exists.", name)
	}
	st, err := newSettings(s.h, template)
	if err != nil {
		return err
	}
	vm, err := s.h.Clone(ctx, base, name, "", true)
	if err != nil {
		return err
	}
	if err := vm.SetExtra(st); err != nil {
		return err
	}
	fmt.Fprintf(s.out, "Clone the %s VM to the VM %s...\nThe VM has been successfully cloned.\n", base.Name, name)
	return vm.Save()
}

// start runs the VM's QEMU, its SSH port forwarded from its address, and
// leases the address to its MAC.
func (s *prl) start(ctx context.Context, vm *standin.VM) error {
	st := vmSettings(vm)
	if st.Template {
		return prlError("Unable to start a template.")
	}
	if vm.Running() {
		return prlError("The VM is already running.")
	}
	fmt.Fprintln(s.out, "Starting the VM...")
	if err := vm.Start(ctx, st.IP, s.sshPort, 22); err != nil {
		return err
	}
	f, err := os.OpenFile(LeasesFile(s.h.Dir), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	mac := strings.ToLower(st.MAC)
	if _, err := fmt.Fprintf(f, "%s=\"%d,%d,%s,ff%s000100011c25b9ff%s\"\n", st.IP, time.Now().Unix()+leaseTime, leaseTime, mac, mac[2:], mac); err != nil {
		return err
	}
	fmt.Fprintln(s.out, "The VM has been successfully started.")
	return nil
}

// exec answers exit 0 once the guest's SSH server greets, and which
// with "not found".
func (s *prl) exec(ctx context.Context, vm *standin.VM, cmd []string) (int, error) {
	if !vm.Running() {
		return 1, prlError("The VM is not running.")
	}
	switch {
	case slices.Equal(cmd, []string{"exit", "0"}):
		addr := net.JoinHostPort(vmSettings(vm).IP, strconv.Itoa(s.sshPort))
		if err := greets(ctx, addr); err != nil {
			return 1, prlError("Unable to open new session in this virtual machine. (stand-in: the guest's SSH server at %s does not greet yet: %v)", addr, err)
		}
		return 0, nil
	case len(cmd) == 2 && cmd[0] == "which":
		return 1, nil
	}
	return 1, fmt.Errorf("exec %v: the stand-in for prlctl runs no commands in the guest", cmd)
}

// greets reports whether an SSH server at addr sends its version line.
func greets(ctx context.Context, addr string) error {
	d := net.Dialer{Timeout: 5 * time.Second}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, "SSH-") {
		return fmt.Errorf("not an SSH server: %q", line)
	}
	return nil
}

// snapshotList prints the snapshot tree as prlctl snapshot-list does:
// parent and id columns, the current one marked *.
func (s *prl) snapshotList(vm *standin.VM) {
	fmt.Fprintf(s.out, "%-38s  %s\n", "PARENT_SNAPSHOT_ID", "SNAPSHOT_ID")
	for _, sn := range vm.Snapshots {
		parent := ""
		if sn.Parent != "" {
			parent = "{" + sn.Parent + "}"
		}
		mark := " "
		if sn.UUID == vm.Current {
			mark = "*"
		}
		fmt.Fprintf(s.out, "%-38s %s{%s}\n", parent, mark, sn.UUID)
	}
}

// prlError is an error worded as prlctl words it (capitalized).
func prlError(format string, args ...any) error { return fmt.Errorf(format, args...) }
