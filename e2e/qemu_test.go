package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/client"
	"github.com/drover-ci/drover/internal/vm/guestimage"
	"github.com/drover-ci/drover/internal/vm/guestimage/guestimagetest"
	qemuvm "github.com/drover-ci/drover/internal/vm/qemu"
)

// vmJobTimeout bounds a test's wait for a qemu job: a cold boot under
// emulation on a loaded machine (15-20 s alone) plus the helper's upload.
const vmJobTimeout = 5 * time.Minute

// qemuRunner writes a config.toml for one qemu runner on the busybox
// guest image, its VMs under dir/vms, with the given extra lines of
// [runners.qemu] and of the runner.
func qemuRunner(t testing.TB, dir, url, token string, img guestimage.Image, base, extraQemu, extraRunner string) string {
	t.Helper()
	if base == "" {
		base = img.Disk
	}
	return writeRunnerConfig(t, dir, url, token, 1, "qemu", fmt.Sprintf(`  shell = "sh"
%s  [runners.qemu]
    base_name = %q
    base_folder = %q
    kernel = %q
    initrd = %q
    append = %q
    boot_timeout = "3m"
%s  [runners.ssh]
    user = %q
    identity_file = %q
`, extraRunner, base, filepath.Join(dir, "vms"), img.Kernel, img.Initrd, img.Append, extraQemu, img.User, img.IdentityFile))
}

// startManager starts drover run on cfg, stopped (SIGTERM) when the test
// ends.
func startManager(t *testing.T, dir, cfg string) {
	t.Helper()
	m := start(t, dir, "run", "--config", cfg)
	m.waitLog("runner manager started", 30*time.Second)
	t.Cleanup(func() {
		m.signal(syscall.SIGTERM)
		m.wait(30 * time.Second)
	})
}

// vmDirs lists the VM directories under dir/vms.
func vmDirs(t testing.TB, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(dir, "vms"))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

// termListener listens on the host's loopback for the guest's stages to
// report a signal (the guest reaches the host's loopback as 10.0.2.2):
// each connection's first line arrives on the channel.
func termListener(t testing.TB) (int, <-chan string) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	lines := make(chan string, 8)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				if s, err := bufio.NewReader(c).ReadString('\n'); err == nil {
					lines <- strings.TrimSpace(s)
				}
			}()
		}
	}()
	return l.Addr().(*net.TCPAddr).Port, lines
}

// trappedSleep is a stage script that says it started, then sleeps; a
// SIGTERM reaching its shell in the guest is reported to the host's
// termListener on port.
func trappedSleep(port int, tag string) []string {
	return []string{
		fmt.Sprintf(`trap 'echo %s-got-TERM | nc 10.0.2.2 %d; exit 143' TERM`, tag, port),
		"echo stage-started",
		"sleep 600 & wait",
	}
}

// waitLine waits for a line from a termListener.
func waitLine(t testing.TB, lines <-chan string, want string) {
	t.Helper()
	select {
	case got := <-lines:
		if got != want {
			t.Errorf("the guest reported %q, want %q", got, want)
		}
	case <-time.After(2 * time.Minute):
		t.Errorf("the guest never reported %q", want)
	}
}

