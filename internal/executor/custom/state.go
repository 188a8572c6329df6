package custom

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/drover-ci/drover/internal/clock"
	"github.com/drover-ci/drover/internal/executor"
)

// stateVersion is the version of the state State writes; Restore refuses
// others.
const stateVersion = 1

// ErrNotResumable is returned (wrapped) by State and Restore for a job
// whose driver cannot be resumed: its config_exec did not print
// "resumable": true, resume_exec is not set, or the manager keeps no job
// store.
var ErrNotResumable = errors.New("the custom executor's driver is not resumable")

// savedState is what State exports. It holds config_exec's output, and so
// job_env: whatever the driver put there is in the job store.
type savedState struct {
	Version int            `json:"version"`
	TmpDir  string         `json:"tmp_dir"`
	Shell   string         `json:"shell"`
	Config  ConfigOutput   `json:"config"`
	Runs    int            `json:"runs"`            // stage scripts written so far
	Stage   executor.Stage `json:"stage,omitempty"` // running, "" between stages
}

// State exports what a new manager process needs to go on with the job
// through resume_exec.
func (e *Executor) State() (json.RawMessage, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.stateLocked()
}

func (e *Executor) stateLocked() (json.RawMessage, error) {
	if e.tmpDir == "" || e.env == nil {
		return nil, errors.New("custom executor: State before Prepare")
	}
	if !e.resumable {
		return nil, ErrNotResumable
	}
	st := savedState{Version: stateVersion, TmpDir: e.tmpDir, Shell: e.shell, Config: e.conf, Runs: e.runs, Stage: e.out.stage}
	if e.resume != nil {
		// Restored, not resumed yet: the state is still the saved one.
		st = *e.resume
	}
	b, err := json.Marshal(st)
	if err != nil {
		return nil, fmt.Errorf("custom executor state: %w", err)
	}
	return b, nil
}

// OutputCheckpoint calls fn with the state, the running stage ("" between
// stages) and how many bytes of its driver's output are in the trace; no
// stage output is written, and no stage starts or ends, while fn runs.
func (e *Executor) OutputCheckpoint(fn func(state json.RawMessage, stage executor.Stage, offset int64)) error {
	e.out.mu.Lock()
	defer e.out.mu.Unlock()
	e.mu.Lock()
	restored := e.resume != nil
	state, err := e.stateLocked()
	e.mu.Unlock()
	if restored {
		return errors.New("custom executor: checkpoint of a restored executor before Resume")
	}
	if err != nil {
		return err
	}
	fn(state, e.out.stage, e.out.off.Load())
	return nil
}

// Restore rebuilds the executor from State's export in a new manager
// process, instead of Prepare: config_exec and prepare_exec do not run
// again. It writes nothing to the trace.
func (e *Executor) Restore(ctx context.Context, opts executor.PrepareOptions, state json.RawMessage) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	var st savedState
	if err := json.Unmarshal(state, &st); err != nil {
		return fmt.Errorf("custom executor state: %w", err)
	}
	switch {
	case st.Version != stateVersion:
		return fmt.Errorf("custom executor state: version %d, want %d", st.Version, stateVersion)
	case !filepath.IsAbs(st.TmpDir):
		return fmt.Errorf("custom executor state: tmp_dir %q is not an absolute path", st.TmpDir)
	case st.Runs < 0:
		return fmt.Errorf("custom executor state: runs %d", st.Runs)
	}
	if err := st.Config.validate(); err != nil {
		return fmt.Errorf("custom executor state: %w", err)
	}
	cfg, err := e.lookup(opts.Settings)
	if err != nil {
		return err
	}
	if cfg.ResumeExec == "" {
		return fmt.Errorf("%w: resume_exec is not set", ErrNotResumable)
	}
	cfg = cfg.withDefaults()
	// After a reboot the directory is gone: the job response is written
	// again, the build exit code file is per stage anyway.
	if err := os.MkdirAll(st.TmpDir, 0o700); err != nil {
		return fmt.Errorf("custom executor state: %w", err)
	}
	job, err := json.Marshal(opts.Job)
	if err == nil {
		err = os.WriteFile(filepath.Join(st.TmpDir, jobResponseFile), job, 0o600)
	}
	if err != nil {
		return fmt.Errorf("custom executor: %s: %w", jobResponseFile, err)
	}
	trace, logger := executor.Sinks(opts)

	e.mu.Lock()
	e.cfg, e.trace, e.logger, e.job, e.settings, e.tmpDir = cfg, trace, logger, opts.Job, opts.Settings, st.TmpDir
	e.kill = killer{clk: clock.OrReal(e.clk), graceful: cfg.GracefulKillTimeout, force: cfg.ForceKillTimeout}
	e.settings.Shell = st.Shell
	e.mu.Unlock()
	if err := e.configure(st.Config, opts); err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.resumable = true // the state says so: only resumable jobs export one
	e.runs, e.resume = st.Runs, &st
	if st.Stage != "" {
		// The running stage is script number Runs: Resume writes it again.
		e.runs--
	}
	return nil
}

// Resume calls `resume_exec <resume_args...> <script> <stage name>` for
// the stage that ran when the state was saved (or, saved between stages,
// for the next one), with CUSTOM_RESUME_STAGE (the stage name) and
// CUSTOM_RESUME_OFFSET (from: how many bytes of the stage's driver output
// are in the log) in its environment. resume_exec prints the stage's
// output from that byte on, waits for the stage and exits like run_exec;
// exiting with CUSTOM_RESUME_NOT_STARTED_EXIT_CODE says the stage never
// started (an error wrapping executor.ErrStageNotStarted: the caller then
// runs it).
func (e *Executor) Resume(ctx context.Context, cmd executor.Command, from int64) error {
	if from < 0 {
		return fmt.Errorf("%s: negative output offset %d", cmd.Stage, from)
	}
	e.mu.Lock()
	saved, cfg := e.resume, e.cfg
	e.resume = nil
	if e.tmpDir == "" || e.env == nil {
		e.mu.Unlock()
		return errors.New("custom executor: Resume before Restore")
	}
	e.mu.Unlock()
	if saved != nil && saved.Stage != "" && saved.Stage != cmd.Stage {
		return fmt.Errorf("resume %s: the saved state's running stage is %s", cmd.Stage, saved.Stage)
	}
	env := []string{
		"CUSTOM_RESUME_STAGE=" + StageName(cmd.Stage),
		"CUSTOM_RESUME_OFFSET=" + strconv.FormatInt(from, 10),
		"CUSTOM_RESUME_NOT_STARTED_EXIT_CODE=" + strconv.Itoa(NotStartedExitCode),
	}
	// A cancelled ctx still reaches the driver: resume_exec starts and
	// gets SIGTERM at once, so that it stops what a dead manager left
	// (cleanup_exec, which runs next, must stop it too).
	return e.stage(ctx, cmd, call{what: "resume_exec", path: cfg.ResumeExec, args: cfg.ResumeArgs, env: env}, from, true)
}
