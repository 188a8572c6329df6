package shell

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/executor"
)

// The runner's hook scripts run where GitLab Runner runs them:
// pre_get_sources_script (then the job's hooks:pre_get_sources_script)
// before the git commands, post_get_sources_script after them in the
// project directory, pre_build_script and post_build_script around the
// job's script in its shell (so a variable set by pre_build_script is
// seen by the script); a failing pre_build_script ends the stage before
// the script.
func TestHooks(t *testing.T) {
	for _, sh := range shells {
		t.Run(sh, func(t *testing.T) {
			t.Parallel()
			order := filepath.Join(t.TempDir(), "order")
			job := scriptJob([]string{`echo "script sees $FROM_HOOK" >> "$ORDER"`}, nil, api.Variable{Key: "ORDER", Value: order})
			job.Hooks = []api.Hook{{Name: api.HookPreGetSourcesScript, Script: []string{`echo job-pre-get >> "$ORDER"`}}}
			info := testInfo(t, sh, job)
			info.Hooks = executor.Hooks{
				PreGetSources:  `echo runner-pre-get >> "$ORDER"`,
				PostGetSources: `echo "post-get in $(basename "$PWD")" >> "$ORDER"`,
				PreBuild:       "FROM_HOOK=pre-build\necho pre-build >> \"$ORDER\"",
				PostBuild:      `echo post-build >> "$ORDER"`,
			}
			for _, stage := range []executor.Stage{executor.StageGetSources, StepStage(api.StepScript)} {
				if out, code := runScript(t, sh, generate(t, stage, info), info.BuildsDir); code != 0 {
					t.Fatalf("%s: exit %d:\n%s", stage, code, out)
				}
			}
			b, err := os.ReadFile(order)
			if err != nil {
				t.Fatal(err)
			}
			want := "runner-pre-get\njob-pre-get\npost-get in project\npre-build\nscript sees pre-build\npost-build\n"
			if string(b) != want {
				t.Errorf("hooks ran as\n%s\nwant\n%s", b, want)
			}

			// A failing pre_build_script: the script does not run.
			if err := os.Remove(order); err != nil {
				t.Fatal(err)
			}
			info.Hooks.PreBuild = "exit 7"
			out, code := runScript(t, sh, generate(t, StepStage(api.StepScript), info), info.BuildsDir)
			if code != 7 || !strings.Contains(out, "$ exit 7") {
				t.Errorf("step_script with a failing pre_build_script = exit %d, want 7 with the hook echoed:\n%s", code, out)
			}
			if b, _ := os.ReadFile(order); strings.Contains(string(b), "script sees") {
				t.Errorf("the script ran after a failing pre_build_script: %q", b)
			}
		})
	}
}