// TestQemuExecutor runs jobs with executor = "qemu" in busybox guests
// through a real coordinator and drover run, one slot reused: the first
// job boots the slot's VM and snapshots it; the second finds nothing of
// the first (reverted) and fails with its exit code; artifacts and a
// cache go through drover's helper installed in the guest, the artifacts
// to the coordinator on the host's loopback (forwarded over SSH); a cancel and a
// timeout stop the stage in the guest and leave the VM stopped, to be
// reverted.
func TestQemuExecutor(t *testing.T) {
	img := guestimagetest.Image(t, guestimage.Busybox)
	dir := t.TempDir()
	c := startCoordinator(t, filepath.Join(dir, "coord"))
	cfg := qemuRunner(t, dir, c.url, c.runnerToken(t), img, "", "", "")
	startManager(t, dir, cfg)
	cl := c.client()
	ctx := context.Background()
	noGit := client.Variable{Key: "GIT_STRATEGY", Value: "none"}
	submitted := map[int64]time.Time{}
	submit := func(spec client.JobSpec) int64 {
		t.Helper()
		spec.Variables = append(spec.Variables, noGit)
		j, err := cl.Submit(ctx, spec)
		if err != nil {
			t.Fatal(err)
		}
		submitted[j.ID] = time.Now()
		return j.ID
	}
	defer func() {
		for id, at := range submitted {
			if j, err := cl.Job(ctx, id); err == nil && j.FinishedAt != nil {
				t.Logf("job %d %s: %s after %v", id, j.Name, j.Status, j.FinishedAt.Sub(at).Round(100*time.Millisecond))
			}
		}
	}()
	vmName := func() string {
		names := vmDirs(t, dir)
		if len(names) != 1 || !strings.Contains(names[0], "-runner-") || !strings.HasSuffix(names[0], "-concurrent-0") {
			t.Fatalf("VMs = %q, want the slot's one", names)
		}
		return names[0]
	}
	stopped := func(when string) {
		t.Helper()
		name := vmName()
		info, err := qemuvm.Inspect(filepath.Join(dir, "vms", name))
		if err != nil || info.Running {
			t.Errorf("%s: VM %s running %v (%v), want it stopped after the job", when, name, info.Running, err)
		}
	}

	first := submit(client.JobSpec{
		Name: "first", Script: []string{
			"echo first-job > /root/marker", "uname -n", "echo secret=$SECRET", "cat $CONFIG_FILE",
			"test \"$CI_DISPOSABLE_ENVIRONMENT\" = true && echo disposable",
		},
		Variables: []client.Variable{
			{Key: "SECRET", Value: "hunter2-very-secret", Masked: true},
			{Key: "CONFIG_FILE", Value: "file-variable-content", File: true},
		},
	})
	j := waitJob(t, cl, first, vmJobTimeout, finished)
	log := trace(t, cl, first)
	if j.Status != "success" {
		t.Fatalf("first job = %s (%s):\n%s", j.Status, j.FailureReason, log)
	}
	for _, want := range []string{
		`Preparing the "qemu" executor`, "Creating new VM", "Waiting for SSH", "Creating default snapshot Started",
		"Using QEMU (sh) executor on " + guestimage.Hostname, "secret=[MASKED]", "file-variable-content", "disposable",
	} {
		if !strings.Contains(log, want) {
			t.Errorf("first job's log lacks %q:\n%s", want, log)
		}
	}
	if strings.Contains(log, "hunter2") {
		t.Errorf("the masked variable shows in the log:\n%s", log)
	}
	stopped("after the first job")

	second := submit(client.JobSpec{Name: "second", Script: []string{"test ! -e /root/marker && echo reverted", "exit 3"}})
	j = waitJob(t, cl, second, vmJobTimeout, finished)
	log = trace(t, cl, second)
	if j.Status != "failed" || j.FailureReason != "script_failure" || !strings.Contains(log, "exit status 3") {
		t.Errorf("second job = %s (%s), want failed (script_failure) with exit status 3:\n%s", j.Status, j.FailureReason, log)
	}
	for _, want := range []string{"Restoring VM from snapshot Started", "reverted"} {
		if !strings.Contains(log, want) {
			t.Errorf("second job's log lacks %q:\n%s", want, log)
		}
	}
	if strings.Contains(log, "Creating new VM") {
		t.Errorf("second job made a new VM instead of reverting the slot's:\n%s", log)
	}
	stopped("after the second job")

	cache := []json.RawMessage{json.RawMessage(`{"key":"deps-v1","paths":["deps/"]}`)}
	arts := submit(client.JobSpec{
		Name: "artifacts", Project: "g/p", Cache: cache,
		Script:    []string{"mkdir -p deps dist", "echo lib > deps/lib.txt", "echo built-$CI_JOB_ID > dist/app.txt"},
		Artifacts: &client.Artifacts{Paths: []string{"dist/"}},
	})
	j = waitJob(t, cl, arts, vmJobTimeout, finished)
	log = trace(t, cl, arts)
	if j.Status != "success" {
		t.Fatalf("artifacts job = %s (%s):\n%s", j.Status, j.FailureReason, log)
	}
	for _, want := range []string{"Forwarding 127.0.0.1:", "Creating cache deps-v1...", `Uploading artifacts as "archive" to coordinator... 201 Created`} {
		if !strings.Contains(log, want) {
			t.Errorf("artifacts job's log lacks %q:\n%s", want, log)
		}
	}
	port, lines := termListener(t)
	long := submit(client.JobSpec{Name: "cancel", Script: trappedSleep(port, "cancel")})
	waitTrace(t, cl, long, "stage-started", vmJobTimeout)
	if _, err := cl.Cancel(ctx, long); err != nil {
		t.Fatal(err)
	}
	j = waitJob(t, cl, long, vmJobTimeout, finished)
	if j.Status != "canceled" {
		t.Errorf("canceled job = %s (%s)", j.Status, j.FailureReason)
	}
	waitLine(t, lines, "cancel-got-TERM")
	stopped("after the cancel")

	slow := submit(client.JobSpec{Name: "timeout", Timeout: 10, Script: trappedSleep(port, "timeout")})
	j = waitJob(t, cl, slow, vmJobTimeout, finished)
	if log = trace(t, cl, slow); j.Status != "failed" || j.FailureReason != "job_execution_timeout" {
		t.Errorf("timed out job = %s (%s), want failed (job_execution_timeout):\n%s", j.Status, j.FailureReason, log)
	}
	waitLine(t, lines, "timeout-got-TERM")
	stopped("after the timeout")
}

