package jobrun

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/clock"
	"github.com/drover-ci/drover/internal/executor"
	"github.com/drover-ci/drover/internal/featureflags"
	"github.com/drover-ci/drover/internal/shell"
)

// cleanupTimeout bounds cleanup_file_variables and Executor.Cleanup, which
// run even after the build was aborted.
const cleanupTimeout = 2 * time.Minute

// Causes of the job context's cancellation.
var (
	errJobTimeout     = errors.New("job timeout")
	errGracefulCancel = errors.New("job canceled")
)

// Options is what Run needs. Job, Executor and Trace are required.
type Options struct {
	Job      *api.JobResponse
	Provider executor.Provider // for DefaultShell when Settings.Shell is empty
	Executor executor.Executor
	Data     executor.Data
	Settings executor.Settings
	Trace    io.Writer    // the job log
	Logger   *slog.Logger // the manager's log; nil discards
	Clock    clock.Clock  // nil = real
	Version  string       // shown in "Running with drover <version>"
	// Helper is the shell words that run `drover helper` on the manager's
	// host, for the cache and artifact stages of executors whose scripts
	// run there (executor.Local); "" skips those stages with a warning in
	// the log. An executor.HelperHost brings its own.
	Helper string
	// ServerURL is the coordinator's URL (the runner's url) the artifact
	// stages upload to and download from.
	ServerURL string
	// SharedCache signs the shared cache's URLs of a cache key (nil: the
	// runner's caches are local only); see shell.Transfers.
	SharedCache func(key string) (shell.SharedCacheURLs, bool)
	// ExtractMaxSize and ExtractMaxEntries cap the archives the helper
	// extracts into the build directory (a dependency's artifacts, a
	// cache): the runner's [runners.artifact] extract_max_size and
	// extract_max_entries; zero is the helper's default.
	ExtractMaxSize, ExtractMaxEntries int64
	// Accept, when set, is the two-phase job start: Run calls it once,
	// after the executor is prepared and right before the first script
	// stage (prepare_script). Until it returns nil the job is not the
	// runner's: an error from it stops the build there (no script and no
	// after_script runs) and the result's Err wraps ErrNotAccepted. It is
	// not called when the build was cancelled or timed out during
	// preparation, nor when Prepare failed for a system reason; a Prepare
	// failure that is the job's own (a *executor.BuildError, or the
	// runner's prepare_timeout run out) is accepted first and then
	// reported as a failed job. With Accept set, the job
	// timeout counts from the acceptance (preparation is bounded by one
	// job timeout of its own), and the synchronous checkpoint of
	// prepare_script comes before the call, not after it: the job's
	// record exists before the job can be the runner's.
	Accept func(ctx context.Context) error
	// Checkpoint, when set, receives the build's checkpoints (see
	// Checkpoint). With sync true (before a stage starts) the build waits
	// for it to return, so the caller can make the checkpoint durable
	// before the stage's processes exist; otherwise it is called with the
	// log's lock held, right after the stage's output was written, and
	// must be quick.
	Checkpoint func(cp Checkpoint, sync bool)
	// Resume, when set, continues a build that another process started:
	// the executor is restored instead of prepared (it must implement
	// executor.Stateful), the stages before the checkpoint are skipped,
	// the checkpoint's stage is re-attached, and the rest runs as usual.
	// Nothing before the checkpoint is written to the log again.
	Resume *Resume
	// Runner is what the runner's config.toml says about the build beyond
	// the executor's settings.
	Runner RunnerOptions
}

// RunnerOptions are a runner's config.toml keys that bound or change its
// builds.
type RunnerOptions struct {
	// PrepareTimeout bounds the executor's preparation and prepare_script
	// together (prepare_timeout); GetSourcesTimeout bounds get_sources,
	// its attempts included (get_sources_timeout). A build past one fails
	// with job_execution_timeout, without after_script, as in GitLab
	// Runner. Zero, or more than the job timeout, is the job timeout.
	PrepareTimeout, GetSourcesTimeout time.Duration
	// DebugTraceDisabled refuses the jobs' CI_DEBUG_TRACE and
	// CI_DEBUG_SERVICES with a warning in the log (debug_trace_disabled).
	DebugTraceDisabled bool
}

// ErrNotAccepted marks a build stopped because Options.Accept failed.
var ErrNotAccepted = errors.New("job not accepted")

// Result is how a build ended.
type Result struct {
	State         api.JobState      // success or failed
	FailureReason api.FailureReason // "" on success
	ExitCode      int               // the failing script's exit code, else 0
	// HasExitCode is set when ExitCode is a script's (the build failed
	// with an executor.BuildError); failures without one (timeouts,
	// cancels, system failures) report none.
	HasExitCode bool
	Canceled    bool  // ended by a graceful cancel
	Err         error // what went wrong, for the manager's log
}

