package qemu

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// needQEMU skips a test when QEMU is not installed.
func needQEMU(t testing.TB) {
	t.Helper()
	for _, b := range []string{Binary, "qemu-img"} {
		if _, err := exec.LookPath(b); err != nil {
			t.Skipf("%s not installed (apt-get install %s qemu-utils)", b, Package)
		}
	}
}

// blankDisk makes an empty qcow2 disk: a VM on it runs its firmware,
// finds nothing to boot and idles, which is all QMP tests need.
func blankDisk(t testing.TB, dir string) string {
	t.Helper()
	p := filepath.Join(dir, "blank.qcow2")
	if out, err := exec.Command("qemu-img", "create", "-q", "-f", "qcow2", p, "16M").CombinedOutput(); err != nil {
		t.Fatalf("qemu-img create: %v: %s", err, out)
	}
	return p
}

// startBlank starts a firmware-only VM in dir; it is stopped when the
// test ends.
func startBlank(t testing.TB, dir string, m Machine, o StartOptions) *VM {
	t.Helper()
	if m.Disk == "" {
		m.Disk = blankDisk(t, t.TempDir())
	}
	if m.MemoryMiB == 0 {
		m.MemoryMiB = 64
	}
	v, err := Start(t.Context(), dir, m, o)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { v.Stop(context.Background(), 10*time.Second) })
	return v
}

// waitEvent returns when the monitor delivers event name.
func waitEvent(t *testing.T, m *Monitor, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	for {
		select {
		case e := <-m.Events():
			if e.Name == name {
				return
			}
		case <-ctx.Done():
			t.Fatalf("no %s event", name)
		}
	}
}

// TestMonitor drives a real QEMU through QMP: status, stop and cont with
// their events, savevm, info snapshots, loadvm, delvm, an error answer,
// quit.
func TestMonitor(t *testing.T) {
	needQEMU(t)
	ctx := t.Context()
	v := startBlank(t, t.TempDir(), Machine{Accel: "tcg"}, StartOptions{})
	m := v.Monitor()
	if v.Accel != "tcg" || !v.Running() {
		t.Fatalf("VM accel %q running %v, want tcg and running", v.Accel, v.Running())
	}

	st, err := m.QueryStatus(ctx)
	if err != nil || !st.Running || st.Status != "running" {
		t.Fatalf("QueryStatus = %+v, %v; want running", st, err)
	}
	if err := m.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	waitEvent(t, m, "STOP")
	if st, _ := m.QueryStatus(ctx); st.Running || st.Status != "paused" {
		t.Errorf("after stop: %+v, want paused", st)
	}
	if err := m.Cont(ctx); err != nil {
		t.Fatal(err)
	}
	waitEvent(t, m, "RESUME")

	var qe *QMPError
	if err := m.Execute(ctx, "no-such-command", nil, nil); !errors.As(err, &qe) || qe.Class != "CommandNotFound" {
		t.Errorf("unknown command: %v, want a CommandNotFound QMPError", err)
	}

	if err := m.SaveVM(ctx, "one"); err != nil {
		t.Fatalf("SaveVM: %v", err)
	}
	if err := m.SaveVM(ctx, "two"); err != nil {
		t.Fatalf("SaveVM: %v", err)
	}
	tags, err := m.Snapshots(ctx)
	if err != nil || !slices.Equal(tags, []string{"one", "two"}) {
		t.Errorf("Snapshots = %q, %v; want one, two", tags, err)
	}
	disk, _ := MachineOf(v.Dir)
	info, err := Images{}.Info(ctx, disk.Disk)
	if err != nil || !info.HasSnapshot("one", true) || info.HasSnapshot("three", false) {
		t.Errorf("Info(%s) = %+v, %v; want snapshot one with a running state", disk.Disk, info, err)
	}
	if err := m.LoadVM(ctx, "one"); err != nil {
		t.Fatalf("LoadVM: %v", err)
	}
	if st, _ := m.QueryStatus(ctx); !st.Running {
		t.Errorf("after loadvm of a running state: %+v, want running", st)
	}
	if err := m.LoadVM(ctx, "nope"); err == nil || !strings.Contains(err.Error(), "nope") {
		t.Errorf("LoadVM(nope) = %v, want an error naming it", err)
	}
	if err := m.DelVM(ctx, "one"); err != nil {
		t.Fatal(err)
	}
	if tags, _ := m.Snapshots(ctx); !slices.Equal(tags, []string{"two"}) {
		t.Errorf("after delvm: %q, want two", tags)
	}
	if err := m.SaveVM(ctx, "bad name"); err == nil {
		t.Error("SaveVM with a space: no error")
	}

	if err := m.Quit(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-v.Exited():
	case <-time.After(60 * time.Second):
		t.Fatal("the monitor did not end after quit")
	}
	if err := v.Wait(ctx); err != nil || v.Running() {
		t.Fatalf("Wait = %v, running %v", err, v.Running())
	}
	if _, err := Find(ctx, v.Dir); !errors.Is(err, ErrNotRunning) {
		t.Errorf("Find after quit = %v, want ErrNotRunning", err)
	}
}

