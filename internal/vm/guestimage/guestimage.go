// Package guestimage builds the base guest images of drover's VM
// executors (qemu, and the virtualbox and parallels stand-ins built on
// QEMU) from what a Debian machine has or its apt mirror offers: no image
// is downloaded from elsewhere.
//
// An image is a Linux kernel and an initramfs (booted directly, QEMU's
// -kernel, -initrd and -append), a qcow2 root disk to make linked clones
// of, and the SSH credentials to reach it: a client key pair whose public
// half root's authorized_keys holds, and the guest's ed25519 host key, so
// a client pins it instead of trusting on first use.
//
// # Kinds
//
//   - busybox: a static busybox (every applet a symlink) and dropbear,
//     copied from the host with its shared libraries. A few megabytes,
//     built in seconds, at SSH in about as long as the kernel takes to
//     boot: the tests' image. No git.
//   - debian: a debootstrap --variant=minbase root (internal/debroot) with
//     openssh-server, git and ca-certificates. Boots slower; built once in
//     minutes.
//
// Both boot the same kernel (Debian's cloud kernel, from the apt mirror)
// and initramfs (busybox: loads the virtio modules, mounts /dev/vda,
// switches to it), and the same init: busybox init running drover's
// rc script, which mounts /proc, /sys, /dev, /dev/pts, /run and /tmp, sets
// the host name, configures eth0 for QEMU's user networking (10.0.2.15/24
// via 10.0.2.2, DNS 10.0.2.3), starts the SSH server, and when it listens
// prints [ReadyMarker] on the console (ttyS0). An ACPI power button event
// (QMP system_powerdown) powers the guest off cleanly.
//
// # Cache
//
// Build makes an image once per machine, in a directory of the cache
// (default ~/.cache/drover/vm, or $DROVER_CACHE_DIR/vm) named after the
// kind and a key of the recipe, so a changed recipe makes a new image.
// It is built in a temporary directory and renamed into place, so a crash
// never leaves half an image; a lock file makes a second process wait for
// the first instead of building it twice. The image's files are read-only:
// never boot the base disk itself, only linked clones of it
// (qemu-img create -f qcow2 -b DISK -F qcow2 OVERLAY).
package guestimage

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/drover-ci/drover/internal/cachedir"
	"github.com/drover-ci/drover/internal/debroot"
	"github.com/drover-ci/drover/internal/sshx"
)

// Kind is what an image's root holds.
type Kind string

// The kinds of image Build makes.
const (
	Busybox Kind = "busybox"
	Debian  Kind = "debian"
)

// Kinds are the kinds Build makes, the default first.
func Kinds() []Kind { return []Kind{Busybox, Debian} }

// recipeVersion changes whenever what Build makes changes in a way the
// options do not show (scripts, layout, packages, kernel command line),
// so that images of an old recipe are never reused.
const recipeVersion = "v3"

// Guest facts: what every image's init sets up.
const (
	// ReadyMarker is the line the guest prints on its console (ttyS0)
	// once its SSH server listens on port 22.
	ReadyMarker = "drover-guest: ssh ready"
	// Hostname is the guest's host name.
	Hostname = "drover-guest"
	// GuestIP is eth0's address, GatewayIP its gateway (the host's
	// loopback under QEMU's user networking) and DNSIP its resolver.
	GuestIP   = "10.0.2.15"
	GatewayIP = "10.0.2.2"
	DNSIP     = "10.0.2.3"
	// SSHPort is the port the guest's SSH server listens on.
	SSHPort = 22
)

// DefaultKernelPackage is the Debian package whose dependency names the
// kernel package used when Options.KernelPackage is empty: the cloud
// kernel, which has the virtio drivers as modules, ext4 and the serial
// console built in, and is a third the size of the generic one.
const DefaultKernelPackage = "linux-image-cloud-amd64"

// Options say which image to build and where.
type Options struct {
	// Kind is the image's kind; "" means Busybox.
	Kind Kind
	// CacheDir is where images are cached; "" means DefaultCacheDir().
	CacheDir string
	// KernelPackage names the Debian kernel package to take the kernel
	// and its modules from (e.g. "linux-image-6.1.0-57-cloud-amd64"); ""
	// means the package DefaultKernelPackage depends on when the image is
	// built. It is part of the cache key; the default is not resolved
	// again once an image exists.
	KernelPackage string
	// Logger gets a line per build step; nil discards them.
	Logger *slog.Logger
}

