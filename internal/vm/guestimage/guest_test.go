package guestimage_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/drover-ci/drover/internal/sshx"
	"github.com/drover-ci/drover/internal/vm/guestimage"
	"github.com/drover-ci/drover/internal/vm/guestimage/guestimagetest"
)

// stageTools are the commands drover's stage scripts and the instance
// executor's wrapper run on a host (internal/executor/instance).
var stageTools = []string{"sh", "mkdir", "cat", "rm", "chmod", "mktemp", "env", "sleep", "kill", "wc",
	"tail", "head", "sed", "grep", "tr", "printf", "hostname", "uname", "base64", "setsid", "mv", "pwd",
	"id", "date", "ls", "cp", "ln", "touch", "tar", "gzip", "find", "xargs", "awk", "cut", "sort"}

// guestChecks are commands run in a booted guest of either kind, with
// what they must print (a substring) or exit with.
func guestChecks(img guestimage.Image, hostPort int) []guestCheck {
	bb := guestimage.BusyboxPath // the debian kind has no ip, no nc
	return []guestCheck{
		{name: "uname", cmd: "uname -a", want: "Linux " + guestimage.Hostname + " " + img.KernelVersion + " "},
		{name: "root", cmd: "id -u", want: "0\n"},
		{name: "hostname", cmd: "hostname", want: guestimage.Hostname + "\n"},
		{name: "write and read a file", cmd: "printf 'drover\\n' > /builds/f && cat /builds/f && rm /builds/f", want: "drover\n"},
		{name: "stdin", cmd: "cat", stdin: "from the host", want: "from the host"},
		{name: "exit code", cmd: "exit 3", exit: 3},
		{name: "sh -c exit code", cmd: "sh -c 'exit 3'", exit: 3},
		{name: "stderr and failure", cmd: "cat /nonexistent", exit: 1},
		{name: "stage tools", cmd: "for c in " + strings.Join(stageTools, " ") + "; do command -v $c >/dev/null || echo missing $c; done; echo ok", want: "ok\n", exact: true},
		{name: "tmp writable, sticky", cmd: "stat -c %a /tmp && mktemp -d /tmp/x.XXXXXX | grep -c '^/tmp/x'", want: "1777\n1\n", exact: true},
		{name: "builds and cache", cmd: "test -d /builds && test -d /cache && echo yes", want: "yes\n"},
		{name: "mounts", cmd: "cut -d' ' -f2,3 /proc/mounts | sort", want: "/dev/pts devpts\n"},
		{name: "tmpfs", cmd: "cut -d' ' -f2,3 /proc/mounts | grep '^/tmp '", want: "/tmp tmpfs\n"},
		{name: "date settable", cmd: "date -s @2000000000 >/dev/null && date +%s", want: "20000000"},
		{name: "address", cmd: bb + " ip -4 addr show eth0", want: "inet " + guestimage.GuestIP + "/24"},
		{name: "route", cmd: bb + " ip route", want: "default via " + guestimage.GatewayIP + " dev eth0"},
		{name: "resolver", cmd: "cat /etc/resolv.conf", want: "nameserver " + guestimage.DNSIP + "\n", exact: true},
		{name: "host loopback via the gateway", cmd: "echo from-the-guest | " + bb + " nc " + guestimage.GatewayIP + " " + strconv.Itoa(hostPort) + " && echo sent", want: "sent\n"},
	}
}

type guestCheck struct {
	name, cmd, stdin string
	want             string // in the output; "" = anything
	exact            bool   // the whole output
	exit             int
}

// runChecks runs checks over c.
func runChecks(t *testing.T, c *sshx.Client, checks []guestCheck) {
	for _, tc := range checks {
		t.Run(tc.name, func(t *testing.T) {
			var stdin io.Reader
			if tc.stdin != "" {
				stdin = strings.NewReader(tc.stdin)
			}
			out, err := c.Output(t.Context(), tc.cmd, stdin)
			exit := 0
			var ee *ssh.ExitError
			if errors.As(err, &ee) {
				exit = ee.ExitStatus()
			} else if err != nil {
				t.Fatalf("Output(%q) = %v", tc.cmd, err)
			}
			if exit != tc.exit {
				t.Errorf("Output(%q): exit %d (%v), want %d; output %q", tc.cmd, exit, err, tc.exit, out)
			}
			switch {
			case tc.exact && string(out) != tc.want:
				t.Errorf("Output(%q) = %q, want %q", tc.cmd, out, tc.want)
			case !tc.exact && !strings.Contains(string(out), tc.want):
				t.Errorf("Output(%q) = %q, want it to contain %q", tc.cmd, out, tc.want)
			}
		})
	}
}

// hostListener listens on the host's 127.0.0.1 and sends the first line
// a client writes to lines.
func hostListener(t *testing.T) (port int, lines <-chan string) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	ch := make(chan string, 1)
	go func() {
		conn, err := l.Accept()
		if err != nil {
			return
		}
		defer conn.Close()
		line, _ := bufio.NewReader(conn).ReadString('\n')
		ch <- line
	}()
	return l.Addr().(*net.TCPAddr).Port, ch
}

// TestBusyboxGuest boots a linked clone of the busybox image, connects
// with drover's SSH client pinning the image's host key, checks what the
// guest has and does (commands, exit codes, the stage scripts' tools,
// writable /tmp, network, settable date), then powers it off with the
// ACPI power button (QMP system_powerdown).
func TestBusyboxGuest(t *testing.T) {
	testGuest(t, guestimagetest.Image(t, guestimage.Busybox))
}

