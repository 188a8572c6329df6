package shell

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/drover-ci/drover/internal/executor"
)

// How long Run waits, after the stage's processes were killed, for the last
// of them to disappear and for the log pipe to drain. Only a process that
// left the group (setsid) and kept the log open can make it last that long.
const drainTimeout = 5 * time.Second

// How often Run looks whether a signalled process group is gone.
const pollInterval = 25 * time.Millisecond

// Executor runs a job's stage scripts in local shell processes.
type Executor struct {
	// GracePeriod is the time between SIGTERM and SIGKILL when a stage is
	// cancelled; zero means DefaultGracePeriod. Set it before Prepare.
	GracePeriod time.Duration

	mu        sync.Mutex
	stage     executor.Stage
	shell     string
	shellPath string
	paths     executor.Paths
	trace     io.Writer
	logger    *slog.Logger
	scriptDir string
	runs      int
	finished  error
}

var (
	_ executor.Executor      = (*Executor)(nil)
	_ executor.PathsReporter = (*Executor)(nil)
)

// Shell returns the shell scripts run in: the runner's shell setting once
// prepared, the provider's default before.
func (e *Executor) Shell() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.shell
}

// Paths returns the job's directories; valid after Prepare.
func (e *Executor) Paths() executor.Paths {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.paths
}

// CurrentStage returns the stage last set.
func (e *Executor) CurrentStage() executor.Stage {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.stage
}

// SetCurrentStage records the stage being run.
func (e *Executor) SetCurrentStage(s executor.Stage) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.stage = s
}

// Prepare checks the shell and creates the builds, cache and project
// directories.
func (e *Executor) Prepare(ctx context.Context, opts executor.PrepareOptions) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	trace := opts.Trace
	if trace == nil {
		trace = io.Discard
	}
	trace = &syncWriter{w: trace}
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	fmt.Fprintf(trace, "\033[0K\033[36;1mPreparing the \"shell\" executor\033[0;m\n")

	sh := opts.Settings.Shell
	if sh == "" {
		sh = e.Shell()
	}
	if sh != "bash" && sh != "sh" {
		return fmt.Errorf("shell %q is not supported by the shell executor (bash or sh)", sh)
	}
	shellPath, err := exec.LookPath(sh)
	if err != nil {
		return fmt.Errorf("shell %s: %w", sh, err)
	}
	paths, err := executor.HostPaths(opts.Settings, opts.Job)
	if err != nil {
		return err
	}
	for _, dir := range []string{paths.BuildsDir, paths.CacheDir, paths.ProjectDir} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("create %s: %w", dir, err)
		}
	}
	scriptDir, err := os.MkdirTemp(scriptBase(), "drover-shell-")
	if err != nil {
		return fmt.Errorf("script directory: %w", err)
	}
	fmt.Fprintf(trace, "Using Shell (%s) executor...\n", sh)

	e.mu.Lock()
	defer e.mu.Unlock()
	e.shell, e.shellPath, e.paths = sh, shellPath, paths
	e.trace, e.logger, e.scriptDir = trace, logger, scriptDir
	if e.GracePeriod <= 0 {
		e.GracePeriod = DefaultGracePeriod
	}
	return nil
}

// Run runs one stage script in a new shell process group, its output going
// to the trace. A non-zero exit is a *executor.BuildError. When ctx is
// cancelled the group gets SIGTERM, then SIGKILL after the grace period,
// and Run returns ctx.Err() wrapped once every process is gone.
func (e *Executor) Run(ctx context.Context, cmd executor.Command) error {
	e.mu.Lock()
	if e.scriptDir == "" {
		e.mu.Unlock()
		return errors.New("shell executor: Run before Prepare")
	}
	e.runs++
	scriptPath := filepath.Join(e.scriptDir, fmt.Sprintf("%03d.sh", e.runs))
	shellPath, paths, trace, grace, logger := e.shellPath, e.paths, e.trace, e.GracePeriod, e.logger
	e.mu.Unlock()

	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%s: %w", cmd.Stage, err)
	}
	if err := os.WriteFile(scriptPath, []byte(cmd.Script), 0o600); err != nil {
		return fmt.Errorf("%s: write script: %w", cmd.Stage, err)
	}
	defer os.Remove(scriptPath)
	// get_sources may have removed the project directory on a failed clone.
	if err := os.MkdirAll(paths.ProjectDir, 0o755); err != nil {
		return fmt.Errorf("%s: %w", cmd.Stage, err)
	}

	p, err := startProcess(shellPath, scriptPath, paths.ProjectDir, trace)
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

// Finish records the build's end.
func (e *Executor) Finish(err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.finished = err
}

// Cleanup removes the generated scripts. The project directory stays, so
// that the fetch strategy can reuse the checkout.
func (e *Executor) Cleanup(ctx context.Context) {
	e.mu.Lock()
	dir := e.scriptDir
	e.scriptDir = ""
	e.mu.Unlock()
	if dir != "" {
		_ = os.RemoveAll(dir)
	}
}

// syncWriter serialises writes to the trace.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

var _ executor.Local = (*Executor)(nil)

// Hostname returns this host's name: the shell executor runs scripts here.
func (e *Executor) Hostname() string {
	h, err := os.Hostname()
	if err != nil {
		return "localhost"
	}
	return h
}

// scriptBase is where stage scripts are written: /dev/shm when this host
// has it, so scripts (they hold the job's variables, secrets included) stay
// in memory and cost no disk metadata writes; else the temp directory.
func scriptBase() string {
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() && syscall.Access("/dev/shm", 2) == nil {
		return "/dev/shm"
	}
	return ""
}
