package guestimage

import (
	"bufio"
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// initScript is the initramfs's /init (busybox sh): load the modules in
// /modules (an order with dependencies first), wait for the root disk,
// mount it and switch to it, its /sbin/init as PID 1. Any failure is
// printed on the console and powers the guest off, so a caller waiting
// for the ready marker sees QEMU exit instead of waiting out its timeout.
const initScript = `#!/bin/busybox sh
export PATH=/bin
fail() { echo "drover-guest: initramfs: $*"; sleep 1; poweroff -f; }
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
if grep -qw ` + AppendPowerOff + ` /proc/cmdline; then poweroff -f; fi
while read -r m; do
	insmod "/lib/modules/$m.ko" || fail "insmod $m failed"
done < /modules
root=/dev/vda
for arg in $(cat /proc/cmdline); do
	case "$arg" in root=*) root=${arg#root=} ;; esac
done
i=0
while [ ! -b "$root" ]; do
	i=$((i + 1))
	[ "$i" -le 300 ] || fail "no root disk $root"
	sleep 0.1
done
mount -t ext4 -o rw "$root" /newroot || fail "cannot mount $root"
mount --move /dev /newroot/dev || fail "cannot move /dev"
umount /proc /sys
exec switch_root /newroot /sbin/init
`

// initramfs writes the image's initrd: busybox (applets linked in /bin),
// the boot modules with their dependencies and the init script, as a
// gzip-compressed newc cpio archive.
func (b *builder) initramfs(k *kernel) error {
	done := b.step("making the initramfs")
	defer done()
	mods, err := modules(k.modDir)
	if err != nil {
		return err
	}
	order, err := loadOrder(mods, bootModules, moduleDepends)
	if err != nil {
		return err
	}
	bb, err := staticBusybox()
	if err != nil {
		return err
	}
	applets, err := busyboxApplets(bb)
	if err != nil {
		return err
	}
	if err := copyFile(k.vmlinuz, filepath.Join(b.out, kernelFile), 0o644); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(b.out, initrdFile))
	if err != nil {
		return err
	}
	defer f.Close()
	bw := bufio.NewWriter(f)
	zw, err := gzip.NewWriterLevel(bw, gzip.DefaultCompression)
	if err != nil {
		return err
	}
	w := newCpioWriter(zw)
	for _, d := range []string{"bin", "dev", "proc", "sys", "newroot", "lib", "lib/modules"} {
		w.dir(d, 0o755)
	}
	// The kernel opens /dev/console for init's standard streams before
	// /init runs, when devtmpfs is not mounted yet.
	w.charDev("dev/console", 0o600, 5, 1)
	if err := w.fileFrom("bin/busybox", 0o755, bb); err != nil {
		return err
	}
	for _, a := range applets {
		if a != "busybox" {
			w.symlink("bin/"+a, "busybox")
		}
	}
	var list strings.Builder
	for _, path := range order {
		name := moduleName(path)
		if err := w.fileFrom("lib/modules/"+name+".ko", 0o644, path); err != nil {
			return err
		}
		list.WriteString(name + "\n")
	}
	w.file("modules", 0o644, []byte(list.String()))
	w.file("init", 0o755, []byte(initScript))
	if err := w.close(); err != nil {
		return fmt.Errorf("initramfs: %w", err)
	}
	if err := zw.Close(); err != nil {
		return fmt.Errorf("initramfs: %w", err)
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("initramfs: %w", err)
	}
	return f.Close()
}

// cpioWriter writes a cpio archive in the "newc" format, the one the
// kernel unpacks as an initramfs. The first write error sticks and is
// returned by close.
type cpioWriter struct {
	w   io.Writer
	ino int
	n   int64 // bytes written, for the 4-byte alignment
	err error
}

func newCpioWriter(w io.Writer) *cpioWriter { return &cpioWriter{w: w, ino: 1} }

// Mode bits of cpio entries (as in struct stat).
const (
	cpioDir     = 0o040000
	cpioFile    = 0o100000
	cpioSymlink = 0o120000
	cpioChar    = 0o020000
)

func (c *cpioWriter) write(p []byte) {
	if c.err != nil {
		return
	}
	n, err := c.w.Write(p)
	c.n += int64(n)
	c.err = err
}

func (c *cpioWriter) pad() {
	if r := c.n % 4; r != 0 {
		c.write(make([]byte, 4-r))
	}
}

// entry writes one header, the name and the data, each padded to 4 bytes.
func (c *cpioWriter) entry(name string, mode uint32, rdevMajor, rdevMinor int, data []byte) {
	nlink := 1
	if mode&0o170000 == cpioDir {
		nlink = 2
	}
	hdr := fmt.Sprintf("070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
		c.ino, mode, 0, 0, nlink, 0, len(data), 0, 0, rdevMajor, rdevMinor, len(name)+1, 0)
	c.ino++
	c.write([]byte(hdr))
	c.write([]byte(name + "\x00"))
	c.pad()
	c.write(data)
	c.pad()
}

func (c *cpioWriter) dir(name string, perm uint32) { c.entry(name, cpioDir|perm, 0, 0, nil) }

func (c *cpioWriter) file(name string, perm uint32, data []byte) {
	c.entry(name, cpioFile|perm, 0, 0, data)
}

func (c *cpioWriter) symlink(name, target string) {
	c.entry(name, cpioSymlink|0o777, 0, 0, []byte(target))
}

func (c *cpioWriter) charDev(name string, perm uint32, major, minor int) {
	c.entry(name, cpioChar|perm, major, minor, nil)
}

// fileFrom adds the host file src as name.
func (c *cpioWriter) fileFrom(name string, perm uint32, src string) error {
	data, err := os.ReadFile(src)
	if err != nil {
		return fmt.Errorf("initramfs: %w", err)
	}
	c.file(name, perm, data)
	return nil
}

// close writes the trailer.
func (c *cpioWriter) close() error {
	c.entry("TRAILER!!!", 0, 0, 0, nil)
	return c.err
}
