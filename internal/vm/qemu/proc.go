package qemu

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// kvmUsable reports whether /dev/kvm can run guests for this process: it
// opens read-write, answers the stable API version, and the CPU shows
// virtualization extensions (vmx or svm). Some sandboxes have a /dev/kvm
// that creates VMs but cannot run QEMU's (QEMU hangs or aborts setting
// MSRs): their CPUs do not show the extensions.
func kvmUsable() bool {
	f, err := os.OpenFile("/dev/kvm", os.O_RDWR, 0)
	if err != nil {
		return false
	}
	defer f.Close()
	const kvmGetAPIVersion = 0xAE00
	if v, err := unix.IoctlRetInt(int(f.Fd()), kvmGetAPIVersion); err != nil || v != 12 {
		return false
	}
	cpuinfo, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return false
	}
	for line := range strings.SplitSeq(string(cpuinfo), "\n") {
		if name, flags, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(name) == "flags" {
			for flag := range strings.FieldsSeq(flags) {
				if flag == "vmx" || flag == "svm" {
					return true
				}
			}
			return false
		}
	}
	return false
}

// ResolveAccel turns an accel setting into the accelerator QEMU gets:
// "auto" or "" is kvm when /dev/kvm is usable, else tcg.
func ResolveAccel(accel string) (string, error) {
	switch accel {
	case "", "auto":
		if kvmUsable() {
			return "kvm", nil
		}
		return "tcg", nil
	case "kvm", "tcg":
		return accel, nil
	}
	return "", fmt.Errorf("accel %q: want auto, kvm or tcg", accel)
}

// isQEMU reports whether pid is a live (not zombie) QEMU system emulator
// process: a pid file outlives its process, and the pid may be reused.
func isQEMU(pid int) bool {
	if pid <= 0 {
		return false
	}
	exe, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/exe")
	if err != nil {
		return false
	}
	exe = strings.TrimSuffix(exe, " (deleted)") // upgraded under it
	if !strings.HasPrefix(filepath.Base(exe), "qemu-system-") {
		return false
	}
	return alive(pid)
}

// alive reports whether pid exists and has not exited (a zombie has).
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// pid (comm) state ...: comm may hold spaces and parentheses.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return false
	}
	st := s[i+2]
	return st != 'Z' && st != 'X'
}

// waitExit waits until pid has exited (also one that is not our child),
// or ctx is done. It waits on a pidfd, which becomes readable when the
// process exits.
func waitExit(ctx context.Context, pid int) error {
	fd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
	if errors.Is(err, unix.ESRCH) {
		return nil
	}
	if err != nil {
		return waitExitPolling(ctx, pid)
	}
	f := os.NewFile(uintptr(fd), "pidfd")
	defer f.Close()
	if !alive(pid) {
		return nil
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return waitExitPolling(ctx, pid)
	}
	stop := context.AfterFunc(ctx, func() { f.SetReadDeadline(time.Unix(1, 0)) })
	defer stop()
	err = rc.Read(func(fd uintptr) bool {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, _ := unix.Poll(fds, 0)
		return n > 0
	})
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if errors.Is(err, os.ErrNoDeadline) || errors.Is(err, syscall.EPERM) {
			// Not pollable here: fall back.
			return waitExitPolling(ctx, pid)
		}
		return err
	}
	return nil
}

// waitExitPolling is waitExit without pidfds (old kernels).
func waitExitPolling(ctx context.Context, pid int) error {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for alive(pid) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	return nil
}
