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
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/client"
	"github.com/drover-ci/drover/internal/vm/guestimage"
	"github.com/drover-ci/drover/internal/vm/guestimage/guestimagetest"
	"github.com/drover-ci/drover/internal/vm/qemu"
	"github.com/drover-ci/drover/internal/vm/vboxstandin"
)

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

// vmCalls returns the commands a stand-in recorded after the first
// skip that keep selects, joined by spaces, a command repeated at once
// (a poll) kept once, the host port of NAT rules replaced by PORT and
// snapshot ids by {ID}.
func vmCalls(calls [][]string, skip int, keep func([]string) bool) []string {
	port := regexp.MustCompile(`127\.0\.0\.1,\d+,`)
	id := regexp.MustCompile(`\{[0-9a-f-]{36}\}`)
	var out []string
	for _, c := range calls[min(skip, len(calls)):] {
		if !keep(c) {
			continue
		}
		line := id.ReplaceAllString(port.ReplaceAllString(strings.Join(c, " "), "127.0.0.1,PORT,"), "{ID}")
		if len(out) == 0 || out[len(out)-1] != line {
			out = append(out, line)
		}
	}
	return out
}

// vmHarness runs jobs on a VM runner whose hypervisor program is a
// stand-in, and reads the stand-in's call log.
type vmHarness struct {
	t       *testing.T
	cl      *client.Client
	program string
	// callLog reads the stand-in's calls; keep selects the ones compared.
	callLog func() ([][]string, error)
	keep    func([]string) bool
}

func (h *vmHarness) calls() [][]string {
	h.t.Helper()
	cs, err := h.callLog()
	if err != nil {
		h.t.Fatal(err)
	}
	return cs
}

// since returns the selected calls after the first before.
func (h *vmHarness) since(before int) []string { return vmCalls(h.calls(), before, h.keep) }

// waitLast waits until the last selected call after the first before
// starts with prefix (the VM's cleanup after a job's end).
func (h *vmHarness) waitLast(before int, prefix string) {
	h.t.Helper()
	waitFor(h.t, vmJobTimeout, h.program+" "+prefix, func() bool {
		got := h.since(before)
		return len(got) > 0 && strings.HasPrefix(got[len(got)-1], prefix)
	})
}

// run runs a job (GIT_STRATEGY none) and waits until it has finished
// and, when last is set, until the stand-in recorded a call starting so;
// it returns the job, its log and the selected calls meanwhile.
func (h *vmHarness) run(spec client.JobSpec, last string) (*client.Job, string, []string) {
	h.t.Helper()
	before := len(h.calls())
	spec.Variables = append(spec.Variables, client.Variable{Key: "GIT_STRATEGY", Value: "none"})
	sub, err := h.cl.Submit(context.Background(), spec)
	if err != nil {
		h.t.Fatal(err)
	}
	j := waitJob(h.t, h.cl, sub.ID, vmJobTimeout, finished)
	if last != "" {
		h.waitLast(before, last)
	}
	return j, trace(h.t, h.cl, sub.ID), h.since(before)
}

