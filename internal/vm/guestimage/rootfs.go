package guestimage

import (
	"bufio"
	"bytes"
	"context"
	"debug/elf"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/drover-ci/drover/internal/debroot"
)

// Sizes of the root file systems: sparse, so an unused gigabyte costs
// nothing in the qcow2 nor in a linked clone.
const (
	busyboxDiskSize = 2 << 30
	debianDiskSize  = 4 << 30
)

// The Debian root of the debian kind. Bump debianVersion when the root
// changes in a way Packages does not show.
const (
	debianSuite   = "bookworm"
	debianMirror  = "http://deb.debian.org/debian"
	debianVersion = "v1"
)

// debianRecipe is the debroot recipe of the debian kind's root.
func debianRecipe() debroot.Recipe {
	r := debroot.Recipe{
		Suite:    debianSuite,
		Mirror:   debianMirror,
		Packages: []string{"ca-certificates", "git", "openssh-server"},
		// The host keys openssh-server's installation made: the image
		// has its own, whose public half Build returns.
		Trim: append(append([]string{}, debroot.DefaultTrim...), "etc/ssh/ssh_host_*"),
	}
	key := debroot.Key(append([]string{r.Suite, r.Mirror, debianVersion}, r.Packages...)...)
	r.File = fmt.Sprintf("debian-%s-vmguest-%s-%s.tar", r.Suite, debianVersion, key)
	return r
}

// BusyboxPath is the path of busybox in a guest of either kind (a Debian
// root has no ip, nc or acpid: busybox has them).
const BusyboxPath = droverDir + "/bin/busybox"

// The files drover adds to every root.
const (
	droverDir = "/opt/drover"
	guestBB   = BusyboxPath
	rcScript  = droverDir + "/rc"

	dropbearHK = "/etc/dropbear/dropbear_ed25519_host_key"
)

// inittab makes busybox init (the guest's PID 1) run drover's rc script
// at boot and its shutdown script at power-off.
const inittab = `::sysinit:` + rcScript + `
::ctrlaltdel:` + guestBB + ` reboot
::shutdown:` + shutdownScript + `
`

// shutdownScript ends the guest's processes and remounts the file
// systems read-only. busybox init runs it before it signals the processes
// itself, and a file system in use cannot be made read-only. kill -1
// spares init and the kill process, not this shell: it ignores TERM.
const shutdownScript = droverDir + "/shutdown"

const shutdownText = `#!` + guestBB + ` sh
bb=` + guestBB + `
trap '' TERM
$bb kill -TERM -1
$bb sleep 0.5
$bb sync
$bb umount -a -r
`

// rcTemplate is drover's rc script; %s is the kind's SSH server start.
// It uses busybox's applets by full path, so it does the same in either
// kind (a Debian root has no ip, for one).
const rcTemplate = `#!` + guestBB + ` sh
# drover's guest init: mounts, host name, network, SSH, ready marker.
bb=` + guestBB + `
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
$bb mount -t proc proc /proc
$bb mount -t sysfs sysfs /sys
$bb grep -q ' /dev ' /proc/mounts || $bb mount -t devtmpfs devtmpfs /dev
$bb mkdir -p /dev/pts /dev/shm
$bb mount -t devpts -o gid=5,mode=620,ptmxmode=666 devpts /dev/pts
$bb mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs /dev/shm
$bb mount -t tmpfs -o mode=755,nosuid,nodev tmpfs /run
$bb mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs /tmp
$bb hostname -F /etc/hostname
$bb ip link set lo up
$bb ip addr add ` + GuestIP + `/24 dev eth0
$bb ip link set eth0 up
$bb ip route add default via ` + GatewayIP + `
# The ACPI power button (QMP system_powerdown) runs /etc/acpi/PWRF/*.
$bb acpid
%s
i=0
until $bb grep -q ':0016 [0-9A-F]*:0000 0A' /proc/net/tcp /proc/net/tcp6 2>/dev/null; do
	i=$((i + 1))
	if [ "$i" -gt 600 ]; then
		echo "drover-guest: the SSH server does not listen; powering off"
		$bb poweroff
		exit 1
	fi
	$bb sleep 0.1
done
echo "` + ReadyMarker + `"
`