// Run runs the build. Cancelling ctx aborts hard (processes killed,
// after_script skipped, Result.FailureReason = runner_system_failure unless
// the caller overrides). A close of gracefulCancel stops the current stage
// and still runs after_script, then returns Canceled=true with
// FailureReason job_canceled. The job timeout (job.TimeoutSeconds()) is
// enforced here: on expiry the script is killed, after_script is skipped
// (as GitLab Runner does), and the result is failed with
// job_execution_timeout.
//
// Run writes the whole user-visible log of the build to opts.Trace, ending
// with "Job succeeded" or "ERROR: Job failed: …". It calls Finish and
// Cleanup on the executor in every case, but never the provider's Release.
func Run(ctx context.Context, gracefulCancel <-chan struct{}, opts Options) Result {
	b := &build{opts: opts, clk: clock.OrReal(opts.Clock), log: opts.Logger}
	if b.log == nil {
		b.log = slog.New(slog.DiscardHandler)
	}
	trace := opts.Trace
	if trace == nil {
		trace = io.Discard
	}
	b.trace = &traceWriter{w: trace, clk: b.clk}
	if opts.Resume != nil {
		cp := opts.Resume.Checkpoint
		b.resume = &cp
		b.trace.midLine = cp.MidLine
	}
	if opts.Job == nil || opts.Executor == nil {
		err := errors.New("build: no job or no executor")
		return Result{State: api.StateFailed, FailureReason: api.RunnerSystemFailure, Err: err}
	}
	b.exec = opts.Executor
	// The settings come from variables that do not depend on where the
	// executor puts the job: they are known before it is prepared.
	b.set = readSettings(executor.JobVariables(opts.Job, opts.Settings, executor.Paths{}, opts.Version), opts.Job.GitInfo.Depth,
		opts.Runner.DebugTraceDisabled, opts.Settings.FeatureFlags)
	b.opts.Settings.DebugServices = b.set.debugServices
	b.flagProblems = b.resolveFlags()
	if b.flags.On(featureflags.Timestamps) {
		if opts.Settings.Resumable || opts.Resume != nil {
			b.flagProblems = append(b.flagProblems, "FF_TIMESTAMPS is not honoured for a job a job store keeps ([runners.store]): "+
				"a resumed job writes its log again byte for byte, which it could not with the times of its lines")
		} else {
			b.trace.stamp = &stamper{w: trace, clk: b.clk}
		}
	}
	return b.run(ctx, gracefulCancel)
}

type build struct {
	opts  Options
	clk   clock.Clock
	log   *slog.Logger
	trace *traceWriter
	exec  executor.Executor
	vars  api.Variables
	info  shell.Info
	set   settings

	resume *Checkpoint      // until the checkpoint's stage is reached
	first  error            // the first failed step, for checkpoints
	keyed  *api.JobResponse // the job with its cache keys from files (see cacheKeyed)

	quietCleanup bool             // no empty cleanup_file_variables section
	flags        featureflags.Set // the job's feature flags (resolveFlags)
	flagProblems []string         // what to warn about them in the log
}

