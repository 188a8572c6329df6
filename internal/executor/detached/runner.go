package detached

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/drover-ci/drover/internal/executor"
	"github.com/drover-ci/drover/internal/helper"
	"github.com/drover-ci/drover/internal/lockedbuf"
)

// Config is what a Runner needs of its executor.
type Config struct {
	// Dir is the job's directory in the target, where the runs' files
	// are (FilesOf).
	Dir string
	// Tool makes the follower's commands; nil: drover's helper as
	// "drover helper".
	Tool Tool
	// PIDGone: the follower sees the stage's processes (the same host or
	// process namespace), so a run whose wrapper is dead without an exit
	// status is vanished even when no one made its gone file.
	PIDGone bool
	// Retries is how often a follower that failed (its stream broke) is
	// started again, from the byte the trace has, before the stage counts
	// as vanished; the n-th retry waits n seconds first.
	Retries int
	// Grace is the executor's time between SIGTERM and SIGKILL: a
	// cancelled stage whose follower has not ended Grace + 30 s after
	// Target.Stop returned is abandoned.
	Grace time.Duration
	// Trace is the job's trace; nil discards.
	Trace io.Writer
	// Logger is the manager's log; nil discards.
	Logger *slog.Logger
}

// Mode says how Run treats a stage.
type Mode int

const (
	// StartFresh starts the stage as the next run and follows it.
	StartFresh Mode = iota
	// AttachSaved follows the run a dead manager started (Saved), from
	// the byte its checkpoint had. From byte 0 (the dead manager may
	// have saved the state before the run's wrapper started, and died
	// before it did), a run that never started is claimed and started,
	// as with AttachIfStarted, unless ctx is over.
	AttachSaved
	// AttachIfStarted follows the next run if a dead manager started it
	// after its last checkpoint, else starts it: never both.
	AttachIfStarted
)

// Stage is one stage to run detached.
type Stage struct {
	Name   executor.Stage
	Script string // the script, in Shell
	// Where is the place the stage runs in, as the job's state records
	// it (State.Where): a container, a host.
	Where string
	Shell string // what runs Script (a path or a name); default sh
	// Entrypoint, when set, starts Shell: Shell and the script are its
	// arguments (a container image's entrypoint, which the stage's
	// shell runs under).
	Entrypoint []string
	// Login runs Shell as a login shell (-l): it reads the profile first.
	Login bool
	Dir   string // the project directory: made if need be and entered
	Umask string // the wrapper's umask ("" leaves it)
	// Setup is shell the wrapper runs before the script, in its own
	// shell (the executor's settings of the stage's processes).
	Setup string
}

// Runner runs a job's stages detached and keeps what the job's saved
// state and checkpoints need: the number of runs started, the running
// stage, the one to resume, and how many bytes of the running stage's
// output are in the trace.
type Runner struct {
	c Config

	// out is held while stage output is written to the trace, and by
	// Checkpoint: the state and the offset it reports agree.
	out sync.Mutex
	off atomic.Int64 // bytes of the running stage's output in the trace

	mu      sync.Mutex
	runs    int
	running *State
	resume  *State
	stage   executor.Stage
}

