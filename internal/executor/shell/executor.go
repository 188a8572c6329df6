package shell

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/drover-ci/drover/internal/executor"
)

// How long Run waits, after the stage's shell (or wrapper) ended and its
// group was killed, for the last of the group's processes to disappear and
// for the log pipe of an attached stage to drain. Only a process that left
// the group and kept the pipe open, or one stuck in the kernel, can make it
// last that long.
const drainTimeout = 5 * time.Second

// How often a stage's output file is read for new output when it had none,
// and how often a signalled process group, or the wrapper of a stage this
// process did not start, is looked at.
const pollInterval = 25 * time.Millisecond

// Executor runs a job's stage scripts in local shell processes, attached
// to the manager or, for a resumable job, detached from it (see the package
// documentation). It implements executor.Stateful for resumable jobs.
type Executor struct {
	// GracePeriod is the time between SIGTERM and SIGKILL when a stage is
	// cancelled; zero means DefaultGracePeriod. Set it before Prepare.
	GracePeriod time.Duration

	executor.StageRecorder

	mu        sync.Mutex
	shell     string
	shellPath string // the script shell
	shPath    string // /bin/sh or the like: runs the stage wrapper
	detached  bool   // stages survive the manager (Settings.Resumable, or restored)
	paths     executor.Paths
	trace     io.Writer
	logger    *slog.Logger
	scriptDir string // scripts, pid and exit files: in memory where possible
	outputDir string // the stages' output files: on disk
	runs      int    // stages started (or re-attached to) so far
	running   *stageState
	resume    *stageState // from Restore: the stage to re-attach to
	finished  error

	out output
}

// output is the progress of the current stage's output into the trace.
type output struct {
	mu    sync.Mutex // held while stage output is written to the trace
	stage executor.Stage
	off   atomic.Int64 // bytes of the stage's output file in the trace
}

var (
	_ executor.Executor           = (*Executor)(nil)
	_ executor.PathsReporter      = (*Executor)(nil)
	_ executor.Stateful           = (*Executor)(nil)
	_ executor.OutputCheckpointer = (*Executor)(nil)
)

// ExitWording is how the job's last line names a failing script's exit:
// "exit status", as GitLab Runner's shell executor words it.
func (e *Executor) ExitWording() string { return "exit status" }

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

// Prepare checks the shell and creates the builds, cache and project
// directories, and the job's script and output directories.
func (e *Executor) Prepare(ctx context.Context, opts executor.PrepareOptions) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	trace, logger := executor.Sinks(opts)
	executor.PrepareHeader(trace, "shell")

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
	shPath, err := exec.LookPath("sh")
	if err != nil {
		return fmt.Errorf("stage wrapper shell: %w", err)
	}
	paths, err := executor.HostPaths(opts.Settings, opts.Job)
	if err != nil {
		return err
	}
	if paths, err = opts.JobPaths(paths); err != nil {
		return err
	}
	for _, dir := range []string{paths.BuildsDir, paths.CacheDir, paths.ProjectDir} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("create %s: %w", dir, err)
		}
	}
	// The job id in the name lets StopJob find a job's stages when its
	// resume record is lost.
	scriptDir, err := os.MkdirTemp(scriptBase(), fmt.Sprintf("%s%d-", jobDirPrefix, opts.Job.ID))
	if err != nil {
		return fmt.Errorf("script directory: %w", err)
	}
	var outputDir string // only resumable stages write their output to files
	if opts.Settings.Resumable {
		if outputDir, err = os.MkdirTemp("", "drover-shell-out-"); err != nil {
			_ = os.RemoveAll(scriptDir)
			return fmt.Errorf("output directory: %w", err)
		}
	}
	fmt.Fprintf(trace, "Using Shell (%s) executor...\n", sh)

	e.mu.Lock()
	defer e.mu.Unlock()
	e.shell, e.shellPath, e.shPath, e.paths = sh, shellPath, shPath, paths
	e.trace, e.logger, e.scriptDir, e.outputDir = trace, logger, scriptDir, outputDir
	e.detached = opts.Settings.Resumable
	if e.GracePeriod <= 0 {
		e.GracePeriod = DefaultGracePeriod
	}
	return nil
}

// Run runs one stage script in a new shell process group (a detached
// session when the job is resumable), its output going to the trace. A
// non-zero exit is a *executor.BuildError. When ctx is cancelled the group
// gets SIGTERM, then SIGKILL after the grace period, and Run returns
// ctx.Err() wrapped once every process is gone.
//
// After Restore, a Run of the stage that the previous manager process had
// started (after its last saved state) re-attaches to it instead of
// starting it again, copying its output from the start.
func (e *Executor) Run(ctx context.Context, cmd executor.Command) error {
	return e.run(ctx, cmd, 0, false)
}

