package shell

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"syscall"
	"time"
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

// userHZ is the unit of the start times in /proc/<pid>/stat: USER_HZ is
// 100 on every Linux architecture Go supports.
const userHZ = 100

// startSlack is how much later than notAfter a leader's start time may be
// and still count as ours: the boot time in /proc/stat is whole seconds and
// moves with wall-clock adjustments.
const startSlack = 2 * time.Second

// leaderState looks at process pid: whether it exists (zombies too),
// whether it is ours (it started no later than notAfter; a zero notAfter
// accepts any start) and whether it is alive (ours and not a zombie).
func leaderState(pid int, notAfter time.Time) (exists, ours, alive bool) {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		exists = syscall.Kill(pid, 0) == nil
		return exists, exists && notAfter.IsZero(), exists && notAfter.IsZero()
	}
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return true, false, false
	}
	// After the comm: state is field 3 of the line, starttime field 22.
	f := bytes.Fields(stat[i+1:])
	if len(f) < 20 {
		return true, false, false
	}
	zombie := f[0][0] == 'Z' || f[0][0] == 'X'
	ours = notAfter.IsZero()
	if !ours {
		ticks, err := strconv.ParseUint(string(f[19]), 10, 64)
		boot, berr := bootTime()
		ours = err == nil && berr == nil &&
			!boot.Add(time.Duration(ticks)*time.Second/userHZ).After(notAfter.Add(startSlack))
	}
	return true, ours, ours && !zombie
}

// bootTime is the system's boot time, from the btime line of /proc/stat.
func bootTime() (time.Time, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return time.Time{}, err
	}
	for line := range bytes.Lines(b) {
		if rest, ok := bytes.CutPrefix(line, []byte("btime ")); ok {
			sec, err := strconv.ParseInt(string(bytes.TrimSpace(rest)), 10, 64)
			if err != nil {
				return time.Time{}, fmt.Errorf("/proc/stat btime: %w", err)
			}
			return time.Unix(sec, 0), nil
		}
	}
	return time.Time{}, errors.New("/proc/stat: no btime")
}
