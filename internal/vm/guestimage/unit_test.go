package guestimage

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/crypto/ssh"
)

// TestCpioWriter: busybox's cpio reads what cpioWriter writes (the
// format the kernel unpacks): names, types, sizes, device numbers.
func TestCpioWriter(t *testing.T) {
	bb, err := staticBusybox()
	if err != nil {
		t.Skip(err)
	}
	var buf bytes.Buffer
	w := newCpioWriter(&buf)
	w.dir("bin", 0o755)
	w.file("bin/hello", 0o755, []byte("#!/bin/sh\necho hello\n"))
	w.file("odd", 0o644, []byte("x")) // a size needing padding
	w.symlink("bin/sh", "busybox")
	w.charDev("console", 0o600, 5, 1)
	if err := w.close(); err != nil {
		t.Fatal(err)
	}
	if buf.Len()%4 != 0 {
		t.Errorf("archive length %d, want a multiple of 4", buf.Len())
	}
	archive := buf.Bytes()
	cmd := exec.Command(bb, "cpio", "-t", "-v")
	cmd.Stdin = bytes.NewReader(archive)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("busybox cpio -t -v: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	want := []struct{ prefix, suffix string }{
		{"drwxr-xr-x", " bin"},
		{"-rwxr-xr-x", " 21 1970-01-01 00:00:00 bin/hello"},
		{"-rw-r--r--", " 1 1970-01-01 00:00:00 odd"},
		{"lrwxrwxrwx", " bin/sh -> busybox"},
		{"crw-------", " console"}, // -v does not show the device
	}
	if len(lines) < len(want) {
		t.Fatalf("busybox cpio lists %d entries, want %d:\n%s", len(lines), len(want), out)
	}
	for i, w := range want {
		if !strings.HasPrefix(lines[i], w.prefix) || !strings.HasSuffix(lines[i], w.suffix) {
			t.Errorf("entry %d = %q, want %q...%q", i, lines[i], w.prefix, w.suffix)
		}
	}
	if os.Geteuid() != 0 {
		return // extracting a device node needs root
	}
	dir := t.TempDir()
	cmd = exec.Command(bb, "cpio", "-i", "-d")
	cmd.Dir, cmd.Stdin = dir, bytes.NewReader(archive)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("busybox cpio -i: %v\n%s", err, out)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(dir, "console"), &st); err != nil {
		t.Fatal(err)
	}
	// Linux's encoding of device numbers (glibc's gnu_dev_major/minor).
	major := (st.Rdev>>8)&0xfff | (st.Rdev>>32)&^0xfff
	minor := st.Rdev&0xff | (st.Rdev>>12)&^0xff
	if st.Mode&syscall.S_IFMT != syscall.S_IFCHR || major != 5 || minor != 1 {
		t.Errorf("console: mode %o, device %d,%d; want a character device 5,1", st.Mode, major, minor)
	}
	if data, err := os.ReadFile(filepath.Join(dir, "bin/hello")); err != nil || string(data) != "#!/bin/sh\necho hello\n" {
		t.Errorf("bin/hello = %q, %v", data, err)
	}
}