// TestStartFromSavedState: a VM started with -loadvm continues from the
// state, also with another host port (slirp's rules are not in the
// state); with another memory size QEMU refuses and Start says why.
func TestStartFromSavedState(t *testing.T) {
	needQEMU(t)
	ctx := t.Context()
	disk := blankDisk(t, t.TempDir())
	m := Machine{Disk: disk, MemoryMiB: 64, Accel: "tcg"}
	dir := t.TempDir()
	v := startBlank(t, dir, m, StartOptions{})
	if err := v.Monitor().SaveVM(ctx, "ready"); err != nil {
		t.Fatal(err)
	}
	port := v.SSHPort
	if err := v.Stop(ctx, 30*time.Second); err != nil {
		t.Fatal(err)
	}

	v2, err := Start(ctx, dir, m, StartOptions{LoadVM: "ready"})
	if err != nil {
		t.Fatalf("Start(loadvm): %v", err)
	}
	defer v2.Stop(context.Background(), 10*time.Second)
	if v2.SSHPort == port {
		t.Logf("the same port %d was picked again", port)
	}
	if st, err := v2.Monitor().QueryStatus(ctx); err != nil || !st.Running {
		t.Errorf("after start from the state: %+v, %v", st, err)
	}
	if err := v2.Stop(ctx, 30*time.Second); err != nil {
		t.Fatal(err)
	}

	m.MemoryMiB = 96
	_, err = Start(ctx, dir, m, StartOptions{LoadVM: "ready"})
	if err == nil || !strings.Contains(err.Error(), "qemu") {
		t.Fatalf("Start with other memory = %v, want QEMU's refusal", err)
	}
	t.Logf("refusal: %v", err)
}

// TestFindAfterStarterExit: a VM started by another process, which then
// exits, still runs and is found from its directory (also a directory
// whose socket path is longer than a unix address holds).
func TestFindAfterStarterExit(t *testing.T) {
	needQEMU(t)
	ctx := t.Context()
	dir := filepath.Join(t.TempDir(), strings.Repeat("d", 60), strings.Repeat("e", 60))
	disk := blankDisk(t, t.TempDir())
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperStart$")
	cmd.Env = append(os.Environ(), "DROVER_QEMU_HELPER_DIR="+dir, "DROVER_QEMU_HELPER_DISK="+disk)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("starter: %v\n%s", err, out)
	}
	v, err := Find(ctx, dir)
	if err != nil {
		t.Fatalf("Find: %v", err)
	}
	defer v.Stop(context.Background(), 10*time.Second)
	if st, err := v.Monitor().QueryStatus(ctx); err != nil || !st.Running {
		t.Fatalf("QueryStatus = %+v, %v", st, err)
	}
	if v.SSHPort == 0 {
		t.Error("no SSH port recorded")
	}
	if _, err := Start(ctx, dir, Machine{Disk: disk}, StartOptions{}); err == nil || !strings.Contains(err.Error(), "already running") {
		t.Errorf("Start over a running VM = %v, want a refusal", err)
	}
	if err := v.Kill(ctx); err != nil {
		t.Fatal(err)
	}
	if v.Running() {
		t.Error("still running after Kill")
	}
}