// run starts the next stage, or re-attaches to it when it was started
// already, and follows it to its end. The output goes to the trace from
// byte from on. With mustAttach, the stage is never started here.
func (e *Executor) run(ctx context.Context, cmd executor.Command, from int64, mustAttach bool) error {
	e.mu.Lock()
	if e.scriptDir == "" {
		e.mu.Unlock()
		return errors.New("shell executor: Run before Prepare")
	}
	n := e.runs + 1
	files := e.stageFiles(n, cmd.Stage)
	shPath, shellPath, paths, logger, detached := e.shPath, e.shellPath, e.paths, e.logger, e.detached
	e.mu.Unlock()

	_, pidErr := os.Stat(files.pid) // nil: the stage was started
	if err := ctx.Err(); err != nil && !(detached && (pidErr == nil || mustAttach)) {
		// A stage that a dead manager started is still followed, so that
		// the cancellation reaches its processes.
		return fmt.Errorf("%s: %w", cmd.Stage, err)
	}
	if !detached {
		e.mu.Lock()
		e.runs = n
		e.mu.Unlock()
		return e.runPiped(ctx, cmd, files)
	}
	var p *proc
	var err error
	if pidErr == nil || mustAttach {
		// A manager process that died started this stage: follow it.
		if p, err = attachStage(files); err != nil {
			return fmt.Errorf("%s: %w", cmd.Stage, err)
		}
		logger.Info("re-attached to a running stage", "stage", cmd.Stage, "pid", p.pid, "from", from)
	} else {
		if from != 0 {
			return fmt.Errorf("%s: output offset %d for a stage not started", cmd.Stage, from)
		}
		if err := os.WriteFile(files.script, []byte(cmd.Script), 0o600); err != nil {
			return fmt.Errorf("%s: write script: %w", cmd.Stage, err)
		}
		// get_sources may have removed the project directory on a failed clone.
		if err := os.MkdirAll(paths.ProjectDir, 0o755); err != nil {
			return fmt.Errorf("%s: %w", cmd.Stage, err)
		}
		if p, err = startStage(shPath, shellPath, paths.ProjectDir, files); err != nil {
			return fmt.Errorf("%s: %w", cmd.Stage, err)
		}
		logger.Debug("stage started", "stage", cmd.Stage, "pid", p.pid)
	}
	return e.follow(ctx, cmd.Stage, p, n, from)
}

// follow copies the stage's output to the trace from byte from until the
// stage ended, and returns its result.
func (e *Executor) follow(ctx context.Context, stage executor.Stage, p *proc, n int, from int64) error {
	e.mu.Lock()
	trace, grace, logger := e.trace, e.GracePeriod, e.logger
	e.mu.Unlock()
	defer os.Remove(p.files.script)

	f, err := openOutput(p.files.output, from)
	if err != nil {
		// The stage must not run on unwatched.
		p.stop(grace)
		p.finish(drainTimeout)
		return fmt.Errorf("%s: %w", stage, err)
	}
	defer f.Close()
	e.setRunning(stage, p, n, from)
	defer e.setEnded()

	stop, copied := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(copied)
		e.copyOutput(f, trace, logger, stop)
	}()
	p, canceled := e.wait(ctx, stage, p, grace)
	// The wrapper is gone; whatever it left behind in its group goes too.
	p.finish(drainTimeout)
	close(stop)
	<-copied
	res := p.result()
	logger.Debug("stage ended", "stage", stage, "result", res, "canceled", canceled)

	if canceled {
		return fmt.Errorf("%s: %w", stage, ctx.Err())
	}
	var be *executor.BuildError
	if res != nil && !errors.As(res, &be) {
		return fmt.Errorf("%s: %w", stage, res)
	}
	return res
}

// wait waits until the stage's wrapper is gone, or until ctx is done and
// the stage was stopped. It returns the stage's final process (another
// start's, when this one lost the claim) and whether ctx ended it.
func (e *Executor) wait(ctx context.Context, stage executor.Stage, p *proc, grace time.Duration) (*proc, bool) {
	for {
		select {
		case <-p.ended:
		case <-ctx.Done():
			p.stop(grace)
			return p, true
		}
		if !p.lostClaim() {
			return p, false
		}
		// A start of this stage by a manager that died won the claim just
		// before ours: follow that one.
		np, err := attachStage(p.files)
		if err != nil {
			return p, false
		}
		p = np
		e.setPID(p.pid)
	}
}

// openOutput opens a stage's output file at byte from.
func openOutput(path string, from int64) (*os.File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("stage output: %w", err)
	}
	st, err := f.Stat()
	if err == nil && from > st.Size() {
		err = fmt.Errorf("resume at byte %d of %s: it has %d", from, path, st.Size())
	}
	if err == nil && from > 0 {
		_, err = f.Seek(from, io.SeekStart)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("stage output: %w", err)
	}
	return f, nil
}

