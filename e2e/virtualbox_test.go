package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/client"
	"github.com/drover-ci/drover/internal/vm/guestimage"
	"github.com/drover-ci/drover/internal/vm/guestimage/guestimagetest"
	"github.com/drover-ci/drover/internal/vm/qemu"
	"github.com/drover-ci/drover/internal/vm/vboxstandin"
)

// vmJobTimeout bounds a VM job: a cold boot under emulation (no KVM) on
// a loaded machine, a savevm and the job.
const vmJobTimeout = 5 * time.Minute

// buildStandin builds the stand-in program pkg (a path under the
// module) as name in a new directory, puts that directory first on PATH
// and returns it.
func buildStandin(t *testing.T, pkg, name string) string {
	t.Helper()
	dir := t.TempDir()
	build := exec.Command("go", "build", "-o", filepath.Join(dir, name), "../"+pkg)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, out)
	}
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	return dir
}

// vmCalls returns the commands a stand-in recorded after the first skip,
// joined by spaces, the host port of NAT rules replaced by PORT; with
// changes set only the commands that change something (not showvminfo,
// list or snapshot list).
func vmCalls(t *testing.T, calls [][]string, skip int, changes func([]string) bool) []string {
	t.Helper()
	port := regexp.MustCompile(`127\.0\.0\.1,\d+,`)
	var out []string
	for _, c := range calls[min(skip, len(calls)):] {
		if changes != nil && !changes(c) {
			continue
		}
		out = append(out, port.ReplaceAllString(strings.Join(c, " "), "127.0.0.1,PORT,"))
	}
	return out
}

// vboxChanges reports whether a VBoxManage call changes something (or is
// --version, which GitLab Runner runs before each job).
func vboxChanges(c []string) bool {
	switch c[0] {
	case "showvminfo", "list":
		return false
	case "snapshot":
		return len(c) > 2 && c[2] != "list"
	}
	return true
}

