package qemu

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/drover-ci/drover/internal/executor/vm"
	qemuvm "github.com/drover-ci/drover/internal/vm/qemu"
)

// How long a VM gets to quit before it is killed.
const stopGrace = 30 * time.Second

// Files of a job VM's directory besides QEMU's own (see package
// internal/vm/qemu).
const (
	fileDisk   = "disk.qcow2"
	fileConfig = "drover-vm.json"
)

// Hypervisor is vm.Hypervisor on QEMU: each VM is a directory under
// Folder holding its qcow2 disk (an overlay of the base, or a copy when
// it starts from the base's saved state), its settings and QEMU's files.
type Hypervisor struct {
	// Folder holds the VMs' directories (base_folder).
	Folder string
	// Binary is the QEMU binary ("" = qemu-system-x86_64 from PATH).
	Binary string
	// Images runs qemu-img.
	Images qemuvm.Images
	// Machine is the VMs' hardware and boot; its Disk is each VM's own.
	Machine qemuvm.Machine
	// BaseName is base_name: an image, or a directory of images.
	BaseName string
}

var (
	_ vm.Hypervisor = (*Hypervisor)(nil)
	_ vm.Console    = (*Hypervisor)(nil)
)

// vmConfig is a VM's drover-vm.json: how to start it.
type vmConfig struct {
	Machine qemuvm.Machine `json:"machine"`
	Base    string         `json:"base"`
	// LoadVM is the saved state the next start resumes from ("" = boot):
	// set by Clone from a saved state and by Revert, cleared once a start
	// used it.
	LoadVM string `json:"loadvm,omitempty"`
}

// Product is "QEMU".
func (h *Hypervisor) Product() string { return "QEMU" }

// imageName is what a job's image may be to name an image file: no
// paths.
var imageName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

// imageExts are tried in turn after a job's image name.
var imageExts = []string{"", ".qcow2", ".img", ".raw"}

// Base finds the image name refers to: base_name itself, or an image of
// that name in base_name's directory (base_name, when it is a directory,
// or the one holding it), as <name>, <name>.qcow2, <name>.img or
// <name>.raw. It must be a qcow2 or raw image.
func (h *Hypervisor) Base(ctx context.Context, name string) (vm.Base, error) {
	path := name
	if name != h.BaseName {
		if !imageName.MatchString(name) {
			return vm.Base{}, fmt.Errorf("%w: image names are file names in the images' directory (letters, digits, '.', '_', '-'), not %q", vm.ErrBaseNotFound, name)
		}
		dir := h.BaseName
		if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
			dir = filepath.Dir(dir)
		}
		path = ""
		for _, ext := range imageExts {
			p := filepath.Join(dir, name+ext)
			if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
				path = p
				break
			}
		}
		if path == "" {
			return vm.Base{}, fmt.Errorf("%w: no image %s in %s (tried %s)", vm.ErrBaseNotFound, name, dir, strings.Join(imageExts[1:], ", "))
		}
	}
	if fi, err := os.Stat(path); err != nil {
		return vm.Base{}, fmt.Errorf("%w: %w", vm.ErrBaseNotFound, err)
	} else if fi.IsDir() {
		return vm.Base{}, fmt.Errorf("%s is a directory of images: the job must name one (image:)", path)
	}
	if _, err := h.Images.CheckBase(ctx, path); err != nil {
		return vm.Base{}, err
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return vm.Base{}, err
	}
	return vm.Base{ID: abs, Name: ShortName(abs)}, nil
}

// ShortName is an image's name in its VMs' names: its file name without
// the extension, anything but letters, digits, '.', '_' and '-' replaced.
func ShortName(path string) string {
	base := filepath.Base(path)
	for _, ext := range imageExts[1:] {
		base = strings.TrimSuffix(base, ext)
	}
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-' {
			return r
		}
		return '_'
	}, base)
}

func (h *Hypervisor) dir(name string) string { return filepath.Join(h.Folder, name) }