// SSH server starts, in the rc script.
const (
	dropbearStart = `/usr/sbin/dropbear -r ` + dropbearHK + ` -p 22 -s -P /run/dropbear.pid -E 2>>/var/log/dropbear.log`
	sshdStart     = `$bb mkdir -p /run/sshd
/usr/sbin/sshd -E /var/log/sshd.log`
)

// sshdConfig is the debian kind's sshd drop-in: the image's host key
// only, keys only.
const sshdConfig = `# drover guest image
HostKey /etc/ssh/ssh_host_ed25519_key
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
`

// common adds what every root has: drover's init, the directories jobs
// use, the network's files, root's authorized key.
func (b *builder) common(root string) error {
	done := b.step("adding drover's init")
	defer done()
	for _, d := range []struct {
		path string
		perm os.FileMode
	}{
		{"proc", 0o555}, {"sys", 0o555}, {"dev", 0o755}, {"run", 0o755}, {"tmp", 0o1777},
		{"root", 0o700}, {"root/.ssh", 0o700}, {"builds", 0o755}, {"cache", 0o755},
		{"var/log", 0o755}, {"etc/acpi/PWRF", 0o755}, {"sbin", 0o755},
	} {
		p := filepath.Join(root, d.path)
		if err := os.MkdirAll(p, d.perm); err != nil {
			return err
		}
		if err := os.Chmod(p, d.perm); err != nil {
			return err
		}
	}
	if _, err := os.Lstat(filepath.Join(root, "sbin/init")); err != nil {
		if err := os.Symlink(guestBB, filepath.Join(root, "sbin/init")); err != nil {
			return err
		}
	}
	pub, err := b.authorizedKey()
	if err != nil {
		return err
	}
	// resolv.conf may be a symlink or the build host's copy.
	_ = os.Remove(filepath.Join(root, "etc/resolv.conf"))
	for _, f := range []struct {
		path string
		perm os.FileMode
		data string
	}{
		{"etc/inittab", 0o644, inittab},
		{rcScript[1:], 0o755, fmt.Sprintf(rcTemplate, b.sshStart())},
		{shutdownScript[1:], 0o755, shutdownText},
		{"etc/acpi/PWRF/00000080", 0o755, "#!" + guestBB + " sh\nexec " + guestBB + " poweroff\n"},
		{"etc/hostname", 0o644, Hostname + "\n"},
		{"etc/hosts", 0o644, "127.0.0.1\tlocalhost\n" + GuestIP + "\t" + Hostname + "\n::1\tlocalhost ip6-localhost ip6-loopback\n"},
		{"etc/resolv.conf", 0o644, "nameserver " + DNSIP + "\n"},
		{"root/.ssh/authorized_keys", 0o600, pub},
	} {
		p := filepath.Join(root, f.path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, []byte(f.data), f.perm); err != nil {
			return err
		}
		if err := os.Chmod(p, f.perm); err != nil {
			return err
		}
	}
	return nil
}

func (b *builder) sshStart() string {
	if b.opts.Kind == Debian {
		return sshdStart
	}
	return dropbearStart
}

// busyboxRoot makes the busybox kind's root: busybox with its applets at
// their usual paths, dropbear with its libraries, the user database.
func (b *builder) busyboxRoot(ctx context.Context, root string) error {
	done := b.step("making the busybox root")
	defer done()
	bb, err := staticBusybox()
	if err != nil {
		return err
	}
	applets, err := busyboxAppletPaths(bb)
	if err != nil {
		return err
	}
	for _, d := range []string{"bin", "sbin", "usr/bin", "usr/sbin", "etc/dropbear", "lib", "lib64", droverDir[1:] + "/bin"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			return err
		}
	}
	if err := copyFile(bb, filepath.Join(root, "bin/busybox"), 0o755); err != nil {
		return err
	}
	if err := os.Symlink("/bin/busybox", filepath.Join(root, guestBB)); err != nil {
		return err
	}
	for _, a := range applets {
		if a == "bin/busybox" {
			continue
		}
		if err := os.Symlink("/bin/busybox", filepath.Join(root, a)); err != nil {
			return fmt.Errorf("busybox applet %s: %w", a, err)
		}
	}
	dropbear, err := findDropbear()
	if err != nil {
		return err
	}
	if err := copyFile(dropbear, filepath.Join(root, "usr/sbin/dropbear"), 0o755); err != nil {
		return err
	}
	libs, err := sharedLibraries(ctx, dropbear)
	if err != nil {
		return err
	}
	for _, lib := range libs {
		if err := os.MkdirAll(filepath.Join(root, filepath.Dir(lib)), 0o755); err != nil {
			return err
		}
		if err := copyFile(lib, filepath.Join(root, lib), 0o755); err != nil {
			return err
		}
	}
	if err := os.WriteFile(filepath.Join(root, dropbearHK[1:]), dropbearKey(b.hostKey), 0o600); err != nil {
		return err
	}
	for _, f := range []struct {
		path string
		perm os.FileMode
		data string
	}{
		{"etc/passwd", 0o644, "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n"},
		{"etc/group", 0o644, "root:x:0:\ntty:x:5:\nnogroup:x:65534:\n"},
		// "*": no password can match, and dropbear does not take the
		// account for locked ("!").
		{"etc/shadow", 0o600, "root:*:19000:0:99999:7:::\nnobody:*:19000:0:99999:7:::\n"},
		{"etc/shells", 0o644, "/bin/sh\n/bin/ash\n"},
		{"etc/profile", 0o644, "export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n"},
	} {
		if err := os.WriteFile(filepath.Join(root, f.path), []byte(f.data), f.perm); err != nil {
			return err
		}
	}
	return nil
}

