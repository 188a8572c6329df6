package shell

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// process is one stage's shell, leader of its own process group.
type process struct {
	pid    int
	done   chan struct{} // closed when the shell has been waited for
	err    error         // the shell's Wait result, set before done closes
	out    *os.File      // read end of the log pipe
	copied chan struct{} // closed when the log pipe is drained
}

// startProcess starts `shellPath scriptPath` in dir with the runner's
// environment; stdout and stderr share one pipe copied to trace, and stdin
// is /dev/null so that a command reading stdin cannot eat anything.
func startProcess(shellPath, scriptPath, dir string, trace io.Writer) (*process, error) {
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("log pipe: %w", err)
	}
	cmd := exec.Command(shellPath, scriptPath)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = pw, pw
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		pr.Close()
		pw.Close()
		return nil, fmt.Errorf("start %s: %w", shellPath, err)
	}
	// Only the children hold the write end now, so the pipe reaches EOF when
	// the last process that inherited it is gone.
	pw.Close()
	p := &process{pid: cmd.Process.Pid, done: make(chan struct{}), out: pr, copied: make(chan struct{})}
	go func() {
		defer close(p.copied)
		_, _ = io.Copy(trace, pr)
	}()
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *process) signal(sig syscall.Signal) {
	if err := syscall.Kill(-p.pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		// Fall back to the leader alone; the group kill after exit catches
		// the rest.
		_ = syscall.Kill(p.pid, sig)
	}
}

// stop sends SIGTERM to the group and waits until the shell and every
// process of the group are gone, or until grace has passed, then sends
// SIGKILL. It returns the shell's Wait result.
func (p *process) stop(grace time.Duration) error {
	p.signal(syscall.SIGTERM)
	deadline := time.NewTimer(grace)
	defer deadline.Stop()
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			if p.exited() && !groupAlive(p.pid) {
				return p.err
			}
		case <-deadline.C:
			p.signal(syscall.SIGKILL)
			<-p.done
			return p.err
		}
	}
}

// killGroup kills whatever is left in the group.
func (p *process) killGroup() { p.signal(syscall.SIGKILL) }

// drain waits, at most timeout, until the group is empty and the log pipe is
// drained, then closes the pipe and waits for the copy to stop: no output of
// the stage can reach the trace after Run has returned.
func (p *process) drain(timeout time.Duration) {
	<-p.done
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for groupAlive(p.pid) {
		select {
		case <-tick.C:
		case <-deadline.C:
			p.out.Close()
			<-p.copied
			return
		}
	}
	select {
	case <-p.copied:
	case <-deadline.C:
		// A process that left the group still holds the pipe.
	}
	p.out.Close()
	<-p.copied
}