// TestDebianGuest does the same with the debian image, and checks git
// and the CA bundle. Its first build takes about 3 minutes (debootstrap);
// with -short it runs only when the image is in the cache already.
func TestDebianGuest(t *testing.T) {
	cache, err := guestimage.DefaultCacheDir()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := guestimage.Load(filepath.Join(cache, guestimage.Name(guestimage.Options{Kind: guestimage.Debian}))); err != nil && testing.Short() {
		t.Skip("-short, and the debian guest image is not built yet (minutes): drover vm image build --kind debian")
	}
	img := guestimagetest.Image(t, guestimage.Debian)
	testGuest(t, img, guestCheck{name: "git", cmd: "git --version", want: "git version "},
		guestCheck{name: "CA bundle", cmd: "test -s /etc/ssl/certs/ca-certificates.crt && echo yes", want: "yes\n"})
}

func testGuest(t *testing.T, img guestimage.Image, more ...guestCheck) {
	g := guestimagetest.Boot(t, img)
	g.KeepConsole(t)
	c := g.Dial(t)
	port, lines := hostListener(t)
	runChecks(t, c, append(guestChecks(img, port), more...))
	select {
	case line := <-lines:
		if line != "from-the-guest\n" {
			t.Errorf("the host's listener read %q, want %q", line, "from-the-guest\n")
		}
	case <-time.After(90 * time.Second): // nc said it sent the line
		t.Error("the host's listener got no line from the guest")
	}

	t.Run("OpenSSH client with the known_hosts file", func(t *testing.T) {
		sshBin, err := exec.LookPath("ssh")
		if err != nil {
			t.Skipf("no OpenSSH client: %v", err)
		}
		_, port, _ := net.SplitHostPort(g.Addr)
		out, err := exec.CommandContext(t.Context(), sshBin, "-i", img.IdentityFile, "-p", port,
			"-o", "HostKeyAlias="+guestimage.HostKeyAlias, "-o", "UserKnownHostsFile="+img.KnownHostsFile,
			"-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes", "-F", "none",
			img.User+"@127.0.0.1", "echo ok").CombinedOutput()
		if err != nil || string(out) != "ok\n" {
			t.Errorf("ssh = %q, %v; want \"ok\\n\"", out, err)
		}
	})

	if _, err := g.QMP(t.Context(), "system_powerdown"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	if err := g.Wait(ctx); err != nil {
		t.Fatalf("after system_powerdown: %v", err)
	}
	if !strings.Contains(g.Console(), "reboot: Power down") {
		t.Errorf("QEMU exited without the guest powering down; console:\n%s", g.Console())
	}
	if strings.Contains(g.Console(), "can't remount") {
		t.Errorf("the guest's shutdown left a file system writable; console:\n%s", g.Console())
	}
}

// BenchmarkColdBoot times cold boots of linked clones of the busybox
// image under this machine's accelerator, each iteration one of each so
// that the machine's load weighs on both alike: ssh-p50-ms until a
// command ran over SSH (QEMU started, the ready marker, the SSH
// handshake, `true`), marker-p50-ms until the ready marker, and the
// baseline kernel-p50-ms until a guest whose initramfs powers off at once
// has exited (QEMU, firmware and the kernel's own boot). Medians; ns/op
// is the mean of the pair.
func BenchmarkColdBoot(b *testing.B) {
	img := guestimagetest.Image(b, guestimage.Busybox)
	var kernel, marker, total []time.Duration
	for b.Loop() {
		start := time.Now()
		g := guestimagetest.Start(b, img, guestimagetest.Options{Append: guestimage.AppendPowerOff})
		ctx, cancel := context.WithTimeout(b.Context(), guestimagetest.BootTimeout)
		if err := g.Wait(ctx); err != nil {
			b.Fatalf("%v\n%s", err, g.Console())
		}
		cancel()
		kernel = append(kernel, time.Since(start))

		start = time.Now()
		g = guestimagetest.Start(b, img, guestimagetest.Options{})
		ctx, cancel = context.WithTimeout(b.Context(), guestimagetest.BootTimeout)
		if err := g.WaitReady(ctx); err != nil {
			b.Fatalf("%v\n%s", err, g.Console())
		}
		cancel()
		marker = append(marker, time.Since(start))
		c := g.Dial(b)
		if _, err := c.Output(b.Context(), "true", nil); err != nil {
			b.Fatal(err)
		}
		total = append(total, time.Since(start))
		c.Close()
		g.Stop()
	}
	b.ReportMetric(median(kernel), "kernel-p50-ms")
	b.ReportMetric(median(marker), "marker-p50-ms")
	b.ReportMetric(median(total), "ssh-p50-ms")
}

// median of ds in milliseconds.
func median(ds []time.Duration) float64 {
	s := slices.Clone(ds)
	slices.Sort(s)
	return float64(s[len(s)/2]) / float64(time.Millisecond)
}

func ExampleImage_QEMUArgs() {
	img := guestimage.Image{Kernel: "/k", Initrd: "/i", Append: "console=ttyS0"}
	fmt.Println(guestimage.CommandLine(img.QEMUArgs("tcg", "/tmp/my disk.qcow2", 2222)))
	// Output: -nodefaults -no-user-config -display none -accel tcg -m 512 -smp 1 -kernel /k -initrd /i -append console=ttyS0 -drive 'file=/tmp/my disk.qcow2,if=virtio,format=qcow2' -netdev user,id=n0,hostfwd=tcp:127.0.0.1:2222-:22 -device virtio-net-pci,netdev=n0,romfile= -device virtio-rng-pci
}