func (b *build) run(ctx context.Context, graceful <-chan struct{}) Result {
	job := b.opts.Job
	if b.resume == nil {
		b.trace.printf("Running with drover %s\n", b.opts.Version)
		if s := b.opts.Settings; s.RunnerName != "" || s.ShortToken != "" {
			on := fmt.Sprintf("  on %s %s", s.RunnerName, s.ShortToken)
			if s.SystemID != "" {
				on += ", system ID: " + s.SystemID // as GitLab Runner says it
			}
			b.trace.printf("%s\n", on)
		}
		if len(b.set.warnings) > 0 {
			// One warning, the settings' errors a line each, as GitLab
			// Runner prints them.
			b.trace.line(ansiYellow, "WARNING: "+strings.Join(b.set.warnings, "\n"))
		}
		b.printFlags(b.flagProblems)
		b.logImages()
	}

	// The job context ends the job's stages: on the job timeout, on a
	// graceful cancel, or with ctx. after_script does not run in it.
	jobCtx, cancelJob := context.WithCancelCause(ctx)
	defer cancelJob(nil)
	timeout := time.Duration(job.TimeoutSeconds()) * time.Second
	left := timeout
	if r := b.opts.Resume; r != nil && !r.Accepted.IsZero() {
		left = max(timeout-b.clk.Now().Sub(r.Accepted), time.Nanosecond)
	}
	timer := b.clk.NewTimer(left)
	defer timer.Stop()
	go func() {
		select {
		case <-graceful:
			cancelJob(errGracefulCancel)
		case <-timer.C():
			cancelJob(errJobTimeout)
		case <-jobCtx.Done():
		}
	}()

	if b.resume != nil && b.resume.Stage == executor.StageFinished && b.resume.Outcome != nil {
		return b.finishResumed(ctx)
	}

	// prepare_timeout bounds the preparation and prepare_script.
	prepCtx, stopPrep := b.phaseContext(jobCtx, b.opts.Runner.PrepareTimeout, "prepare", timeout)
	defer stopPrep()
	var err error
	if b.resume != nil {
		err = b.restore(jobCtx)
	} else if err = b.prepare(prepCtx); err != nil {
		err = phaseError(prepCtx, err)
	}
	prepared := err == nil
	started := false // the job is the runner's and its stages began
	if b.resume == nil && prepared && b.opts.Accept != nil && jobCtx.Err() == nil {
		// A two-phase job's record is saved before its accept, not after:
		// a manager that dies once the accept landed leaves a record that
		// the next one resumes (accepting again, which is harmless),
		// instead of a job the coordinator runs and no runner has.
		b.checkpoint(executor.StagePrepareScript, false, 0, true)
	}
	if b.resume != nil {
		// A resumed job was accepted by the process that started it, or
		// by the manager that resumed it (before the build).
	} else if aerr := b.accept(jobCtx, err, timer, timeout); aerr != nil {
		err = aerr
	}
	if prepared && err == nil {
		if b.resume == nil && b.opts.Accept == nil {
			// The job is the runner's from here on: a resume after the
			// manager's death starts at prepare_script at the earliest.
			b.checkpoint(executor.StagePrepareScript, false, 0, true)
		}
		started = true
		err = b.scripts(jobCtx, prepCtx)
		var pt *phaseTimeout
		switch {
		case ctx.Err() != nil:
		case context.Cause(jobCtx) == errJobTimeout:
			// GitLab Runner's words; as with it, a job out of time gets
			// no after_script.
			b.trace.line(ansiYellow, "WARNING: step_script could not run to completion because the timeout was exceeded. For more control over job and script timeouts see: https://docs.gitlab.com/ci/runners/configure_runners/#set-script-and-after_script-timeouts")
		case errors.As(err, &pt):
			// As GitLab Runner: preparation or get_sources out of time
			// ends the build there.
		case errors.As(err, new(*beforeScripts)):
			err = b.saveStages(jobCtx, err)
		default:
			err = b.afterScript(ctx, jobCtx, err)
			err = b.saveStages(jobCtx, err)
		}
	}
	res := b.result(ctx, jobCtx, err, timeout)
	cancelJob(nil)
	color, footer := b.footerLine(res, timeout)
	if started && ctx.Err() == nil {
		// The result is known: a manager that dies during the cleanup
		// below is resumed here (finishResumed), not in a stage whose
		// containers the cleanup may have removed already.
		b.finishedCheckpoint(&Outcome{State: res.State, FailureReason: res.FailureReason, ExitCode: res.ExitCode,
			HasExitCode: res.HasExitCode, Canceled: res.Canceled, Footer: footer, FooterColor: color})
	}

	// File variables hold secrets and the executor may hold machines: both
	// are cleaned up even when ctx was cancelled to abort the build, so this
	// runs on a context detached from ctx, with a deadline of its own.
	cleanupCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	if prepared {
		// An empty cleanup section is shown, as GitLab Runner's, unless
		// the job ran out of time or was cancelled.
		b.quietCleanup = res.FailureReason == api.JobExecutionTimeout || res.Canceled
		b.cleanupFileVariables(cleanupCtx)
	}
	b.exec.SetCurrentStage(executor.StageFinished)
	b.exec.Finish(res.Err)
	b.exec.Cleanup(cleanupCtx)
	b.trace.line(color, footer)
	b.trace.finish()
	return res
}

// finishResumed ends a build resumed at its finished checkpoint: the
// executor is restored only to be cleaned up, and the result is the one
// the checkpoint kept.
func (b *build) finishResumed(ctx context.Context) Result {
	o := b.resume.Outcome
	res := o.result()
	cleanupCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	if err := b.restore(cleanupCtx); err != nil {
		// Nothing to clean up through it; the executor's start-up sweep
		// removes what is left once the job is over.
		b.log.Warn("resume at the end of the build: the executor could not be restored for its cleanup", "err", err)
	} else {
		b.cleanupFileVariables(cleanupCtx)
		b.exec.SetCurrentStage(executor.StageFinished)
		b.exec.Finish(res.Err)
		b.exec.Cleanup(cleanupCtx)
	}
	b.trace.line(o.FooterColor, o.Footer)
	return res
}

