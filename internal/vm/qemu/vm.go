package qemu

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/drover-ci/drover/internal/freeport"
)

// Binary is the QEMU system emulator drover runs (found on PATH): from
// Debian's qemu-system-x86 package.
const Binary = "qemu-system-x86_64"

// Package names the Debian package that installs Binary.
const Package = "qemu-system-x86"

// ErrNotRunning is returned (wrapped) by Find for a directory whose VM is
// not running.
var ErrNotRunning = errors.New("the VM is not running")

// Files of a VM's directory.
const (
	fileQMP     = "qmp.sock"
	filePID     = "qemu.pid"
	fileConsole = "console.log"
	fileLog     = "qemu.log" // QEMU's own messages (stderr) while starting
	fileState   = "vm.json"
)

// Machine is a VM's hardware and boot: what its QEMU command line is made
// of. A VM started from a saved state (StartOptions.LoadVM) must have the
// Machine it was saved with, except for the disk's path: QEMU checks the
// memory size, the devices and the machine type against the state.
type Machine struct {
	// Disk is the VM's disk image, attached as a virtio disk. savevm
	// needs it to be qcow2.
	Disk string `json:"disk"`
	// DiskFormat is "qcow2" (default) or "raw".
	DiskFormat string `json:"disk_format,omitempty"`
	// MemoryMiB is the guest's memory (default 512).
	MemoryMiB int `json:"memory_mib,omitempty"`
	// CPUs is the number of virtual CPUs (default 1).
	CPUs int `json:"cpus,omitempty"`
	// Accel is auto (default: kvm when /dev/kvm is usable), kvm or tcg.
	Accel string `json:"accel,omitempty"`
	// Kernel, Initrd and Append boot a kernel directly (-kernel,
	// -initrd, -append) instead of the disk's boot loader.
	Kernel string `json:"kernel,omitempty"`
	Initrd string `json:"initrd,omitempty"`
	Append string `json:"append,omitempty"`
	// GuestSSHPort is the guest's SSH port the host port forwards to
	// (default 22).
	GuestSSHPort int `json:"guest_ssh_port,omitempty"`
	// Type is QEMU's machine type (default "pc").
	Type string `json:"type,omitempty"`
}

func (m Machine) withDefaults() Machine {
	if m.DiskFormat == "" {
		m.DiskFormat = "qcow2"
	}
	if m.MemoryMiB <= 0 {
		m.MemoryMiB = 512
	}
	if m.CPUs <= 0 {
		m.CPUs = 1
	}
	if m.GuestSSHPort <= 0 {
		m.GuestSSHPort = 22
	}
	if m.Type == "" {
		m.Type = "pc"
	}
	return m
}

// StartOptions are the choices of one start of a VM.
type StartOptions struct {
	// Name is the VM's name for QEMU (-name: process title, logs).
	Name string
	// Binary is the QEMU binary ("" = Binary from PATH).
	Binary string
	// LoadVM starts from the disk's saved state of that name instead of
	// booting.
	LoadVM string
	// SSHPort is the host port on 127.0.0.1 that forwards to the guest's
	// SSH port; 0 picks a free one. A saved state may be started with
	// another host port than it was saved with: QEMU's user networking
	// keeps its forwarding rules out of the saved state.
	SSHPort int
	// SSHHost is the host address the forward listens on (default
	// 127.0.0.1): the Parallels stand-in gives each guest a loopback
	// address of its own.
	SSHHost string
}

func (o StartOptions) sshHost() string {
	if o.SSHHost == "" {
		return "127.0.0.1"
	}
	return o.SSHHost
}

// state is what a VM's directory records of its current start.
type state struct {
	Name    string    `json:"name"`
	Machine Machine   `json:"machine"`
	SSHPort int       `json:"ssh_port"`
	Accel   string    `json:"accel"`
	Started time.Time `json:"started"`
}

// VM is a running QEMU process, controlled through QMP. It runs detached
// from drover (a session of its own, reparented to init): it survives the
// process that started it, and Find reconnects to it from its directory.
type VM struct {
	// Dir is the VM's directory: its QMP socket, pid file, console log
	// and state.
	Dir string
	// PID is QEMU's process id.
	PID int
	// SSHPort is the host port on 127.0.0.1 forwarded to the guest's SSH
	// port.
	SSHPort int
	// Accel is the accelerator it runs with (kvm or tcg).
	Accel string

	mon *Monitor
}