// TestQemuExecutorFreshClones: with disable_snapshots and base_snapshot
// each job gets a VM started from the base's saved state (no boot),
// deleted after the job; also after a cancel, which stops the stage in
// the guest.
func TestQemuExecutorFreshClones(t *testing.T) {
	img := guestimagetest.Image(t, guestimage.Busybox)
	dir := t.TempDir()
	base := snapshotBase(t, img, dir)
	c := startCoordinator(t, filepath.Join(dir, "coord"))
	cfg := qemuRunner(t, dir, c.url, c.runnerToken(t), img, base, "    base_snapshot = \"ready\"\n    disable_snapshots = true\n", "")
	startManager(t, dir, cfg)
	cl := c.client()
	ctx := context.Background()
	noGit := []client.Variable{{Key: "GIT_STRATEGY", Value: "none"}}

	for i := range 2 {
		id, log := runSuccess(t, cl, client.JobSpec{
			Name: "fresh", Variables: noGit,
			Script: []string{"test ! -e /root/marker && echo fresh", "echo x > /root/marker", "date +%Y"},
		}, vmJobTimeout)
		for _, want := range []string{"Creating new VM", "state ready", "fresh", fmt.Sprint(time.Now().Year())} {
			if !strings.Contains(log, want) {
				t.Errorf("job %d (%d)'s log lacks %q:\n%s", i, id, want, log)
			}
		}
		if strings.Contains(log, "Creating default snapshot") {
			t.Errorf("job %d snapshotted its VM with disable_snapshots:\n%s", i, log)
		}
		if names := vmDirs(t, dir); len(names) != 0 {
			t.Errorf("VMs after job %d: %q, want none", i, names)
		}
	}

	port, lines := termListener(t)
	j, err := cl.Submit(ctx, client.JobSpec{Name: "cancel", Variables: noGit, Script: trappedSleep(port, "fresh")})
	if err != nil {
		t.Fatal(err)
	}
	waitTrace(t, cl, j.ID, "stage-started", vmJobTimeout)
	if _, err := cl.Cancel(ctx, j.ID); err != nil {
		t.Fatal(err)
	}
	if got := waitJob(t, cl, j.ID, vmJobTimeout, finished); got.Status != "canceled" {
		t.Errorf("canceled job = %s (%s)", got.Status, got.FailureReason)
	}
	waitLine(t, lines, "fresh-got-TERM")
	waitFor(t, time.Minute, "the canceled job's VM deleted", func() bool { return len(vmDirs(t, dir)) == 0 })
}

