package shell

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/executor"
)

// Shell names Generate writes for.
const (
	Bash = "bash"
	Sh   = "sh"
)

// Job statuses exported as CI_JOB_STATUS.
const (
	StatusRunning  = "running"
	StatusSuccess  = "success"
	StatusFailed   = "failed"
	StatusCanceled = "canceled"
)

// ErrUnsupportedStage is returned by Generate for a stage it has no script
// for (cache and artifact stages, unknown steps).
var ErrUnsupportedStage = errors.New("unsupported stage")

// ansiBoldGreen colours commands and git progress, as GitLab Runner does.
const ansiBoldGreen = "\033[32;1m"

// Info is what Generate needs to know about the job and where it runs.
type Info struct {
	// Shell is "bash" or "sh".
	Shell string
	Job   *api.JobResponse
	// Variables are the job's merged variables, in definition order
	// (predefined, job, runner environment); later keys win.
	Variables  api.Variables
	ProjectDir string // CI_PROJECT_DIR; the checkout goes here
	BuildsDir  string // CI_BUILDS_DIR
	// TmpDir holds file variables; empty means <ProjectDir>.tmp.
	TmpDir string
	// FileVarsDir, when set, is where the executor already put every
	// file variable (as FileVarsDir/KEY, see FileVariables): the scripts
	// point the variables there and neither write nor remove the files.
	FileVarsDir string
	// JobStatus is exported as CI_JOB_STATUS; empty means "running". Set it
	// to success, failed or canceled for after_script.
	JobStatus string
	// LookupEnv resolves names that no variable defines while expanding
	// values; nil means os.LookupEnv (the runner's environment).
	LookupEnv func(string) (string, bool)
	// Git is what the runner's config.toml says about get_sources.
	Git GitOptions
	// Transfers say how the cache and artifact stages reach drover's
	// helper and where local caches are kept.
	Transfers Transfers
	// Hooks are the runner's hook scripts: get_sources runs
	// PreGetSources before the git commands and PostGetSources after them
	// (in the project directory); step_script runs PreBuild before the
	// job's script and PostBuild after it, in the same shell (a failing
	// hook fails the stage, as a failing script line does).
	Hooks executor.Hooks
	// DebugTrace turns on the shell's command trace (bash `set -o
	// xtrace`, sh `set -x`) for the whole script, after the strict mode:
	// CI_DEBUG_TRACE, as GitLab Runner's scripts do. Every command, the
	// variable exports included, is then echoed to the job log.
	DebugTrace bool
	// ScriptSections shows each multi-line command of a script as a
	// collapsed log section holding the whole command, before it runs
	// (FF_SCRIPT_SECTIONS, for a job whose coordinator supports
	// sections); without it the first line is shown, marked as collapsed.
	ScriptSections bool
	// ExitCodeCheck follows each command with a check of its exit
	// status, besides the strict mode (FF_ENABLE_BASH_EXIT_CODE_CHECK):
	// a command whose failure the strict mode lets pass (one negated
	// with !, say) ends the stage with that status.
	ExitCodeCheck bool
}

func (info Info) tmpDir() string {
	if info.FileVarsDir != "" {
		return info.FileVarsDir
	}
	if info.TmpDir != "" {
		return info.TmpDir
	}
	return info.ProjectDir + ".tmp"
}