// Image is a built guest image. Its paths are absolute and its files
// read-only.
type Image struct {
	Kind Kind
	// Dir is the image's directory in the cache.
	Dir string
	// Kernel and Initrd are QEMU's -kernel and -initrd, Append its
	// -append (the kernel command line).
	Kernel string
	Initrd string
	Append string
	// Disk is the root disk, qcow2: the base of linked clones. The guest
	// sees it as /dev/vda (virtio).
	Disk string
	// KernelVersion is the kernel's release (uname -r in the guest).
	KernelVersion string
	// User is the SSH user, Shell its shell (what a runner's shell is).
	User  string
	Shell string
	// IdentityFile is the client's private key (OpenSSH format, 0600),
	// authorized for User in the guest; PrivateKey is its content.
	IdentityFile string
	PrivateKey   []byte
	// ClientKey is the public half of PrivateKey.
	ClientKey ssh.PublicKey
	// HostKey is the guest's SSH host key (ed25519), to pin;
	// HostKeyFile holds it in authorized_keys format.
	HostKey     ssh.PublicKey
	HostKeyFile string
	// KnownHostsFile is a known_hosts file with HostKey for the host
	// name HostKeyAlias, whatever the address and port: OpenSSH's
	// ssh -o HostKeyAlias=drover-guest -o UserKnownHostsFile=FILE.
	KnownHostsFile string
}

// HostKeyAlias is the host name of the guests' key in KnownHostsFile.
const HostKeyAlias = Hostname

// The files of an image's directory.
const (
	kernelFile   = "vmlinuz"
	initrdFile   = "initrd.img"
	diskFile     = "disk.qcow2"
	identityFile = "id_ed25519"
	hostKeyFile  = "ssh_host_ed25519_key.pub"
	knownHosts   = "known_hosts"
	manifestFile = "image.json"
)

// manifest is image.json: what Build records about an image, written
// last, so an image directory with one is complete.
type manifest struct {
	Kind          Kind      `json:"kind"`
	Recipe        string    `json:"recipe"`
	KernelPackage string    `json:"kernel_package"`
	KernelVersion string    `json:"kernel_version"`
	Append        string    `json:"append"`
	User          string    `json:"user"`
	Shell         string    `json:"shell"`
	Built         time.Time `json:"built"`
	BuildSeconds  float64   `json:"build_seconds"`
}

// DefaultCacheDir is where images are cached by default: "vm" in
// drover's cache directory ($DROVER_CACHE_DIR, else ~/.cache/drover).
func DefaultCacheDir() (string, error) {
	dir, err := cachedir.Dir()
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, "vm"), nil
}

// Name is the name of the image directory Build makes for opts in the
// cache: the kind and a key of the recipe.
func Name(opts Options) string {
	kind := opts.Kind
	if kind == "" {
		kind = Busybox
	}
	parts := []string{recipeVersion, string(kind), "kernel=" + opts.KernelPackage}
	if kind == Debian {
		r := debianRecipe()
		parts = append(append(parts, r.Suite, r.Mirror), r.Packages...)
	}
	return string(kind) + "-" + debroot.Key(parts...)
}

