// Package executor defines how the runner manager drives a job environment:
// a Provider creates and reserves executors, an Executor prepares an
// environment and runs one generated stage script at a time.
//
// The shapes follow GitLab Runner's ExecutorProvider and Executor
// interfaces, made idiomatic: every blocking call takes a context, and
// errors that are the user's fault (a failing script) are *BuildError.
//
// # Contexts
//
// Cancelling the context given to Run kills the stage's processes (the
// whole process group: interrupt, grace period, kill). The manager uses it
// for job cancellation, timeouts and forced shutdown.
package executor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"

	"github.com/drover-ci/drover/internal/api"
)

// Stage names a step of a build, as shown in log sections and metrics.
type Stage string

// Build stages, in the order a build runs them.
const (
	StagePrepareExecutor      Stage = "prepare_executor"
	StagePrepareScript        Stage = "prepare_script"
	StageGetSources           Stage = "get_sources"
	StageRestoreCache         Stage = "restore_cache"
	StageDownloadArtifacts    Stage = "download_artifacts"
	StageStepScript           Stage = "step_script"
	StageAfterScript          Stage = "after_script"
	StageArchiveCache         Stage = "archive_cache"
	StageArchiveCacheFail     Stage = "archive_cache_on_failure"
	StageUploadArtifacts      Stage = "upload_artifacts_on_success"
	StageUploadArtifactsFail  Stage = "upload_artifacts_on_failure"
	StageCleanupFileVariables Stage = "cleanup_file_variables"
	StageFinished             Stage = "finished"
)

// UserStage reports whether stage runs the job's own scripts (step_script
// with its hooks, after_script): GitLab Runner runs these in the job's
// image, the others ("predefined") in its helper.
func UserStage(stage Stage) bool {
	return stage == StageStepScript || stage == StageAfterScript
}

// StageClearWorktree runs before the second attempt of get_sources
// (GET_SOURCES_ATTEMPTS): it empties the checkout the failed attempt left,
// as GitLab Runner's stage of that name does. Executors run it where they
// run get_sources (it needs git).
const StageClearWorktree Stage = "clear_worktree"

// ErrNoFreeExecutor is returned by Provider.Acquire when it has no capacity:
// the manager then does not ask the coordinator for a job.
var ErrNoFreeExecutor = errors.New("no free executor")

// BuildError is a failure of the user's script: the job fails with
// script_failure (or Reason, when set) and ExitCode.
type BuildError struct {
	// ExitCode is the script's exit code, reported to the coordinator
	// (0 for a job refused before any script ran).
	ExitCode int
	// Reason replaces script_failure as the job's failure reason when
	// set (a job the runner refuses as written, e.g. with an image it may
	// not use: runner_configuration_error).
	Reason api.FailureReason
	// Inner is what went wrong, when there is more to say than the exit
	// code; errors.Is and errors.As see it through Unwrap.
	Inner error
}

// Error says what failed: the exit code, with Inner's text when there is
// one (Inner's alone for a job refused before any script ran).
func (e *BuildError) Error() string {
	if e.Inner != nil && e.ExitCode == 0 {
		// A job refused before any script ran (an image it may not use).
		return e.Inner.Error()
	}
	if e.Inner != nil {
		return fmt.Sprintf("exit code %d: %v", e.ExitCode, e.Inner)
	}
	return fmt.Sprintf("exit code %d", e.ExitCode)
}

// Unwrap returns Inner, so that callers can test for the error below the
// script's failure.
func (e *BuildError) Unwrap() error { return e.Inner }

// Data is what Acquire reserved; the provider gets it back in Release and
// the executor in PrepareOptions. It is opaque to the manager.
type Data any