// New returns the Runner of a job.
func New(c Config) *Runner {
	if c.Tool == nil {
		c.Tool = Helper{Command: []string{"drover", "helper"}}
	}
	if c.Trace == nil {
		c.Trace = io.Discard
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return &Runner{c: c}
}

// Run runs stage s in t as mode says, copies its output to the trace and
// returns its result: nil for exit status 0, a *executor.BuildError for
// another, an error wrapping executor.ErrStageVanished when the stage's
// processes are gone without an exit status, ctx's error (wrapped) when
// ctx ended (the stage is stopped, with Target.Stop). from is the first
// byte of the output to copy: 0 unless AttachSaved.
func (r *Runner) Run(ctx context.Context, t Target, s Stage, mode Mode, from int64) error {
	if err := ctx.Err(); err != nil && mode != AttachSaved {
		return fmt.Errorf("%s: %w", s.Name, err)
	}
	if from < 0 || from != 0 && mode != AttachSaved {
		return fmt.Errorf("%s: output offset %d for a stage not started", s.Name, from)
	}
	f := r.begin(s, from)
	defer r.end(mode != StartFresh)
	// The watch covers the probe too: a run claimed by a starter whose
	// place stopped before the run's output existed is vanished.
	wctx, stopWatch := context.WithCancel(context.WithoutCancel(ctx))
	defer stopWatch()
	if w, ok := t.(Watcher); ok {
		go r.markGone(wctx, w, t, s, f)
	}
	switch mode {
	case StartFresh:
		if err := r.start(ctx, t, s, f, false); err != nil {
			return fmt.Errorf("%s: %w", s.Name, err)
		}
	case AttachIfStarted, AttachSaved:
		if mode == AttachSaved && (from > 0 || ctx.Err() != nil) {
			// Its output exists: it started. Or the resumed job is
			// cancelled: what runs is stopped, nothing is started.
			break
		}
		// The dead manager may have started this stage after its last
		// checkpoint (AttachIfStarted), or it had the stage running but
		// died before its wrapper claimed it (AttachSaved from byte 0: a
		// script cut short on its way is not started, StoreStart):
		// follow it if it started, else claim it and start it here.
		_, _, notStarted, err := r.followOnce(ctx, t, FollowArgs{Files: f, Claim: true, Probe: true}, io.Discard)
		if err != nil {
			return fmt.Errorf("%s: %w", s.Name, err)
		}
		if notStarted {
			r.c.Logger.Info("the resumed stage had not started; running it", "stage", s.Name)
			if err := r.start(ctx, t, s, f, true); err != nil {
				return fmt.Errorf("%s: %w", s.Name, err)
			}
		}
	}
	return r.followToEnd(ctx, t, s, f)
}

// ResumeMode says how to resume stage after Restore, with output offset
// from: AttachSaved and the saved stage when the state had it running,
// else AttachIfStarted (from is then 0: the state was taken between
// stages).
func (r *Runner) ResumeMode(stage executor.Stage, from int64) (Mode, *State, error) {
	if from < 0 {
		return 0, nil, fmt.Errorf("%s: negative output offset %d", stage, from)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.resume == nil {
		return AttachIfStarted, nil, nil
	}
	if r.resume.Name != stage {
		return 0, nil, fmt.Errorf("resume %s: the saved state's running stage is %s", stage, r.resume.Name)
	}
	saved := *r.resume
	return AttachSaved, &saved, nil
}

// start stores the stage's script and starts its wrapper.
func (r *Runner) start(ctx context.Context, t Target, s Stage, f Files, claimed bool) error {
	// Each starter stores the script under a name of its own: the
	// wrapper that wins the claim moves it into place, so a script that
	// runs is never written over by a starter that lost.
	var b [8]byte
	_, _ = rand.Read(b[:])
	staged := f.Script + "." + hex.EncodeToString(b[:])
	script := wrapper(s, f, staged, claimed)
	if ws, ok := t.(WriteStarter); ok {
		if err := ws.WriteStart(ctx, staged, []byte(s.Script), script); err != nil {
			return fmt.Errorf("start the stage: %w", err)
		}
		return nil
	}
	if err := t.WriteFile(ctx, staged, []byte(s.Script)); err != nil {
		return fmt.Errorf("store the stage script: %w", err)
	}
	if err := t.Start(ctx, script); err != nil {
		return fmt.Errorf("start the stage: %w", err)
	}
	return nil
}

// followToEnd follows a run from the byte the trace has to its end and
// returns its result. A follower that fails is started again from the
// byte it reached (Config.Retries).
func (r *Runner) followToEnd(ctx context.Context, t Target, s Stage, f Files) error {
	// Cancelling ctx stops the stage; the follower goes on until the
	// stage's end shows (an exit status, or the gone mark of a stopped
	// place), so that the output it left is in the trace.
	fctx, stopFollow := context.WithCancel(context.WithoutCancel(ctx))
	defer stopFollow()
	// Run returns once a stop it began is over.
	stopped, stopDone := make(chan struct{}), make(chan struct{})
	defer func() {
		close(stopped)
		<-stopDone
	}()
	go func() {
		defer close(stopDone)
		r.stopOnCancel(ctx, t, s, f, stopped, stopFollow)
	}()
	var lastErr error
	for attempt := 0; ; attempt++ {
		a := FollowArgs{Files: f, From: r.off.Load(), PID: r.c.PIDGone}
		code, vanished, _, err := r.followOnce(fctx, t, a, r.Writer())
		switch {
		case err == nil && ctx.Err() != nil:
			return fmt.Errorf("%s: %w", s.Name, ctx.Err())
		case err == nil && vanished:
			return vanishedError(s.Name, explain(context.WithoutCancel(ctx), t))
		case err == nil && code != 0:
			return &executor.BuildError{ExitCode: code}
		case err == nil:
			return nil
		case ctx.Err() != nil && fctx.Err() != nil:
			return fmt.Errorf("%s: %w", s.Name, ctx.Err())
		}
		if why := explain(fctx, t); why != "" {
			return vanishedError(s.Name, why)
		}
		lastErr = err
		if attempt >= r.c.Retries {
			break
		}
		r.c.Logger.Warn("following the stage's output failed; following again", "stage", s.Name, "from", r.off.Load(), "err", err)
		wait := time.NewTimer(time.Duration(attempt+1) * time.Second)
		select {
		case <-wait.C:
		case <-fctx.Done():
			wait.Stop()
		}
	}
	return fmt.Errorf("%s: the stage's output could not be followed: %w: %w", s.Name, lastErr, executor.ErrStageVanished)
}

// stopOnCancel stops the stage when ctx ends before stopped is closed;
// if its follower then does not end in time, it is abandoned
// (stopFollow).
func (r *Runner) stopOnCancel(ctx context.Context, t Target, s Stage, f Files, stopped <-chan struct{}, stopFollow func()) {
	select {
	case <-ctx.Done():
	case <-stopped:
		return
	}
	// The stage's context is over: the stop gets one of its own.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.c.Grace+30*time.Second)
	err := t.Stop(sctx, f)
	cancel()
	if err != nil {
		r.c.Logger.Warn("cannot stop the stage's processes", "stage", s.Name, "err", err)
	}
	abandon := time.NewTimer(r.c.Grace + 30*time.Second)
	defer abandon.Stop()
	select {
	case <-stopped:
	case <-abandon.C:
		stopFollow()
	}
}

// markGone makes the run's gone file when the stage's place stopped: its
// follower stops waiting for an exit status that will never come.
func (r *Runner) markGone(ctx context.Context, w Watcher, t Target, s Stage, f Files) {
	if !w.WaitStopped(ctx) {
		return
	}
	var out lockedbuf.Buffer
	code, err := t.Exec(ctx, []string{"sh", "-c", `: > "$1"`, "sh", f.Gone}, &out, &out)
	if (err != nil || code != 0) && ctx.Err() == nil {
		r.c.Logger.Warn("cannot mark a stopped stage", "stage", s.Name, "exit", code, "err", err, "output", out.String())
	}
}

// followOnce runs a follower once: it copies the run's output from byte
// a.From to w until the run ends, and returns its exit status, or that
// it vanished, or (with a.Claim) that it never started and is now
// claimed, or (with a.Probe) nothing once it started.
func (r *Runner) followOnce(ctx context.Context, t Target, a FollowArgs, w io.Writer) (code int, vanished, notStarted bool, err error) {
	var status lockedbuf.Buffer
	c, err := t.Exec(ctx, r.c.Tool.Follow(a), w, &status)
	if err != nil {
		return 0, false, false, fmt.Errorf("follow the stage's output: %w", err)
	}
	code, vanished, notStarted, err = helper.ParseStatus(status.String())
	if err != nil {
		return 0, false, false, fmt.Errorf("follow the stage's output (follower exit %d): %w", c, err)
	}
	return code, vanished, notStarted, nil
}

// explain asks t why the stage's place is gone ("" when t cannot say).
func explain(ctx context.Context, t Target) string {
	if x, ok := t.(Explainer); ok {
		return x.Gone(ctx)
	}
	return ""
}

func vanishedError(stage executor.Stage, why string) error {
	if why == "" {
		return fmt.Errorf("%s: %w", stage, executor.ErrStageVanished)
	}
	return fmt.Errorf("%s: %w (%s)", stage, executor.ErrStageVanished, why)
}

// Begin records that the next run of stage s runs in s.Where, attached
// by its executor rather than detached (a job that is not resumable): it
// returns the run's files and the writer its output goes to the trace
// through. End ends it.
func (r *Runner) Begin(s Stage) (Files, io.Writer) {
	return r.begin(s, 0), r.Writer()
}

// End records that the stage Begin began ended.
func (r *Runner) End() { r.end(false) }

// begin records that the next run of stage s runs, its output in the
// trace from byte from on, and returns its files.
func (r *Runner) begin(s Stage, from int64) Files {
	r.out.Lock()
	defer r.out.Unlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.runs++
	r.running = &State{Name: s.Name, N: r.runs, Where: s.Where, Started: time.Now().UTC()}
	r.stage = s.Name
	r.off.Store(from)
	return FilesOf(r.c.Dir, r.runs)
}

// end records that the running stage ended; resumed, that it was the one
// to resume.
func (r *Runner) end(resumed bool) {
	r.out.Lock()
	defer r.out.Unlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.running = nil
	if resumed {
		r.resume = nil
	}
	r.stage = ""
	r.off.Store(0)
}

// Writer returns the writer through which the running stage's output
// goes to the trace, counted.
func (r *Runner) Writer() io.Writer { return (*traceWriter)(r) }

type traceWriter Runner

func (w *traceWriter) Write(p []byte) (int, error) {
	r := (*Runner)(w)
	r.out.Lock()
	defer r.out.Unlock()
	// Errors of the log sink are the trace uploader's business.
	_, _ = r.c.Trace.Write(p)
	r.off.Add(int64(len(p)))
	return len(p), nil
}

// Export returns what the job's saved state records: the number of runs
// started and the running stage (nil between stages). A restored stage
// not yet re-attached counts as running.
func (r *Runner) Export() (runs int, running *State) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.running != nil:
		s := *r.running
		return r.runs, &s
	case r.resume != nil:
		s := *r.resume
		return r.runs + 1, &s
	}
	return r.runs, nil
}