// finishedCheckpoint takes the checkpoint of a build whose result is
// known, before the executor's cleanup.
func (b *build) finishedCheckpoint(o *Outcome) {
	if b.opts.Checkpoint == nil {
		return
	}
	b.trace.mu.Lock()
	cp := Checkpoint{Stage: executor.StageFinished, MidLine: b.trace.midLine, Outcome: o}
	b.trace.mu.Unlock()
	b.opts.Checkpoint(cp, true)
}

// accept runs Options.Accept when the build may start its scripts, or
// when preparation failed through the job's own fault (so that the job is
// reported failed here rather than handed to another runner to fail
// again). On success the job timeout restarts: the coordinator counts it
// from the acceptance too.
func (b *build) accept(jobCtx context.Context, prepErr error, timer clock.Timer, timeout time.Duration) error {
	if b.opts.Accept == nil {
		return nil
	}
	var be *executor.BuildError
	var pt *phaseTimeout
	if prepErr != nil && (!errors.As(prepErr, &be) && !errors.As(prepErr, &pt) || jobCtx.Err() != nil) {
		return nil // a system failure (or an abort): not ours to report
	}
	if jobCtx.Err() != nil {
		// Prepared, but cancelled or timed out meanwhile: no script (not
		// even after_script) runs in a job that was never accepted.
		return fmt.Errorf("%w: %w", ErrNotAccepted, context.Cause(jobCtx))
	}
	if err := b.opts.Accept(jobCtx); err != nil {
		return fmt.Errorf("%w: %w", ErrNotAccepted, err)
	}
	timer.Stop()
	timer.Reset(timeout)
	return nil
}

// prepare runs prepare_executor and sets up what the stage scripts need.
func (b *build) prepare(ctx context.Context) error {
	settings := b.opts.Settings
	if settings.Shell == "" && b.opts.Provider != nil {
		settings.Shell = b.opts.Provider.DefaultShell()
	}
	b.exec.SetCurrentStage(executor.StagePrepareExecutor)
	b.trace.sectionStart(executor.StagePrepareExecutor, "")
	err := b.exec.Prepare(ctx, b.prepareOptions(settings))
	b.trace.sectionEnd(executor.StagePrepareExecutor)
	if err != nil {
		return fmt.Errorf("prepare executor: %w", err)
	}
	return b.setup(settings)
}

func (b *build) prepareOptions(settings executor.Settings) executor.PrepareOptions {
	return executor.PrepareOptions{
		Job: b.opts.Job, Settings: settings, Data: b.opts.Data, Trace: &stageWriter{b}, Logger: b.log,
		Variables: func(p executor.Paths) api.Variables {
			return executor.JobVariables(b.opts.Job, settings, p, b.opts.Version)
		},
		ProjectDir: func(p executor.Paths) (string, error) {
			return shell.ProjectDir(executor.JobVariables(b.opts.Job, settings, p, b.opts.Version), p, settings.Git.CustomBuildDir)
		},
	}
}

// restore rebuilds the executor of a resumed build instead of preparing
// it: nothing is written to the log.
func (b *build) restore(ctx context.Context) error {
	settings := b.opts.Settings
	if settings.Shell == "" && b.opts.Provider != nil {
		settings.Shell = b.opts.Provider.DefaultShell()
	}
	st, ok := b.exec.(executor.Stateful)
	if !ok {
		return fmt.Errorf("%w (%T)", ErrNotResumable, b.exec)
	}
	b.exec.SetCurrentStage(b.resume.Stage)
	if err := st.Restore(ctx, b.prepareOptions(settings), b.opts.Resume.ExecutorState); err != nil {
		return fmt.Errorf("restore executor: %w", err)
	}
	b.first = b.resume.failedErr()
	return b.setup(settings)
}

