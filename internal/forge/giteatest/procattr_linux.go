package giteatest

import "syscall"

// procAttr puts Gitea in a process group of its own, so that stopping it
// also stops the git and `gitea hook` processes it runs, and has the
// kernel kill it should the test binary die without stopping it.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