// debianRoot makes the debian kind's root from the cached debootstrap
// root (made first when missing), with the image's sshd host key and
// busybox for drover's init.
func (b *builder) debianRoot(ctx context.Context, root string) error {
	tarPath, err := debroot.Ensure(ctx, debianRecipe(), func(s string) { b.log.Info(s) })
	if err != nil {
		return err
	}
	done := b.step("unpacking the Debian root", "tar", tarPath)
	defer done()
	cmd := exec.CommandContext(ctx, "tar", "--numeric-owner", "-xpf", tarPath, "-C", root)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("unpack %s: %w: %s", tarPath, err, strings.TrimSpace(string(out)))
	}
	bb, err := staticBusybox()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(root, droverDir[1:], "bin"), 0o755); err != nil {
		return err
	}
	if err := copyFile(bb, filepath.Join(root, guestBB), 0o755); err != nil {
		return err
	}
	priv, pub, err := openSSHKey(b.hostKey, "root@"+Hostname)
	if err != nil {
		return err
	}
	for _, f := range []struct {
		path string
		perm os.FileMode
		data []byte
	}{
		{"etc/ssh/ssh_host_ed25519_key", 0o600, priv},
		{"etc/ssh/ssh_host_ed25519_key.pub", 0o644, pub},
		{"etc/ssh/sshd_config.d/drover.conf", 0o644, []byte(sshdConfig)},
	} {
		p := filepath.Join(root, f.path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, f.data, f.perm); err != nil {
			return err
		}
	}
	return nil
}

// disk makes the root file system (ext4, of size bytes, sparse) from the
// tree at root and converts it to the image's qcow2.
func (b *builder) disk(ctx context.Context, root string, size int64) error {
	done := b.step("making the root disk", "size_gib", size>>30)
	defer done()
	raw := filepath.Join(b.work, "root.ext4")
	f, err := os.Create(raw)
	if err != nil {
		return err
	}
	if err := f.Truncate(size); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	// The inode tables and the journal are written now (zeros, which the
	// qcow2 does not store) rather than by the guest's ext4 after every
	// boot, in each linked clone.
	args := []string{"-q", "-F", "-t", "ext4", "-L", "drover-root", "-d", root,
		"-E", "lazy_itable_init=0,lazy_journal_init=0,root_owner=0:0", raw}
	if out, err := exec.CommandContext(ctx, sbin("mkfs.ext4"), args...).CombinedOutput(); err != nil {
		return fmt.Errorf("mkfs.ext4: %w: %s", err, strings.TrimSpace(string(out)))
	}
	if os.Geteuid() != 0 {
		// mkfs.ext4 -d copies the owners of the tree, which are ours.
		if err := chownAllRoot(ctx, raw, root); err != nil {
			return err
		}
	}
	cmd := exec.CommandContext(ctx, "qemu-img", "convert", "-f", "raw", "-O", "qcow2", raw, filepath.Join(b.out, diskFile))
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("qemu-img convert: %w: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// chownAllRoot makes root:root the owner of every file of the file
// system image raw that the tree at root holds, with debugfs.
func chownAllRoot(ctx context.Context, raw, root string) error {
	var cmds bytes.Buffer
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		rel = "/" + filepath.ToSlash(rel)
		if strings.ContainsAny(rel, " \t\n\"") {
			return fmt.Errorf("chown in the disk image: unsupported file name %q", rel)
		}
		fmt.Fprintf(&cmds, "sif %s uid 0\nsif %s gid 0\n", rel, rel)
		return nil
	})
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, sbin("debugfs"), "-w", "-f", "-", raw)
	cmd.Stdin = &cmds
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("debugfs (chown): %w: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// sbin is the path of the system tool name: found on PATH, else in
// /usr/sbin or /sbin, which a user's PATH may lack; else name as is (and
// running it fails with the name in the error).
func sbin(name string) string {
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	for _, dir := range []string{"/usr/sbin", "/sbin"} {
		if p := filepath.Join(dir, name); isExecutable(p) {
			return p
		}
	}
	return name
}

func isExecutable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

// staticBusybox is the path of a statically linked busybox on PATH.
func staticBusybox() (string, error) {
	p, err := exec.LookPath("busybox")
	if err != nil {
		return "", fmt.Errorf("no busybox (apt-get install busybox-static): %w", err)
	}
	f, err := elf.Open(p)
	if err != nil {
		return "", fmt.Errorf("busybox %s: %w", p, err)
	}
	defer f.Close()
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			return "", fmt.Errorf("busybox %s is dynamically linked (apt-get install busybox-static)", p)
		}
	}
	return p, nil
}

