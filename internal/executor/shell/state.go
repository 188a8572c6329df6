package shell

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/drover-ci/drover/internal/executor"
)

// stateVersion is the version of the state State writes; Restore refuses
// others.
const stateVersion = 1

// savedState is the shell executor's state, as State exports it. Only
// names of files and directories and process ids are in it: no secret.
type savedState struct {
	Version   int         `json:"version"`
	Shell     string      `json:"shell"`      // bash or sh
	ShellPath string      `json:"shell_path"` // the script shell
	ShPath    string      `json:"sh_path"`    // the wrapper shell
	Paths     statePaths  `json:"paths"`
	ScriptDir string      `json:"script_dir"` // scripts, pid and exit files
	OutputDir string      `json:"output_dir"` // stage output files
	Runs      int         `json:"runs"`       // stages started so far
	Stage     *stageState `json:"stage,omitempty"`
}

type statePaths struct {
	BuildsDir  string `json:"builds_dir"`
	CacheDir   string `json:"cache_dir"`
	ProjectDir string `json:"project_dir"`
}

// stageState is the running stage: run number Runs. Its files follow from
// the directories, the run number and its name (see Executor.stageFiles).
type stageState struct {
	Name    executor.Stage `json:"name"`
	PID     int            `json:"pid"` // the wrapper: session and group leader
	Started time.Time      `json:"started"`
	// Copied is how many bytes of the stage's output file were in the
	// trace when the state was taken; informational: Resume's from is the
	// caller's, see executor.OutputCheckpointer.
	Copied int64 `json:"copied"`
}

// State exports the executor's state: its shell, directories, the number
// of stages started and the stage running, if any.
func (e *Executor) State() (json.RawMessage, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.scriptDir == "" {
		return nil, errors.New("shell executor: State before Prepare")
	}
	if !e.detached {
		return nil, errors.New("shell executor: State of a job not prepared resumable (Settings.Resumable): its stages do not survive the manager")
	}
	st := savedState{
		Version: stateVersion, Shell: e.shell, ShellPath: e.shellPath, ShPath: e.shPath,
		Paths:     statePaths{BuildsDir: e.paths.BuildsDir, CacheDir: e.paths.CacheDir, ProjectDir: e.paths.ProjectDir},
		ScriptDir: e.scriptDir, OutputDir: e.outputDir, Runs: e.runs,
	}
	switch {
	case e.running != nil:
		s := *e.running
		s.Copied = e.out.off.Load()
		st.Stage = &s
	case e.resume != nil:
		// Restored, not resumed yet: the state is still the saved one.
		st.Stage = e.resume
		st.Runs++
	}
	b, err := json.Marshal(st)
	if err != nil {
		return nil, fmt.Errorf("shell executor state: %w", err)
	}
	return b, nil
}

// Restore rebuilds the executor from a state State exported, in a new
// process, instead of Prepare. It writes nothing to the trace. The job's
// directories are created again when they are gone (after a reboot); a
// stage that was running is then reported vanished by Resume.
func (e *Executor) Restore(ctx context.Context, opts executor.PrepareOptions, state json.RawMessage) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	st, err := parseState(state)
	if err != nil {
		return err
	}
	for _, dir := range []string{st.ScriptDir, st.OutputDir} {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return fmt.Errorf("shell executor state: %w", err)
		}
	}
	trace, logger := executor.Sinks(opts)

	e.mu.Lock()
	defer e.mu.Unlock()
	e.shell, e.shellPath, e.shPath = st.Shell, st.ShellPath, st.ShPath
	e.paths = executor.Paths{BuildsDir: st.Paths.BuildsDir, CacheDir: st.Paths.CacheDir, ProjectDir: st.Paths.ProjectDir}
	e.trace, e.logger, e.scriptDir, e.outputDir = trace, logger, st.ScriptDir, st.OutputDir
	e.runs, e.resume, e.running = st.Runs, st.Stage, nil
	e.detached = true
	if st.Stage != nil {
		// The running stage is run number Runs: Resume re-attaches to the
		// next run, as a Run would start it.
		e.runs--
	}
	if e.GracePeriod <= 0 {
		e.GracePeriod = DefaultGracePeriod
	}
	return nil
}

// parseState decodes and checks a state State exported.
func parseState(raw json.RawMessage) (savedState, error) {
	var st savedState
	if err := json.Unmarshal(raw, &st); err != nil {
		return savedState{}, fmt.Errorf("shell executor state: %w", err)
	}
	if err := st.validate(); err != nil {
		return savedState{}, fmt.Errorf("shell executor state: %w", err)
	}
	return st, nil
}

func (st *savedState) validate() error {
	switch {
	case st.Version != stateVersion:
		return fmt.Errorf("version %d, want %d", st.Version, stateVersion)
	case st.Shell != "bash" && st.Shell != "sh":
		return fmt.Errorf("shell %q", st.Shell)
	case st.Runs < 0 || st.Stage != nil && st.Runs < 1:
		return fmt.Errorf("runs %d", st.Runs)
	case st.Stage != nil && st.Stage.Name == "":
		return errors.New("a running stage without a name")
	}
	for name, p := range map[string]string{
		"shell_path": st.ShellPath, "sh_path": st.ShPath, "script_dir": st.ScriptDir, "output_dir": st.OutputDir,
		"builds_dir": st.Paths.BuildsDir, "project_dir": st.Paths.ProjectDir,
	} {
		if !filepath.IsAbs(p) {
			return fmt.Errorf("%s %q is not an absolute path", name, p)
		}
	}
	return nil
}

// Resume re-attaches to the stage that was running when the state given to
// Restore was taken, whose name must be cmd.Stage: its output file is
// copied to the trace from byte from on (see executor.OutputCheckpointer
// for the offset), then Resume waits for it to end and returns like Run.
// A stage whose wrapper is gone without an exit code gives an error
// wrapping executor.ErrStageVanished, after whatever output it left was
// copied and whatever of its process group was left was killed.
//
// When the state was taken between stages, cmd is the next stage: Resume
// re-attaches to it when the previous manager process had started it
// already (from is then an offset in its output, normally 0), else runs it
// like Run (from must be 0).
func (e *Executor) Resume(ctx context.Context, cmd executor.Command, from int64) error {
	if from < 0 {
		return fmt.Errorf("%s: negative output offset %d", cmd.Stage, from)
	}
	e.mu.Lock()
	saved := e.resume
	e.resume = nil
	e.mu.Unlock()
	if saved != nil && saved.Name != cmd.Stage {
		return fmt.Errorf("resume %s: the saved state's running stage is %s", cmd.Stage, saved.Name)
	}
	return e.run(ctx, cmd, from, saved != nil)
}