// setup computes the variables and script context of the stages.
func (b *build) setup(settings executor.Settings) error {
	var err error

	var paths executor.Paths
	if pr, ok := b.exec.(executor.PathsReporter); ok {
		paths = pr.Paths()
	} else if paths, err = executor.HostPaths(settings, b.opts.Job); err != nil {
		return fmt.Errorf("prepare executor: %w", err)
	} else if paths, err = b.prepareOptions(settings).JobPaths(paths); err != nil {
		return fmt.Errorf("prepare executor: %w", err)
	}
	if d, ok := b.exec.(interface{ Disposable() bool }); ok {
		settings.Disposable = d.Disposable()
	}
	b.vars = executor.JobVariables(b.opts.Job, settings, paths, b.opts.Version)
	b.info = shell.Info{
		Shell:      b.exec.Shell(),
		Job:        b.opts.Job,
		Variables:  b.vars,
		ProjectDir: paths.ProjectDir,
		BuildsDir:  paths.BuildsDir,
		Hooks:      settings.Hooks,
		DebugTrace: b.set.debugTrace,
		// Sections only where the coordinator shows them.
		ScriptSections: b.flags.On(featureflags.ScriptSections) && b.opts.Job.Features.TraceSections,
		ExitCodeCheck:  b.flags.On(featureflags.BashExitCodeCheck),
		Git: shell.GitOptions{
			CloneURL: settings.Git.CloneURL, ServerURL: b.opts.ServerURL,
			SafeDirectoryCheckout: settings.Git.SafeDirectoryCheckout, CleanGitConfig: settings.Git.CleanGitConfig,
		},
		Transfers: shell.Transfers{
			CacheDir: paths.CacheDir, ServerURL: b.opts.ServerURL, SharedCache: b.opts.SharedCache,
			ExtractMaxSize: b.opts.ExtractMaxSize, ExtractMaxEntries: b.opts.ExtractMaxEntries,
		},
	}
	if b.flags.On(featureflags.GitalyCorrelationID) {
		b.info.Git.CorrelationID = b.opts.Job.CorrelationID
	}
	if m := b.set.cacheRequestTimeout; m > 0 && m != defaultCacheRequestTimeout {
		b.info.Transfers.CacheRequestTimeout = time.Duration(m) * time.Minute
	}
	if fv, ok := b.exec.(executor.FileVariablesHost); ok {
		b.info.FileVarsDir = fv.FileVariablesDir()
	}
	if h, ok := b.exec.(executor.HelperHost); ok {
		b.info.Transfers.Helper = h.HelperCommand()
	} else if _, local := b.exec.(executor.Local); local {
		b.info.Transfers.Helper = b.opts.Helper
	}
	return nil
}

// scripts runs prepare_script (in prepCtx, bounded by prepare_timeout),
// get_sources, restore_cache and download_artifacts, each up to its
// number of attempts, and the job's steps other than after_script. It
// returns the first error; once one happened, only steps with when:
// on_failure or always still run, and none after the job context ended.
func (b *build) scripts(ctx, prepCtx context.Context) error {
	if err := b.prepareScripts(ctx, prepCtx); err != nil {
		return &beforeScripts{err}
	}
	return b.userScripts(ctx)
}

// beforeScripts is a failure of the stages before the job's scripts
// (prepare_script, get_sources, restore_cache, download_artifacts): as
// with GitLab Runner, after_script does not run after it, the caches and
// artifacts of a failed job are still saved.
type beforeScripts struct{ err error }

func (e *beforeScripts) Error() string { return e.err.Error() }
func (e *beforeScripts) Unwrap() error { return e.err }

// prepareScripts runs the stages before the job's scripts.
func (b *build) prepareScripts(ctx, prepCtx context.Context) error {
	if err := b.stage(prepCtx, executor.StagePrepareScript, "Preparing environment", b.info); err != nil {
		return phaseError(prepCtx, err)
	}
	srcCtx, stopSrc := b.phaseContext(ctx, b.opts.Runner.GetSourcesTimeout, "get sources", time.Duration(b.opts.Job.TimeoutSeconds())*time.Second)
	defer stopSrc()
	if err := b.attempts(srcCtx, executor.StageGetSources, "Getting source from Git repository", b.info, b.set.getSources); err != nil {
		return phaseError(srcCtx, err)
	}
	if err := b.attempts(ctx, executor.StageRestoreCache, "Restoring cache", b.info, b.set.restoreCache); err != nil {
		return err
	}
	if err := b.attempts(ctx, executor.StageDownloadArtifacts, "Downloading artifacts", b.info, b.set.downloadArtifacts); err != nil {
		// The job's dependencies could not be had: not the script's
		// fault, a system failure.
		if be := (*executor.BuildError)(nil); errors.As(err, &be) {
			return fmt.Errorf("download artifacts: %s", be.Error())
		}
		return err
	}
	return nil
}

