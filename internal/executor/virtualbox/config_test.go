package virtualbox

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

// parse parses a config.toml of one virtualbox runner with the given
// lines after executor.
func parse(t *testing.T, dir, lines string, lookPath func(string) (string, error)) (Config, []config.Warning, error) {
	t.Helper()
	file, r := configtest.Runner(t, dir, "virtualbox", lines)
	return ParseConfig(file, r, lookPath)
}

// TestParseConfig: GitLab Runner's keys of [runners.virtualbox] with
// [runners.ssh], their defaults, an unknown key warned, and each problem
// reported at its file, line and key.
func TestParseConfig(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "id"), []byte("key"), 0o600); err != nil {
		t.Fatal(err)
	}
	found := func(b string) (string, error) { return "/usr/bin/" + b, nil }
	lowercase := func(b string) (string, error) {
		if b == "vboxmanage" {
			return "/usr/bin/vboxmanage", nil
		}
		return "", exec.ErrNotFound
	}
	missing := func(string) (string, error) { return "", exec.ErrNotFound }
	ssh := "  [runners.ssh]\n    user = \"gitlab\"\n    password = \"pw\"\n    port = \"2222\"\n"

	c, warns, err := parse(t, dir, `  [runners.virtualbox]
    base_name = "debian"
    base_snapshot = "clean"
    base_folder = "vms"
    disable_snapshots = true
    allowed_images = ["^debian-"]
    start_type = "gui"
    boot_timeout = "90s"
    colour = "blue"
`+ssh, found)
	if err != nil {
		t.Fatalf("ParseConfig: %v", err)
	}
	if c.VM.BaseName != "debian" || c.BaseSnapshot != "clean" || c.BaseFolder != filepath.Join(dir, "vms") || !c.VM.DisableSnapshots ||
		len(c.VM.AllowedImages) != 1 || c.StartType != "gui" || c.VM.BootTimeout != 90*time.Second || c.VM.SSH.User != "gitlab" ||
		c.VM.SSH.Port != 2222 || c.VBoxManage != "/usr/bin/VBoxManage" || !c.VM.ProjectNames || c.VM.Section != "virtualbox" {
		t.Errorf("config = %+v", c)
	}
	if h := c.Hypervisor(); h.GuestSSHPort != 2222 || h.StartType != "gui" || h.BaseSnapshot != "clean" || !h.DisableSnapshots {
		t.Errorf("Hypervisor() = %+v", h)
	}
	if len(warns) != 1 || !strings.Contains(warns[0].String(), "config.toml:13: runners[0].virtualbox.colour: unknown key") {
		t.Errorf("warnings = %v, want one about colour at its line", warns)
	}
	if c, _, err := parse(t, dir, "  [runners.virtualbox]\n    base_name = \"debian\"\n"+ssh, lowercase); err != nil || c.VBoxManage != "/usr/bin/vboxmanage" {
		t.Errorf("with vboxmanage only on PATH: %v, %q", err, c.VBoxManage)
	}

	for _, tc := range []struct {
		name, lines string
		lookPath    func(string) (string, error)
		want        string
	}{
		{"no table", ssh, found, `config.toml:4: runners[0].executor: executor "virtualbox" needs a [runners.virtualbox] table with at least base_name`},
		{"no base_name", "  [runners.virtualbox]\n    start_type = \"headless\"\n" + ssh, found, "runners[0].virtualbox: base_name is required"},
		{"no VBoxManage", "  [runners.virtualbox]\n    base_name = \"debian\"\n" + ssh, missing,
			`config.toml:4: runners[0].executor: executor "virtualbox" needs VBoxManage, which is not on PATH: install VirtualBox`},
		{"bad start_type", "  [runners.virtualbox]\n    base_name = \"debian\"\n    start_type = \"window\"\n" + ssh, found,
			`config.toml:7: runners[0].virtualbox.start_type: want gui, headless, sdl or separate (startvm --type), got "window"`},
		{"bad regexp", "  [runners.virtualbox]\n    base_name = \"debian\"\n    allowed_images = [\"(\"]\n" + ssh, found,
			`config.toml:7: runners[0].virtualbox.allowed_images[0]: invalid regular expression "("`},
		{"wrong type", "  [runners.virtualbox]\n    base_name = \"debian\"\n    disable_snapshots = \"yes\"\n" + ssh, found,
			`config.toml:7: runners[0].virtualbox.disable_snapshots: must be a boolean`},
		{"no ssh", "  [runners.virtualbox]\n    base_name = \"debian\"\n", found, `needs a [runners.ssh] table with at least user`},
		{"no credentials", "  [runners.virtualbox]\n    base_name = \"debian\"\n  [runners.ssh]\n    user = \"gitlab\"\n", found, `runners[0].ssh: identity_file or password is required`},
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
