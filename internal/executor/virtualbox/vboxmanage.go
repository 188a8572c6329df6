package virtualbox

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/drover-ci/drover/internal/executor/vm"
	"github.com/drover-ci/drover/internal/freeport"
)

// Program is VirtualBox's command line tool. GitLab Runner runs it as
// "vboxmanage", which only a case-insensitive file system (macOS,
// Windows) or the Linux packages' extra link find; ParseConfig looks for
// either name.
const Program = "VBoxManage"

// ErrNotFound is returned (wrapped) for a VM VirtualBox does not know.
var ErrNotFound = errors.New("no such VirtualBox VM")

// Status is a VM's state as showvminfo --machinereadable reports it
// (VMState="...").
type Status string

// The states the executor tells apart (VirtualBox has more: see Online).
const (
	PoweredOff Status = "poweroff"
	Saved      Status = "saved"
	Aborted    Status = "aborted"
	Running    Status = "running"
)

// Online reports whether a VM in state s runs or is on its way to or from
// running (GitLab Runner's IsStatusOnlineOrTransient): anything but
// powered off, saved, aborted, teleported and unknown states.
func (s Status) Online() bool {
	return slices.Contains([]Status{
		Running, "paused", "gurumeditation", "teleporting", "livesnapshotting", "starting", "stopping",
		"saving", "restoring", "teleportingpausedvm", "teleportingin", "faulttolerantsyncing",
		"deletingsnapshotlive", "deletingsnapshotlivepaused", "onlinesnapshotting", "restoringsnapshot",
		"deletingsnapshot", "settingup", "snapshotting",
	}, s)
}

// Manage runs VBoxManage commands, one each call, and parses their
// output as GitLab Runner's helpers/virtualbox does. Nothing retries. A
// failed command is a *vm.ProgramError.
type Manage struct {
	vm.Program
}

// NewManage returns Manage running the VBoxManage at path.
func NewManage(path string) Manage { return Manage{vm.Program{Name: Program, Path: path}} }

// notFound reports whether err is VBoxManage's answer for a VM that does
// not exist.
func notFound(err error) bool {
	var e *vm.ProgramError
	return errors.As(err, &e) && (strings.Contains(e.Stderr, "VBOX_E_OBJECT_NOT_FOUND") || strings.Contains(e.Stderr, "Could not find a registered machine"))
}

// Version returns VirtualBox's version (VBoxManage --version).
func (m Manage) Version(ctx context.Context) (string, error) {
	out, err := m.Run(ctx, "--version")
	return strings.TrimSpace(out), err
}

// Exists reports whether VirtualBox knows the VM (showvminfo answers).
func (m Manage) Exists(ctx context.Context, name string) (bool, error) {
	_, err := m.Run(ctx, "showvminfo", name)
	if notFound(err) {
		return false, nil
	}
	return err == nil, err
}

var vmStateRe = regexp.MustCompile(`(?m)^VMState="(\w+)"`)

// Status returns the VM's state (showvminfo --machinereadable); a VM
// that does not exist is ErrNotFound.
func (m Manage) Status(ctx context.Context, vm string) (Status, error) {
	out, err := m.Run(ctx, "showvminfo", vm, "--machinereadable")
	if notFound(err) {
		return "", fmt.Errorf("%w: %s", ErrNotFound, vm)
	}
	if err != nil {
		return "", err
	}
	s, ok := parseStatus(out)
	if !ok {
		return "", fmt.Errorf("VBoxManage showvminfo %s --machinereadable: no VMState in its output", vm)
	}
	return s, nil
}

// parseStatus reads VMState from showvminfo --machinereadable.
func parseStatus(out string) (Status, bool) {
	s := vmStateRe.FindStringSubmatch(out)
	if s == nil {
		return "", false
	}
	return Status(s[1]), true
}

var sshPortRe = regexp.MustCompile(`guestssh.*host port = (\d+)`)

// SSHPort returns the host port of the VM's "guestssh" NAT rule, from
// showvminfo's human-readable output as GitLab Runner reads it.
func (m Manage) SSHPort(ctx context.Context, vm string) (int, error) {
	out, err := m.Run(ctx, "showvminfo", vm)
	if err != nil {
		return 0, err
	}
	port, ok := parseSSHPort(out)
	if !ok {
		return 0, fmt.Errorf("VM %s has no guestssh port forwarding rule", vm)
	}
	return port, nil
}

// parseSSHPort reads the host port of the "guestssh" rule from
// showvminfo's human-readable output.
func parseSSHPort(out string) (int, bool) {
	s := sshPortRe.FindStringSubmatch(out)
	if s == nil {
		return 0, false
	}
	port, err := strconv.Atoi(s[1])
	return port, err == nil
}

var hostPortRe = regexp.MustCompile(`host port = (\d+)`)

// usedPorts returns the host ports of every VM's forwarding rules (list
// vms -l).
func (m Manage) usedPorts(ctx context.Context) ([]string, error) {
	out, err := m.Run(ctx, "list", "vms", "-l")
	if err != nil {
		return nil, err
	}
	return parseHostPorts(out), nil
}

// parseHostPorts reads the host ports of all forwarding rules from list
// vms -l.
func parseHostPorts(out string) []string {
	var ports []string
	for _, s := range hostPortRe.FindAllStringSubmatch(out, -1) {
		ports = append(ports, s[1])
	}
	return ports
}