// TestHelperStart is the starter process of TestFindAfterStarterExit.
func TestHelperStart(t *testing.T) {
	dir := os.Getenv("DROVER_QEMU_HELPER_DIR")
	if dir == "" {
		t.Skip("helper process only")
	}
	v, err := Start(t.Context(), dir, Machine{Disk: os.Getenv("DROVER_QEMU_HELPER_DISK"), MemoryMiB: 64, Accel: "tcg"}, StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	v.Close()
}

// TestFindNotQEMU: a pid file naming a live process that is not QEMU (a
// reused pid) is not a running VM.
func TestFindNotQEMU(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, filePID), []byte(strconv.Itoa(os.Getpid())+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Find(t.Context(), dir); !errors.Is(err, ErrNotRunning) {
		t.Errorf("Find = %v, want ErrNotRunning", err)
	}
	if _, err := Find(t.Context(), t.TempDir()); !errors.Is(err, ErrNotRunning) {
		t.Errorf("Find(empty dir) = %v, want ErrNotRunning", err)
	}
}

// TestCheckBase: qcow2 and raw disks are bases; a missing file, a text
// file and another image format are not, each named in the error.
func TestCheckBase(t *testing.T) {
	needQEMU(t)
	dir := t.TempDir()
	qcow := blankDisk(t, dir)
	vmdk := filepath.Join(dir, "disk.vmdk")
	if out, err := exec.Command("qemu-img", "create", "-q", "-f", "vmdk", vmdk, "1M").CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	raw := filepath.Join(dir, "disk.img")
	b := make([]byte, 1<<20)
	b[510], b[511] = 0x55, 0xAA
	if err := os.WriteFile(raw, b, 0o600); err != nil {
		t.Fatal(err)
	}
	text := filepath.Join(dir, "notes.txt")
	if err := os.WriteFile(text, []byte("not a disk\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path, format string
		want         error
	}{
		{qcow, "qcow2", nil},
		{raw, "raw", nil},
		{filepath.Join(dir, "missing.qcow2"), "", fs.ErrNotExist},
		{text, "", ErrNotImage},
		{vmdk, "", ErrNotImage},
	} {
		info, err := Images{}.CheckBase(t.Context(), tc.path)
		switch {
		case tc.want == nil && (err != nil || info.Format != tc.format):
			t.Errorf("CheckBase(%s) = %+v, %v; want format %s", tc.path, info, err, tc.format)
		case tc.want != nil && (!errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.path)):
			t.Errorf("CheckBase(%s) = %v, want %v naming the file", tc.path, err, tc.want)
		}
	}
}

// TestOverlayAndCopy: an overlay records its base; a copy keeps the
// base's internal snapshots, which an overlay does not see.
func TestOverlayAndCopy(t *testing.T) {
	needQEMU(t)
	ctx := t.Context()
	dir := t.TempDir()
	base := blankDisk(t, dir)
	if out, err := exec.Command("qemu-img", "snapshot", "-c", "snap", base).CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	im := Images{}
	ov := filepath.Join(dir, "overlay.qcow2")
	if err := im.CreateOverlay(ctx, base, "qcow2", ov); err != nil {
		t.Fatal(err)
	}
	info, err := im.Info(ctx, ov)
	if err != nil || info.BackingFile != base || info.Format != "qcow2" || info.HasSnapshot("snap", false) {
		t.Errorf("overlay info = %+v, %v; want backing %s and no snapshot", info, err, base)
	}
	cp := filepath.Join(dir, "copy.qcow2")
	if err := im.Copy(ctx, base, cp); err != nil {
		t.Fatal(err)
	}
	if info, err := im.Info(ctx, cp); err != nil || !info.HasSnapshot("snap", false) {
		t.Errorf("copy info = %+v, %v; want snapshot snap", info, err)
	}
}

func TestParseInfoSnapshots(t *testing.T) {
	for _, tc := range []struct {
		name, out string
		want      []string
	}{
		{"none", "There is no snapshot available.\r\n", nil},
		{"two", "List of snapshots present on all disks:\r\n" +
			"ID        TAG               VM SIZE                DATE     VM CLOCK     ICOUNT\r\n" +
			"--        Started          45.2 MiB 2024-05-01 10:00:00 00:00:14.123\r\n" +
			"--        ready             1.1 MiB 2024-05-01 10:01:00 00:00:15.000\r\n", []string{"Started", "ready"}},
		{"partial disks", "List of snapshots present on all disks:\r\n" +
			"ID        TAG               VM SIZE                DATE     VM CLOCK     ICOUNT\r\n" +
			"--        a          1 MiB 2024-05-01 10:00:00 00:00:14.123\r\n" +
			"\r\nList of partial (non-loadable) snapshots on 'disk1':\r\n" +
			"ID        TAG               VM SIZE                DATE     VM CLOCK     ICOUNT\r\n" +
			"1         b          0 B 2024-05-01 10:00:00 00:00:14.123\r\n", []string{"a"}},
	} {
		if got := parseInfoSnapshots(tc.out); !slices.Equal(got, tc.want) {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestArgs(t *testing.T) {
	args := strings.Join(Args(Machine{Disk: "/d/a,b.qcow2", Kernel: "/k", Append: "console=ttyS0"}, StartOptions{Name: "vm", SSHPort: 2222, LoadVM: "Started"}, "tcg"), " ")
	for _, want := range []string{
		"-accel tcg", "-m 512", "-smp 1", "-daemonize", "-pidfile qemu.pid", "-qmp unix:qmp.sock,server=on,wait=off",
		"file=/d/a,,b.qcow2,format=qcow2,if=virtio", "hostfwd=tcp:127.0.0.1:2222-:22", "-kernel /k", "-append console=ttyS0", "-loadvm Started",
	} {
		if !strings.Contains(args, want) {
			t.Errorf("args lack %q: %s", want, args)
		}
	}
	if strings.Contains(args, "-initrd") {
		t.Errorf("args have -initrd without one: %s", args)
	}
}