// snapshotBase saves a running state "ready" of the guest image in a
// copy of its disk in dir, with drover vm snapshot.
func snapshotBase(t testing.TB, img guestimage.Image, dir string) string {
	t.Helper()
	base := filepath.Join(dir, "busybox-ready.qcow2")
	cmd := exec.Command(droverBin, "vm", "snapshot", "--guest-image", img.Dir, "--output", base, "--name", "ready", "--boot-timeout", "3m")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("drover vm snapshot: %v\n%s", err, out)
	}
	for _, want := range []string{"Waiting for SSH", `saving its state as "ready"`, `base_snapshot = "ready"`} {
		if !strings.Contains(string(out), want) {
			t.Errorf("drover vm snapshot's output lacks %q:\n%s", want, out)
		}
	}
	info, err := (qemuvm.Images{}).Info(t.Context(), base)
	if err != nil || !info.HasSnapshot("ready", true) {
		t.Fatalf("%s: %+v, %v; want the running state ready", base, info, err)
	}
	return base
}

// TestQemuExecutorBootTimeout: a guest that never answers SSH (the
// runner's SSH port is one nothing listens on in the guest) fails the job
// with runner_system_failure once boot_timeout passes, with the guest's
// last console lines in the log, and its VM deleted.
func TestQemuExecutorBootTimeout(t *testing.T) {
	img := guestimagetest.Image(t, guestimage.Busybox)
	dir := t.TempDir()
	c := startCoordinator(t, filepath.Join(dir, "coord"))
	cfg := qemuRunner(t, dir, c.url, c.runnerToken(t), img, "", "    disable_snapshots = true\n", "")
	// Nothing answers on 2222 in the guest; the short timeout is meant
	// to pass.
	b, _ := os.ReadFile(cfg)
	b = []byte(strings.Replace(strings.Replace(string(b), `boot_timeout = "3m"`, `boot_timeout = "40s"`, 1), "[runners.ssh]\n", "[runners.ssh]\n    port = 2222\n", 1))
	if err := os.WriteFile(cfg, b, 0o600); err != nil {
		t.Fatal(err)
	}
	startManager(t, dir, cfg)
	cl := c.client()
	j := submit(t, cl, client.JobSpec{Name: "never", Script: []string{"echo never runs"}})
	got := waitJob(t, cl, j.ID, vmJobTimeout, finished)
	log := trace(t, cl, j.ID)
	if got.Status != "failed" || got.FailureReason != "runner_system_failure" {
		t.Errorf("job = %s (%s), want failed (runner_system_failure):\n%s", got.Status, got.FailureReason, log)
	}
	for _, want := range []string{"did not answer SSH within the boot timeout (40s)", "lines of the console of VM", "  | "} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %q:\n%s", want, log)
		}
	}
	if strings.Contains(log, "never runs") {
		t.Errorf("the script ran:\n%s", log)
	}
	if names := vmDirs(t, dir); len(names) != 0 {
		t.Errorf("VMs left: %q", names)
	}
}

