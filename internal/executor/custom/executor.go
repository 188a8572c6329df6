package custom

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/clock"
	"github.com/drover-ci/drover/internal/executor"
)

// Name is the executor's name in config.toml.
const Name = "custom"

// Exit codes of the driver protocol, given to every driver call in
// BUILD_FAILURE_EXIT_CODE and SYSTEM_FAILURE_EXIT_CODE (GitLab Runner's
// values), and drover's resume_exec answer for a stage it never started.
const (
	BuildFailureExitCode  = 1
	SystemFailureExitCode = 2
	NotStartedExitCode    = 3
)

// Files in a job's temporary directory (TMPDIR of every driver call).
const (
	buildExitCodeFile = "build-exit-code"
	jobResponseFile   = "job-response.json"
)

// Executor runs a job through the drivers of [runners.custom] (see the
// package doc). It implements executor.Stateful; only jobs whose driver
// declared itself resumable can be restored.
type Executor struct {
	executor.StageRecorder

	lookup func(executor.Settings) (Config, error)
	clk    clock.Clock

	mu        sync.Mutex
	cfg       Config
	kill      killer
	shell     string
	trace     io.Writer
	logger    *slog.Logger
	job       *api.JobResponse
	settings  executor.Settings
	tmpDir    string // TMPDIR of the driver calls; "" before Prepare
	conf      ConfigOutput
	paths     executor.Paths
	env       []string // of every call after config_exec
	runs      int      // stage scripts written so far
	resumable bool     // Settings.Resumable, "resumable": true and resume_exec
	resume    *savedState

	out output
}

// output is the progress of the running stage's output into the trace.
type output struct {
	mu    sync.Mutex // held while stage output is written to the trace
	stage executor.Stage
	off   atomic.Int64 // bytes of the stage's output in the trace
}

var (
	_ executor.Executor           = (*Executor)(nil)
	_ executor.PathsReporter      = (*Executor)(nil)
	_ executor.Stateful           = (*Executor)(nil)
	_ executor.OutputCheckpointer = (*Executor)(nil)
)

// Shell returns the shell of the stage scripts: bash until config_exec or
// the runner says otherwise.
func (e *Executor) Shell() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.shell
}

// ExitWording is how the job's last line names a failing script's exit,
// as GitLab Runner words it for the custom executor.
func (e *Executor) ExitWording() string { return "exit status" }

// Paths returns the job's directories, as the driver's environment sees
// them; valid after Prepare.
func (e *Executor) Paths() executor.Paths {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.paths
}

// Prepare runs config_exec and prepare_exec. A config_exec whose output
// is not a valid configuration fails the job (runner_system_failure) with
// the first lines of that output in the log; a driver exiting with
// BUILD_FAILURE_EXIT_CODE fails it as a script failure; other failures
// are system failures of the preparation.
func (e *Executor) Prepare(ctx context.Context, opts executor.PrepareOptions) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	trace, logger := executor.Sinks(opts)
	executor.PrepareHeader(trace, Name)
	cfg, err := e.lookup(opts.Settings)
	if err != nil {
		return err
	}
	cfg = cfg.withDefaults()
	tmp, err := os.MkdirTemp("", fmt.Sprintf("drover-custom-job%d-", opts.Job.ID))
	if err != nil {
		return fmt.Errorf("custom executor: temporary directory: %w", err)
	}
	job, err := json.Marshal(opts.Job)
	if err == nil {
		err = os.WriteFile(filepath.Join(tmp, jobResponseFile), job, 0o600)
	}
	if err != nil {
		_ = os.RemoveAll(tmp)
		return fmt.Errorf("custom executor: %s: %w", jobResponseFile, err)
	}

	e.mu.Lock()
	e.cfg, e.trace, e.logger, e.job, e.settings, e.tmpDir = cfg, trace, logger, opts.Job, opts.Settings, tmp
	e.kill = killer{clk: clock.OrReal(e.clk), graceful: cfg.GracefulKillTimeout, force: cfg.ForceKillTimeout}
	e.mu.Unlock()

	var conf ConfigOutput
	if cfg.ConfigExec != "" {
		if conf, err = e.configExec(ctx); err != nil {
			return err
		}
	}
	if err := e.configure(conf, opts); err != nil {
		return err
	}
	if d := conf.Driver; d != nil && d.Name != "" {
		fmt.Fprintf(trace, "Using Custom executor with driver %s %s...\n", d.Name, d.Version)
	} else {
		fmt.Fprintf(trace, "Using Custom executor...\n")
	}
	if conf.Resumable && opts.Settings.Resumable && cfg.ResumeExec == "" {
		logger.Warn("the custom executor's driver says it is resumable, but resume_exec is not set: the job cannot be resumed after a restart")
	}
	if cfg.PrepareExec == "" {
		return nil
	}
	e.mu.Lock()
	env, kill := e.env, e.kill
	e.mu.Unlock()
	code, err := kill.run(ctx, call{
		what: "prepare_exec", path: cfg.PrepareExec, args: cfg.PrepareArgs, env: env, dir: tmp,
		stdout: trace, timeout: cfg.PrepareExecTimeout,
	})
	if err != nil {
		return err
	}
	return e.exitResult("prepare_exec", code)
}