// setRunning records that stage run n runs in p, its output going to the
// trace from byte from on. Like every change of the running stage, it
// holds out.mu, then mu: a checkpoint sees stage, runs and offset agree.
func (e *Executor) setRunning(stage executor.Stage, p *proc, n int, from int64) {
	e.out.mu.Lock()
	defer e.out.mu.Unlock()
	e.mu.Lock()
	defer e.mu.Unlock()
	e.runs = n
	e.running = &stageState{Name: stage, PID: p.pid, Started: time.Now().UTC()}
	e.out.stage = stage
	e.out.off.Store(from)
}

// setPID records that the running stage's wrapper is pid.
func (e *Executor) setPID(pid int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.running != nil {
		e.running.PID = pid
	}
}

// setEnded records that the running stage ended (its output is all in the
// trace).
func (e *Executor) setEnded() {
	e.out.mu.Lock()
	defer e.out.mu.Unlock()
	e.mu.Lock()
	defer e.mu.Unlock()
	e.running = nil
	e.out.stage = ""
	e.out.off.Store(0)
}

// copyOutput copies the output file f to trace until stop is closed and f
// is read to its end. The stage has ended when stop is closed, so that last
// read gets all of its output.
func (e *Executor) copyOutput(f *os.File, trace io.Writer, logger *slog.Logger, stop <-chan struct{}) {
	buf := make([]byte, 64<<10)
	idle := time.NewTimer(pollInterval)
	defer idle.Stop()
	final := false
	for {
		n, err := f.Read(buf)
		if n > 0 {
			e.out.mu.Lock()
			// Errors of the log sink are the trace uploader's business; the
			// bytes count as copied.
			_, _ = trace.Write(buf[:n])
			e.out.off.Add(int64(n))
			e.out.mu.Unlock()
			continue
		}
		if err != nil && !errors.Is(err, io.EOF) {
			logger.Warn("cannot read the stage output", "file", f.Name(), "err", err)
			return
		}
		if final {
			return
		}
		idle.Reset(pollInterval)
		select {
		case <-stop:
			final = true
		case <-idle.C:
		}
	}
}

// OutputCheckpoint calls fn with the state, the running stage ("" between
// stages) and how many bytes of its output file are in the trace; no stage
// output is written, and no stage starts or ends, while fn runs.
func (e *Executor) OutputCheckpoint(fn func(state json.RawMessage, stage executor.Stage, offset int64)) error {
	e.out.mu.Lock()
	defer e.out.mu.Unlock()
	e.mu.Lock()
	restored := e.resume != nil
	e.mu.Unlock()
	if restored {
		return errors.New("shell executor: checkpoint of a restored executor before Resume")
	}
	state, err := e.State()
	if err != nil {
		return err
	}
	fn(state, e.out.stage, e.out.off.Load())
	return nil
}

// StageOutputOffset returns how many bytes of the running stage's output
// file are in the trace (0 between stages). Use OutputCheckpoint to read it
// together with the state and the trace's own state.
func (e *Executor) StageOutputOffset() int64 { return e.out.off.Load() }

// stageFiles returns the files of stage run n.
func (e *Executor) stageFiles(n int, stage executor.Stage) stageFiles {
	base := fmt.Sprintf("%03d-%s", n, fileName(string(stage)))
	return stageFiles{
		script: filepath.Join(e.scriptDir, base+".sh"),
		pid:    filepath.Join(e.scriptDir, base+".pid"),
		exit:   filepath.Join(e.scriptDir, base+".exit"),
		output: filepath.Join(e.outputDir, base+".log"),
	}
}

// fileName makes a stage name (step names come from the job) safe in a
// file name.
func fileName(s string) string {
	b := []byte(s)
	if len(b) > 64 {
		b = b[:64]
	}
	for i, c := range b {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-'
		if !ok {
			b[i] = '_'
		}
	}
	return string(b)
}

// Finish records the build's end.
func (e *Executor) Finish(err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.finished = err
}

// Cleanup removes the job's scripts and stage outputs. The project
// directory stays, so that the fetch strategy can reuse the checkout. A
// manager that leaves a job to be resumed by its next process must not
// call it.
func (e *Executor) Cleanup(ctx context.Context) {
	e.mu.Lock()
	dirs := []string{e.scriptDir, e.outputDir}
	e.scriptDir, e.outputDir = "", ""
	e.mu.Unlock()
	for _, dir := range dirs {
		if dir != "" {
			_ = os.RemoveAll(dir)
		}
	}
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