// userScripts runs the job's steps but after_script.
func (b *build) userScripts(ctx context.Context) error {
	first := b.first
	for _, step := range b.opts.Job.Steps {
		if step.Name == api.StepAfterScript {
			continue
		}
		if ctx.Err() != nil && b.resume == nil {
			break
		}
		switch step.When {
		case api.WhenAlways:
		case api.WhenOnFailure:
			if first == nil {
				continue
			}
		default: // on_success
			if first != nil {
				continue
			}
		}
		info := b.info
		if first != nil {
			info.JobStatus = shell.StatusFailed
		}
		stage := shell.StepStage(step.Name)
		err := b.stage(ctx, stage, fmt.Sprintf("Executing %q stage of the job script", stage), info)
		var be *executor.BuildError
		if err != nil && step.AllowFailure && errors.As(err, &be) {
			b.trace.line(ansiYellow, fmt.Sprintf("WARNING: %s failed (%v), but it is allowed to fail", stage, err))
			continue
		}
		if err != nil && first == nil {
			first = err
			b.trace.mu.Lock()
			b.first = err
			b.trace.mu.Unlock()
		}
	}
	return first
}

// afterScript runs after_script in ctx (not jobCtx: it runs after a
// graceful cancel too) under RUNNER_AFTER_SCRIPT_TIMEOUT. It
// returns the build's error: unchanged, unless AFTER_SCRIPT_IGNORE_ERRORS
// is false and a failing after_script fails an otherwise successful job.
func (b *build) afterScript(ctx, jobCtx context.Context, err error) error {
	info := b.info
	info.JobStatus = jobStatus(jobCtx, err)
	timeout := afterScriptTimeout(b.vars)
	actx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	timer := b.clk.NewTimer(timeout)
	defer timer.Stop()
	go func() {
		select {
		case <-timer.C():
			cancel(errJobTimeout)
		case <-actx.Done():
		}
	}()

	aerr := b.stage(actx, executor.StageAfterScript, "Running after_script", info)
	var be *executor.BuildError
	switch {
	case aerr == nil:
	case ctx.Err() != nil:
		// Aborted: the caller knows.
	case context.Cause(actx) == errJobTimeout:
		b.trace.line(ansiYellow, fmt.Sprintf("WARNING: after_script timed out after %v, but job will continue unaffected", timeout))
	case errors.As(aerr, &be) && !b.set.afterScriptIgnoreErrors && err == nil:
		b.trace.line(ansiBoldRed, fmt.Sprintf("ERROR: after_script failed: %v", aerr))
		return aerr
	default:
		why := aerr.Error()
		if errors.As(aerr, &be) && be.Inner == nil {
			why = b.exitText(be)
		}
		b.trace.line(ansiYellow, "WARNING: after_script failed, but job will continue unaffected: "+why)
	}
	return err
}

// saveStages saves the cache and uploads the artifacts whose when matches
// the job's result err, unless the job was cancelled or timed out. An
// artifact upload that fails fails a job that had succeeded.
func (b *build) saveStages(jobCtx context.Context, err error) error {
	if jobCtx.Err() != nil {
		return err
	}
	info := b.info
	info.JobStatus = jobStatus(jobCtx, err)
	archive, upload := executor.StageArchiveCache, executor.StageUploadArtifacts
	if err != nil {
		archive, upload = executor.StageArchiveCacheFail, executor.StageUploadArtifactsFail
	}
	// The section titles are GitLab Runner's.
	outcome := "successful"
	if err != nil {
		outcome = "failed"
	}
	if cerr := b.stage(jobCtx, archive, "Saving cache for "+outcome+" job", info); cerr != nil {
		b.trace.line(ansiYellow, fmt.Sprintf("WARNING: saving the cache failed: %v", cerr))
	}
	uerr := b.stage(jobCtx, upload, "Uploading artifacts for "+outcome+" job", info)
	if uerr != nil && err == nil {
		b.trace.line(ansiBoldRed, fmt.Sprintf("ERROR: uploading artifacts failed: %v", uerr))
		return uerr
	}
	return err
}

// jobStatus is CI_JOB_STATUS for after_script.
func jobStatus(jobCtx context.Context, err error) string {
	switch {
	case err == nil:
		return shell.StatusSuccess
	case context.Cause(jobCtx) == errGracefulCancel:
		return shell.StatusCanceled
	default:
		return shell.StatusFailed
	}
}

func (b *build) cleanupFileVariables(ctx context.Context) {
	err := b.stage(ctx, executor.StageCleanupFileVariables, "Cleaning up project directory and file based variables", b.info)
	if err != nil {
		b.log.Warn("cleanup of file variables failed", "err", err)
	}
}

