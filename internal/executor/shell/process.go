package shell

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"

	"github.com/drover-ci/drover/internal/executor"
)

// wrapper is the /bin/sh program that leads a stage's session. It is
// started as `sh -c wrapper <shell> <script> <exit file> <pid file>`:
//
//   - it first claims the stage by creating the pid file exclusively
//     (noclobber) with its own pid; when the file exists already, another
//     start of the same stage (by a manager that died right after starting
//     it) won, and this one exits with claimLost without running anything;
//   - it handles, rather than ignores, the signals a cancel sends, so that
//     it outlives the script's own handling of them (an ignored signal would
//     be inherited by the script shell);
//   - it runs the script in a login shell (see loginFlag) with stdin from
//     /dev/null and, once the script shell ended, writes its exit status
//     (128+n when killed by signal n) to the exit file in one write of a
//     newline-terminated line: the file reads as complete only once the
//     stage really ended.
const wrapper = `trap : HUP INT QUIT TERM
set -C
{ echo $$ >"$3"; } 2>/dev/null || exit 125
set +C
"$0" ` + loginFlag + ` "$1" </dev/null
echo $? >"$2"
`

// loginFlag makes the script shell a login shell, as GitLab Runner's
// shell executor runs its stages (bash -l, sh -l): it reads
// /etc/profile and the user's profile (~/.bash_profile, ~/.bash_login
// or ~/.profile for bash, ~/.profile for sh) before the script, so the
// job sees the environment a login of the runner's user has.
const loginFlag = "-l"

// claimLost is the wrapper's exit status when another start of the stage
// had claimed it.
const claimLost = 125

// stageFiles are the files of one stage run. Their names derive from the
// executor's directories, the run number and the stage name, so that an
// executor restored from its state finds them.
type stageFiles struct {
	script string // the stage script
	pid    string // the wrapper's pid: written by the wrapper, the claim
	exit   string // the script's exit status, written when it ended
	output string // the stage's stdout and stderr
}

// proc is a stage's wrapper, leader of its own session and process group.
// It is either a child of this process (started here: Wait tells when it
// ends) or a process started by an earlier manager process (watched by
// polling /proc).
type proc struct {
	pid   int
	files stageFiles
	child bool
	// notAfter bounds the start time of the wrapper (non-child: the pid
	// file's modification time): a process with this pid started later is
	// not ours, the pid was reused.
	notAfter time.Time
	ended    chan struct{} // closed once the wrapper is gone
	waitErr  error         // child: the wrapper's Wait result, set before ended closes
}

// startStage starts the wrapper for files in dir, detached: a new session
// (so no terminal hang-up and no signal to the manager's group reaches it),
// no parent-death signal, stdin /dev/null, stdout and stderr appended to
// the output file. Nothing of the manager is held open by it, so it goes on
// when the manager dies.
func startStage(shPath, shellPath, dir string, files stageFiles) (*proc, error) {
	out, err := os.OpenFile(files.output, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("stage output: %w", err)
	}
	defer out.Close()
	cmd := exec.Command(shPath, "-c", wrapper, shellPath, files.script, files.exit, files.pid)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", shPath, err)
	}
	p := &proc{pid: cmd.Process.Pid, files: files, child: true, ended: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		close(p.ended)
	}()
	return p, nil
}

// attachStage watches the wrapper that claimed files, started by another
// process. It returns an error wrapping executor.ErrStageVanished when the
// claim holds no pid.
func attachStage(files stageFiles) (*proc, error) {
	pid, mtime, err := readPIDFile(files.pid)
	if err != nil {
		return nil, err
	}
	p := &proc{pid: pid, files: files, notAfter: mtime, ended: make(chan struct{})}
	go func() {
		defer close(p.ended)
		for p.leaderAlive() {
			time.Sleep(pollInterval)
		}
	}()
	return p, nil
}

// readPIDFile reads a stage's pid file. The wrapper writes it right after
// creating it; a file that stays empty means the wrapper died in between.
func readPIDFile(path string) (int, time.Time, error) {
	deadline := time.Now().Add(time.Second)
	for {
		st, err := os.Stat(path)
		if err != nil {
			return 0, time.Time{}, fmt.Errorf("%w: %w", executor.ErrStageVanished, err)
		}
		if line, ok := readLine(path); ok {
			pid, err := strconv.Atoi(line)
			if err != nil || pid <= 1 {
				return 0, time.Time{}, fmt.Errorf("%w: pid file %s holds %q", executor.ErrStageVanished, path, line)
			}
			return pid, st.ModTime(), nil
		}
		if time.Now().After(deadline) {
			return 0, time.Time{}, fmt.Errorf("%w: pid file %s stayed empty", executor.ErrStageVanished, path)
		}
		time.Sleep(pollInterval)
	}
}