// busyboxAppletPaths are busybox's applets as paths relative to the root
// (bin/sh, usr/bin/env, ...).
func busyboxAppletPaths(bb string) ([]string, error) {
	out, err := exec.Command(bb, "--list-full").Output()
	if err != nil {
		return nil, fmt.Errorf("busybox --list-full: %w", err)
	}
	var paths []string
	for _, line := range strings.Fields(string(out)) {
		// linuxrc is an initrd's init, not a command.
		if strings.Contains(line, "/") && line != "linuxrc" {
			paths = append(paths, strings.TrimPrefix(line, "/"))
		}
	}
	if len(paths) < 50 {
		return nil, fmt.Errorf("busybox --list-full lists %d applets; want a full busybox", len(paths))
	}
	return paths, nil
}

// busyboxApplets are busybox's applet names.
func busyboxApplets(bb string) ([]string, error) {
	paths, err := busyboxAppletPaths(bb)
	if err != nil {
		return nil, err
	}
	names := make([]string, len(paths))
	for i, p := range paths {
		names[i] = filepath.Base(p)
	}
	return names, nil
}

// findDropbear is the path of the host's dropbear server.
func findDropbear() (string, error) {
	for _, p := range []string{"/usr/sbin/dropbear", "/usr/bin/dropbear"} {
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	p, err := exec.LookPath("dropbear")
	if err != nil {
		return "", fmt.Errorf("no dropbear (apt-get install dropbear-bin): %w", err)
	}
	return p, nil
}

// lddLine matches a library path in ldd's output: "libz.so.1 =>
// /lib/x86_64-linux-gnu/libz.so.1 (0x...)" or "/lib64/ld-linux-x86-64.so.2
// (0x...)".
var lddLine = regexp.MustCompile(`(?:=>\s*|^\s*)(/\S+)\s+\(0x`)

// sharedLibraries lists the shared libraries bin loads, the dynamic
// loader included, as absolute paths, by ldd.
func sharedLibraries(ctx context.Context, bin string) ([]string, error) {
	out, err := exec.CommandContext(ctx, "ldd", bin).Output()
	if err != nil {
		return nil, fmt.Errorf("ldd %s: %w", bin, err)
	}
	var libs []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if m := lddLine.FindStringSubmatch(sc.Text()); m != nil {
			libs = append(libs, m[1])
		}
	}
	if len(libs) == 0 {
		return nil, fmt.Errorf("ldd %s lists no libraries:\n%s", bin, out)
	}
	return libs, nil
}

// copyFile copies src (following symbolic links) to dst with perm.
func copyFile(src, dst string, perm os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, perm)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return fmt.Errorf("copy %s: %w", src, err)
	}
	if err := out.Close(); err != nil {
		return err
	}
	return os.Chmod(dst, perm)
}