// Settings are the runner settings an executor needs, copied out of
// config.toml so that executors do not depend on the config package.
type Settings struct {
	RunnerName   string   // the runner's name in config.toml, for the job log and errors
	ShortToken   string   // first 9 characters of the runner token (builds path)
	BuildsDir    string   // default: $PWD/builds
	CacheDir     string   // default: $PWD/cache
	Shell        string   // bash or sh; empty = provider default
	Environment  []string // the runner's environment (K=V), given to the job after its own variables
	ConcurrentID int      // slot number of the job within this runner (0-based)
	// SystemID is the manager's system_id: executors that leave resources
	// behind (containers, volumes) label them with it, so that a restarted
	// manager finds its own (see Sweeper).
	SystemID string
	// FeatureFlags are GitLab Runner's feature flags, by name: the
	// runner's [runners.feature_flags] as the manager gives them; from
	// the start of the build (package jobrun) the job's flags in effect,
	// every flag set in those, the job's variables or the runner's
	// environment (see featureflags.Resolve). A flag not in it has its
	// default (featureflags.Set.On).
	FeatureFlags map[string]bool
	// Disposable is set by executors whose jobs run in an environment made
	// for them alone (containers): CI_DISPOSABLE_ENVIRONMENT instead of
	// CI_SHARED_ENVIRONMENT.
	Disposable bool
	// Resumable is set when the manager saves the job in a job store to
	// resume it after a restart: a Stateful executor then runs the job so
	// that it survives the manager's death (at some cost per stage), and
	// State works. Without it, State may fail.
	Resumable bool
	// ServerTLS is set for a job whose runner reaches its coordinator
	// with TLS files of its own.
	ServerTLS ServerTLS
	// Hooks are the runner's hook scripts (config.toml), which the job's
	// stages run where GitLab Runner runs them.
	Hooks Hooks
	// Git are the runner's config.toml keys of get_sources, the
	// executor's defaults applied.
	Git GitSettings
	// DebugServices is set from the start of the build (package jobrun)
	// when the job asks for CI_DEBUG_SERVICES and the runner allows it
	// (debug_trace_disabled unset): an executor that runs services
	// writes their output into the job log as it comes, each line after
	// "[service:<its names>] ", as GitLab Runner does.
	DebugServices bool
}

// GitSettings are a runner's config.toml keys of get_sources.
type GitSettings struct {
	CloneURL              string // clone_url: where jobs fetch from instead of the repository URL
	SafeDirectoryCheckout bool   // safe_directory_checkout: the project directory is a global safe.directory
	CleanGitConfig        bool   // clean_git_config: the checkout's git configuration and hooks are removed first
	CustomBuildDir        bool   // [runners.custom_build_dir] enabled: jobs may set GIT_CLONE_PATH
}

// Hooks are a runner's hook scripts: shell code the operator adds around
// the job's own (pre_get_sources_script and post_get_sources_script around
// the git stage, pre_build_script and post_build_script around the job's
// script, in the same shell). "" = none.
type Hooks struct {
	PreGetSources  string
	PostGetSources string
	PreBuild       string
	PostBuild      string
}

// ServerTLS is what a job needs to reach its coordinator over TLS as its
// runner does: the PEM contents of the runner's tls-ca-file, and of its
// tls-cert-file and tls-key-file (a client certificate), "" where not
// set. The job gets them as the file variables api.VarTLSCAFile,
// api.VarTLSCertFile and api.VarTLSKeyFile, which drover's helper reads
// for its artifact transfers.
type ServerTLS struct {
	CA, Cert, Key string // PEM: tls-ca-file, tls-cert-file, tls-key-file
}

// Provider creates executors and manages their capacity.
type Provider interface {
	// CanCreate reports whether the provider is usable at all.
	CanCreate() bool
	// Create returns a new executor; no resources are allocated yet.
	Create() Executor
	// Acquire reserves capacity for one job before a job is requested. It
	// returns ErrNoFreeExecutor (wrapped) when there is none; it may block
	// until ctx is done.
	Acquire(ctx context.Context, s Settings) (Data, error)
	// Release gives back what Acquire reserved. It is called exactly once per
	// successful Acquire.
	Release(ctx context.Context, s Settings, d Data)
	// Features sets the features this executor supports.
	Features(f *api.FeaturesInfo)
	// ConfigInfo returns the config metadata reported to the coordinator.
	ConfigInfo(s Settings) map[string]any
	// DefaultShell is the shell used when the runner sets none.
	DefaultShell() string
}