// stage generates and runs one stage script in its log section. A stage
// with nothing to do is skipped without a section.
func (b *build) stage(ctx context.Context, stage executor.Stage, header string, info shell.Info) error {
	b.exec.SetCurrentStage(stage)
	if err := ctx.Err(); err != nil && b.resume == nil {
		return err
	}
	if cp := b.resume; cp != nil {
		if stage != cp.Stage {
			return nil // done before the checkpoint
		}
		b.resume = nil
		if cacheStage(stage) {
			info.Job = b.cacheKeyed(ctx, info.Job)
		}
		if cp.Started || !b.localStage(stage, info) {
			return b.resumeStage(ctx, stage, header, info, cp)
		}
		// A stage the build writes itself: simply written again.
	}
	if cacheStage(stage) {
		info.Job = b.cacheKeyed(ctx, info.Job)
	}
	if host, local, ok := b.scriptless(); ok {
		// Stages with nothing to run on a local executor (or one that can
		// name its host) are written here, without a shell (see
		// executor.Local and executor.ScriptHost).
		switch {
		case stage == executor.StagePrepareScript:
			b.trace.sectionStart(stage, header)
			b.trace.printf("Running on %s...\n", host)
			b.trace.sectionEnd(stage)
			return nil
		case stage == executor.StageGetSources && shell.SkipsSources(info):
			if local {
				if err := os.MkdirAll(info.ProjectDir, 0o755); err != nil {
					return fmt.Errorf("%s: %w", stage, err)
				}
			}
			b.trace.sectionStart(stage, header)
			for _, l := range shell.SkippedSourcesLines {
				b.trace.line(ansiBoldGreen, l)
			}
			b.trace.sectionEnd(stage)
			return nil
		}
	}
	script, err := shell.Generate(stage, info)
	if err != nil {
		return &configError{fmt.Errorf("%s: %w", stage, err)}
	}
	if script == "" {
		if stage == executor.StageCleanupFileVariables && !b.quietCleanup {
			// GitLab Runner shows this section in every job, with
			// nothing to clean up too.
			b.trace.sectionStart(stage, header)
			b.trace.sectionEnd(stage)
		}
		return nil
	}
	b.checkpoint(stage, false, 0, true)
	b.trace.sectionStart(stage, header)
	cmd := executor.Command{Stage: stage, Script: script}
	err = b.runStage(ctx, cmd, 1, 0, func() error { return b.exec.Run(ctx, cmd) })
	b.trace.sectionEnd(stage)
	if err != nil {
		b.log.Debug("stage failed", "stage", stage, "err", err)
	}
	return err
}

// resumeStage re-attaches to the stage of the checkpoint. A stage that the
// checkpoint says was about to start may or may not have started: the
// executor tells (executor.ErrStageNotStarted), and it is run if not.
func (b *build) resumeStage(ctx context.Context, stage executor.Stage, header string, info shell.Info, cp *Checkpoint) error {
	script, err := shell.Generate(stage, info)
	if err != nil {
		return &configError{fmt.Errorf("%s: %w", stage, err)}
	}
	st := b.exec.(executor.Stateful) // restore checked it
	cmd := executor.Command{Stage: stage, Script: script}
	from := cp.StageOffset
	if !cp.Started {
		// No checkpoint here: the record holds this one already (it is
		// what the build resumed from), and the log's bytes up to the
		// coordinator's size are still to be regenerated, so a checkpoint
		// could not be taken now anyway (the manager warned on every
		// resume of a stage that had been silent).
		b.trace.sectionStart(stage, header)
		from = 0
	}
	err = b.runStage(ctx, cmd, max(cp.Run, 1), from, func() error {
		err := st.Resume(ctx, cmd, from)
		if errors.Is(err, executor.ErrStageNotStarted) && !cp.Started {
			b.log.Info("the resumed stage had not started; running it", "stage", stage)
			err = b.exec.Run(ctx, cmd)
		}
		return err
	})
	b.trace.sectionEnd(stage)
	if err != nil {
		b.log.Debug("resumed stage failed", "stage", stage, "err", err)
	}
	return err
}

// checkpoint hands a checkpoint to Options.Checkpoint.
func (b *build) checkpoint(stage executor.Stage, started bool, offset int64, sync bool) {
	if b.opts.Checkpoint == nil {
		return
	}
	if sync {
		b.trace.mu.Lock()
	}
	// b.trace.mu is held: it guards midLine, the attempts and b.first.
	cp := Checkpoint{Stage: stage, Started: started, StageOffset: offset, MidLine: b.trace.midLine,
		Attempt: b.trace.attempt, Run: b.trace.run}
	if cp.Attempt == 1 {
		cp.Attempt = 0
	}
	if cp.Run == 1 {
		cp.Run = 0
	}
	var be *executor.BuildError
	if b.first != nil {
		cp.Failed = true
		if errors.As(b.first, &be) {
			cp.ExitCode = be.ExitCode
		}
	}
	if sync {
		b.trace.mu.Unlock()
	}
	b.opts.Checkpoint(cp, sync)
}

