package shell

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/drover-ci/drover/internal/executor"
)

// runPiped runs stage script run n attached to this process: the shell is
// its child, in its own process group, and its output comes through a
// pipe. It is the cheaper way, for jobs that need not survive the manager.
func (e *Executor) runPiped(ctx context.Context, cmd executor.Command, files stageFiles) error {
	e.mu.Lock()
	shellPath, paths, trace, grace, logger := e.shellPath, e.paths, e.trace, e.GracePeriod, e.logger
	e.mu.Unlock()

	if err := os.WriteFile(files.script, []byte(cmd.Script), 0o600); err != nil {
		return fmt.Errorf("%s: write script: %w", cmd.Stage, err)
	}
	defer os.Remove(files.script)
	// get_sources may have removed the project directory on a failed clone.
	if err := os.MkdirAll(paths.ProjectDir, 0o755); err != nil {
		return fmt.Errorf("%s: %w", cmd.Stage, err)
	}

	p, err := startPiped(shellPath, files.script, paths.ProjectDir, trace)
	if err != nil {
		return fmt.Errorf("%s: %w", cmd.Stage, err)
	}
	logger.Debug("stage started", "stage", cmd.Stage, "pid", p.pid)

	var waitErr error
	canceled := false
	select {
	case <-p.done:
		waitErr = p.err
	case <-ctx.Done():
		canceled = true
		waitErr = p.stop(grace)
	}
	// The shell is gone; whatever it left behind in its group goes too.
	p.killGroup()
	p.drain(drainTimeout)
	logger.Debug("stage ended", "stage", cmd.Stage, "err", waitErr, "canceled", canceled)

	if canceled {
		return fmt.Errorf("%s: %w", cmd.Stage, ctx.Err())
	}
	return exitError(waitErr)
}

// exitError turns the shell's wait error into the executor contract.
func exitError(err error) error {
	if err == nil {
		return nil
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return fmt.Errorf("wait for shell: %w", err)
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		// Like a shell reports a child killed by a signal.
		return &executor.BuildError{ExitCode: 128 + int(ws.Signal()), Inner: fmt.Errorf("shell killed by %v", ws.Signal())}
	}
	return &executor.BuildError{ExitCode: ee.ExitCode()}
}

// pipedProcess is one stage's shell run attached to the manager: leader
// of its own process group, its output through a pipe.
type pipedProcess struct {
	pid    int
	done   chan struct{} // closed when the shell has been waited for
	err    error         // the shell's Wait result, set before done closes
	out    *os.File      // read end of the log pipe
	copied chan struct{} // closed when the log pipe is drained
}

// startPiped starts `shellPath -l scriptPath` (a login shell, see
// loginFlag) in dir with the runner's environment; stdout and stderr
// share one pipe copied to trace, and stdin is /dev/null so that a
// command reading stdin cannot eat anything.
func startPiped(shellPath, scriptPath, dir string, trace io.Writer) (*pipedProcess, error) {
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("log pipe: %w", err)
	}
	cmd := exec.Command(shellPath, loginFlag, scriptPath)
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
	p := &pipedProcess{pid: cmd.Process.Pid, done: make(chan struct{}), out: pr, copied: make(chan struct{})}
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

func (p *pipedProcess) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *pipedProcess) signal(sig syscall.Signal) {
	if err := syscall.Kill(-p.pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		// Fall back to the leader alone; the group kill after exit catches
		// the rest.
		_ = syscall.Kill(p.pid, sig)
	}
}

// stop sends SIGTERM to the group and waits until the shell and every
// process of the group are gone, or until grace has passed, then sends
// SIGKILL. It returns the shell's Wait result.
func (p *pipedProcess) stop(grace time.Duration) error {
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
func (p *pipedProcess) killGroup() { p.signal(syscall.SIGKILL) }

// drain waits, at most timeout, until the group is empty and the log pipe is
// drained, then closes the pipe and waits for the copy to stop: no output of
// the stage can reach the trace after Run has returned.
func (p *pipedProcess) drain(timeout time.Duration) {
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
