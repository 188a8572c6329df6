package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/client"
	"github.com/drover-ci/drover/internal/executor/parallels"
	"github.com/drover-ci/drover/internal/freeport"
	"github.com/drover-ci/drover/internal/vm/guestimage"
	"github.com/drover-ci/drover/internal/vm/guestimage/guestimagetest"
	"github.com/drover-ci/drover/internal/vm/prlstandin"
	"github.com/drover-ci/drover/internal/vm/qemu"
)

// prlSelected reports whether a prlctl call is compared with GitLab
// Runner's sequence: everything but the state, info and snapshot
// queries.
func prlSelected(c []string) bool {
	return c[0] != "list" && c[0] != "snapshot-list"
}

// TestParallelsExecutor runs jobs with executor = "parallels" through a
// real coordinator and drover run, with a GitLab Runner config.toml, on
// the stand-in for prlctl (a real QEMU guest per VM, each on a loopback
// address of its own that the stand-in's DHCP leases file names): the
// job runs in the guest, reached at its leased address; the prlctl
// commands are GitLab Runner's (first job of a slot: template, create,
// start, exec until the guest answers, Started snapshot, time sync
// attempts; next job: snapshot-switch and start; stop --kill after each;
// with disable_snapshots a VM per job, deleted after it), a refused image
// and a missing base VM fail the job naming them.
func TestParallelsExecutor(t *testing.T) {
	img := guestimagetest.Image(t, guestimage.Busybox)
	buildStandin(t, "internal/vm/prlstandin/cmd/prlctl", "prlctl")
	home := t.TempDir()
	// The guests' SSH port on their addresses: one free on 127.0.0.1 is
	// as good as any (each guest has an address of its own).
	port, err := freeport.Port()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(prlstandin.HomeEnv, home)
	t.Setenv(prlstandin.SSHPortEnv, strconv.Itoa(port))
	t.Setenv(parallels.LeasesFileEnv, prlstandin.LeasesFile(home))
	t.Cleanup(func() { prlstandin.KillAll(context.Background(), home) })
	m := qemu.Machine{Kernel: img.Kernel, Initrd: img.Initrd, Append: img.Append, MemoryMiB: 256}
	if err := prlstandin.RegisterBase(t.Context(), home, "busybox", img.Disk, m); err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	c := startCoordinator(t, filepath.Join(dir, "coord"))
	token := c.runnerToken(t)
	short := api.ShortToken(token)
	h := &vmHarness{t: t, cl: c.client(), program: "prlctl", keep: prlSelected,
		callLog: func() ([][]string, error) { return prlstandin.CallLog(home) }}
	config := func(extra string) string {
		return writeRunnerConfig(t, dir, c.url, token, 1, "parallels", fmt.Sprintf(`  shell = "sh"
  [runners.parallels]
    base_name = "busybox"
    allowed_images = ["^busybox"]
    boot_timeout = "3m"
%s  [runners.ssh]
    user = %q
    identity_file = %q
    port = "%d"
`, extra, img.User, img.IdentityFile, port))
	}
	timeSync := func(vm string) []string {
		return []string{"exec " + vm + " which ntpdate", "exec " + vm + " which sntp"}
	}

	mgr := start(t, dir, "run", "--config", config(""))
	mgr.waitLog("runner manager started", 30*time.Second)
	vm := "busybox-runner-" + short + "-concurrent-0"

	j, log, got := h.run(client.JobSpec{Name: "first", Script: []string{
		`echo "guest=$(hostname) $(uname -s) ssh=${SSH_CONNECTION%% *}"`, "touch $HOME/from-the-first-job",
	}}, "stop "+vm+" --kill")
	// The guest sees its SSH connections come from QEMU's gateway.
	if j.Status != "success" || !strings.Contains(log, "guest="+guestimage.Hostname+" Linux ssh="+guestimage.GatewayIP) ||
		!strings.Contains(log, "Parallels "+prlstandin.Version) || !strings.Contains(log, "Neither sntp nor ntpdate are available") {
		t.Fatalf("first job = %s (%s), want success with the guest's host name, Parallels' version and the time sync warning:\n%s", j.Status, j.FailureReason, log)
	}
	if !strings.Contains(log, "(SSH on 127.211.55.") || !strings.Contains(log, fmt.Sprintf(":%d)", port)) {
		t.Errorf("first job's log lacks the guest's leased address and port (127.211.55.N:%d):\n%s", port, log)
	}
	h.check("first job of the slot", got, append([]string{
		"--version",
		"clone busybox --name busybox-template --template --linked",
		"create " + vm + " --ostemplate busybox-template",
		"start " + vm,
		"exec " + vm + " exit 0",
		"snapshot " + vm + " --name Started",
	}, append(timeSync(vm), "stop "+vm+" --kill")...))

	got = h.runReverted("stop " + vm + " --kill")
	h.check("second job of the slot", got, append([]string{
		"--version",
		"snapshot-switch " + vm + " --id {ID}",
		"start " + vm,
	}, append(timeSync(vm), "stop "+vm+" --kill")...))

	refusals(t, h, "Parallels", []string{"--version"})
	stopManager(t, mgr)

	mgr = start(t, dir, "run", "--config", config("    disable_snapshots = true\n"))
	mgr.waitLog("runner manager started", 30*time.Second)
	pvm, got := h.runFresh(short, "delete")
	h.check("disable_snapshots", got, append([]string{
		"--version",
		"create " + pvm + " --ostemplate busybox-template",
		"start " + pvm,
		"exec " + pvm + " exit 0",
	}, append(timeSync(pvm), "stop "+pvm+" --kill", "delete "+pvm)...))
	stopManager(t, mgr)
}