// localStage reports whether the build writes stage itself, without the
// executor (see executor.Local).
func (b *build) localStage(stage executor.Stage, info shell.Info) bool {
	if _, _, ok := b.scriptless(); !ok {
		return false
	}
	return stage == executor.StagePrepareScript || (stage == executor.StageGetSources && shell.SkipsSources(info))
}

// scriptless returns the host name of an executor for which the build
// writes trivial stages itself, and whether its files are on this host.
func (b *build) scriptless() (host string, local, ok bool) {
	if l, ok := b.exec.(executor.Local); ok {
		return l.Hostname(), true, true
	}
	if h, ok := b.exec.(executor.ScriptHost); ok {
		host = h.ScriptHostname()
		if v, ok := b.exec.(executor.ViaManager); ok && v.ViaManager() {
			if me, err := os.Hostname(); err == nil {
				host += " via " + me
			}
		}
		return host, false, true
	}
	return "", false, false
}

// configError is a job configuration drover cannot run (a bad
// GIT_STRATEGY, an invalid ref): runner_configuration_error.
type configError struct{ err error }

func (e *configError) Error() string { return e.err.Error() }
func (e *configError) Unwrap() error { return e.err }

// result classifies the build's error.
func (b *build) result(ctx, jobCtx context.Context, err error, timeout time.Duration) Result {
	failed := func(reason api.FailureReason, err error) Result {
		return Result{State: api.StateFailed, FailureReason: reason, Err: err}
	}
	var be *executor.BuildError
	var ce *configError
	var pt *phaseTimeout
	switch {
	case ctx.Err() != nil:
		return failed(api.RunnerSystemFailure, fmt.Errorf("build aborted: %w", context.Cause(ctx)))
	case err == nil:
		return Result{State: api.StateSuccess}
	case errors.As(err, &pt):
		return failed(api.JobExecutionTimeout, pt)
	case errors.As(err, &be):
		r := failed(be.Reason, err)
		if r.FailureReason == "" {
			r.FailureReason = api.ScriptFailure
		}
		r.ExitCode, r.HasExitCode = be.ExitCode, true
		return r
	case context.Cause(jobCtx) == errJobTimeout:
		return failed(api.JobExecutionTimeout, fmt.Errorf("execution took longer than %v: %w", timeout, err))
	case context.Cause(jobCtx) == errGracefulCancel:
		r := failed(api.JobCanceled, fmt.Errorf("canceled: %w", err))
		r.Canceled = true
		return r
	case errors.As(err, &ce):
		return failed(api.RunnerConfigurationError, err)
	default:
		return failed(api.RunnerSystemFailure, err)
	}
}

// exitText is a script's exit as GitLab Runner words it: "exit status
// N" for scripts of the shell executors, "exit code N" for containers'.
func (b *build) exitText(be *executor.BuildError) string {
	wording := "exit code"
	if w, ok := b.opts.Executor.(interface{ ExitWording() string }); ok {
		wording = w.ExitWording()
	}
	return fmt.Sprintf("%s %d", wording, be.ExitCode)
}

// footerLine is the build's last line and its colour.
func (b *build) footerLine(res Result, timeout time.Duration) (color, line string) {
	var be *executor.BuildError
	var pt *phaseTimeout
	switch {
	case res.State == api.StateSuccess:
		return ansiBoldGreen, "Job succeeded"
	case errors.As(res.Err, &pt):
		return ansiBoldRed, "ERROR: Job failed: " + pt.Error()
	case res.FailureReason == api.JobExecutionTimeout:
		// GitLab Runner's words, its "1h0m0s seconds" included: users
		// search logs for them.
		return ansiBoldRed, fmt.Sprintf("ERROR: Job failed: execution took longer than %v seconds", timeout)
	case res.Canceled:
		return ansiBoldRed, "ERROR: Job failed: canceled"
	case errors.As(res.Err, &be) && be.Inner == nil:
		return ansiBoldRed, "ERROR: Job failed: " + b.exitText(be)
	case res.FailureReason == api.RunnerSystemFailure:
		return ansiBoldRed, fmt.Sprintf("ERROR: Job failed (system failure): %v", res.Err)
	default:
		return ansiBoldRed, fmt.Sprintf("ERROR: Job failed: %v", res.Err)
	}
}