// TestQemuExecutorRefusals: drover run refuses a qemu runner without
// QEMU on PATH (naming the key and the package), with a base_name that
// does not exist or is not a disk image (naming file, line and key); a
// job whose image allowed_images does not allow fails with
// runner_configuration_error naming the rule, before any VM starts.
func TestQemuExecutorRefusals(t *testing.T) {
	img := guestimagetest.Image(t, guestimage.Busybox)
	dir := t.TempDir()
	c := startCoordinator(t, filepath.Join(dir, "coord"))
	token := c.runnerToken(t)
	notes := filepath.Join(dir, "notes.txt")
	if err := os.WriteFile(notes, []byte("not a disk\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// A PATH with qemu-img but no QEMU.
	bin := filepath.Join(dir, "bin")
	qemuImg, err := exec.LookPath("qemu-img")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(qemuImg, filepath.Join(bin, "qemu-img")); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, base string
		env        []string
		want       []string
	}{
		{"no qemu", "", []string{"PATH=" + bin}, []string{":9: runners[0].executor:", "needs qemu-system-x86_64, which is not on PATH: install the qemu-system-x86 package"}},
		{"missing base", filepath.Join(dir, "missing.qcow2"), nil, []string{":12: runners[0].qemu.base_name:", "missing.qcow2 does not exist"}},
		{"not an image", notes, nil, []string{":12: runners[0].qemu.base_name:", "notes.txt: not a qcow2 or raw disk image"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := qemuRunner(t, dir, c.url, token, img, tc.base, "", "")
			cmd := exec.Command(droverBin, "run", "--config", cfg)
			cmd.Dir = dir
			cmd.Env = append(os.Environ(), tc.env...)
			out, err := cmd.CombinedOutput()
			code := -1
			if ee, ok := err.(*exec.ExitError); ok {
				code = ee.ExitCode()
			}
			if code != 2 {
				t.Errorf("drover run = exit %d (%v), want 2:\n%s", code, err, out)
			}
			for _, want := range append(tc.want, cfg) {
				if !strings.Contains(string(out), want) {
					t.Errorf("output lacks %q:\n%s", want, out)
				}
			}
		})
	}

	cfg := qemuRunner(t, dir, c.url, token, img, "", "    allowed_images = [\"^busybox$\"]\n", "")
	startManager(t, dir, cfg)
	cl := c.client()
	j := submit(t, cl, client.JobSpec{Name: "ubuntu", Image: &client.Image{Name: "ubuntu"}, Script: []string{"echo no"}})
	got := waitJob(t, cl, j.ID, time.Minute, finished)
	log := trace(t, cl, j.ID)
	if got.Status != "failed" || got.FailureReason != "runner_configuration_error" ||
		!strings.Contains(log, `the image "ubuntu" is not allowed: it matches none of [runners.qemu] allowed_images ["^busybox$"]`) {
		t.Errorf("job = %s (%s), want failed (runner_configuration_error) naming the rule:\n%s", got.Status, got.FailureReason, log)
	}
	if names := vmDirs(t, dir); len(names) != 0 {
		t.Errorf("VMs made for a refused job: %q", names)
	}
}

// TestRegisterQemuExecutor: `drover register --executor qemu` writes the
// [runners.qemu] and [runners.ssh] its --qemu-* and --ssh-* flags give
// and says what is missing; drover run then refuses the runner without
// an identity, naming file, line and key.
func TestRegisterQemuExecutor(t *testing.T) {
	dir := t.TempDir()
	c := startCoordinator(t, filepath.Join(dir, "coord"))
	cfg := filepath.Join(dir, "config.toml")
	out, code := runCLI(t, dir, nil, "register", "--config", cfg, "--url", c.url, "--token", c.runnerToken(t),
		"--executor", "qemu", "--name", "q", "--qemu-base-name", filepath.Join(dir, "base.qcow2"), "--qemu-memory", "256",
		"--qemu-allowed-images", "^busybox$", "--ssh-user", "root")
	if code != 0 {
		t.Fatalf("register = exit %d:\n%s", code, out)
	}
	if !strings.Contains(out, "needs user and identity_file (or password) in the [runners.ssh] table") {
		t.Errorf("register output lacks the missing identity:\n%s", out)
	}
	b, err := os.ReadFile(cfg)
	for _, want := range []string{`executor = "qemu"`, "[runners.qemu]", "memory = 256", `allowed_images = ["^busybox$"]`, "[runners.ssh]", `user = "root"`} {
		if err != nil || !strings.Contains(string(b), want) {
			t.Fatalf("config.toml lacks %q (%v):\n%s", want, err, b)
		}
	}
	out, code = runCLI(t, dir, nil, "run", "--config", cfg)
	if code != 2 || !strings.Contains(out, cfg+":") || !strings.Contains(out, "runners[0].ssh: identity_file or password is required") {
		t.Errorf("run = exit %d, want 2 naming the missing identity:\n%s", code, out)
	}
}

// TestQemuExecutorDiskFull: base_folder on a file system with no room for
// a VM's overlay (a 64 KiB tmpfs): the job fails with
// runner_system_failure saying so, and nothing of the VM is left there.
func TestQemuExecutorDiskFull(t *testing.T) {
	img := guestimagetest.Image(t, guestimage.Busybox)
	dir := t.TempDir()
	vms := filepath.Join(dir, "vms")
	if err := os.MkdirAll(vms, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", vms).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a small tmpfs here (needs root): %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", vms).Run() })
	c := startCoordinator(t, filepath.Join(dir, "coord"))
	cfg := qemuRunner(t, dir, c.url, c.runnerToken(t), img, "", "    disable_snapshots = true\n", "")
	startManager(t, dir, cfg)
	cl := c.client()
	j := submit(t, cl, client.JobSpec{Name: "full", Script: []string{"true"}, Variables: []client.Variable{{Key: "GIT_STRATEGY", Value: "none"}}})
	got := waitJob(t, cl, j.ID, vmJobTimeout, finished)
	log := trace(t, cl, j.ID)
	if got.Status != "failed" || got.FailureReason != "runner_system_failure" || !strings.Contains(log, "No space left on device") {
		t.Errorf("job = %s (%s), want failed (runner_system_failure) saying the disk is full:\n%s", got.Status, got.FailureReason, log)
	}
	if names := vmDirs(t, dir); len(names) != 0 {
		t.Errorf("left in base_folder: %q, want nothing", names)
	}
}

