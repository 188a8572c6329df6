package qemu

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/freeport"
	"github.com/drover-ci/drover/internal/sshx"
	"github.com/drover-ci/drover/internal/vm/guestimage"
	"github.com/drover-ci/drover/internal/vm/guestimage/guestimagetest"
)

// bootTimeout bounds a guest's boot to SSH: generous, since under
// emulation on a loaded machine a boot of 15 s can take several times
// that.
const bootTimeout = 3 * time.Minute

// waitConsole waits until the VM's console has line (the guest image's
// ready marker), or the VM exits.
func waitConsole(ctx context.Context, v *VM, line string) error {
	ctx, cancel := context.WithTimeout(ctx, bootTimeout)
	defer cancel()
	// The console is a file QEMU appends to: read what is new as it
	// grows, woken by a short tick (a file has no event to wait on).
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		b, _ := os.ReadFile(v.ConsolePath())
		if strings.Contains(string(b), line) {
			return nil
		}
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-v.Exited():
			return ErrNotRunning
		case <-t.C:
		}
	}
}

// dialGuest connects to the guest's SSH server, which answers once its
// ready marker is on the console.
func dialGuest(t *testing.T, img guestimage.Image, v *VM) *sshx.Client {
	t.Helper()
	c, err := sshx.Dial(t.Context(), img.SSH(v.SSHAddr()))
	if err != nil {
		t.Fatalf("ssh %s: %v", v.SSHAddr(), err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestGuestSaveAndLoad boots a linked clone of the busybox guest, writes
// a file, saves the running state, writes another, powers off, then
// starts from the state on another host port: SSH answers at once and
// the guest is as it was saved (the first file there, the second not).
func TestGuestSaveAndLoad(t *testing.T) {
	img := guestimagetest.Image(t, guestimage.Busybox)
	ctx := t.Context()
	dir := t.TempDir()
	disk := filepath.Join(dir, "disk.qcow2")
	if err := (Images{}).CreateOverlay(ctx, img.Disk, "qcow2", disk); err != nil {
		t.Fatal(err)
	}
	m := Machine{Disk: disk, Kernel: img.Kernel, Initrd: img.Initrd, Append: img.Append}
	vdir := filepath.Join(dir, "vm")
	v, err := Start(ctx, vdir, m, StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Stop(context.Background(), 10*time.Second)
	t0 := time.Now()
	if err := waitConsole(ctx, v, guestimage.ReadyMarker); err != nil {
		t.Fatalf("boot: %v\n%s", err, tail(vdir))
	}
	t.Logf("cold boot to SSH (%s): %v", v.Accel, time.Since(t0))
	c := dialGuest(t, img, v)
	if out, err := c.Output(ctx, "echo saved > /root/one && sync", nil); err != nil {
		t.Fatalf("write: %v %s", err, out)
	}
	c.Close()
	if err := v.Monitor().SaveVM(ctx, "ready"); err != nil {
		t.Fatalf("savevm: %v", err)
	}
	c = dialGuest(t, img, v)
	if out, err := c.Output(ctx, "echo later > /root/two && sync", nil); err != nil {
		t.Fatalf("write: %v %s", err, out)
	}
	c.Close()
	oldPort := v.SSHPort
	if err := v.Stop(ctx, 30*time.Second); err != nil {
		t.Fatal(err)
	}

	t0 = time.Now()
	port, err := freeport.Port()
	if err != nil {
		t.Fatal(err)
	}
	v, err = Start(ctx, vdir, m, StartOptions{LoadVM: "ready", SSHPort: port})
	if err != nil {
		t.Fatalf("start from the saved state: %v", err)
	}
	defer v.Stop(context.Background(), 10*time.Second)
	if v.SSHPort == oldPort {
		t.Fatalf("port %d reused; the test wants another", port)
	}
	sctx, cancel := context.WithTimeout(ctx, bootTimeout)
	defer cancel()
	c, err = sshx.Dial(sctx, img.SSH(v.SSHAddr()))
	if err != nil {
		t.Fatalf("ssh after loadvm on port %d (saved with %d): %v", v.SSHPort, oldPort, err)
	}
	defer c.Close()
	t.Logf("start from the saved state to an SSH session: %v", time.Since(t0))
	out, err := c.Output(ctx, "cat /root/one; test -e /root/two && echo two-present || echo two-absent", nil)
	if err != nil || string(out) != "saved\ntwo-absent\n" {
		t.Errorf("after loadvm: %q, %v; want the saved file and not the later one", out, err)
	}
}

func tail(dir string) string {
	lines, _ := ConsoleTail(dir, 20)
	return strings.Join(lines, "\n")
}
