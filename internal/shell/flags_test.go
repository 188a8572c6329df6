package shell

import (
	"regexp"
	"strings"
	"testing"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/executor"
)

// TestScriptSections runs step_script with a multi-line command under
// bash and sh: with FF_SCRIPT_SECTIONS the log shows it as a collapsed
// section holding the whole command (named as GitLab Runner names it,
// by its part and index), without it its first line marked as
// collapsed; a one-line command is shown as it is either way.
func TestScriptSections(t *testing.T) {
	t.Parallel()
	script := []string{"echo one", "echo two \\\n  three"}
	sectioned := regexp.MustCompile(`^` + regexp.QuoteMeta("\x1b[32;1m$ echo one\x1b[0;m\none\n") +
		`section_start:[0-9]+:section_script_step_1\[hide_duration=true,collapsed=true\]` + regexp.QuoteMeta("\r\x1b[0K\x1b[32;1m$ echo two \\\n  three\x1b[0;m\n") +
		`section_end:[0-9]+:section_script_step_1` + regexp.QuoteMeta("\r\x1b[0K\ntwo three\n") + `$`)
	plain := "\x1b[32;1m$ echo one\x1b[0;m\none\n\x1b[32;1m$ echo two \\ # collapsed multi-line command\x1b[0;m\ntwo three\n"
	for _, sh := range shells {
		for _, on := range []bool{true, false} {
			info := testInfo(t, sh, scriptJob(script, nil))
			info.ScriptSections = on
			out, code := runScript(t, sh, generate(t, StepStage(api.StepScript), info), info.BuildsDir)
			if code != 0 {
				t.Fatalf("%s sections=%t: exit %d:\n%s", sh, on, code, out)
			}
			if on && !sectioned.MatchString(out) {
				t.Errorf("%s with sections: log =\n%q\nwant it to match\n%s", sh, out, sectioned)
			}
			if !on && out != plain {
				t.Errorf("%s without sections: log =\n%q\nwant\n%q", sh, out, plain)
			}
		}
	}
	// The hooks' parts, as GitLab Runner names them.
	info := testInfo(t, Bash, scriptJob([]string{"true"}, []string{"echo a\necho b"}))
	info.ScriptSections = true
	info.Hooks = executor.Hooks{PreBuild: "echo x\necho y", PreGetSources: "echo p\necho q"}
	for stage, name := range map[executor.Stage]string{
		StepStage(api.StepScript): "section_pre_build_script_0[",
		executor.StageAfterScript: "section_after_script_step_0[",
		executor.StageGetSources:  "section_pre_clone_script_0[",
	} {
		if s := generate(t, stage, info); !strings.Contains(s, name) {
			t.Errorf("%s: no section %s in\n%s", stage, name, s)
		}
	}
}

// TestExitCodeCheck: a command whose failure the strict mode lets pass
// (negated with !) ends the stage with its status only with
// FF_ENABLE_BASH_EXIT_CODE_CHECK, in bash and sh; a passing script
// passes either way.
func TestExitCodeCheck(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		script   []string
		check    bool
		wantCode int
		wantOut  string // the last line the script printed
	}{
		{name: "negated failure, no check", script: []string{"! true", "echo reached"}, wantCode: 0, wantOut: "reached"},
		{name: "negated failure, check", script: []string{"! true", "echo reached"}, check: true, wantCode: 1, wantOut: "$ ! true"},
		{name: "passing script, check", script: []string{"echo a", "true", "echo b"}, check: true, wantCode: 0, wantOut: "b"},
		{name: "failing command, check", script: []string{"sh -c 'exit 3'", "echo reached"}, check: true, wantCode: 3, wantOut: "$ sh -c 'exit 3'"},
	}
	for _, sh := range shells {
		for _, tt := range tests {
			info := testInfo(t, sh, scriptJob(tt.script, nil))
			info.ExitCodeCheck = tt.check
			out, code := runScript(t, sh, generate(t, StepStage(api.StepScript), info), info.BuildsDir)
			lines := strings.Split(strings.TrimSpace(out), "\n")
			last := strings.NewReplacer("\x1b[32;1m", "", "\x1b[0;m", "").Replace(lines[len(lines)-1])
			if code != tt.wantCode || last != tt.wantOut {
				t.Errorf("%s, %s: exit %d, last line %q; want exit %d, %q\n%s", sh, tt.name, code, last, tt.wantCode, tt.wantOut, out)
			}
		}
	}
}
