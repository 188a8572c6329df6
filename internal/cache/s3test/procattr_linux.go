package s3test

import "syscall"

// procAttr has the kernel kill the server should the test binary die
// without stopping it.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