// PrepareOptions is what Prepare gets.
type PrepareOptions struct {
	Job      *api.JobResponse // the job as the coordinator handed it out
	Settings Settings         // the runner's settings, Shell filled in
	Data     Data             // what the provider's Acquire reserved for the job
	// Trace is the user-visible job log. Never the manager's own log.
	Trace io.Writer
	// Logger is the manager's own log of this job (job id attached);
	// nothing written to it reaches the job's trace.
	Logger *slog.Logger
	// Variables returns the job's variables as its scripts see them, given
	// the executor's paths: for executors that provide the job's file
	// variables themselves (FileVariablesHost). nil when not known.
	Variables func(Paths) api.Variables
	// ProjectDir returns the project directory the job's variables
	// choose, given the executor's paths (p.ProjectDir being the
	// default), or why the runner does not allow it; nil: the default.
	// Executors apply it with JobPaths.
	ProjectDir func(p Paths) (string, error)
}

// Command is one stage script to run.
type Command struct {
	Stage  Stage  // which stage the script is: where it runs may depend on it (get_sources in a helper)
	Script string // the whole script text, in the executor's shell
}

// Executor runs one job.
type Executor interface {
	// Shell returns the shell the executor runs scripts with (bash or sh).
	Shell() string
	// Prepare makes the environment ready (directories, containers, SSH).
	Prepare(ctx context.Context, opts PrepareOptions) error
	// Run runs one stage script; its output goes to the Trace given to
	// Prepare. A non-zero exit is a *BuildError. Cancelling ctx kills it.
	Run(ctx context.Context, cmd Command) error
	// Finish marks the build as finished with err (nil on success).
	Finish(err error)
	// Cleanup frees everything Prepare made. It must be safe to call after a
	// failed or skipped Prepare.
	Cleanup(ctx context.Context)
	// CurrentStage returns the stage being run, for metrics.
	CurrentStage() Stage
	// SetCurrentStage records the stage being run.
	SetCurrentStage(s Stage)
}

// JobStopper is implemented by providers that can stop what a job left
// running when nothing but its id is known (its resume record is lost).
type JobStopper interface {
	// StopJob stops the job's leftover processes and returns how many
	// stages it stopped.
	StopJob(ctx context.Context, jobID int64) (int, error)
}

// Sweeper is implemented by providers whose jobs own resources outside the
// manager's process (containers, networks, volumes) that a manager which
// died leaves behind. The manager calls Sweep once at start, after its job
// stores are open and before it resumes or requests any job.
type Sweeper interface {
	// Sweep removes the resources labelled with systemID whose job keep
	// does not report as one that will be resumed, and returns a
	// description of each thing removed.
	Sweep(ctx context.Context, systemID string, keep func(jobID int64) bool) ([]string, error)
}

// ErrStageNotStarted is returned (wrapped) by Stateful.Resume when the
// stage it should re-attach to never started: the caller may run it.
var ErrStageNotStarted = errors.New("stage not started")

// Local is implemented by executors whose scripts run on the manager's own
// host, in directories the manager can reach. The build runner then does
// trivial stages itself (printing the host name, skipping git setup)
// instead of starting a shell for each: a trivial job costs one shell.
type Local interface {
	// Hostname is the name of the host the scripts run on.
	Hostname() string
}

// HelperHost is implemented by executors whose cache and artifact stages
// run where drover's helper is installed though the scripts do not run on
// the manager's host (the docker executor's helper container). Those
// stages then call it instead of the manager's own binary.
type HelperHost interface {
	// HelperCommand is the shell words that run `drover helper` where
	// the cache and artifact stages run.
	HelperCommand() string
}

// FileOpener is implemented by executors that can read a file of the
// job's project directory without running a script, for what the build
// runner computes from the sources (cache keys from files). Executors
// that are Local need not: the runner opens the file itself.
type FileOpener interface {
	// OpenProjectFile opens name, relative to the project directory. A
	// missing file is an error wrapping fs.ErrNotExist.
	OpenProjectFile(ctx context.Context, name string) (io.ReadCloser, error)
}

