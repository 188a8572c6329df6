// Package guestimagetest gives tests a guest image (built once per
// machine, see guestimage) and boots linked clones of it under QEMU, with
// the console captured and the SSH port forwarded to 127.0.0.1. It is
// deliberately plain (exec, -serial stdio, a QMP socket for the odd
// command): the VM executors' own QEMU control lives in internal/vm/qemu.
// Only tests import it.
package guestimagetest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/debroot"
	"github.com/drover-ci/drover/internal/freeport"
	"github.com/drover-ci/drover/internal/sshx"
	"github.com/drover-ci/drover/internal/vm/guestimage"
)

// BootTimeout bounds a boot to the ready marker: generous, since under
// emulation (no /dev/kvm) on a loaded machine a boot of 10 s can take
// several times that.
const BootTimeout = 3 * time.Minute

// QEMU is the emulator the guests run in.
const QEMU = "qemu-system-x86_64"

// Image returns the image of kind, building it first when the machine's
// cache has none (the log lines go to the test's log). It skips the test
// when QEMU's tools are not installed, or the debian kind cannot be
// built here (no debootstrap, not root).
func Image(t testing.TB, kind guestimage.Kind) guestimage.Image {
	t.Helper()
	for _, bin := range []string{QEMU, "qemu-img"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Skipf("%s not installed (apt-get install qemu-system-x86 qemu-utils): %v", bin, err)
		}
	}
	img, err := guestimage.Build(t.Context(), guestimage.Options{Kind: kind, Logger: slog.New(slog.NewTextHandler(testWriter{t}, nil))})
	if errors.Is(err, debroot.ErrNoDebootstrap) {
		t.Skipf("no %s guest image: %v", kind, err)
	}
	if err != nil {
		t.Fatalf("guestimage.Build(%s) = %v", kind, err)
	}
	return img
}

// testWriter writes to the test's log.
type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// Options change how Start boots a guest.
type Options struct {
	// Append is added to the image's kernel command line.
	Append string
	// Args are more arguments of QEMU.
	Args []string
}

// Guest is a running QEMU guest: a linked clone of an image.
type Guest struct {
	Image guestimage.Image
	// Addr is 127.0.0.1:port, forwarded to the guest's SSH server.
	Addr string
	// Overlay is the guest's disk, a linked clone of Image.Disk.
	Overlay string
	// QMPSocket is QEMU's QMP socket.
	QMPSocket string

	cmd     *exec.Cmd
	console *console
	exited  chan struct{}
	waitErr error
	once    sync.Once
}

// Boot starts a guest of img and waits for its ready marker; the test
// fails when QEMU exits first or the boot takes longer than BootTimeout.
// The guest is stopped when the test ends.
func Boot(t testing.TB, img guestimage.Image) *Guest {
	t.Helper()
	g := Start(t, img, Options{})
	ctx, cancel := context.WithTimeout(t.Context(), BootTimeout)
	defer cancel()
	if err := g.WaitReady(ctx); err != nil {
		t.Fatalf("boot: %v\nconsole:\n%s", err, g.Console())
	}
	return g
}

// Start creates a linked clone of img's disk in t.TempDir() and starts
// QEMU on it, its serial console captured; it does not wait for the boot.
// The guest is killed when the test ends, and with the test process.
func Start(t testing.TB, img guestimage.Image, opts Options) *Guest {
	t.Helper()
	dir := t.TempDir()
	g := &Guest{Image: img, Overlay: filepath.Join(dir, "disk.qcow2"), QMPSocket: filepath.Join(dir, "qmp.sock")}
	out, err := exec.Command("qemu-img", "create", "-q", "-f", "qcow2", "-b", img.Disk, "-F", "qcow2", g.Overlay).CombinedOutput()
	if err != nil {
		t.Fatalf("qemu-img create: %v: %s", err, out)
	}
	for attempt := 1; ; attempt++ {
		err := g.start(opts)
		if err == nil {
			break
		}
		// Another process took the free port before QEMU bound it.
		if !strings.Contains(g.Console(), "host forwarding rule") || attempt == 3 {
			t.Fatalf("start QEMU: %v\n%s", err, g.Console())
		}
	}
	t.Cleanup(g.Stop)
	return g
}

func (g *Guest) start(opts Options) error {
	port, err := freeport.Port()
	if err != nil {
		return err
	}
	g.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	img := g.Image
	img.Append = strings.TrimSpace(img.Append + " " + opts.Append)
	args := append(img.QEMUArgs(guestimage.Accel(), g.Overlay, port),
		"-serial", "stdio", "-no-reboot", "-qmp", "unix:"+g.QMPSocket+",server=on,wait=off")
	g.cmd = exec.Command(QEMU, append(args, opts.Args...)...)
	g.console = &console{ready: make(chan struct{})}
	g.cmd.Stdout, g.cmd.Stderr = g.console, g.console
	g.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := g.cmd.Start(); err != nil {
		return err
	}
	g.exited = make(chan struct{})
	g.once = sync.Once{}
	go func() {
		g.waitErr = g.cmd.Wait()
		close(g.exited)
	}()
	return g.waitMonitor()
}

