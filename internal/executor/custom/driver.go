package custom

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/drover-ci/drover/internal/clock"
)

// drainTimeout bounds how long, after a driver exited, its output pipes
// are read: a background process it left holding them open (a VM or
// container it started in prepare_exec) must not hold up the job.
const drainTimeout = 5 * time.Second

// Errors of a driver call that did not end by itself.
var (
	// errTimeout: the call's own timeout (config_exec_timeout, ...).
	errTimeout = errors.New("timed out")
	// errAbandoned: the driver survived SIGKILL for force_kill_timeout.
	errAbandoned = errors.New("still running force_kill_timeout after SIGKILL: abandoned")
)

// call is one run of a driver executable.
type call struct {
	what    string // "config_exec", ...: for errors
	path    string
	args    []string
	env     []string
	dir     string
	stdout  io.Writer // nil discards
	stderr  io.Writer // nil: stdout (one pipe, so that the order is kept)
	timeout time.Duration
}

// killer is the termination policy of driver calls.
type killer struct {
	clk      clock.Clock
	graceful time.Duration // SIGTERM to SIGKILL
	force    time.Duration // SIGKILL to abandoning
}

// run runs c in a process group of its own, with stdin from /dev/null,
// and returns its exit code (-1 when a signal ended it). When ctx is
// done or the call's timeout passes, the group gets SIGTERM, SIGKILL
// after the graceful kill timeout, and run returns once the driver is
// gone (or abandoned after the force kill timeout) with an error wrapping
// ctx's cause or errTimeout.
func (k killer) run(ctx context.Context, c call) (int, error) {
	pipes, err := newPipes(c.stdout, c.stderr)
	if err != nil {
		return -1, fmt.Errorf("%s: %w", c.what, err)
	}
	cmd := exec.Command(c.path, c.args...)
	cmd.Env, cmd.Dir = c.env, c.dir
	cmd.Stdout, cmd.Stderr = pipes.out.w, pipes.errW()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	err = cmd.Start()
	pipes.closeWriters()
	if err != nil {
		pipes.closeReaders()
		return -1, fmt.Errorf("%s: start %s: %w", c.what, c.path, err)
	}
	pgid := cmd.Process.Pid
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait() // the exit status is read from ProcessState
		close(done)
	}()

	var expired <-chan time.Time
	if c.timeout > 0 {
		t := k.clk.NewTimer(c.timeout)
		defer t.Stop()
		expired = t.C()
	}
	var stopErr error
	select {
	case <-done:
	case <-ctx.Done():
		stopErr = context.Cause(ctx)
	case <-expired:
		stopErr = fmt.Errorf("%w after %v", errTimeout, c.timeout)
	}
	if stopErr != nil {
		if !k.stop(pgid, done) {
			// Its output may never end either.
			pipes.closeReaders()
			return -1, fmt.Errorf("%s: %w: %w", c.what, stopErr, errAbandoned)
		}
	}
	pipes.drain(k.clk)
	if stopErr != nil {
		return -1, fmt.Errorf("%s: %w", c.what, stopErr)
	}
	return cmd.ProcessState.ExitCode(), nil
}

// stop terminates process group pgid whose leader's Wait closes done:
// SIGTERM, the graceful kill timeout, SIGKILL, the force kill timeout. It
// reports whether the leader is gone.
func (k killer) stop(pgid int, done <-chan struct{}) bool {
	for _, step := range []struct {
		sig  syscall.Signal
		wait time.Duration
	}{{syscall.SIGTERM, k.graceful}, {syscall.SIGKILL, k.force}} {
		signalGroup(pgid, step.sig)
		t := k.clk.NewTimer(step.wait)
		select {
		case <-done:
			t.Stop()
			if step.sig == syscall.SIGTERM {
				// What the driver left in its group goes too: a stage
				// never outlives its cancel.
				signalGroup(pgid, syscall.SIGKILL)
			}
			return true
		case <-t.C():
		}
	}
	return false
}

// signalGroup sends sig to process group pgid, or to its leader alone
// when the group cannot be signalled.
func signalGroup(pgid int, sig syscall.Signal) {
	if err := syscall.Kill(-pgid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		_ = syscall.Kill(pgid, sig)
	}
}

// pipe is one output pipe of a driver and the copy of its read end.
type pipe struct {
	r, w   *os.File
	copied chan struct{}
}

// pipes are a driver's stdout and, when written elsewhere, its stderr.
type pipes struct{ out, err *pipe }

func newPipes(stdout, stderr io.Writer) (*pipes, error) {
	if stdout == nil {
		stdout = io.Discard
	}
	out, err := newPipe(stdout)
	if err != nil {
		return nil, err
	}
	ps := &pipes{out: out}
	if stderr != nil {
		if ps.err, err = newPipe(stderr); err != nil {
			ps.closeWriters()
			ps.closeReaders()
			return nil, err
		}
	}
	return ps, nil
}

func newPipe(w io.Writer) (*pipe, error) {
	r, pw, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("output pipe: %w", err)
	}
	p := &pipe{r: r, w: pw, copied: make(chan struct{})}
	go func() {
		defer close(p.copied)
		// Errors of the log sink are the trace uploader's business.
		_, _ = io.Copy(w, r)
	}()
	return p, nil
}

func (ps *pipes) errW() *os.File {
	if ps.err == nil {
		return ps.out.w
	}
	return ps.err.w
}

func (ps *pipes) each(fn func(*pipe)) {
	fn(ps.out)
	if ps.err != nil {
		fn(ps.err)
	}
}

// closeWriters closes this process's write ends: the pipes reach EOF once
// the driver and whatever inherited them are gone.
func (ps *pipes) closeWriters() { ps.each(func(p *pipe) { p.w.Close() }) }

// closeReaders stops the copies.
func (ps *pipes) closeReaders() {
	ps.each(func(p *pipe) {
		p.r.Close()
		<-p.copied
	})
}

// drain waits for the copies to reach EOF, at most drainTimeout, then
// closes the read ends: no output of the call reaches its writers after.
func (ps *pipes) drain(clk clock.Clock) {
	t := clk.NewTimer(drainTimeout)
	defer t.Stop()
	expired := false
	ps.each(func(p *pipe) {
		if expired {
			return
		}
		select {
		case <-p.copied:
		case <-t.C():
			expired = true
		}
	})
	ps.closeReaders()
}