// Monitor is the VM's QMP connection.
func (v *VM) Monitor() *Monitor { return v.mon }

// SSHAddr is the host address of the guest's SSH server.
func (v *VM) SSHAddr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(v.SSHPort)) }

// ConsolePath is the file the guest's serial console is written to.
func (v *VM) ConsolePath() string { return filepath.Join(v.Dir, fileConsole) }

// ConsolePath is the console log of the VM whose directory is dir.
func ConsolePath(dir string) string { return filepath.Join(dir, fileConsole) }

// Args returns QEMU's command line (without the binary) for m started in
// dir with o, accel resolved and o.SSHPort set. Paths of the VM's own
// files are relative to dir, QEMU's working directory while it starts,
// so that a long dir never exceeds a unix socket path's limit.
func Args(m Machine, o StartOptions, accel string) []string {
	m = m.withDefaults()
	args := []string{
		"-name", o.Name,
		"-machine", m.Type,
		"-accel", accel,
		"-m", strconv.Itoa(m.MemoryMiB),
		"-smp", strconv.Itoa(m.CPUs),
		"-nodefaults", "-no-user-config",
		"-display", "none",
		"-daemonize",
		"-pidfile", filePID,
		"-qmp", "unix:" + fileQMP + ",server=on,wait=off",
		// Appended, so that a restart keeps the earlier boots' lines.
		"-chardev", "file,id=console,path=" + fileConsole + ",append=on",
		"-serial", "chardev:console",
		"-drive", "file=" + escapeOpt(m.Disk) + ",format=" + m.DiskFormat + ",if=virtio,cache=writeback,discard=unmap",
		"-netdev", fmt.Sprintf("user,id=net0,hostfwd=tcp:%s:%d-:%d", o.sshHost(), o.SSHPort, m.GuestSSHPort),
		// romfile= skips the network card's PXE ROM: nothing boots from
		// the network, and loading it costs time under emulation.
		"-device", "virtio-net-pci,netdev=net0,romfile=",
		"-device", "virtio-rng-pci",
	}
	if m.Kernel != "" {
		args = append(args, "-kernel", m.Kernel)
	}
	if m.Initrd != "" {
		args = append(args, "-initrd", m.Initrd)
	}
	if m.Append != "" {
		args = append(args, "-append", m.Append)
	}
	if o.LoadVM != "" {
		args = append(args, "-loadvm", o.LoadVM)
	}
	return args
}

// escapeOpt escapes a value for QEMU's option syntax (a comma doubles).
func escapeOpt(s string) string { return strings.ReplaceAll(s, ",", ",,") }

// Start starts a VM in dir (created if missing) and connects to its
// monitor. QEMU daemonizes: Start returns once the VM runs (or is
// restored from o.LoadVM) with its QMP socket up, or with QEMU's own
// message when it could not start. ctx bounds the start only.
func Start(ctx context.Context, dir string, m Machine, o StartOptions) (*VM, error) {
	m = m.withDefaults()
	if m.Disk == "" {
		return nil, errors.New("qemu: the machine has no disk")
	}
	if o.LoadVM != "" {
		if err := CheckSnapshotName(o.LoadVM); err != nil {
			return nil, err
		}
	}
	accel, err := ResolveAccel(m.Accel)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	if pid, err := readPID(dir); err == nil && isQEMU(pid) {
		return nil, fmt.Errorf("qemu %s: a VM is already running there (pid %d)", dir, pid)
	}
	if o.Binary == "" {
		o.Binary = Binary
	}
	if o.Name == "" {
		o.Name = filepath.Base(dir)
	}
	disk, err := filepath.Abs(m.Disk)
	if err != nil {
		return nil, err
	}
	m.Disk = disk
	for _, f := range []*string{&m.Kernel, &m.Initrd} {
		if *f != "" {
			if *f, err = filepath.Abs(*f); err != nil {
				return nil, err
			}
		}
	}

	// A free port can be taken between the probe and QEMU's bind: try
	// another one then.
	pick := o.SSHPort == 0
	for attempt := 1; ; attempt++ {
		if pick {
			if o.SSHPort, err = freeport.Port(); err != nil {
				return nil, err
			}
		}
		var v *VM
		v, err = start(ctx, dir, m, o, accel)
		if err == nil {
			return v, nil
		}
		if !pick || attempt == 3 || !strings.Contains(err.Error(), "host forwarding") {
			return nil, err
		}
	}
}

