//go:build !linux

package s3test

import "syscall"

// procAttr: without a parent-death signal, a server whose test binary is
// killed before Stop outlives it.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{}
}