// waitMonitor waits until QEMU answers on its QMP socket, which it does
// once its devices are set up, its port forwarding included; a port it
// cannot forward ends it before that.
func (g *Guest) waitMonitor() error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-g.exited:
			cancel()
		case <-ctx.Done():
		}
	}()
	for {
		if _, err := g.QMP(ctx, "query-status"); err == nil {
			return nil
		}
		select {
		case <-ctx.Done(): // only the exit cancels it
			return fmt.Errorf("QEMU exited: %v", g.waitErr)
		case <-time.After(20 * time.Millisecond): // no socket yet
		}
	}
}

// WaitReady waits for the guest's ready marker on its console (its SSH
// server listens). It fails when QEMU exits first or ctx ends.
func (g *Guest) WaitReady(ctx context.Context) error {
	select {
	case <-g.console.ready:
		return nil
	case <-g.exited:
		return fmt.Errorf("QEMU exited before the guest was ready: %v", g.waitErr)
	case <-ctx.Done():
		return fmt.Errorf("no %q on the console: %w", guestimage.ReadyMarker, ctx.Err())
	}
}

// Wait waits for QEMU to exit (the guest powered off) or ctx to end.
func (g *Guest) Wait(ctx context.Context) error {
	select {
	case <-g.exited:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("QEMU still runs: %w", ctx.Err())
	}
}

// Exited is closed when QEMU has exited.
func (g *Guest) Exited() <-chan struct{} { return g.exited }

// Stop kills QEMU and waits for it; a no-op after the first call.
func (g *Guest) Stop() {
	g.once.Do(func() {
		_ = g.cmd.Process.Kill()
		<-g.exited
	})
}

// Console is what the guest's console and QEMU printed so far.
func (g *Guest) Console() string { return g.console.String() }

// Dial connects to the guest's SSH server as the image's user, pinning
// the image's host key.
func (g *Guest) Dial(t testing.TB) *sshx.Client {
	t.Helper()
	cfg := g.Image.SSH(g.Addr)
	cfg.Timeout = 90 * time.Second
	c, err := sshx.Dial(t.Context(), cfg)
	if err != nil {
		t.Fatalf("sshx.Dial(%s) = %v\nconsole:\n%s", g.Addr, err, g.Console())
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// QMP runs one QMP command (with no arguments) and returns its "return"
// value.
func (g *Guest) QMP(ctx context.Context, command string) (json.RawMessage, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", g.QMPSocket)
	if err != nil {
		return nil, fmt.Errorf("QMP: %w", err)
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	r := bufio.NewReader(conn)
	if _, err := r.ReadBytes('\n'); err != nil { // the greeting
		return nil, fmt.Errorf("QMP greeting: %w", err)
	}
	var ret json.RawMessage
	for _, cmd := range []string{"qmp_capabilities", command} {
		if _, err := fmt.Fprintf(conn, "{\"execute\": %q}\n", cmd); err != nil {
			return nil, fmt.Errorf("QMP %s: %w", cmd, err)
		}
		for {
			line, err := r.ReadBytes('\n')
			if err != nil {
				return nil, fmt.Errorf("QMP %s: %w", cmd, err)
			}
			var msg struct {
				Return json.RawMessage `json:"return"`
				Error  *struct {
					Desc string `json:"desc"`
				} `json:"error"`
			}
			if err := json.Unmarshal(line, &msg); err != nil {
				return nil, fmt.Errorf("QMP %s: %w", cmd, err)
			}
			if msg.Error != nil {
				return nil, fmt.Errorf("QMP %s: %s", cmd, msg.Error.Desc)
			}
			if msg.Return != nil {
				ret = msg.Return
				break
			}
			// an event: read on
		}
	}
	return ret, nil
}

// console collects QEMU's output (the guest's serial console) and closes
// ready when the ready marker appears.
type console struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	checked int // bytes of buf already searched for the marker
	ready   chan struct{}
	isReady bool
}

func (c *console) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.buf.Write(p)
	if !c.isReady {
		marker := []byte(guestimage.ReadyMarker)
		from := max(0, c.checked-len(marker))
		if bytes.Contains(c.buf.Bytes()[from:], marker) {
			c.isReady = true
			close(c.ready)
		}
		c.checked = c.buf.Len()
	}
	return len(p), nil
}

func (c *console) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.buf.String()
}

// KeepConsole makes the test log the guest's console when it fails.
func (g *Guest) KeepConsole(t testing.TB) {
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("guest console:\n%s", g.Console())
		}
	})
}