// Restore takes back what Export returned, in the Runner of a new
// process: running is then the stage to resume (ResumeMode).
func (r *Runner) Restore(runs int, running *State) error {
	switch {
	case runs < 0:
		return fmt.Errorf("%d runs", runs)
	case running != nil && (running.N != runs || running.Where == ""):
		return fmt.Errorf("running stage %d (in %q) of %d runs", running.N, running.Where, runs)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.runs, r.running, r.resume = runs, nil, nil
	if running != nil {
		s := *running
		r.runs, r.resume = runs-1, &s
	}
	return nil
}

// Checkpoint calls fn with what state returns, the running stage ("" when
// none) and how many bytes of its output are in the trace; no stage
// output is written and no stage starts or ends while fn runs
// (executor.OutputCheckpointer). state may call Export. A nil Runner (an
// executor not prepared) has no stage running.
func (r *Runner) Checkpoint(state func() (json.RawMessage, error), fn func(state json.RawMessage, stage executor.Stage, offset int64)) error {
	if r == nil {
		st, err := state()
		if err != nil {
			return err
		}
		fn(st, "", 0)
		return nil
	}
	r.out.Lock()
	defer r.out.Unlock()
	st, err := state()
	if err != nil {
		return err
	}
	r.mu.Lock()
	stage := r.stage
	r.mu.Unlock()
	fn(st, stage, r.off.Load())
	return nil
}
