//go:build !linux

package giteatest

import "syscall"

// procAttr: a process group of its own; without a parent-death signal, a
// Gitea whose test binary is killed before Stop outlives it.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