// Clone creates the VM's directory with a qcow2 overlay of the base, or
// with snapshot a copy of it (an overlay does not see its base's saved
// states) that starts from the snapshot.
func (h *Hypervisor) Clone(ctx context.Context, base vm.Base, snapshot, name string) error {
	info, err := h.Images.Info(ctx, base.ID)
	if err != nil {
		return err
	}
	if snapshot != "" && (info.Format != "qcow2" || !info.HasSnapshot(snapshot, true)) {
		return fmt.Errorf("%s has no saved running state %q (make one with: drover vm snapshot --base %s --name %s)", base.ID, snapshot, base.ID, snapshot)
	}
	dir := h.dir(name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	disk := filepath.Join(dir, fileDisk)
	if snapshot != "" {
		err = h.Images.Copy(ctx, base.ID, disk)
	} else {
		err = h.Images.CreateOverlay(ctx, base.ID, info.Format, disk)
	}
	if err != nil {
		return err
	}
	m := h.Machine
	m.Disk, m.DiskFormat = disk, "qcow2"
	return writeConfig(dir, vmConfig{Machine: m, Base: base.ID, LoadVM: snapshot})
}

// Exists reports whether the VM's directory has its settings.
func (h *Hypervisor) Exists(ctx context.Context, name string) (bool, error) {
	_, err := os.Stat(filepath.Join(h.dir(name), fileConfig))
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	return err == nil, err
}

// Running reports whether the VM's QEMU runs.
func (h *Hypervisor) Running(ctx context.Context, name string) (bool, error) {
	info, err := qemuvm.Inspect(h.dir(name))
	return info.Running, err
}

// Revert stops the VM and makes its next start resume from snapshot.
func (h *Hypervisor) Revert(ctx context.Context, name, snapshot string) error {
	if err := h.Stop(ctx, name); err != nil {
		return err
	}
	dir := h.dir(name)
	c, err := readConfig(dir)
	if err != nil {
		return err
	}
	info, err := h.Images.Info(ctx, c.Machine.Disk)
	if err != nil {
		return err
	}
	if !info.HasSnapshot(snapshot, true) {
		return fmt.Errorf("VM %s has no snapshot %s", name, snapshot)
	}
	c.LoadVM = snapshot
	return writeConfig(dir, c)
}

// Start starts the VM's QEMU, from its pending saved state if any.
func (h *Hypervisor) Start(ctx context.Context, name string) error {
	dir := h.dir(name)
	c, err := readConfig(dir)
	if err != nil {
		return err
	}
	v, err := qemuvm.Start(ctx, dir, c.Machine, qemuvm.StartOptions{Name: name, Binary: h.Binary, LoadVM: c.LoadVM})
	if err != nil {
		return err
	}
	v.Close()
	if c.LoadVM != "" {
		c.LoadVM = ""
		return writeConfig(dir, c)
	}
	return nil
}

// SSHAddr is the VM's forward on 127.0.0.1.
func (h *Hypervisor) SSHAddr(ctx context.Context, name string) (string, error) {
	info, err := qemuvm.Inspect(h.dir(name))
	if err != nil {
		return "", err
	}
	if !info.Running || info.SSHPort == 0 {
		return "", fmt.Errorf("VM %s: %w", name, qemuvm.ErrNotRunning)
	}
	return fmt.Sprintf("127.0.0.1:%d", info.SSHPort), nil
}

// Snapshot runs savevm on the running VM.
func (h *Hypervisor) Snapshot(ctx context.Context, name, snapshot string) error {
	v, err := qemuvm.Find(ctx, h.dir(name))
	if err != nil {
		return err
	}
	defer v.Close()
	return v.Monitor().SaveVM(ctx, snapshot)
}

// Stop quits the VM's QEMU (killing it if it does not quit in time).
func (h *Hypervisor) Stop(ctx context.Context, name string) error {
	dir := h.dir(name)
	v, err := qemuvm.Find(ctx, dir)
	if errors.Is(err, qemuvm.ErrNotRunning) {
		return nil
	}
	if err != nil {
		// It runs, but its monitor does not answer: the last resort.
		return qemuvm.KillDir(ctx, dir)
	}
	return v.Stop(ctx, stopGrace)
}

// Delete stops the VM and removes its directory.
func (h *Hypervisor) Delete(ctx context.Context, name string) error {
	if err := h.Stop(ctx, name); err != nil {
		return err
	}
	return os.RemoveAll(h.dir(name))
}

// List returns the VMs under Folder whose names start with prefix.
func (h *Hypervisor) List(ctx context.Context, prefix string) ([]string, error) {
	entries, err := os.ReadDir(h.Folder)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range entries {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), prefix) {
			continue
		}
		if ok, _ := h.Exists(ctx, e.Name()); ok {
			names = append(names, e.Name())
		}
	}
	slices.Sort(names)
	return names, nil
}

// ConsoleTail returns the last n lines of the VM's serial console.
func (h *Hypervisor) ConsoleTail(name string, n int) ([]string, error) {
	return qemuvm.ConsoleTail(h.dir(name), n)
}

func readConfig(dir string) (vmConfig, error) {
	var c vmConfig
	b, err := os.ReadFile(filepath.Join(dir, fileConfig))
	if err != nil {
		return c, err
	}
	if err := json.Unmarshal(b, &c); err != nil {
		return c, fmt.Errorf("%s: %w", filepath.Join(dir, fileConfig), err)
	}
	return c, nil
}

func writeConfig(dir string, c vmConfig) error {
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, fileConfig+".tmp")
	if err := os.WriteFile(tmp, append(b, '\n'), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, fileConfig))
}
