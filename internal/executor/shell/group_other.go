//go:build unix && !linux

package shell

import "syscall"

// groupAlive reports whether process group pgid still has a member
// (zombies included: without /proc they cannot be told apart).
func groupAlive(pgid int) bool {
	return syscall.Kill(-pgid, 0) == nil
}
