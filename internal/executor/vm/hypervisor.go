package vm

import (
	"context"
	"errors"
	"io"
)

// ErrBaseNotFound is returned (wrapped) by Hypervisor.Base for a base VM
// or image that does not exist.
var ErrBaseNotFound = errors.New("base VM not found")

// Base is a base VM (or disk image) that job VMs are cloned from.
type Base struct {
	// ID is how the hypervisor knows it: a VM name, an image's path.
	ID string
	// Name is its short name, the first part of the names of the VMs
	// cloned from it (GitLab Runner's <base>-runner-...).
	Name string
}

// Hypervisor is one VM product's operations, each a primitive: the slot
// logic (Slots) decides when to call which. VMs are known by name. Every
// call may block within ctx; none retries. Calls for different names may
// run at once; calls for one name never do.
type Hypervisor interface {
	// Product names the hypervisor in the job log ("QEMU").
	Product() string
	// Base finds the base that name refers to: base_name, or a job's
	// image that allowed_images allows. A base that does not exist is
	// an error wrapping ErrBaseNotFound; one that cannot be used (not a
	// disk image) another error saying why.
	Base(ctx context.Context, name string) (Base, error)
	// Clone creates the VM name as a linked clone of base, not running.
	// With snapshot set it starts (Start) from the base's saved running
	// state of that name instead of booting.
	Clone(ctx context.Context, base Base, snapshot, name string) error
	// Exists reports whether the VM name exists (running or not).
	Exists(ctx context.Context, name string) (bool, error)
	// Running reports whether the VM name runs.
	Running(ctx context.Context, name string) (bool, error)
	// Revert returns the VM name to its snapshot (stopping it first if
	// it runs): the next Start resumes from the snapshot's state. A VM
	// without that snapshot is an error.
	Revert(ctx context.Context, name, snapshot string) error
	// Start starts the VM name from its current state and returns once
	// it runs (not once its guest is up).
	Start(ctx context.Context, name string) error
	// SSHAddr returns the host address (host:port) forwarded to the
	// running VM's SSH port.
	SSHAddr(ctx context.Context, name string) (string, error)
	// Snapshot saves the running VM's state as snapshot (replacing one of
	// that name); the VM keeps running.
	Snapshot(ctx context.Context, name, snapshot string) error
	// Stop powers the VM off at once, like pulling the plug (its disk is
	// reverted or deleted next). Stopping a VM that does not run is not
	// an error.
	Stop(ctx context.Context, name string) error
	// Delete stops the VM and removes it with its disks. Deleting a VM
	// that does not exist is not an error.
	Delete(ctx context.Context, name string) error
	// List returns the names of the VMs whose names start with prefix.
	List(ctx context.Context, prefix string) ([]string, error)
}

// Console is a Hypervisor that keeps its guests' serial consoles: the
// last lines go to the log of a job whose guest never came up.
type Console interface {
	// ConsoleTail returns the last n lines of the VM's console.
	ConsoleTail(name string, n int) ([]string, error)
}

// Readier is a Hypervisor with work to do in a guest each time it is up
// for a job (after the Started snapshot of a new VM): Parallels' clock
// sync. Its messages go to trace, the job's log. An error fails the job
// with runner_system_failure.
type Readier interface {
	Ready(ctx context.Context, name string, trace io.Writer) error
}
