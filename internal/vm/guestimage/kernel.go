package guestimage

import (
	"bytes"
	"context"
	"debug/elf"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
)

// bootModules are the modules the guest loads from its initramfs (with
// what they depend on): the virtio PCI transport, the disk, the network
// card, the random number generator (used when the VM has one: the SSH
// servers wait for the kernel's entropy), and the ACPI power button with
// the event device busybox's acpid reads it from.
var bootModules = []string{"virtio_pci", "virtio_blk", "virtio_net", "virtio_rng", "button", "evdev"}

// kernel is a Debian kernel package unpacked in the work directory.
type kernel struct {
	pkg     string // e.g. linux-image-6.1.0-57-cloud-amd64
	version string // the release, e.g. 6.1.0-57-cloud-amd64
	vmlinuz string
	modDir  string // lib/modules/<version>
}

// kernel downloads the kernel package with apt-get and unpacks it.
func (b *builder) kernel(ctx context.Context) (*kernel, error) {
	pkg := b.opts.KernelPackage
	if pkg == "" {
		var err error
		if pkg, err = resolveKernelPackage(ctx); err != nil {
			return nil, err
		}
	}
	dir := filepath.Join(b.work, "kernel")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	done := b.step("downloading the kernel package", "package", pkg)
	cmd := exec.CommandContext(ctx, "apt-get", "download", "-q", pkg)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("apt-get download %s: %w: %s", pkg, err, strings.TrimSpace(string(out)))
	}
	debs, _ := filepath.Glob(filepath.Join(dir, "*.deb"))
	if len(debs) != 1 {
		return nil, fmt.Errorf("apt-get download %s: want one .deb in %s, found %d", pkg, dir, len(debs))
	}
	done()
	tree := filepath.Join(dir, "x")
	if out, err := exec.CommandContext(ctx, "dpkg-deb", "-x", debs[0], tree).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("dpkg-deb -x %s: %w: %s", debs[0], err, strings.TrimSpace(string(out)))
	}
	vmlinuz, _ := filepath.Glob(filepath.Join(tree, "boot", "vmlinuz-*"))
	if len(vmlinuz) != 1 {
		return nil, fmt.Errorf("%s: want one boot/vmlinuz-*, found %d", debs[0], len(vmlinuz))
	}
	k := &kernel{pkg: pkg, vmlinuz: vmlinuz[0], version: strings.TrimPrefix(filepath.Base(vmlinuz[0]), "vmlinuz-")}
	k.modDir = filepath.Join(tree, "lib", "modules", k.version)
	if _, err := os.Stat(k.modDir); err != nil {
		return nil, fmt.Errorf("%s: no modules for %s: %w", debs[0], k.version, err)
	}
	b.log.Info("kernel", "version", k.version)
	return k, nil
}

// kernelDep matches a kernel image package in apt-cache depends' output.
var kernelDep = regexp.MustCompile(`(?m)^\s*Depends:\s*(linux-image-[^\s<>]+)\s*$`)

// resolveKernelPackage returns the kernel package DefaultKernelPackage
// depends on in this machine's apt lists.
func resolveKernelPackage(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "apt-cache", "depends", DefaultKernelPackage).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("apt-cache depends %s (run apt-get update?): %w: %s", DefaultKernelPackage, err, strings.TrimSpace(string(out)))
	}
	m := kernelDep.FindSubmatch(out)
	if m == nil {
		return "", fmt.Errorf("apt-cache depends %s names no kernel package (run apt-get update?):\n%s", DefaultKernelPackage, out)
	}
	return string(m[1]), nil
}

// moduleName is the name the kernel knows a module file by: the file
// name without .ko, dashes as underscores.
func moduleName(file string) string {
	return strings.ReplaceAll(strings.TrimSuffix(filepath.Base(file), ".ko"), "-", "_")
}

// modules indexes the module files under modDir by name.
func modules(modDir string) (map[string]string, error) {
	mods := map[string]string{}
	err := filepath.WalkDir(modDir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".ko") {
			mods[moduleName(p)] = p
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("kernel modules: %w", err)
	}
	return mods, nil
}

// moduleDepends reads the depends= entry of a module's .modinfo section.
func moduleDepends(path string) ([]string, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	s := f.Section(".modinfo")
	if s == nil {
		return nil, fmt.Errorf("%s: no .modinfo section", path)
	}
	data, err := s.Data()
	if err != nil {
		return nil, fmt.Errorf("%s: .modinfo: %w", path, err)
	}
	for entry := range bytes.SplitSeq(data, []byte{0}) {
		if v, ok := bytes.CutPrefix(entry, []byte("depends=")); ok {
			var deps []string
			for d := range strings.SplitSeq(string(v), ",") {
				if d != "" {
					deps = append(deps, strings.ReplaceAll(d, "-", "_"))
				}
			}
			return deps, nil
		}
	}
	return nil, nil
}

// loadOrder returns the files of want and of every module they depend
// on, each after its dependencies: the order to insmod them in. mods maps
// names to files (see modules); depends reads a file's dependencies (the
// package has no modules.dep: depmod makes it on installation).
func loadOrder(mods map[string]string, want []string, depends func(path string) ([]string, error)) ([]string, error) {
	var order []string
	state := map[string]int{} // 1 visiting, 2 done
	var visit func(name, from string) error
	visit = func(name, from string) error {
		switch state[name] {
		case 1:
			return fmt.Errorf("kernel modules: %s depends on itself", name)
		case 2:
			return nil
		}
		path, ok := mods[name]
		if !ok {
			if from == "" {
				return fmt.Errorf("kernel modules: no module %s (built in?)", name)
			}
			return fmt.Errorf("kernel modules: %s needs %s, which the package lacks", from, name)
		}
		deps, err := depends(path)
		if err != nil {
			return err
		}
		state[name] = 1
		for _, d := range deps {
			if err := visit(d, name); err != nil {
				return err
			}
		}
		state[name] = 2
		order = append(order, path)
		return nil
	}
	for _, name := range want {
		if err := visit(name, ""); err != nil {
			return nil, err
		}
	}
	return order, nil
}