// Build returns the image opts describe, building it first when the cache
// has none (see the package doc). Building needs apt-get (to download the
// kernel package), dpkg-deb, mkfs.ext4 and qemu-img, a static busybox
// and, for the busybox kind, dropbear; the debian kind needs root and
// debootstrap (errors.Is(err, debroot.ErrNoDebootstrap) when it cannot
// run). Cancelling ctx stops a build and leaves the cache as it was.
func Build(ctx context.Context, opts Options) (Image, error) {
	if opts.Kind == "" {
		opts.Kind = Busybox
	}
	if !slices.Contains(Kinds(), opts.Kind) {
		return Image{}, fmt.Errorf("guest image: unknown kind %q (want %s or %s)", opts.Kind, Busybox, Debian)
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cache := opts.CacheDir
	if cache == "" {
		var err error
		if cache, err = DefaultCacheDir(); err != nil {
			return Image{}, fmt.Errorf("guest image: %w", err)
		}
	}
	cache, err := filepath.Abs(cache)
	if err != nil {
		return Image{}, fmt.Errorf("guest image: cache directory: %w", err)
	}
	name := Name(opts)
	final := filepath.Join(cache, name)
	if img, err := Load(final); err == nil {
		return img, nil
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return Image{}, fmt.Errorf("guest image: cache directory: %w", err)
	}
	unlock, err := debroot.LockFile(ctx, filepath.Join(cache, name+".lock"), "building the guest image "+name)
	if err != nil {
		return Image{}, fmt.Errorf("guest image: %w", err)
	}
	defer unlock()
	if img, err := Load(final); err == nil {
		log.Info("guest image built by another process", "dir", final)
		return img, nil
	} else if _, serr := os.Stat(final); serr == nil {
		// Build never leaves a directory like this (it renames a
		// complete one into place): someone changed it, and no guest
		// can be booted from it as it is. Make it anew.
		log.Warn("replacing a broken guest image", "dir", final, "error", err)
		if err := os.RemoveAll(final); err != nil {
			return Image{}, fmt.Errorf("guest image: remove the broken image: %w", err)
		}
	}
	// Under the lock, a work directory of this image is a dead builder's.
	stale, _ := filepath.Glob(filepath.Join(cache, ".build-"+name+"-*"))
	for _, d := range stale {
		log.Info("removing an interrupted build", "dir", d)
		if err := os.RemoveAll(d); err != nil {
			return Image{}, fmt.Errorf("guest image: remove an interrupted build: %w", err)
		}
	}
	work, err := os.MkdirTemp(cache, ".build-"+name+"-")
	if err != nil {
		return Image{}, fmt.Errorf("guest image: work directory: %w", err)
	}
	defer os.RemoveAll(work)
	start := time.Now()
	log.Info("building the guest image", "kind", opts.Kind, "dir", final)
	b := &builder{opts: opts, log: log, work: work, out: filepath.Join(work, "image")}
	if err := b.build(ctx); err != nil {
		return Image{}, fmt.Errorf("guest image %s: %w", name, err)
	}
	b.m.Built = time.Now().UTC().Truncate(time.Second)
	b.m.BuildSeconds = time.Since(start).Round(100 * time.Millisecond).Seconds()
	if err := b.finish(); err != nil {
		return Image{}, fmt.Errorf("guest image %s: %w", name, err)
	}
	if err := os.Rename(b.out, final); err != nil {
		return Image{}, fmt.Errorf("guest image %s: put it in place: %w", name, err)
	}
	log.Info("guest image built", "dir", final, "took", time.Since(start).Round(100*time.Millisecond))
	return Load(final)
}

// Load reads the image in dir (a directory Build made). A missing one, or
// one missing a file, is an error for which errors.Is(err, fs.ErrNotExist).
func Load(dir string) (Image, error) {
	data, err := os.ReadFile(filepath.Join(dir, manifestFile))
	if err != nil {
		return Image{}, fmt.Errorf("guest image %s: %w", dir, err)
	}
	var m manifest
	if err := json.Unmarshal(data, &m); err != nil {
		return Image{}, fmt.Errorf("guest image %s: %s: %w", dir, manifestFile, err)
	}
	img := Image{
		Kind: m.Kind, Dir: dir,
		Kernel: filepath.Join(dir, kernelFile), Initrd: filepath.Join(dir, initrdFile), Append: m.Append,
		Disk: filepath.Join(dir, diskFile), KernelVersion: m.KernelVersion,
		User: m.User, Shell: m.Shell,
		IdentityFile: filepath.Join(dir, identityFile), HostKeyFile: filepath.Join(dir, hostKeyFile),
		KnownHostsFile: filepath.Join(dir, knownHosts),
	}
	if img.PrivateKey, err = os.ReadFile(img.IdentityFile); err != nil {
		return Image{}, fmt.Errorf("guest image %s: %w", dir, err)
	}
	signer, err := ssh.ParsePrivateKey(img.PrivateKey)
	if err != nil {
		return Image{}, fmt.Errorf("guest image %s: %s: %w", dir, identityFile, err)
	}
	img.ClientKey = signer.PublicKey()
	hk, err := os.ReadFile(img.HostKeyFile)
	if err != nil {
		return Image{}, fmt.Errorf("guest image %s: %w", dir, err)
	}
	if img.HostKey, _, _, _, err = ssh.ParseAuthorizedKey(hk); err != nil {
		return Image{}, fmt.Errorf("guest image %s: %s: %w", dir, hostKeyFile, err)
	}
	for _, p := range []string{img.Kernel, img.Initrd, img.Disk, img.KnownHostsFile} {
		if _, err := os.Stat(p); err != nil {
			return Image{}, fmt.Errorf("guest image %s: %w", dir, err)
		}
	}
	return img, nil
}

// builder makes one image in its work directory.
type builder struct {
	opts Options
	log  *slog.Logger
	work string // scratch space, removed afterwards
	out  string // the image directory being made (in work)
	m    manifest

	clientKey, hostKey ed25519.PrivateKey
}

func (b *builder) build(ctx context.Context) error {
	if err := os.MkdirAll(b.out, 0o755); err != nil {
		return err
	}
	b.m = manifest{Kind: b.opts.Kind, Recipe: recipeVersion, User: "root", Shell: "sh"}
	if err := b.keys(); err != nil {
		return err
	}
	k, err := b.kernel(ctx)
	if err != nil {
		return err
	}
	b.m.KernelPackage, b.m.KernelVersion = k.pkg, k.version
	b.m.Append = kernelAppend
	if err := b.initramfs(k); err != nil {
		return err
	}
	root := filepath.Join(b.work, "root")
	if err := os.MkdirAll(root, 0o755); err != nil {
		return err
	}
	var size int64
	switch b.opts.Kind {
	case Debian:
		size = debianDiskSize
		err = b.debianRoot(ctx, root)
	default:
		size = busyboxDiskSize
		err = b.busyboxRoot(ctx, root)
	}
	if err != nil {
		return err
	}
	if err := b.common(root); err != nil {
		return err
	}
	return b.disk(ctx, root, size)
}

// finish writes the manifest and makes the image's files read-only.
func (b *builder) finish() error {
	data, err := json.MarshalIndent(b.m, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(b.out, manifestFile), append(data, '\n'), 0o644); err != nil {
		return err
	}
	entries, err := os.ReadDir(b.out)
	if err != nil {
		return err
	}
	for _, e := range entries {
		mode := os.FileMode(0o444)
		if e.Name() == identityFile {
			mode = 0o400
		}
		if err := os.Chmod(filepath.Join(b.out, e.Name()), mode); err != nil {
			return err
		}
	}
	return nil
}

// step logs the start of a build step and returns a function logging its
// end with its duration.
func (b *builder) step(msg string, args ...any) func() {
	start := time.Now()
	b.log.Info(msg, args...)
	return func() {
		b.log.Debug(msg+": done", "took", time.Since(start).Round(time.Millisecond))
	}
}

// kernelAppend is the kernel command line of every image: the console on
// the first serial port, the root disk (which the initramfs mounts), and
// a reboot on panic (with QEMU's -no-reboot, an exit) rather than a hang.
// quiet keeps the boot messages off the serial console, which is slow
// under emulation.
const kernelAppend = "console=ttyS0 root=/dev/vda rw quiet panic=-1"

// AppendPowerOff, added to Append, makes the initramfs power the guest
// off at once instead of mounting the root: a boot of the kernel alone.
const AppendPowerOff = "drover.poweroff"

// QEMUArgs are arguments of qemu-system-x86_64 that boot img from disk (a
// linked clone of img.Disk, qcow2) with sshPort on the host's 127.0.0.1
// forwarded to the guest's SSH server: accel (see Accel), 512 MiB, one
// CPU, no display, no default devices but a virtio disk, network card and
// random number generator; the caller adds where the serial console goes
// (e.g. -serial stdio) and anything else.
func (img Image) QEMUArgs(accel, disk string, sshPort int) []string {
	return []string{
		"-nodefaults", "-no-user-config", "-display", "none",
		"-accel", accel, "-m", "512", "-smp", "1",
		"-kernel", img.Kernel, "-initrd", img.Initrd, "-append", img.Append,
		"-drive", "file=" + disk + ",if=virtio,format=qcow2",
		"-netdev", "user,id=n0,hostfwd=tcp:127.0.0.1:" + strconv.Itoa(sshPort) + "-:" + strconv.Itoa(SSHPort),
		// romfile= skips the network card's PXE ROM: nothing boots from
		// the network, and loading it costs time under emulation.
		"-device", "virtio-net-pci,netdev=n0,romfile=",
		// Entropy from the host: the SSH server waits for the kernel's.
		"-device", "virtio-rng-pci",
	}
}

// SSH is how to reach a guest of img whose SSH port is forwarded to addr
// (host:port): its user and key, its host key pinned.
func (img Image) SSH(addr string) sshx.Config {
	return sshx.Config{
		Addr: addr, User: img.User, Key: img.PrivateKey,
		HostKey: ssh.FixedHostKey(img.HostKey), HostKeyAlgorithms: sshx.HostKeyAlgorithms(img.HostKey),
	}
}

// Accel is QEMU's accelerator for this machine: "kvm" when /dev/kvm can
// be opened and the CPU has virtualization extensions (vmx or svm), else
// "tcg" (emulation, many times slower). Some sandboxes have a /dev/kvm
// that creates VMs but cannot run QEMU's (QEMU hangs or aborts setting
// MSRs): their CPUs do not show the extensions.
func Accel() string {
	f, err := os.OpenFile("/dev/kvm", os.O_RDWR, 0)
	if err != nil {
		return "tcg"
	}
	f.Close()
	cpuinfo, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "tcg"
	}
	for line := range strings.SplitSeq(string(cpuinfo), "\n") {
		if name, flags, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(name) == "flags" {
			for flag := range strings.FieldsSeq(flags) {
				if flag == "vmx" || flag == "svm" {
					return "kvm"
				}
			}
			break
		}
	}
	return "tcg"
}

// shellQuote quotes s for sh when it needs it.
func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./=:,+@%", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// CommandLine is args as one line for sh, each word quoted when needed.
func CommandLine(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = shellQuote(a)
	}
	return strings.Join(q, " ")
}