// ConfigureSSH adds the VM's "guestssh" NAT rule, 127.0.0.1:<port> to
// guestPort in the guest, on a host port that is free and no other VM's
// rule uses, and returns the port. A port another VM has taken meanwhile
// is skipped (GitLab Runner's ConfigureSSH).
func (m Manage) ConfigureSSH(ctx context.Context, vm string, guestPort int) (int, error) {
	for attempt := 0; attempt < 20; attempt++ {
		port, err := freeport.Port()
		if err != nil {
			return 0, err
		}
		used, err := m.usedPorts(ctx)
		if err != nil {
			return 0, err
		}
		if slices.Contains(used, strconv.Itoa(port)) {
			continue
		}
		rule := fmt.Sprintf("guestssh,tcp,127.0.0.1,%d,,%d", port, guestPort)
		if _, err := m.Run(ctx, "modifyvm", vm, "--natpf1", rule); err != nil {
			return 0, err
		}
		return port, nil
	}
	return 0, fmt.Errorf("VM %s: no free host port for its SSH forwarding", vm)
}

var currentSnapshotRe = regexp.MustCompile(`(?m)^CurrentSnapshotName="([^"]*)"\r?$`)

// snapshots returns snapshot list --machinereadable of the VM: "" with
// an error when it has none.
func (m Manage) snapshots(ctx context.Context, vm string) (string, error) {
	return m.Run(ctx, "snapshot", vm, "list", "--machinereadable")
}

// CurrentSnapshot returns the name of the VM's current snapshot.
func (m Manage) CurrentSnapshot(ctx context.Context, vm string) (string, error) {
	out, err := m.snapshots(ctx, vm)
	if err != nil {
		return "", err
	}
	cur, ok := parseCurrentSnapshot(out)
	if !ok {
		return "", fmt.Errorf("VM %s: no current snapshot", vm)
	}
	return cur, nil
}

// parseCurrentSnapshot reads CurrentSnapshotName from snapshot list
// --machinereadable.
func parseCurrentSnapshot(out string) (string, bool) {
	s := currentSnapshotRe.FindStringSubmatch(out)
	if s == nil {
		return "", false
	}
	return s[1], true
}

// HasSnapshot reports whether the VM has a snapshot of that name or
// UUID.
func (m Manage) HasSnapshot(ctx context.Context, vm, snapshot string) bool {
	out, err := m.snapshots(ctx, vm)
	if err != nil {
		return false
	}
	return listsSnapshot(out, snapshot)
}

// listsSnapshot reports whether snapshot list --machinereadable has a
// snapshot of that name or UUID, at any depth.
func listsSnapshot(out, snapshot string) bool {
	re := regexp.MustCompile(fmt.Sprintf(`(?m)^Snapshot(Name|UUID)[^=]*="(%s)"\r?$`, regexp.QuoteMeta(snapshot)))
	return re.MatchString(out)
}

// TakeSnapshot takes a snapshot of the VM (running or not).
func (m Manage) TakeSnapshot(ctx context.Context, vm, snapshot string) error {
	_, err := m.Run(ctx, "snapshot", vm, "take", snapshot)
	return err
}

// RestoreCurrent returns the powered off VM to its current snapshot.
func (m Manage) RestoreCurrent(ctx context.Context, vm string) error {
	_, err := m.Run(ctx, "snapshot", vm, "restorecurrent")
	return err
}

// Clone clones base as the registered VM name (clonevm --mode machine):
// linked to the base's snapshot when set, in folder when set.
func (m Manage) Clone(ctx context.Context, base, snapshot, name, folder string) error {
	args := []string{"clonevm", base, "--mode", "machine", "--name", name, "--register"}
	if snapshot != "" {
		args = append(args, "--snapshot", snapshot, "--options", "link")
	}
	if folder != "" {
		args = append(args, "--basefolder", folder)
	}
	_, err := m.Run(ctx, args...)
	return err
}

// Start starts the VM (startvm --type startType).
func (m Manage) Start(ctx context.Context, vm, startType string) error {
	_, err := m.Run(ctx, "startvm", vm, "--type", startType)
	return err
}

// PowerOff pulls the VM's plug (controlvm poweroff).
func (m Manage) PowerOff(ctx context.Context, vm string) error {
	_, err := m.Run(ctx, "controlvm", vm, "poweroff")
	return err
}

// Delete unregisters the VM and deletes its files (unregistervm
// --delete).
func (m Manage) Delete(ctx context.Context, vm string) error {
	_, err := m.Run(ctx, "unregistervm", vm, "--delete")
	return err
}

var listVMRe = regexp.MustCompile(`(?m)^"(.*)" \{[0-9a-fA-F-]+\}\r?$`)

// List returns the names of the registered VMs (list vms).
func (m Manage) List(ctx context.Context) ([]string, error) {
	out, err := m.Run(ctx, "list", "vms")
	if err != nil {
		return nil, err
	}
	return parseList(out), nil
}

// parseList reads the VM names of list vms.
func parseList(out string) []string {
	var names []string
	for _, s := range listVMRe.FindAllStringSubmatch(out, -1) {
		names = append(names, s[1])
	}
	return names
}