// Generate returns the script of stage, or "" when the stage has nothing to
// do (no after_script, no file variables to remove, an empty step). Steps
// are the stages "step_<name>" for the job's steps other than after_script.
func Generate(stage executor.Stage, info Info) (string, error) {
	if info.Shell != Bash && info.Shell != Sh {
		return "", fmt.Errorf("shell %q: only %s and %s are supported", info.Shell, Bash, Sh)
	}
	if info.Job == nil {
		return "", errors.New("no job")
	}
	if info.ProjectDir == "" {
		return "", errors.New("no project directory")
	}
	env := info.LookupEnv
	if env == nil {
		env = os.LookupEnv
	}
	vars, values := resolve(info.Variables, info.tmpDir(), env)
	w := &writer{sections: info.ScriptSections, check: info.ExitCodeCheck}

	switch stage {
	case executor.StagePrepareScript:
		w.prelude(info, vars)
		w.raw(`printf 'Running on %s...\n' "$(hostname 2>/dev/null || uname -n)"`)
	case executor.StageGetSources:
		gs, err := readGitSettings(info, values)
		if err != nil {
			return "", err
		}
		hooks := gs.hooks
		w.prelude(info, vars)
		if err := w.globalGitSSLConfig(gs); err != nil {
			return "", err
		}
		var pre []string
		if h := info.Hooks.PreGetSources; strings.TrimSpace(h) != "" {
			pre = append(pre, h)
		}
		// The job's own (hooks:pre_get_sources_script), after the
		// runner's.
		for _, h := range info.Job.Hooks {
			if h.Name == api.HookPreGetSourcesScript {
				pre = append(pre, h.Script...)
			}
		}
		if hooks {
			w.commands("pre_clone_script", pre)
		}
		if err := w.getSources(info, gs); err != nil {
			return "", err
		}
		if h := info.Hooks.PostGetSources; hooks && strings.TrimSpace(h) != "" {
			w.cdProject(info)
			w.commands("post_clone_script", []string{h})
		}
		w.clearGitCredentials(gs)
	case executor.StageClearWorktree:
		w.prelude(info, vars)
		w.clearWorktree(info)
	case executor.StageAfterScript:
		step := info.Job.Step(api.StepAfterScript)
		if step == nil || !hasCommands(step.Script) {
			return "", nil
		}
		w.prelude(info, vars)
		w.cdProject(info)
		w.echo(ansiBoldGreen, "Running after script...") // as GitLab Runner
		w.commands("after_script_step", step.Script)
	case executor.StageRestoreCache, executor.StageArchiveCache, executor.StageArchiveCacheFail,
		executor.StageDownloadArtifacts, executor.StageUploadArtifacts, executor.StageUploadArtifactsFail:
		body, err := transferStage(stage, info)
		if err != nil || body == "" {
			return "", err
		}
		w.prelude(info, vars)
		w.cdProject(info)
		w.WriteString(body)
	case executor.StageCleanupFileVariables:
		if info.FileVarsDir != "" {
			return "", nil // the executor's to remove
		}
		var paths []string
		for _, v := range vars {
			if v.File {
				paths = append(paths, quote(v.Value))
			}
		}
		if len(paths) == 0 {
			return "", nil
		}
		w.strict(info)
		w.raw("rm -f -- " + strings.Join(paths, " "))
	default:
		name, ok := strings.CutPrefix(string(stage), "step_")
		if !ok || name == api.StepAfterScript {
			return "", fmt.Errorf("%w: %s", ErrUnsupportedStage, stage)
		}
		step := info.Job.Step(name)
		if step == nil {
			return "", fmt.Errorf("%w: %s: the job has no step %q", ErrUnsupportedStage, stage, name)
		}
		var pre, post []string
		if name == api.StepScript {
			pre, post = []string{info.Hooks.PreBuild}, []string{info.Hooks.PostBuild}
		}
		if !hasCommands(slices.Concat(pre, step.Script, post)) {
			return "", nil
		}
		w.prelude(info, vars)
		w.cdProject(info)
		w.commands("pre_build_script", pre)
		w.commands("script_step", step.Script)
		w.commands("post_build_script", post)
	}
	return w.String(), nil
}

// StepStage returns the stage name of a job step ("script" → "step_script").
func StepStage(name string) executor.Stage { return executor.Stage("step_" + name) }

func hasCommands(lines []string) bool {
	for _, l := range lines {
		if strings.TrimSpace(l) != "" {
			return true
		}
	}
	return false
}

// writer accumulates a script.
type writer struct {
	strings.Builder
	sections bool // Info.ScriptSections
	check    bool // Info.ExitCodeCheck
}

// raw adds one line of shell code.
func (w *writer) raw(line string) {
	w.WriteString(line)
	w.WriteByte('\n')
}

// echo prints text (any bytes) followed by a newline, optionally coloured.
func (w *writer) echo(color, text string) {
	if color == "" {
		w.raw("printf '%s\\n' " + quote(text))
		return
	}
	// The colour codes are in the format, the text is an argument: printf
	// interprets nothing in it.
	w.raw("printf '" + strings.ReplaceAll(color, "\033", `\033`) + "%s" + `\033[0;m\n' ` + quote(text))
}