func start(ctx context.Context, dir string, m Machine, o StartOptions, accel string) (*VM, error) {
	for _, f := range []string{fileQMP, filePID} {
		if err := os.Remove(filepath.Join(dir, f)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
	}
	logf, err := os.OpenFile(filepath.Join(dir, fileLog), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd := exec.Command(o.Binary, Args(m, o, accel)...)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = logf, logf
	// A session of its own: no signal to drover's process group (a ^C,
	// a kill of the manager's group) reaches the VM.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("qemu: %w", err)
	}
	// With -daemonize the first process exits once the VM is set up
	// (sockets bound, state loaded): that is the start's end.
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err = <-exited:
	case <-ctx.Done():
		cmd.Process.Kill()
		<-exited
		if pid, perr := readPID(dir); perr == nil && isQEMU(pid) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
		return nil, fmt.Errorf("qemu %s: start: %w", dir, ctx.Err())
	}
	if err != nil {
		msg, _ := os.ReadFile(filepath.Join(dir, fileLog))
		return nil, fmt.Errorf("qemu %s: start: %w: %s", dir, err, bytes.TrimSpace(msg))
	}
	pid, err := readPID(dir)
	if err != nil {
		return nil, fmt.Errorf("qemu %s: started, but: %w", dir, err)
	}
	st := state{Name: o.Name, Machine: m, SSHPort: o.SSHPort, Accel: accel, Started: time.Now()}
	if err := writeState(dir, st); err != nil {
		syscall.Kill(pid, syscall.SIGKILL)
		return nil, err
	}
	mon, err := DialMonitor(ctx, filepath.Join(dir, fileQMP))
	if err != nil {
		syscall.Kill(pid, syscall.SIGKILL)
		return nil, err
	}
	return &VM{Dir: dir, PID: pid, SSHPort: o.SSHPort, Accel: accel, mon: mon}, nil
}

// monitorHandshakeTimeout bounds Find's QMP handshake.
const monitorHandshakeTimeout = 30 * time.Second

// Find connects to the VM running in dir: its pid file must name a live
// QEMU process whose QMP socket answers. A VM that is not running is
// ErrNotRunning (wrapped). QEMU serves one monitor client at a time: Close
// the VM before another process may Find it.
func Find(ctx context.Context, dir string) (*VM, error) {
	pid, err := readPID(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("qemu %s: %w (no pid file)", dir, ErrNotRunning)
	}
	if err != nil {
		return nil, fmt.Errorf("qemu %s: %w", dir, err)
	}
	if !isQEMU(pid) {
		return nil, fmt.Errorf("qemu %s: %w (pid %d is not a QEMU process)", dir, ErrNotRunning, pid)
	}
	st, err := readState(dir)
	if err != nil {
		return nil, fmt.Errorf("qemu %s: %w", dir, err)
	}
	// QEMU serves one QMP client at a time: a monitor that does not greet
	// is most likely held by another process.
	hctx, cancel := context.WithTimeout(ctx, monitorHandshakeTimeout)
	defer cancel()
	mon, err := DialMonitor(hctx, filepath.Join(dir, fileQMP))
	if err != nil {
		return nil, fmt.Errorf("qemu %s: pid %d runs, but its monitor (QEMU serves one client at a time: is another process connected?): %w", dir, pid, err)
	}
	return &VM{Dir: dir, PID: pid, SSHPort: st.SSHPort, Accel: st.Accel, mon: mon}, nil
}

// MachineOf returns the Machine the VM in dir was last started with.
func MachineOf(dir string) (Machine, error) {
	st, err := readState(dir)
	return st.Machine, err
}

// Close closes the monitor connection; the VM keeps running.
func (v *VM) Close() error { return v.mon.Close() }

// Exited is closed when QEMU has exited (its monitor connection ended).
func (v *VM) Exited() <-chan struct{} { return v.mon.Done() }

// Wait waits until QEMU's process has exited, or ctx is done.
func (v *VM) Wait(ctx context.Context) error { return waitExit(ctx, v.PID) }

