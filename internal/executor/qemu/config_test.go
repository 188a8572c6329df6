package qemu

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/config"
	"github.com/drover-ci/drover/internal/config/configtest"
)

// parse parses a config.toml of one qemu runner with the given lines
// after executor and returns its qemu Config.
func parse(t *testing.T, dir, lines string, lookPath func(string) (string, error)) (Config, []config.Warning, error) {
	t.Helper()
	file, r := configtest.Runner(t, dir, "qemu", lines)
	return ParseConfig(t.Context(), file, r, lookPath)
}

func needQemuImg(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("qemu-img"); err != nil {
		t.Skip("qemu-img not installed (apt-get install qemu-utils)")
	}
}

// TestParseConfig: the keys of [runners.qemu] and [runners.ssh], their
// defaults, and each problem reported at its file, line and key.
func TestParseConfig(t *testing.T) {
	needQemuImg(t)
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		t.Skip("qemu-system-x86 not installed")
	}
	dir := t.TempDir()
	base := filepath.Join(dir, "busybox.qcow2")
	if out, err := exec.Command("qemu-img", "create", "-q", "-f", "qcow2", base, "16M").CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if err := os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("hello\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "id"), []byte("key"), 0o600); err != nil {
		t.Fatal(err)
	}
	found := exec.LookPath // QEMU itself is not run here
	ssh := "  [runners.ssh]\n    user = \"root\"\n    identity_file = \"id\"\n"

	c, warns, err := parse(t, dir, `  [runners.qemu]
    base_name = "busybox.qcow2"
    memory = 256
    cpus = 2
    accel = "tcg"
    boot_timeout = "90s"
    allowed_images = ["^busybox$"]
    colour = "blue"
`+ssh+"    port = \"2222\"\n", found)
	if err != nil {
		t.Fatalf("ParseConfig: %v", err)
	}
	if c.VM.BaseName != base || c.BaseFolder != filepath.Join(dir, "qemu") || c.Machine.MemoryMiB != 256 || c.Machine.CPUs != 2 ||
		c.Machine.Accel != "tcg" || c.VM.BootTimeout != 90*time.Second || len(c.VM.AllowedImages) != 1 ||
		c.VM.SSH.User != "root" || c.VM.SSH.IdentityFile != filepath.Join(dir, "id") || c.Machine.GuestSSHPort != 2222 {
		t.Errorf("config = %+v", c)
	}
	if len(warns) != 1 || !strings.Contains(warns[0].String(), "qemu.colour: unknown key") {
		t.Errorf("warnings = %v, want one about colour", warns)
	}

	for _, tc := range []struct {
		name, lines string
		lookPath    func(string) (string, error)
		want        string
	}{
		{"no table", "", found, `config.toml:4: runners[0].executor: executor "qemu" needs a [runners.qemu] table`},
		{"no qemu", "  [runners.qemu]\n    base_name = \"busybox.qcow2\"\n" + ssh, func(b string) (string, error) { return "", exec.ErrNotFound },
			`config.toml:4: runners[0].executor: executor "qemu" needs qemu-system-x86_64, which is not on PATH: install the qemu-system-x86 package`},
		{"no qemu-img", "  [runners.qemu]\n    base_name = \"busybox.qcow2\"\n" + ssh, func(b string) (string, error) {
			if b == "qemu-img" {
				return "", exec.ErrNotFound
			}
			return exec.LookPath(b)
		}, "needs qemu-img, which is not on PATH: install the qemu-utils package"},
		{"missing base", "  [runners.qemu]\n    base_name = \"nope.qcow2\"\n" + ssh, found, "config.toml:6: runners[0].qemu.base_name: " + filepath.Join(dir, "nope.qcow2") + " does not exist"},
		{"base not an image", "  [runners.qemu]\n    base_name = \"notes.txt\"\n" + ssh, found, "config.toml:6: runners[0].qemu.base_name: " + filepath.Join(dir, "notes.txt") + ": not a qcow2 or raw disk image"},
		{"directory without allowed_images", "  [runners.qemu]\n    base_name = \".\"\n" + ssh, found, "is a directory: base_name is an image, or with allowed_images a directory of images"},
		{"no saved state", "  [runners.qemu]\n    base_name = \"busybox.qcow2\"\n    base_snapshot = \"ready\"\n" + ssh, found,
			`config.toml:7: runners[0].qemu.base_snapshot: ` + base + ` has no saved running state "ready": make one with drover vm snapshot`},
		{"bad regexp", "  [runners.qemu]\n    base_name = \"busybox.qcow2\"\n    allowed_images = [\"(\"]\n" + ssh, found, `runners[0].qemu.allowed_images[0]: invalid regular expression "("`},
		{"no ssh", "  [runners.qemu]\n    base_name = \"busybox.qcow2\"\n", found, `needs a [runners.ssh] table with at least user`},
		{"no ssh user", "  [runners.qemu]\n    base_name = \"busybox.qcow2\"\n  [runners.ssh]\n    password = \"x\"\n", found, `runners[0].ssh: user is required`},
		{"bad accel", "  [runners.qemu]\n    base_name = \"busybox.qcow2\"\n    accel = \"hvf\"\n" + ssh, found, `runners[0].qemu.accel: want auto, kvm or tcg, got "hvf"`},
		{"bad boot timeout", "  [runners.qemu]\n    base_name = \"busybox.qcow2\"\n    boot_timeout = \"soon\"\n" + ssh, found, `runners[0].qemu.boot_timeout: want a positive duration`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := parse(t, dir, tc.lines, tc.lookPath)
			var ce *config.Error
			if !errors.As(err, &ce) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("ParseConfig = %v, want a *config.Error containing %q", err, tc.want)
			}
		})
	}
}
