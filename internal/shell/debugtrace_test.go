package shell

import (
	"os"
	"strings"
	"testing"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/executor"
)

// TestDebugTraceScripts: with Info.DebugTrace every stage script turns on
// the shell's command trace after its strict mode (bash set -o xtrace, sh
// set -x), so each command is echoed with "+ " when it runs; without it
// the scripts turn the trace off (an inherited SHELLOPTS could have
// turned it on).
func TestDebugTraceScripts(t *testing.T) {
	job := scriptJob([]string{"echo in-script"}, []string{"echo in-after"}, api.Variable{Key: "FILE_VAR", Value: "x", File: true})
	for _, sh := range shells {
		for _, debug := range []bool{true, false} {
			for _, tc := range []struct {
				stage executor.Stage
				cmd   string // a command of the stage, as the trace shows it
			}{
				{executor.StagePrepareScript, "+ hostname"},
				{executor.StageStepScript, "+ echo in-script"},
				{executor.StageAfterScript, "+ echo in-after"},
				{executor.StageCleanupFileVariables, "+ rm -f --"},
			} {
				info := testInfo(t, sh, job)
				info.DebugTrace = debug
				script := generate(t, tc.stage, info)
				on := map[string]string{Bash: "set -o xtrace\n", Sh: "set -x\n"}[sh]
				if got := strings.Contains(script, on); got != debug || strings.Contains(script, "set +x\n") == debug {
					t.Errorf("%s %s debug %v: script turns the trace on %v:\n%s", sh, tc.stage, debug, got, script)
				}
				out, code := runScript(t, sh, script, info.ProjectDir)
				if code != 0 {
					t.Fatalf("%s %s: exit %d:\n%s", sh, tc.stage, code, out)
				}
				if got := strings.Contains(out, tc.cmd); got != debug {
					t.Errorf("%s %s debug %v: output has %q: %v:\n%s", sh, tc.stage, debug, tc.cmd, got, out)
				}
			}
		}
	}
}

// TestClearWorktreeScript: clear_worktree empties a checkout of its
// tracked and untracked files and leaves a directory that is no checkout
// (or none at all) alone.
func TestClearWorktreeScript(t *testing.T) {
	for _, sh := range shells {
		info := testInfo(t, sh, scriptJob([]string{"true"}, nil))
		script := generate(t, executor.StageClearWorktree, info)
		// Not a checkout: left alone.
		writeFile(t, info.ProjectDir+"/keep.txt", "kept")
		if out, code := runScript(t, sh, script, info.BuildsDir); code != 0 || !strings.Contains(out, "Deleting tracked and untracked files...") {
			t.Fatalf("%s: exit %d:\n%s", sh, code, out)
		}
		if !exists(info.ProjectDir + "/keep.txt") {
			t.Errorf("%s: a file of a directory that is no checkout was removed", sh)
		}
		// A checkout: emptied, .git kept.
		for _, args := range [][]string{{"init", "-q"}, {"add", "keep.txt"}} {
			if out, code := runScript(t, sh, "git "+strings.Join(args, " "), info.ProjectDir); code != 0 {
				t.Fatalf("git %v: %s", args, out)
			}
		}
		writeFile(t, info.ProjectDir+"/untracked.txt", "junk")
		if out, code := runScript(t, sh, script, info.BuildsDir); code != 0 {
			t.Fatalf("%s: exit %d:\n%s", sh, code, out)
		}
		for _, f := range []string{"keep.txt", "untracked.txt"} {
			if exists(info.ProjectDir + "/" + f) {
				t.Errorf("%s: %s is still there", sh, f)
			}
		}
		if !exists(info.ProjectDir + "/.git") {
			t.Errorf("%s: .git was removed", sh)
		}
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