// configExec runs config_exec and reads its output.
func (e *Executor) configExec(ctx context.Context) (ConfigOutput, error) {
	e.mu.Lock()
	cfg, tmp, trace, kill := e.cfg, e.tmpDir, e.trace, e.kill
	env := e.environ(executor.Paths{BuildsDir: e.settings.BuildsDir, CacheDir: e.settings.CacheDir}, nil)
	e.mu.Unlock()
	var stdout bytes.Buffer
	code, err := kill.run(ctx, call{
		what: "config_exec", path: cfg.ConfigExec, args: cfg.ConfigArgs, env: env, dir: tmp,
		stdout: &limitWriter{w: &stdout, n: maxConfigOutput + 1}, stderr: trace, timeout: cfg.ConfigExecTimeout,
	})
	if err != nil {
		return ConfigOutput{}, err
	}
	if err := e.exitResult("config_exec", code); err != nil {
		return ConfigOutput{}, err
	}
	conf, err := ParseConfigOutput(stdout.Bytes())
	if err != nil {
		fmt.Fprintf(trace, "\033[31;1mERROR: config_exec printed no valid configuration: %v; its output began:\033[0;m\n%s", err, firstLines(stdout.Bytes(), 10))
		// The driver's fault, not the job's, but the job is failed here
		// (not given back for another runner to take): the same driver
		// would print the same output there.
		return ConfigOutput{}, &executor.BuildError{Reason: api.RunnerSystemFailure, Inner: fmt.Errorf("config_exec output: %w", err)}
	}
	return conf, nil
}

// configure applies config_exec's output: shell, directories (with the
// job's choice of project directory, see PrepareOptions.JobPaths) and the
// environment of the later calls.
func (e *Executor) configure(conf ConfigOutput, opts executor.PrepareOptions) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	sh := firstOf(conf.Shell, e.settings.Shell, "bash")
	if sh != "bash" && sh != "sh" {
		return fmt.Errorf("custom executor: shell %q is not supported (bash or sh)", sh)
	}
	p := executor.Paths{BuildsDir: firstOf(conf.BuildsDir, e.settings.BuildsDir), CacheDir: firstOf(conf.CacheDir, e.settings.CacheDir)}
	switch {
	case p.BuildsDir == "":
		return errors.New("custom executor: no builds_dir: set it in [[runners]] or print it from config_exec")
	case p.CacheDir == "":
		return errors.New("custom executor: no cache_dir: set it in [[runners]] or print it from config_exec")
	}
	if conf.BuildsDirIsShared != nil && *conf.BuildsDirIsShared {
		p.ProjectDir = executor.ProjectDir(p.BuildsDir, e.settings.ShortToken, e.settings.ConcurrentID, e.job)
	} else {
		p.ProjectDir = path.Join(p.BuildsDir, executor.ProjectPath(e.job))
	}
	p, err := opts.JobPaths(p)
	if err != nil {
		return err
	}
	e.shell, e.conf, e.paths = sh, conf, p
	e.env = e.environ(p, conf.JobEnv)
	e.resumable = conf.Resumable && e.settings.Resumable && e.cfg.ResumeExec != ""
	return nil
}

func firstOf(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}

