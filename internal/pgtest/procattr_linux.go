package pgtest

import "syscall"

// procAttr runs the server with cred and has the kernel send it SIGQUIT
// (PostgreSQL's immediate shutdown) should the test binary die without
// stopping it. The signal follows the death of the thread that started the
// child; Go threads outlive the goroutines they run, so in practice that is
// the death of the process.
func procAttr(cred *syscall.Credential) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGQUIT}
}
