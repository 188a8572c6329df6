//go:build unix && !linux

package shell

import (
	"syscall"
	"time"
)

// groupAlive reports whether process group pgid still has a member
// (zombies included: without /proc they cannot be told apart).
func groupAlive(pgid int) bool {
	return syscall.Kill(-pgid, 0) == nil
}

// leaderState looks at process pid. Without /proc neither start times nor
// zombies can be seen: an existing process counts as ours and alive.
func leaderState(pid int, notAfter time.Time) (exists, ours, alive bool) {
	err := syscall.Kill(pid, 0)
	exists = err == nil || err == syscall.EPERM
	return exists, exists, exists
}
