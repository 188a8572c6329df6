//go:build unix && !linux

package pgtest

import "syscall"

// procAttr runs the server with cred. Without a parent-death signal, a
// server whose test binary is killed before Stop outlives it.
func procAttr(cred *syscall.Credential) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Credential: cred}
}