func TestLoadOrder(t *testing.T) {
	deps := map[string][]string{
		"virtio_pci":             {"virtio", "virtio_ring", "virtio_pci_modern_dev"},
		"virtio_blk":             {"virtio", "virtio_ring"},
		"virtio_net":             {"net_failover", "virtio", "virtio_ring"},
		"net_failover":           {"failover"},
		"failover":               nil,
		"virtio":                 nil,
		"virtio_ring":            nil,
		"virtio_pci_modern_dev":  nil,
		"loop_a":                 {"loop_b"},
		"loop_b":                 {"loop_a"},
		"needs_missing":          {"missing"},
		"button":                 nil,
		"virtio_pci_legacy_dev ": nil,
	}
	mods := map[string]string{}
	for name := range deps {
		mods[name] = "/m/" + strings.ReplaceAll(name, "_", "-") + ".ko"
	}
	depends := func(path string) ([]string, error) { return deps[moduleName(path)], nil }
	for _, tc := range []struct {
		name    string
		want    []string
		order   []string
		wantErr string
	}{
		{"dependencies first, each once", []string{"virtio_pci", "virtio_blk", "virtio_net"},
			[]string{"virtio", "virtio_ring", "virtio_pci_modern_dev", "virtio_pci", "virtio_blk", "failover", "net_failover", "virtio_net"}, ""},
		{"no dependencies", []string{"button"}, []string{"button"}, ""},
		{"not a module", []string{"ext4"}, nil, "no module ext4 (built in?)"},
		{"a dependency missing", []string{"needs_missing"}, nil, "needs_missing needs missing"},
		{"a cycle", []string{"loop_a"}, nil, "depends on itself"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := loadOrder(mods, tc.want, depends)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("loadOrder(%v) = %v, %v; want an error with %q", tc.want, got, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("loadOrder(%v) = %v", tc.want, err)
			}
			var names []string
			for _, p := range got {
				names = append(names, moduleName(p))
			}
			if !slices.Equal(names, tc.order) {
				t.Errorf("loadOrder(%v) = %v, want %v", tc.want, names, tc.order)
			}
		})
	}
}

// TestDropbearKey: dropbearkey reads the host key file Build writes for
// dropbear and derives the same public key.
func TestDropbearKey(t *testing.T) {
	dk, err := exec.LookPath("dropbearkey")
	if err != nil {
		t.Skipf("dropbearkey not installed (apt-get install dropbear-bin): %v", err)
	}
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(path, dropbearKey(priv), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(dk, "-y", "-f", path).CombinedOutput()
	if err != nil {
		t.Fatalf("dropbearkey -y: %v\n%s", err, out)
	}
	pub, err := ssh.NewPublicKey(priv.Public())
	if err != nil {
		t.Fatal(err)
	}
	want := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(pub)))
	if !strings.Contains(string(out), want) {
		t.Errorf("dropbearkey -y printed\n%s\nwant the line %q", out, want)
	}
}

func TestName(t *testing.T) {
	base := Name(Options{})
	if !strings.HasPrefix(base, "busybox-") || base != Name(Options{Kind: Busybox}) {
		t.Errorf("Name(busybox) = %q, want busybox-KEY, the same for Kind \"\" and busybox", base)
	}
	seen := map[string]Options{}
	for _, o := range []Options{
		{},
		{Kind: Debian},
		{KernelPackage: "linux-image-6.1.0-57-cloud-amd64"},
		{Kind: Debian, KernelPackage: "linux-image-6.1.0-57-cloud-amd64"},
	} {
		n := Name(o)
		if prev, ok := seen[n]; ok {
			t.Errorf("Name(%+v) = Name(%+v) = %q, want them different", o, prev, n)
		}
		seen[n] = o
	}
	if n := Name(Options{CacheDir: "/elsewhere", Logger: nil}); n != base {
		t.Errorf("Name with another cache directory = %q, want %q", n, base)
	}
}

func TestBuildRefusesAnUnknownKind(t *testing.T) {
	_, err := Build(t.Context(), Options{Kind: "alpine", CacheDir: t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), `unknown kind "alpine"`) {
		t.Errorf("Build(alpine) = %v, want an unknown kind error", err)
	}
}

func TestLoadMissing(t *testing.T) {
	_, err := Load(t.TempDir())
	if !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Load(empty directory) = %v, want fs.ErrNotExist", err)
	}
}

func TestCommandLine(t *testing.T) {
	got := CommandLine([]string{"qemu-system-x86_64", "-append", "console=ttyS0 root=/dev/vda", "it's", "a,b=c:d", ""})
	want := `qemu-system-x86_64 -append 'console=ttyS0 root=/dev/vda' 'it'\''s' a,b=c:d ''`
	if got != want {
		t.Errorf("CommandLine = %s, want %s", got, want)
	}
}