// TestQemuFleet: [runners.autoscaler] plugin = "qemu" scales busybox VMs
// of this host for the instance executor: a job waits for the first VM
// (none idle), runs in its guest, and a second job reuses it; with
// delete_instances_on_shutdown a stopped manager deletes the VM.
func TestQemuFleet(t *testing.T) {
	img := guestimagetest.Image(t, guestimage.Busybox)
	dir := t.TempDir()
	c := startCoordinator(t, filepath.Join(dir, "coord"))
	cfg := writeRunnerConfig(t, dir, c.url, c.runnerToken(t), 1, "instance", fmt.Sprintf(`  shell = "sh"
  builds_dir = "/root/builds"
  [runners.autoscaler]
    plugin = "qemu"
    capacity_per_instance = 1
    max_instances = 1
    update_interval = "1s"
    update_interval_when_expecting = "200ms"
    deletion_retry_interval = "1s"
    shutdown_deletion_interval = "1s"
    delete_instances_on_shutdown = true
    [runners.autoscaler.plugin_config]
      base_name = %q
      base_folder = %q
      kernel = %q
      initrd = %q
      append = %q
      boot_timeout = "3m"
    [runners.autoscaler.connector_config]
      username = %q
      key_path = %q
      use_static_credentials = true
    [[runners.autoscaler.policy]]
      idle_count = 0
      idle_time = "10m"
`, img.Disk, filepath.Join(dir, "vms"), img.Kernel, img.Initrd, img.Append, img.User, img.IdentityFile))
	m := start(t, dir, "run", "--config", cfg)
	m.waitLog("runner manager started", 30*time.Second)
	cl := c.client()
	noGit := []client.Variable{{Key: "GIT_STRATEGY", Value: "none"}}
	var vm string
	for i := range 2 {
		id, log := runSuccess(t, cl, client.JobSpec{Name: "fleet", Variables: noGit, Script: []string{"uname -n", "cat /proc/cmdline"}}, vmJobTimeout)
		for _, want := range []string{guestimage.Hostname, img.Append} {
			if !strings.Contains(log, want) {
				t.Errorf("job %d (%d)'s log lacks %q: it did not run in the guest:\n%s", i, id, want, log)
			}
		}
		names := vmDirs(t, dir)
		if len(names) != 1 || !strings.HasPrefix(names[0], "fleet-") {
			t.Fatalf("VMs after job %d: %q, want one of the fleet", i, names)
		}
		if vm != "" && names[0] != vm {
			t.Errorf("job %d ran in a new VM %s, want %s again", i, names[0], vm)
		}
		vm = names[0]
	}
	m.signal(syscall.SIGTERM)
	m.wait(2 * time.Minute)
	if names := vmDirs(t, dir); len(names) != 0 {
		t.Errorf("VMs after the manager stopped with delete_instances_on_shutdown: %q", names)
	}
}