// Running reports whether QEMU still runs.
func (v *VM) Running() bool { return isQEMU(v.PID) }

// Kill ends QEMU with SIGKILL, the last resort, and waits for it to exit.
func (v *VM) Kill(ctx context.Context) error {
	if err := syscall.Kill(v.PID, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("qemu %s: kill %d: %w", v.Dir, v.PID, err)
	}
	v.mon.Close()
	return v.Wait(ctx)
}

// Stop powers the VM off: QMP quit, then SIGKILL if QEMU has not exited
// within grace. The guest is not asked (a job VM's disk is thrown away
// or reverted). It returns once QEMU has exited.
func (v *VM) Stop(ctx context.Context, grace time.Duration) error {
	qctx, cancel := context.WithTimeout(ctx, grace)
	defer cancel()
	if err := v.mon.Quit(qctx); err == nil {
		if err := v.Wait(qctx); err == nil {
			v.mon.Close()
			return nil
		}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return v.Kill(ctx)
}

// Shutdown asks the guest to power off (ACPI power button) and waits up
// to grace for QEMU to exit, then stops it (Stop).
func (v *VM) Shutdown(ctx context.Context, grace time.Duration) error {
	if err := v.mon.SystemPowerdown(ctx); err == nil {
		wctx, cancel := context.WithTimeout(ctx, grace)
		err := v.Wait(wctx)
		cancel()
		if err == nil {
			v.mon.Close()
			return nil
		}
	}
	return v.Stop(ctx, 10*time.Second)
}

func readPID(dir string) (int, error) {
	b, err := os.ReadFile(filepath.Join(dir, filePID))
	if err != nil {
		return 0, err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0, fmt.Errorf("pid file %s: %q is not a pid", filepath.Join(dir, filePID), b)
	}
	return pid, nil
}

func readState(dir string) (state, error) {
	var st state
	b, err := os.ReadFile(filepath.Join(dir, fileState))
	if err != nil {
		return st, err
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return st, fmt.Errorf("%s: %w", filepath.Join(dir, fileState), err)
	}
	return st, nil
}

func writeState(dir string, st state) error {
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, fileState+".tmp")
	if err := os.WriteFile(tmp, append(b, '\n'), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, fileState))
}

// Info is what a VM's directory says of it, without connecting to it.
type Info struct {
	// PID is QEMU's process id when it runs.
	PID int
	// Running is set while QEMU runs.
	Running bool
	// SSHPort is the host port of the last start.
	SSHPort int
	// Machine is the last start's.
	Machine Machine
}

// Inspect reads the state of the VM in dir. A directory where no VM ever
// started is not an error: Running is false and the rest zero.
func Inspect(dir string) (Info, error) {
	var info Info
	if pid, err := readPID(dir); err == nil && isQEMU(pid) {
		info.PID, info.Running = pid, true
	}
	st, err := readState(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return info, nil
	}
	if err != nil {
		return info, err
	}
	info.SSHPort, info.Machine = st.SSHPort, st.Machine
	return info, nil
}

// KillDir ends the VM running in dir, if any, with SIGKILL and waits for
// it: for a VM whose monitor does not answer.
func KillDir(ctx context.Context, dir string) error {
	pid, err := readPID(dir)
	if err != nil || !isQEMU(pid) {
		return nil
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("qemu %s: kill %d: %w", dir, pid, err)
	}
	return waitExit(ctx, pid)
}

// ConsoleTail returns the last n lines of the console of the VM in dir.
func ConsoleTail(dir string, n int) ([]string, error) {
	f, err := os.Open(ConsolePath(dir))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	// The end of the file holds the last lines; 64 KiB is plenty for n
	// lines of a console.
	const window = 64 << 10
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	off := max(0, fi.Size()-window)
	buf := make([]byte, fi.Size()-off)
	if _, err := f.ReadAt(buf, off); err != nil {
		return nil, err
	}
	text := strings.ReplaceAll(string(buf), "\r", "")
	lines := strings.Split(strings.TrimRight(text, "\n"), "\n")
	if off > 0 && len(lines) > 0 {
		lines = lines[1:] // cut mid-line
	}
	if len(lines) == 1 && lines[0] == "" {
		return nil, nil
	}
	return lines[max(0, len(lines)-n):], nil
}
