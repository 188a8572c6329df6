package shell

import (
	"bytes"
	"errors"
	"os"
	"strconv"
	"syscall"
)

// groupAlive reports whether any live process is in process group pgid.
// Zombies do not count: an orphan is reaped by init, and where init does
// not reap (some containers) it would otherwise look alive forever. So a
// successful kill(-pgid, 0) is confirmed by reading /proc.
func groupAlive(pgid int) bool {
	// Fast path: no process at all in the group (the usual case once the
	// stage's shell has been waited for). Only when kill finds one do we scan
	// /proc, to tell live members from zombies waiting to be reaped.
	if err := syscall.Kill(-pgid, 0); errors.Is(err, syscall.ESRCH) {
		return false
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return false
	}
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid pgrp ...; comm may contain spaces and ')'.
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 {
			continue
		}
		f := bytes.Fields(stat[i+1:])
		if len(f) < 3 {
			continue
		}
		if pg, err := strconv.Atoi(string(f[2])); err == nil && pg == pgid && f[0][0] != 'Z' && f[0][0] != 'X' {
			return true
		}
	}
	return false
}
