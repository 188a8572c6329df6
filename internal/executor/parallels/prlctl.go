package parallels

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"

	"github.com/drover-ci/drover/internal/executor/vm"
)

// Program is Parallels Desktop's command line tool.
const Program = "prlctl"

// DefaultLeasesFile is where Parallels Desktop keeps the DHCP leases of
// its shared network, which GitLab Runner reads a guest's address from.
const DefaultLeasesFile = "/Library/Preferences/Parallels/parallels_dhcp_leases"

// Status is a VM's state as prlctl list reports it.
type Status string

// The states the executor tells apart.
const (
	Invalid   Status = "invalid"
	Stopped   Status = "stopped"
	Suspended Status = "suspended"
	Running   Status = "running"
)

// Ctl runs prlctl commands, one each call, and parses their output as
// GitLab Runner's helpers/parallels does. Nothing retries. A failed
// command is a *vm.ProgramError.
type Ctl struct {
	vm.Program
}

// NewCtl returns Ctl running the prlctl at path.
func NewCtl(path string) Ctl { return Ctl{vm.Program{Name: Program, Path: path}} }

var versionRe = regexp.MustCompile(`prlctl version (\d+\.\d+.\d+)`)

// Version returns Parallels Desktop's version (prlctl --version).
func (c Ctl) Version(ctx context.Context) (string, error) {
	out, err := c.Run(ctx, "--version")
	if err != nil {
		return "", err
	}
	m := versionRe.FindStringSubmatch(out)
	if m == nil {
		return "", fmt.Errorf("prlctl --version: no Parallels Desktop version in %q", strings.TrimSpace(out))
	}
	return m[1], nil
}

// Status returns the VM's state; an error when prlctl does not know it.
func (c Ctl) Status(ctx context.Context, vm string) (Status, error) {
	out, err := c.Run(ctx, "list", vm, "--no-header", "--output", "status")
	if err != nil {
		return "", err
	}
	return Status(strings.TrimSpace(out)), nil
}

// Exists reports whether prlctl knows the VM (GitLab Runner's Exist:
// its status can be read).
func (c Ctl) Exists(ctx context.Context, name string) (bool, error) {
	_, err := c.Status(ctx, name)
	var pe *vm.ProgramError
	if errors.As(err, &pe) {
		return false, nil
	}
	return err == nil, err
}

var macRe = regexp.MustCompile("net0.* mac=([0-9A-F]{12}) card=.*")

// MAC returns the MAC address of the VM's net0 (list -i).
func (c Ctl) MAC(ctx context.Context, vm string) (string, error) {
	out, err := c.Run(ctx, "list", "-i", vm)
	if err != nil {
		return "", err
	}
	mac, ok := parseMAC(out)
	if !ok {
		return "", fmt.Errorf("MAC address for NIC net0 of VM %s not found", vm)
	}
	return mac, nil
}

func parseMAC(out string) (string, bool) {
	m := macRe.FindStringSubmatch(strings.TrimSpace(out))
	if m == nil {
		return "", false
	}
	return m[1], true
}

// IPFromLeases returns the address the leases file gave the MAC address
// mac last (GitLab Runner's IPAddressFromMac). Lines read
// IP="expiry,lease time,mac,client id".
func IPFromLeases(file, mac string) (string, error) {
	if len(mac) != 12 {
		return "", fmt.Errorf("not a valid MAC address: %s (want 12 hex digits)", mac)
	}
	leases, err := os.ReadFile(file)
	if err != nil {
		return "", err
	}
	ip, ok := parseLeases(string(leases), mac)
	if !ok {
		return "", fmt.Errorf("no IP address leased to MAC address %s in %s", mac, file)
	}
	return ip, nil
}

func parseLeases(leases, mac string) (string, bool) {
	re := regexp.MustCompile("(.*)=\"(.*),(.*)," + strings.ToLower(mac) + ",.*\"")
	best, bestStart := "", uint64(0)
	for _, l := range re.FindAllStringSubmatch(leases, -1) {
		expiry, _ := strconv.ParseUint(l[2], 10, 64)
		lease, _ := strconv.ParseUint(l[3], 10, 32)
		if start := expiry - lease; bestStart <= start {
			best, bestStart = l[1], start
		}
	}
	return best, best != ""
}

// DefaultSnapshot returns the id of the VM's current snapshot, the one
// snapshot-list marks with *.
func (c Ctl) DefaultSnapshot(ctx context.Context, vm string) (string, error) {
	out, err := c.Run(ctx, "snapshot-list", vm)
	if err != nil {
		return "", err
	}
	id, ok := parseDefaultSnapshot(out)
	if !ok {
		return "", fmt.Errorf("VM %s has no snapshot", vm)
	}
	return id, nil
}

func parseDefaultSnapshot(out string) (string, bool) {
	for line := range strings.SplitSeq(out, "\n") {
		if _, id, ok := strings.Cut(line, " *"); ok {
			if id = strings.TrimSpace(id); id != "" {
				return id, true
			}
		}
	}
	return "", false
}

// Exec runs cmd in the VM's guest through Parallels Tools (prlctl exec).
func (c Ctl) Exec(ctx context.Context, vm string, cmd ...string) (string, error) {
	return c.Run(ctx, append([]string{"exec", vm}, cmd...)...)
}

// simple runs a prlctl command whose output does not matter.
func (c Ctl) simple(ctx context.Context, args ...string) error {
	_, err := c.Run(ctx, args...)
	return err
}

// CloneTemplate makes template a linked clone of vm, as a template.
func (c Ctl) CloneTemplate(ctx context.Context, vm, template string) error {
	return c.simple(ctx, "clone", vm, "--name", template, "--template", "--linked")
}

// Create makes the VM vm from template.
func (c Ctl) Create(ctx context.Context, vm, template string) error {
	return c.simple(ctx, "create", vm, "--ostemplate", template)
}

// Start starts the VM.
func (c Ctl) Start(ctx context.Context, vm string) error { return c.simple(ctx, "start", vm) }

// Snapshot takes a snapshot named name of the VM.
func (c Ctl) Snapshot(ctx context.Context, vm, name string) error {
	return c.simple(ctx, "snapshot", vm, "--name", name)
}

// SwitchSnapshot reverts the VM to the snapshot id.
func (c Ctl) SwitchSnapshot(ctx context.Context, vm, id string) error {
	return c.simple(ctx, "snapshot-switch", vm, "--id", id)
}

// Kill stops the VM at once (stop --kill).
func (c Ctl) Kill(ctx context.Context, vm string) error { return c.simple(ctx, "stop", vm, "--kill") }

// Delete deletes the VM with its files.
func (c Ctl) Delete(ctx context.Context, vm string) error { return c.simple(ctx, "delete", vm) }

// Unregister forgets the VM, keeping its files.
func (c Ctl) Unregister(ctx context.Context, vm string) error {
	return c.simple(ctx, "unregister", vm)
}

// List returns the names of the VMs (not templates).
func (c Ctl) List(ctx context.Context) ([]string, error) {
	out, err := c.Run(ctx, "list", "-a", "--no-header", "-o", "name")
	if err != nil {
		return nil, err
	}
	var names []string
	for line := range strings.SplitSeq(out, "\n") {
		if n := strings.TrimSpace(line); n != "" {
			names = append(names, n)
		}
	}
	return names, nil
}
