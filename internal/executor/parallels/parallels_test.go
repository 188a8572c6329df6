package parallels

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/drover-ci/drover/internal/config"
	"github.com/drover-ci/drover/internal/config/configtest"
)

// TestParseConfig: GitLab Runner's keys of [runners.parallels] with
// [runners.ssh], their defaults, an unknown key warned, and each problem
// reported at its file, line and key.
func TestParseConfig(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "config.toml")
	parse := func(lines string, lookPath func(string) (string, error)) (Config, []config.Warning, error) {
		t.Helper()
		_, r := configtest.Runner(t, dir, "parallels", lines)
		return ParseConfig(file, r, lookPath)
	}
	found := func(b string) (string, error) { return "/usr/local/bin/" + b, nil }
	missing := func(string) (string, error) { return "", exec.ErrNotFound }
	ssh := "  [runners.ssh]\n    user = \"gitlab\"\n    password = \"pw\"\n"

	c, warns, err := parse(`  [runners.parallels]
    base_name = "macos-14"
    template_name = "macos-tpl"
    disable_snapshots = true
    time_server = "pool.ntp.org"
    allowed_images = ["^macos-"]
    colour = "blue"
`+ssh, found)
	if err != nil {
		t.Fatalf("ParseConfig: %v", err)
	}
	if c.VM.BaseName != "macos-14" || c.TemplateName != "macos-tpl" || !c.VM.DisableSnapshots || c.TimeServer != "pool.ntp.org" ||
		len(c.VM.AllowedImages) != 1 || c.Prlctl != "/usr/local/bin/prlctl" || c.LeasesFile != DefaultLeasesFile || !c.VM.ProjectNames {
		t.Errorf("config = %+v", c)
	}
	if h := c.Hypervisor(); h.template("macos-14") != "macos-tpl" || h.TimeServer != "pool.ntp.org" {
		t.Errorf("Hypervisor() = %+v", h)
	}
	if h := (&Hypervisor{}); h.template("macos-14") != "macos-14-template" {
		t.Errorf("default template = %q, want macos-14-template", h.template("macos-14"))
	}
	if len(warns) != 1 || !strings.Contains(warns[0].String(), "config.toml:11: runners[0].parallels.colour: unknown key") {
		t.Errorf("warnings = %v, want one about colour at its line", warns)
	}

	for _, tc := range []struct {
		name, lines string
		lookPath    func(string) (string, error)
		want        string
	}{
		{"no table", ssh, found, `config.toml:4: runners[0].executor: executor "parallels" needs a [runners.parallels] table with at least base_name`},
		{"no base_name", "  [runners.parallels]\n    time_server = \"x\"\n" + ssh, found, "runners[0].parallels: base_name is required"},
		{"no prlctl", "  [runners.parallels]\n    base_name = \"macos\"\n" + ssh, missing,
			`config.toml:4: runners[0].executor: executor "parallels" needs prlctl, which is not on PATH: install Parallels Desktop`},
		{"bad regexp", "  [runners.parallels]\n    base_name = \"macos\"\n    allowed_images = [\"(\"]\n" + ssh, found,
			`config.toml:7: runners[0].parallels.allowed_images[0]: invalid regular expression "("`},
		{"no ssh", "  [runners.parallels]\n    base_name = \"macos\"\n", found, `needs a [runners.ssh] table with at least user`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := parse(tc.lines, tc.lookPath)
			var ce *config.Error
			if !errors.As(err, &ce) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("ParseConfig = %v, want a *config.Error containing %q", err, tc.want)
			}
		})
	}
}

// TestParseOutput: prlctl's output and Parallels' DHCP leases read as
// GitLab Runner's helpers/parallels reads them.
func TestParseOutput(t *testing.T) {
	info := "ID: {0ed1d4a3-1234-4567-89ab-0123456789ab}\nName: macos-14\nState: running\nHardware:\n  cpu cpus=2\n  net0 (+) type=shared ips=10.211.55.5/255.255.255.0 mac=001C42F593FB card=virtio\n"
	if mac, ok := parseMAC(info); !ok || mac != "001C42F593FB" {
		t.Errorf("parseMAC = %q, %v", mac, ok)
	}
	if _, ok := parseMAC("  net1 (+) type=shared mac=001C42F593FB card=virtio\n"); ok {
		t.Errorf("parseMAC found net1's address")
	}
	// An older lease of the address, a newer one, and another MAC's.
	leases := "[vnic0]\n10.211.55.181=\"1418921112,1800,001c42f593fb,ff42f593fb000100011c25b9ff001c42f593fb\"\n" +
		"10.211.55.190=\"1418929112,1800,001c42f593fb,ff42f593fb000100011c25b9ff001c42f593fb\"\n" +
		"10.211.55.7=\"1418939112,1800,001c42000001,ff42000001000100011c25b9ff001c42000001\"\n"
	if ip, ok := parseLeases(leases, "001C42F593FB"); !ok || ip != "10.211.55.190" {
		t.Errorf("parseLeases = %q, %v; want the most recent lease, 10.211.55.190", ip, ok)
	}
	if _, ok := parseLeases(leases, "001C42ABCDEF"); ok {
		t.Errorf("parseLeases found a lease of an unknown MAC")
	}
	leaseFile := filepath.Join(t.TempDir(), "leases")
	if err := os.WriteFile(leaseFile, []byte(leases), 0o600); err != nil {
		t.Fatal(err)
	}
	if ip, err := IPFromLeases(leaseFile, "001C42F593FB"); err != nil || ip != "10.211.55.190" {
		t.Errorf("IPFromLeases = %q, %v", ip, err)
	}
	if _, err := IPFromLeases(leaseFile, "001C42"); err == nil {
		t.Errorf("IPFromLeases of a short MAC: no error")
	}
	list := "PARENT_SNAPSHOT_ID                      SNAPSHOT_ID\n                                        {64ea4ec4-1111-4c2f-a9a3-8b9b2c1b1111}\n{64ea4ec4-1111-4c2f-a9a3-8b9b2c1b1111}  *{b5a3b1f0-2222-4c2f-a9a3-8b9b2c1b2222}\n"
	if id, ok := parseDefaultSnapshot(list); !ok || id != "{b5a3b1f0-2222-4c2f-a9a3-8b9b2c1b2222}" {
		t.Errorf("parseDefaultSnapshot = %q, %v", id, ok)
	}
	if _, ok := parseDefaultSnapshot("PARENT_SNAPSHOT_ID                      SNAPSHOT_ID\n"); ok {
		t.Errorf("parseDefaultSnapshot without snapshots: ok")
	}
}