// readLine returns the content of a file written with one echo, without
// its newline; ok is false until the whole line is there.
func readLine(path string) (string, bool) {
	b, err := os.ReadFile(path)
	if err != nil || len(b) == 0 || b[len(b)-1] != '\n' {
		return "", false
	}
	return string(bytes.TrimSpace(b)), true
}

func (p *proc) hasEnded() bool {
	select {
	case <-p.ended:
		return true
	default:
		return false
	}
}

// leaderAlive reports whether the wrapper of a non-child stage still runs.
func (p *proc) leaderAlive() bool {
	_, ours, alive := leaderState(p.pid, p.notAfter)
	return ours && alive
}

// ownsGroup reports whether process group p.pid is still the stage's: for
// a child, always (its pid is ours until it is waited for, and signals
// follow right after); for a non-child, when the leader is ours, or when no
// process has the pid (then any member left of group p.pid is ours: a pid
// is not reused while a group of that id has members).
func (p *proc) ownsGroup() bool {
	if p.child {
		return true
	}
	exists, ours, _ := leaderState(p.pid, p.notAfter)
	return !exists || ours
}

func (p *proc) signal(sig syscall.Signal) {
	if !p.ownsGroup() {
		return
	}
	if err := syscall.Kill(-p.pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) && p.child {
		// Fall back to the leader alone; the group kill after exit catches
		// the rest.
		_ = syscall.Kill(p.pid, sig)
	}
}

// groupAlive reports whether the stage's process group has a live member.
func (p *proc) groupAlive() bool { return p.ownsGroup() && groupAlive(p.pid) }

// stop sends SIGTERM to the group and waits until the wrapper and every
// process of the group are gone, or until grace has passed, then sends
// SIGKILL and waits for the wrapper.
func (p *proc) stop(grace time.Duration) {
	p.signal(syscall.SIGTERM)
	deadline := time.NewTimer(grace)
	defer deadline.Stop()
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			if p.hasEnded() && !p.groupAlive() {
				return
			}
		case <-deadline.C:
			p.signal(syscall.SIGKILL)
			<-p.ended
			return
		}
	}
}

// finish kills whatever is left in the group once the wrapper is gone and
// waits, at most timeout, until the group is empty: no process of the
// stage writes to its output after that.
func (p *proc) finish(timeout time.Duration) {
	<-p.ended
	p.signal(syscall.SIGKILL)
	deadline := time.Now().Add(timeout)
	for p.groupAlive() && time.Now().Before(deadline) {
		time.Sleep(pollInterval)
	}
}

// lostClaim reports whether this child wrapper found the stage claimed by
// another start of it.
func (p *proc) lostClaim() bool {
	var ee *exec.ExitError
	if !p.child || !errors.As(p.waitErr, &ee) || ee.ExitCode() != claimLost {
		return false
	}
	line, _ := readLine(p.files.pid)
	return line != strconv.Itoa(p.pid)
}

// result is the stage's outcome once it ended: nil, a *BuildError with the
// script's exit status, or an error wrapping executor.ErrStageVanished
// when it left no exit status.
func (p *proc) result() error {
	if line, ok := readLine(p.files.exit); ok {
		code, err := strconv.Atoi(line)
		if err != nil {
			return fmt.Errorf("exit code file %s holds %q", p.files.exit, line)
		}
		if code == 0 {
			return nil
		}
		return &executor.BuildError{ExitCode: code}
	}
	var ee *exec.ExitError
	if p.child && errors.As(p.waitErr, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			// The script's whole group, wrapper included, was killed (kill
			// -9 0, the OOM killer): report it as a shell reports a child
			// killed by a signal.
			return &executor.BuildError{ExitCode: 128 + int(ws.Signal()), Inner: fmt.Errorf("shell killed by %v", ws.Signal())}
		}
	}
	if p.child {
		return fmt.Errorf("%w: stage wrapper ended (%v)", executor.ErrStageVanished, p.waitErr)
	}
	return fmt.Errorf("%w (process group %d)", executor.ErrStageVanished, p.pid)
}