// strict starts a script: stop at the first failing command, and trace
// the commands only when the job asked for it (an inherited SHELLOPTS
// may have turned xtrace on).
func (w *writer) strict(info Info) {
	if info.Shell == Bash {
		w.raw("set -eo pipefail")
	} else {
		w.raw("set -e")
	}
	// As GitLab Runner's: a SIGTERM (a timeout, a cancel) lets the
	// command it stops end first (the shell says "Terminated"), then ends
	// the script.
	w.raw("trap 'exit 1' TERM")
	switch {
	case !info.DebugTrace:
		w.raw("set +x")
	case info.Shell == Bash:
		w.raw("set -o xtrace")
	default:
		w.raw("set -x")
	}
}

// prelude starts a stage script: strict mode, then every variable.
func (w *writer) prelude(info Info, vars []resolved) {
	w.strict(info)
	madeTmp := false
	for _, v := range vars {
		if v.File && info.FileVarsDir == "" {
			if !madeTmp {
				w.raw("mkdir -p -- " + quote(info.tmpDir()))
				madeTmp = true
			}
			// A fresh file under umask 077 is created with mode 0600; removing
			// it first keeps an older file's mode from being reused.
			w.raw("rm -f -- " + quote(v.Value))
			w.raw("(umask 077 && printf '%s' " + quote(v.Data) + " > " + quote(v.Value) + ")")
		}
		w.raw("export " + v.Key + "=" + quote(v.Value))
	}
	status := info.JobStatus
	if status == "" {
		status = StatusRunning
	}
	w.raw("export CI_JOB_STATUS=" + quote(status))
}

// clearWorktree removes every tracked and untracked file of the checkout
// in the project directory, as GitLab Runner does before get_sources runs
// a second time: `git clean` alone cannot undo every broken state (an
// untracked file in an uninitialised submodule). Unlike GitLab Runner's
// script, which runs git in any directory that exists (and fails the
// attempt outside a repository), a directory that is no checkout is left
// alone: a parent repository of the builds directory is none of the job's.
func (w *writer) clearWorktree(info Info) {
	w.echo(ansiBoldGreen, "Deleting tracked and untracked files...")
	w.raw("if [ -d " + quote(info.ProjectDir) + " ] && [ -e " + quote(info.ProjectDir+"/.git") + " ]; then")
	w.raw("  cd -- " + quote(info.ProjectDir))
	w.raw("  git rm -rf --ignore-unmatch --quiet .")
	w.raw("  git clean -ffdx -q")
	w.raw("fi")
}

func (w *writer) cdProject(info Info) {
	w.raw("cd -- " + quote(info.ProjectDir))
}

// commands prints and runs each line of a script, GitLab style: "$ line"
// in green, then the line itself. The strict mode of the prelude ends the
// script at the first failing command, with its exit code. A multi-line
// command shows its first line, or with w.sections a collapsed section
// named section_<part>_<i> (i: its index in lines, as GitLab Runner
// names them) holding the whole command.
func (w *writer) commands(part string, lines []string) {
	for i, line := range lines {
		if strings.TrimSpace(line) == "" {
			continue
		}
		shown := strings.TrimRight(line, "\n")
		switch first, _, multi := strings.Cut(shown, "\n"); {
		case multi && w.sections:
			w.commandSection(part+"_"+strconv.Itoa(i), strings.TrimSpace(line))
		case multi:
			w.echo(ansiBoldGreen, "$ "+first+" # collapsed multi-line command")
		default:
			w.echo(ansiBoldGreen, "$ "+shown)
		}
		w.raw(line)
		if w.check {
			// The status of the line, whatever the strict mode let pass.
			w.raw(`_drover_status=$?; [ "$_drover_status" -eq 0 ] || exit "$_drover_status"`)
		}
	}
}

// commandSection prints a collapsed section, named section_<name>, whose
// header is "$ command" in green (the whole command, its lines included)
// and that ends at once: the log shows the command folded to its first
// line. The times are the shell's, taken when the lines are printed.
func (w *writer) commandSection(name, command string) {
	w.raw(`printf 'section_start:%s:section_` + name + `[hide_duration=true,collapsed=true]\r\033[0K` +
		strings.ReplaceAll(ansiBoldGreen, "\033", `\033`) + `%s\033[0;m\n' "$(date +%s)" ` + quote("$ "+command))
	w.raw(`printf 'section_end:%s:section_` + name + `\r\033[0K\n' "$(date +%s)"`)
}