// environ is the environment of a driver call (e.mu held): drover's own,
// then job_env, every job variable as CUSTOM_ENV_<name>, and the
// protocol's variables.
func (e *Executor) environ(paths executor.Paths, jobEnv map[string]string) []string {
	env := os.Environ()
	for _, k := range sortedKeys(jobEnv) {
		env = append(env, k+"="+jobEnv[k])
	}
	for _, v := range executor.JobVariables(e.job, e.settings, paths, "") {
		if v.Key == "" || strings.ContainsAny(v.Key, "=\x00") || strings.ContainsRune(v.Value, 0) {
			continue
		}
		env = append(env, "CUSTOM_ENV_"+v.Key+"="+v.Value)
	}
	env = append(env,
		"CUSTOM_ENV_CI_JOB_SERVICES="+servicesJSON(e.job.Services),
		"BUILD_FAILURE_EXIT_CODE="+strconv.Itoa(BuildFailureExitCode),
		"SYSTEM_FAILURE_EXIT_CODE="+strconv.Itoa(SystemFailureExitCode),
		"BUILD_EXIT_CODE_FILE="+filepath.Join(e.tmpDir, buildExitCodeFile),
		"JOB_RESPONSE_FILE="+filepath.Join(e.tmpDir, jobResponseFile),
		"TMPDIR="+e.tmpDir,
	)
	return env
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// servicesJSON is CUSTOM_ENV_CI_JOB_SERVICES: the job's services as
// GitLab Runner describes them to drivers.
func servicesJSON(services []api.Image) string {
	type service struct {
		Name       string            `json:"name"`
		Alias      string            `json:"alias"`
		Entrypoint []string          `json:"entrypoint"`
		Command    []string          `json:"command"`
		Variables  map[string]string `json:"variables,omitempty"`
	}
	list := make([]service, 0, len(services))
	for _, s := range services {
		alias, _, _ := strings.Cut(strings.TrimSpace(strings.ReplaceAll(s.Alias, ",", " ")), " ")
		sv := service{Name: s.Name, Alias: alias, Entrypoint: s.Entrypoint, Command: s.Command}
		for _, v := range s.Variables {
			if sv.Variables == nil {
				sv.Variables = map[string]string{}
			}
			sv.Variables[v.Key] = v.Value
		}
		list = append(list, sv)
	}
	b, _ := json.Marshal(list) // strings, slices and maps of strings only
	return string(b)
}

// Run writes the stage script to the job's temporary directory and calls
// `run_exec <run_args...> <script> <stage name>` with GitLab Runner's stage
// names (step_script is build_script). The driver's exit code maps as the
// package doc says; cancelling ctx terminates the driver (SIGTERM, the
// graceful kill timeout, SIGKILL).
func (e *Executor) Run(ctx context.Context, cmd executor.Command) error {
	e.mu.Lock()
	if e.tmpDir == "" || e.env == nil {
		e.mu.Unlock()
		return errors.New("custom executor: Run before Prepare")
	}
	cfg := e.cfg
	e.mu.Unlock()
	return e.stage(ctx, cmd, call{what: "run_exec", path: cfg.RunExec, args: cfg.RunArgs}, 0, false)
}

// stage runs one driver call for a stage script: run_exec, or resume_exec
// with its output counted from byte from. c.env is added to the job's
// driver environment. Unless always is set, nothing starts when ctx is
// done.
func (e *Executor) stage(ctx context.Context, cmd executor.Command, c call, from int64, always bool) error {
	if err := ctx.Err(); err != nil && !always {
		return fmt.Errorf("%s: %w", cmd.Stage, err)
	}
	e.mu.Lock()
	n := e.runs + 1
	script := filepath.Join(e.tmpDir, fmt.Sprintf("script-%03d", n))
	c.env, c.dir = append(slices.Clip(e.env), c.env...), e.tmpDir
	kill := e.kill
	e.mu.Unlock()
	if err := os.WriteFile(script, []byte(cmd.Script), 0o700); err != nil {
		return fmt.Errorf("%s: write script: %w", cmd.Stage, err)
	}
	defer os.Remove(script)
	if err := os.Remove(filepath.Join(c.dir, buildExitCodeFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("%s: %w", cmd.Stage, err)
	}
	c.args = append(slices.Clip(c.args), script, StageName(cmd.Stage))
	c.stdout = &stageWriter{e: e}
	e.setRunning(cmd.Stage, n, from)
	defer e.setEnded()
	code, err := kill.run(ctx, c)
	if err != nil {
		return fmt.Errorf("%s: %w", cmd.Stage, err)
	}
	if c.what == "resume_exec" && code == NotStartedExitCode {
		if from != 0 {
			return fmt.Errorf("%s: resume_exec says the stage never started, but %d bytes of its output are in the log", cmd.Stage, from)
		}
		return fmt.Errorf("%s: %w", cmd.Stage, executor.ErrStageNotStarted)
	}
	return e.exitResult(c.what, code)
}

// StageName is the stage name drivers get: GitLab Runner's, where the main
// script is build_script.
func StageName(s executor.Stage) string {
	if s == executor.StageStepScript {
		return "build_script"
	}
	return string(s)
}

// exitResult maps a driver's exit code: 0 is success, BUILD_FAILURE_EXIT_CODE
// a *executor.BuildError (with the code in BUILD_EXIT_CODE_FILE, if any),
// anything else a system failure.
func (e *Executor) exitResult(what string, code int) error {
	switch code {
	case 0:
		return nil
	case BuildFailureExitCode:
		n, err := e.buildExitCode()
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		return &executor.BuildError{ExitCode: n}
	case SystemFailureExitCode:
		return fmt.Errorf("%s: the driver reported a system failure (exit code %d, SYSTEM_FAILURE_EXIT_CODE)", what, code)
	case -1:
		return fmt.Errorf("%s: the driver was killed by a signal", what)
	default:
		return fmt.Errorf("%s: unknown custom executor exit code %d (want 0, BUILD_FAILURE_EXIT_CODE %d or SYSTEM_FAILURE_EXIT_CODE %d)",
			what, code, BuildFailureExitCode, SystemFailureExitCode)
	}
}

// buildExitCode reads BUILD_EXIT_CODE_FILE: the script's own exit code,
// or BuildFailureExitCode when the driver wrote none.
func (e *Executor) buildExitCode() (int, error) {
	e.mu.Lock()
	file := filepath.Join(e.tmpDir, buildExitCodeFile)
	e.mu.Unlock()
	b, err := os.ReadFile(file)
	if errors.Is(err, os.ErrNotExist) || (err == nil && len(bytes.TrimSpace(b)) == 0) {
		return BuildFailureExitCode, nil
	}
	if err != nil {
		return 0, fmt.Errorf("BUILD_EXIT_CODE_FILE: %w", err)
	}
	n, err := strconv.Atoi(string(bytes.TrimSpace(b)))
	if err != nil {
		return 0, fmt.Errorf("BUILD_EXIT_CODE_FILE holds %q, not an integer", strings.TrimSpace(firstLines(b, 1)))
	}
	return n, nil
}

// stageWriter writes a stage driver's output to the trace, counting it.
type stageWriter struct{ e *Executor }

func (w *stageWriter) Write(p []byte) (int, error) {
	w.e.out.mu.Lock()
	defer w.e.out.mu.Unlock()
	w.e.mu.Lock()
	trace := w.e.trace
	w.e.mu.Unlock()
	// Errors of the log sink are the trace uploader's business; the bytes
	// count as written.
	_, _ = trace.Write(p)
	w.e.out.off.Add(int64(len(p)))
	return len(p), nil
}

// setRunning records that stage script n runs, its output going to the
// trace from byte from on. Like every change of the running stage, it
// holds out.mu, then mu: a checkpoint sees stage, runs and offset agree.
func (e *Executor) setRunning(stage executor.Stage, n int, from int64) {
	e.out.mu.Lock()
	defer e.out.mu.Unlock()
	e.mu.Lock()
	defer e.mu.Unlock()
	e.runs = n
	e.out.stage = stage
	e.out.off.Store(from)
}

// setEnded records that the running stage ended.
func (e *Executor) setEnded() {
	e.out.mu.Lock()
	defer e.out.mu.Unlock()
	e.out.stage = ""
	e.out.off.Store(0)
}

// Finish does nothing: cleanup_exec runs in Cleanup.
func (e *Executor) Finish(err error) {}

// maxCleanupOutput bounds what is kept of cleanup_exec's stdout and of its
// stderr for the manager's log.
const maxCleanupOutput = 64 << 10

// Cleanup runs cleanup_exec (when Prepare got as far as its temporary
// directory: after a failed config_exec or prepare_exec, a cancel or a
// timeout too) and removes the temporary directory. Its output goes to the
// manager's log (the first 64 KiB of each), stdout at debug and stderr at
// warning level, as GitLab
// Runner does: the job's result is known by then and it never changes.
func (e *Executor) Cleanup(ctx context.Context) {
	e.mu.Lock()
	cfg, tmp, env, logger, kill := e.cfg, e.tmpDir, e.env, e.logger, e.kill
	if env == nil && tmp != "" {
		env = e.environ(executor.Paths{BuildsDir: e.settings.BuildsDir, CacheDir: e.settings.CacheDir}, nil)
	}
	e.tmpDir = ""
	e.mu.Unlock()
	if tmp == "" {
		return
	}
	defer os.RemoveAll(tmp)
	if cfg.CleanupExec == "" {
		return
	}
	var stdout, stderr bytes.Buffer
	code, err := kill.run(ctx, call{
		what: "cleanup_exec", path: cfg.CleanupExec, args: cfg.CleanupArgs, env: env, dir: tmp,
		stdout: &limitWriter{w: &stdout, n: maxCleanupOutput}, stderr: &limitWriter{w: &stderr, n: maxCleanupOutput},
		timeout: cfg.CleanupExecTimeout,
	})
	if stdout.Len() > 0 {
		logger.Debug("cleanup_exec output", "stdout", stdout.String())
	}
	if stderr.Len() > 0 {
		logger.Warn("cleanup_exec output", "stderr", stderr.String())
	}
	if err == nil && code != 0 {
		err = fmt.Errorf("cleanup_exec: exit code %d", code)
	}
	if err != nil {
		logger.Warn("custom executor cleanup failed", "err", err)
	}
}

// limitWriter keeps at most n bytes and drops the rest.
type limitWriter struct {
	w io.Writer
	n int64
}

func (l *limitWriter) Write(p []byte) (int, error) {
	if k := min(int64(len(p)), l.n); k > 0 {
		_, _ = l.w.Write(p[:k])
		l.n -= k
	}
	return len(p), nil
}