// TestVirtualBoxExecutor runs jobs with executor = "virtualbox" through a
// real coordinator and drover run, with a GitLab Runner config.toml, on
// the stand-in for VBoxManage (a real QEMU guest per VM): the job runs in
// the guest, the VBoxManage commands are GitLab Runner's (first job of a
// slot: snapshot of the base, linked clone, NAT rule, start, Started
// snapshot; next job: restorecurrent and start; poweroff after each;
// with disable_snapshots a clone per job, deleted after it), a refused
// image and a missing base VM fail the job naming them.
func TestVirtualBoxExecutor(t *testing.T) {
	img := guestimagetest.Image(t, guestimage.Busybox)
	buildStandin(t, "internal/vm/vboxstandin/cmd/VBoxManage", "VBoxManage")
	home := t.TempDir()
	t.Setenv(vboxstandin.HomeEnv, home)
	t.Cleanup(func() { vboxstandin.PowerOffAll(context.Background(), home) })
	m := qemu.Machine{Kernel: img.Kernel, Initrd: img.Initrd, Append: img.Append, MemoryMiB: 256}
	if err := vboxstandin.RegisterBase(t.Context(), home, "busybox", img.Disk, m); err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	c := startCoordinator(t, filepath.Join(dir, "coord"))
	token := c.runnerToken(t)
	short := api.ShortToken(token)
	cl := c.client()
	config := func(extra string) string {
		return writeRunnerConfig(t, dir, c.url, token, 1, "virtualbox", fmt.Sprintf(`  shell = "sh"
  [runners.virtualbox]
    base_name = "busybox"
    allowed_images = ["^busybox"]
    boot_timeout = "3m"
%s  [runners.ssh]
    user = %q
    identity_file = %q
`, extra, img.User, img.IdentityFile))
	}
	calls := func() [][]string {
		t.Helper()
		cs, err := vboxstandin.CallLog(home)
		if err != nil {
			t.Fatal(err)
		}
		return cs
	}
	// run runs a job and waits until it has finished and, when wantLast
	// is set, until the stand-in recorded that call (the VM's cleanup
	// after the job's end); it returns the job, its log and the
	// commands recorded meanwhile.
	run := func(spec client.JobSpec, wantLast string) (*client.Job, string, []string) {
		t.Helper()
		before := len(calls())
		spec.Variables = append(spec.Variables, client.Variable{Key: "GIT_STRATEGY", Value: "none"})
		sub, err := cl.Submit(context.Background(), spec)
		if err != nil {
			t.Fatal(err)
		}
		j := waitJob(t, cl, sub.ID, vmJobTimeout, finished)
		if wantLast != "" {
			waitFor(t, vmJobTimeout, "VBoxManage "+wantLast, func() bool {
				got := vmCalls(t, calls(), before, vboxChanges)
				return len(got) > 0 && got[len(got)-1] == wantLast
			})
		}
		return j, trace(t, cl, sub.ID), vmCalls(t, calls(), before, vboxChanges)
	}
	check := func(what string, got, want []string) {
		t.Helper()
		if !slices.Equal(got, want) {
			t.Errorf("%s: VBoxManage commands =\n  %s\nwant (GitLab Runner's)\n  %s", what, strings.Join(got, "\n  "), strings.Join(want, "\n  "))
		}
	}

	mgr := start(t, dir, "run", "--config", config(""))
	mgr.waitLog("runner manager started", 30*time.Second)
	vm := "busybox-runner-" + short + "-concurrent-0"

	j, log, got := run(client.JobSpec{Name: "first", Script: []string{
		`echo "guest=$(hostname) $(uname -s)"`, "touch $HOME/from-the-first-job",
	}}, "controlvm "+vm+" poweroff")
	if j.Status != "success" || !strings.Contains(log, "guest="+guestimage.Hostname+" Linux") || !strings.Contains(log, "VirtualBox "+vboxstandin.Version) {
		t.Fatalf("first job = %s (%s), want success with the guest's host name and VirtualBox's version:\n%s", j.Status, j.FailureReason, log)
	}
	check("first job of the slot", got, []string{
		"--version",
		"snapshot busybox take Base State",
		"clonevm busybox --mode machine --name " + vm + " --register --snapshot Base State --options link",
		"modifyvm " + vm + " --natpf1 guestssh,tcp,127.0.0.1,PORT,,22",
		"startvm " + vm + " --type headless",
		"snapshot " + vm + " take Started",
		"controlvm " + vm + " poweroff",
	})

	j, log, got = run(client.JobSpec{Name: "second", Script: []string{
		`test ! -e $HOME/from-the-first-job && echo "reverted on $(hostname)"`,
	}}, "controlvm "+vm+" poweroff")
	if j.Status != "success" || !strings.Contains(log, "reverted on "+guestimage.Hostname) {
		t.Fatalf("second job = %s (%s), want success in a VM reverted to Started:\n%s", j.Status, j.FailureReason, log)
	}
	check("second job of the slot", got, []string{
		"--version",
		"snapshot " + vm + " restorecurrent",
		"startvm " + vm + " --type headless",
		"controlvm " + vm + " poweroff",
	})

	j, log, got = run(client.JobSpec{Name: "refused", Image: &client.Image{Name: "debian:12"}, Script: []string{"true"}}, "")
	if j.Status != "failed" || j.FailureReason != "runner_configuration_error" || !strings.Contains(log, `the image "debian:12" is not allowed`) || !strings.Contains(log, "^busybox") {
		t.Errorf("job with a refused image = %s (%s), want failed (runner_configuration_error) naming the image and allowed_images:\n%s", j.Status, j.FailureReason, log)
	}
	check("refused image", got, nil)

	j, log, got = run(client.JobSpec{Name: "no base", Image: &client.Image{Name: "busybox-gone"}, Script: []string{"true"}}, "")
	if j.Status != "failed" || j.FailureReason != "runner_configuration_error" || !strings.Contains(log, `VirtualBox has no VM "busybox-gone"`) {
		t.Errorf("job on a missing base VM = %s (%s), want failed (runner_configuration_error) naming the base:\n%s", j.Status, j.FailureReason, log)
	}
	check("missing base VM", got, []string{"--version"})

	mgr.signal(syscall.SIGTERM)
	if code := mgr.wait(60 * time.Second); code != 0 {
		t.Errorf("exit code %d after SIGTERM", code)
	}

	// disable_snapshots: a clone per job named after the project, deleted
	// after it.
	mgr = start(t, dir, "run", "--config", config("    disable_snapshots = true\n"))
	mgr.waitLog("runner manager started", 30*time.Second)
	before := len(calls())
	j, log, _ = run(client.JobSpec{Name: "fresh", Script: []string{`echo "fresh=$(hostname)"`, "test ! -e $HOME/from-the-first-job"}}, "")
	if j.Status != "success" || !strings.Contains(log, "fresh="+guestimage.Hostname) {
		t.Fatalf("job with disable_snapshots = %s (%s):\n%s", j.Status, j.FailureReason, log)
	}
	pvm := regexp.MustCompile(`busybox-runner-` + short + `-project-\d+-concurrent-0`).FindString(log)
	if pvm == "" {
		t.Fatalf("the job's log names no VM busybox-runner-%s-project-<id>-concurrent-0:\n%s", short, log)
	}
	waitFor(t, vmJobTimeout, "the VM deleted", func() bool {
		got := vmCalls(t, calls(), before, vboxChanges)
		return len(got) > 0 && strings.HasPrefix(got[len(got)-1], "unregistervm")
	})
	check("disable_snapshots", vmCalls(t, calls(), before, vboxChanges), []string{
		"--version",
		"clonevm busybox --mode machine --name " + pvm + " --register --snapshot Base State --options link",
		"modifyvm " + pvm + " --natpf1 guestssh,tcp,127.0.0.1,PORT,,22",
		"startvm " + pvm + " --type headless",
		"controlvm " + pvm + " poweroff",
		"unregistervm " + pvm + " --delete",
	})
	mgr.signal(syscall.SIGTERM)
	if code := mgr.wait(60 * time.Second); code != 0 {
		t.Errorf("exit code %d after SIGTERM", code)
	}
}