// check compares a job's calls with GitLab Runner's.
func (h *vmHarness) check(what string, got, want []string) {
	h.t.Helper()
	if !slices.Equal(got, want) {
		h.t.Errorf("%s: %s commands =\n  %s\nwant (GitLab Runner's)\n  %s", what, h.program, strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

// runReverted runs the second job of a slot, which must find the VM
// reverted to its Started snapshot (the first job's file gone), and waits
// for the call last; it returns the selected calls meanwhile.
func (h *vmHarness) runReverted(last string) []string {
	h.t.Helper()
	j, log, got := h.run(client.JobSpec{Name: "second", Script: []string{
		`test ! -e $HOME/from-the-first-job && echo "reverted on $(hostname)"`,
	}}, last)
	if j.Status != "success" || !strings.Contains(log, "reverted on "+guestimage.Hostname) {
		h.t.Fatalf("second job = %s (%s), want success in a VM reverted to Started:\n%s", j.Status, j.FailureReason, log)
	}
	return got
}

// runFresh runs a job with disable_snapshots, which must get a fresh VM
// named after its project, and waits until the last selected call starts
// with removed (the VM deleted); it returns the VM's name and the selected
// calls since the job was submitted. short is the runner's short token.
func (h *vmHarness) runFresh(short, removed string) (string, []string) {
	h.t.Helper()
	before := len(h.calls())
	j, log, _ := h.run(client.JobSpec{Name: "fresh", Script: []string{`echo "fresh=$(hostname)"`, "test ! -e $HOME/from-the-first-job"}}, "")
	if j.Status != "success" || !strings.Contains(log, "fresh="+guestimage.Hostname) {
		h.t.Fatalf("job with disable_snapshots = %s (%s):\n%s", j.Status, j.FailureReason, log)
	}
	pvm := projectVM(h.t, log, short)
	h.waitLast(before, removed)
	return pvm, h.since(before)
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
	h := &vmHarness{t: t, cl: c.client(), program: "VBoxManage", keep: vboxChanges,
		callLog: func() ([][]string, error) { return vboxstandin.CallLog(home) }}
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

	mgr := start(t, dir, "run", "--config", config(""))
	mgr.waitLog("runner manager started", 30*time.Second)
	vm := "busybox-runner-" + short + "-concurrent-0"

	j, log, got := h.run(client.JobSpec{Name: "first", Script: []string{
		`echo "guest=$(hostname) $(uname -s)"`, "touch $HOME/from-the-first-job",
	}}, "controlvm "+vm+" poweroff")
	if j.Status != "success" || !strings.Contains(log, "guest="+guestimage.Hostname+" Linux") || !strings.Contains(log, "VirtualBox "+vboxstandin.Version) {
		t.Fatalf("first job = %s (%s), want success with the guest's host name and VirtualBox's version:\n%s", j.Status, j.FailureReason, log)
	}
	h.check("first job of the slot", got, []string{
		"--version",
		"snapshot busybox take Base State",
		"clonevm busybox --mode machine --name " + vm + " --register --snapshot Base State --options link",
		"modifyvm " + vm + " --natpf1 guestssh,tcp,127.0.0.1,PORT,,22",
		"startvm " + vm + " --type headless",
		"snapshot " + vm + " take Started",
		"controlvm " + vm + " poweroff",
	})

	got = h.runReverted("controlvm " + vm + " poweroff")
	h.check("second job of the slot", got, []string{
		"--version",
		"snapshot " + vm + " restorecurrent",
		"startvm " + vm + " --type headless",
		"controlvm " + vm + " poweroff",
	})

	refusals(t, h, "VirtualBox", []string{"--version"})
	stopManager(t, mgr)

	// disable_snapshots: a clone per job named after the project, deleted
	// after it.
	mgr = start(t, dir, "run", "--config", config("    disable_snapshots = true\n"))
	mgr.waitLog("runner manager started", 30*time.Second)
	pvm, got := h.runFresh(short, "unregistervm")
	h.check("disable_snapshots", got, []string{
		"--version",
		"clonevm busybox --mode machine --name " + pvm + " --register --snapshot Base State --options link",
		"modifyvm " + pvm + " --natpf1 guestssh,tcp,127.0.0.1,PORT,,22",
		"startvm " + pvm + " --type headless",
		"controlvm " + pvm + " poweroff",
		"unregistervm " + pvm + " --delete",
	})
	stopManager(t, mgr)
}

// refusals runs a job whose image allowed_images refuses (no calls) and
// one on a base VM that does not exist (baseCalls), both failing with
// runner_configuration_error naming them.
func refusals(t *testing.T, h *vmHarness, product string, baseCalls []string) {
	t.Helper()
	j, log, got := h.run(client.JobSpec{Name: "refused", Image: &client.Image{Name: "debian:12"}, Script: []string{"true"}}, "")
	if j.Status != "failed" || j.FailureReason != "runner_configuration_error" || !strings.Contains(log, `the image "debian:12" is not allowed`) || !strings.Contains(log, "^busybox") {
		t.Errorf("job with a refused image = %s (%s), want failed (runner_configuration_error) naming the image and allowed_images:\n%s", j.Status, j.FailureReason, log)
	}
	h.check("refused image", got, nil)

	j, log, got = h.run(client.JobSpec{Name: "no base", Image: &client.Image{Name: "busybox-gone"}, Script: []string{"true"}}, "")
	if j.Status != "failed" || j.FailureReason != "runner_configuration_error" || !strings.Contains(log, product+` has no VM "busybox-gone"`) {
		t.Errorf("job on a missing base VM = %s (%s), want failed (runner_configuration_error) naming the base:\n%s", j.Status, j.FailureReason, log)
	}
	h.check("missing base VM", got, baseCalls)
}

// projectVM is the name of the VM of a job with disable_snapshots in its
// log.
func projectVM(t *testing.T, log, short string) string {
	t.Helper()
	name := regexp.MustCompile(`busybox-runner-` + regexp.QuoteMeta(short) + `-project-\d+-concurrent-0`).FindString(log)
	if name == "" {
		t.Fatalf("the job's log names no VM busybox-runner-%s-project-<id>-concurrent-0:\n%s", short, log)
	}
	return name
}