// FileVariablesHost is implemented by executors that put the job's file
// variables in place themselves (a Kubernetes Secret mounted into the
// pod), so that their values are never in a script: the scripts then
// point each file variable at FileVariablesDir()/KEY and neither write
// nor remove it. An empty directory means the scripts write them as usual.
type FileVariablesHost interface {
	// FileVariablesDir returns the directory, as the job's scripts see
	// it, holding one file per file variable; "" when the executor did
	// not put them in place for this job. Called after Prepare.
	FileVariablesDir() string
}

// ScriptHost is implemented by executors whose scripts run on a host they
// can name without running a script (a container), and whose stages
// create the project directory themselves. The build runner then writes
// prepare_script and a skipped get_sources itself, as for Local, saving
// two script runs per job.
type ScriptHost interface {
	// ScriptHostname is the name of the host the scripts run on.
	ScriptHostname() string
}

// ViaManager is implemented by ScriptHost executors whose prepare_script
// line names the manager's host too, as GitLab Runner's docker executor
// does: "Running on <container> via <manager's host>...".
type ViaManager interface {
	ViaManager() bool
}

// Stateful is implemented by executors whose running stage survives the
// manager's death: the manager saves State in its job store, and after a
// restart a new executor is rebuilt from it with Restore (instead of
// Prepare) and re-attached to the stage with Resume (instead of Run).
type Stateful interface {
	// State exports what is needed to re-attach: JSON-serialisable, small.
	// It may be called at any time after Prepare or Restore, concurrently
	// with Run and Resume.
	State() (json.RawMessage, error)
	// Restore rebuilds the executor from State in a new process (instead of
	// Prepare). It writes nothing to opts.Trace.
	Restore(ctx context.Context, opts PrepareOptions, state json.RawMessage) error
	// Resume re-attaches to the stage that was running when the state was
	// saved: copies its output to the trace starting at byte `from` of the
	// stage's output (so nothing is written twice), waits for it to end and
	// returns like Run (nil, *BuildError with exit code, or an error
	// wrapping ErrStageVanished when the stage's processes vanished without
	// an exit code: the caller fails the job with runner_system_failure).
	// Cancelling ctx kills the stage as in Run. When the state was taken
	// between stages (OutputCheckpointer reported none running), cmd is the
	// next stage, with its script, and from is 0: Resume re-attaches to it
	// if the dead manager had started it after the checkpoint, else runs
	// it. Later stages are Run as usual.
	Resume(ctx context.Context, cmd Command, from int64) error
}

// OutputCheckpointer is implemented by stateful executors to give the
// manager a consistent checkpoint: the executor's state together with how
// much of the running stage's output is in the trace.
type OutputCheckpointer interface {
	// OutputCheckpoint calls fn with what State returns, the stage that
	// state shows running ("" between stages) and how many bytes of that
	// stage's output have been written to the trace: the `from` to give
	// Resume with that state and stage (0 between stages, and the stage to
	// resume is then the next one). While fn runs no stage output is
	// written to the trace and no stage starts or ends, so whatever fn
	// reads of the trace (its size, what it holds back) matches offset
	// exactly. fn may call State, nothing else of the executor.
	OutputCheckpoint(fn func(state json.RawMessage, stage Stage, offset int64)) error
}

// ErrStageVanished is wrapped by Resume (and Run) when a stage's processes
// are gone and left no exit code: the job ends with runner_system_failure.
var ErrStageVanished = errors.New("the stage's processes vanished without an exit code")

// ErrEnvironmentLost is wrapped by Run (and Resume) when the environment
// a stage ran in disappeared under it (a container removed or dead) and
// the executor runs the next Run in a new one. The build then runs the
// stage again, up to EXECUTOR_JOB_SECTION_ATTEMPTS times, as GitLab
// Runner's docker executor does; otherwise the job fails like after any
// system failure.
var ErrEnvironmentLost = errors.New("the stage's environment was lost")
