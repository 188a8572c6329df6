package shell

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/executor"
)

var shells = []string{Bash, Sh}

// runScript runs script the way the shell executor does: `<shell> <file>`
// in dir, stdout and stderr together.
func runScript(t *testing.T, sh, script, dir string) (string, int) {
	t.Helper()
	return runScriptEnv(t, sh, script, dir, nil)
}

// runScriptEnv is runScript with the environment env (nil: this
// process's).
func runScriptEnv(t *testing.T, sh, script, dir string, env []string) (string, int) {
	t.Helper()
	f := filepath.Join(t.TempDir(), "script.sh")
	if err := os.WriteFile(f, []byte(script), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(sh, f)
	cmd.Dir, cmd.Env = dir, env
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return string(out), 0
	case errors.As(err, &ee):
		return string(out), ee.ExitCode()
	default:
		t.Fatalf("run %s: %v", sh, err)
		return "", 0
	}
}

// testInfo returns an Info for job with a fresh project directory.
func testInfo(t *testing.T, sh string, job *api.JobResponse) Info {
	t.Helper()
	builds := t.TempDir()
	dir := filepath.Join(builds, "tok", "0", "group", "project")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return Info{
		Shell: sh, Job: job, Variables: job.Variables, ProjectDir: dir, BuildsDir: builds,
		LookupEnv: func(name string) (string, bool) {
			if name == "FROM_ENV" {
				return "env-value", true
			}
			return "", false
		},
	}
}

func generate(t *testing.T, stage executor.Stage, info Info) string {
	t.Helper()
	script, err := Generate(stage, info)
	if err != nil {
		t.Fatalf("Generate(%s) = %v, want nil", stage, err)
	}
	return script
}

func scriptJob(script []string, after []string, vars ...api.Variable) *api.JobResponse {
	job := &api.JobResponse{ID: 1, Variables: vars, Steps: []api.Step{{Name: api.StepScript, Script: script}}}
	if after != nil {
		job.Steps = append(job.Steps, api.Step{Name: api.StepAfterScript, Script: after, When: api.WhenAlways})
	}
	return job
}

func TestStepScript(t *testing.T) {
	tests := []struct {
		name     string
		script   []string
		shells   []string // nil = all
		wantCode int
		want     []string // substrings of the output
		notWant  []string
	}{
		{
			name:   "success",
			script: []string{"echo hello"},
			want:   []string{"\033[32;1m$ echo hello\033[0;m\n", "hello\n"},
		},
		{
			name:     "exit code propagated",
			script:   []string{"echo before", "exit 3", "echo after"},
			wantCode: 3,
			want:     []string{"before\n", "$ exit 3"},
			notWant:  []string{"after\n", "$ echo after"},
		},
		{
			name:     "first failing command ends the script",
			script:   []string{"false", "echo after"},
			wantCode: 1,
			notWant:  []string{"after\n"},
		},
		{
			name:   "multi-line command",
			script: []string{"if true; then\n  echo in-if\nfi", "echo done"},
			want:   []string{"$ if true; then # collapsed multi-line command", "in-if\n", "done\n"},
		},
		{
			name:   "lines share one shell",
			script: []string{"mkdir -p sub", "cd sub", "X=kept", `echo "$(basename "$PWD") $X"`},
			want:   []string{"sub kept\n"},
		},
		{
			name:     "pipefail in bash",
			script:   []string{"false | true", "echo after"},
			shells:   []string{Bash},
			wantCode: 1,
			notWant:  []string{"after\n"},
		},
		{
			name:   "blank lines skipped",
			script: []string{"", "  ", "echo only"},
			want:   []string{"only\n"},
		},
	}
	for _, sh := range shells {
		for _, tt := range tests {
			if tt.shells != nil && !contains(tt.shells, sh) {
				continue
			}
			t.Run(sh+"/"+tt.name, func(t *testing.T) {
				t.Parallel()
				info := testInfo(t, sh, scriptJob(tt.script, nil))
				out, code := runScript(t, sh, generate(t, StepStage(api.StepScript), info), info.ProjectDir)
				if code != tt.wantCode {
					t.Errorf("exit code = %d, want %d; output:\n%s", code, tt.wantCode, out)
				}
				for _, w := range tt.want {
					if !strings.Contains(out, w) {
						t.Errorf("output does not contain %q:\n%s", w, out)
					}
				}
				for _, w := range tt.notWant {
					if strings.Contains(out, w) {
						t.Errorf("output contains %q:\n%s", w, out)
					}
				}
			})
		}
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func TestAfterScript(t *testing.T) {
	for _, sh := range shells {
		t.Run(sh, func(t *testing.T) {
			t.Parallel()
			job := scriptJob([]string{"exit 3"}, []string{`echo "status=$CI_JOB_STATUS"`, "exit 4", "echo unreachable"})
			info := testInfo(t, sh, job)
			if _, code := runScript(t, sh, generate(t, StepStage(api.StepScript), info), info.ProjectDir); code != 3 {
				t.Fatalf("step_script exit code = %d, want 3", code)
			}
			info.JobStatus = StatusFailed
			out, code := runScript(t, sh, generate(t, executor.StageAfterScript, info), info.ProjectDir)
			if !strings.Contains(out, "status=failed\n") {
				t.Errorf("after_script output lacks status=failed:\n%s", out)
			}
			if code != 4 || strings.Contains(out, "unreachable") {
				t.Errorf("after_script exit code = %d (output %q), want 4 and a stop at the failing line", code, out)
			}
		})
	}
}

func TestGenerateNothingToDo(t *testing.T) {
	info := testInfo(t, Bash, scriptJob([]string{"echo x"}, nil))
	for _, stage := range []executor.Stage{executor.StageAfterScript, executor.StageCleanupFileVariables,
		executor.StageRestoreCache, executor.StageArchiveCache, executor.StageDownloadArtifacts, executor.StageUploadArtifacts} {
		if got := generate(t, stage, info); got != "" {
			t.Errorf("Generate(%s) = %q, want empty", stage, got)
		}
	}
	for _, stage := range []executor.Stage{"step_missing", "step_after_script", "restore_caches"} {
		if _, err := Generate(stage, info); !errors.Is(err, ErrUnsupportedStage) {
			t.Errorf("Generate(%s) error = %v, want ErrUnsupportedStage", stage, err)
		}
	}
	info.Shell = "pwsh"
	if _, err := Generate(executor.StagePrepareScript, info); err == nil {
		t.Error("Generate with shell pwsh = nil error, want one")
	}
}

func TestPrepareScript(t *testing.T) {
	for _, sh := range shells {
		t.Run(sh, func(t *testing.T) {
			t.Parallel()
			info := testInfo(t, sh, scriptJob([]string{"true"}, nil))
			out, code := runScript(t, sh, generate(t, executor.StagePrepareScript, info), info.ProjectDir)
			host, _ := os.Hostname()
			if want := "Running on " + host + "...\n"; code != 0 || out != want {
				t.Errorf("prepare_script = %q, %d; want %q, 0", out, code, want)
			}
		})
	}
}

// torture values: each must reach the script byte for byte.
var torture = map[string]string{
	"SINGLE":    `it's a 'quoted' value`,
	"DOUBLE":    `say "hi" \"escaped\"`,
	"DOLLAR":    "$$HOME and $(id) and `id` and ${X:-y}",
	"NEWLINES":  "line1\nline2\n\nline4\n",
	"UNICODE":   "ünïcødé ✓ 日本語 🚀",
	"BACKSLASH": `C:\path\to\ \n \t \\`,
	"QUOTES":    `'''`,
	"EMPTY":     "",
	"PERCENT":   "%s %d %% \\033[31m",
	"BANG":      "!! !$ history",
	"SPACES":    "  leading and trailing  ",
}

// scriptValues runs a job with vars whose script writes the value of
// each of keys to a file, and returns what it wrote, by key.
func scriptValues(t *testing.T, sh string, vars api.Variables, keys []string) map[string]string {
	t.Helper()
	out := t.TempDir()
	var lines []string
	for _, k := range keys {
		lines = append(lines, `printf '%s' "$`+k+`" > '`+filepath.Join(out, k)+`'`)
	}
	info := testInfo(t, sh, scriptJob(lines, nil, vars...))
	if o, code := runScript(t, sh, generate(t, StepStage(api.StepScript), info), info.ProjectDir); code != 0 {
		t.Fatalf("exit code %d:\n%s", code, o)
	}
	got := map[string]string{}
	for _, k := range keys {
		b, err := os.ReadFile(filepath.Join(out, k))
		if err != nil {
			t.Fatal(err)
		}
		got[k] = string(b)
	}
	return got
}

func TestVariableQuoting(t *testing.T) {
	for _, sh := range shells {
		t.Run(sh, func(t *testing.T) {
			t.Parallel()
			var vars api.Variables
			var keys []string
			for k, v := range torture {
				// Raw, so the check is about quoting alone; $$ would be
				// unescaped by expansion otherwise.
				vars = append(vars, api.Variable{Key: k, Value: v, Raw: true})
				keys = append(keys, k)
			}
			got := scriptValues(t, sh, vars, keys)
			if diff := cmp.Diff(torture, got); diff != "" {
				t.Errorf("variable values (-want +got):\n%s", diff)
			}
		})
	}
}

func TestRawAndExpandedVariables(t *testing.T) {
	for _, sh := range shells {
		t.Run(sh, func(t *testing.T) {
			t.Parallel()
			vars := api.Variables{
				{Key: "BASE", Value: "base"},
				{Key: "EXPANDED", Value: "$BASE/x ${BASE}y $$BASE $UNDEFINED. $FROM_ENV $ end$"},
				{Key: "RAW", Value: "$BASE ${BASE} $(echo no)", Raw: true},
				{Key: "LATER", Value: "$NEXT"}, // defined after: its value as written (GitLab Runner's lookup)
				{Key: "NEXT", Value: "next"},
				{Key: "BASE", Value: "again-$BASE"}, // redefinition sees the old value; earlier references see this one, unexpanded
				{Key: "bad-name", Value: "skipped"},
			}
			got := scriptValues(t, sh, vars, []string{"BASE", "EXPANDED", "RAW", "LATER"})
			want := map[string]string{
				"BASE":     "again-base",
				"EXPANDED": "again-$BASE/x again-$BASEy $BASE . env-value $ end$",
				"RAW":      "$BASE ${BASE} $(echo no)",
				"LATER":    "next",
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("values (-want +got):\n%s", diff)
			}
		})
	}
}

func TestFileVariables(t *testing.T) {
	for _, sh := range shells {
		t.Run(sh, func(t *testing.T) {
			t.Parallel()
			content := torture["NEWLINES"] + torture["SINGLE"] + torture["DOLLAR"] + torture["UNICODE"]
			out := t.TempDir()
			job := scriptJob([]string{
				`printf '%s' "$SECRET_FILE" > '` + filepath.Join(out, "path") + `'`,
				`cat "$SECRET_FILE" > '` + filepath.Join(out, "content") + `'`,
			}, nil,
				api.Variable{Key: "SECRET_FILE", Value: content, File: true, Raw: true},
				api.Variable{Key: "EXPANDED_FILE", Value: "dir=$CI_PROJECT_DIR", File: true},
			)
			info := testInfo(t, sh, job)
			info.Variables = append(api.Variables{{Key: "CI_PROJECT_DIR", Value: info.ProjectDir, Raw: true}}, job.Variables...)
			if o, code := runScript(t, sh, generate(t, StepStage(api.StepScript), info), info.ProjectDir); code != 0 {
				t.Fatalf("exit code %d:\n%s", code, o)
			}
			wantPath := filepath.Join(info.ProjectDir+".tmp", "SECRET_FILE")
			if got, _ := os.ReadFile(filepath.Join(out, "path")); string(got) != wantPath {
				t.Errorf("$SECRET_FILE = %q, want %q", got, wantPath)
			}
			if got, _ := os.ReadFile(filepath.Join(out, "content")); string(got) != content {
				t.Errorf("file content = %q, want %q", got, content)
			}
			st, err := os.Stat(wantPath)
			if err != nil {
				t.Fatalf("file variable after the step: %v", err)
			}
			if st.Mode().Perm() != 0o600 {
				t.Errorf("file variable mode = %v, want 0600", st.Mode().Perm())
			}
			expanded := filepath.Join(info.ProjectDir+".tmp", "EXPANDED_FILE")
			if got, _ := os.ReadFile(expanded); string(got) != "dir="+info.ProjectDir {
				t.Errorf("expanded file content = %q, want %q", got, "dir="+info.ProjectDir)
			}

			if o, code := runScript(t, sh, generate(t, executor.StageCleanupFileVariables, info), info.ProjectDir); code != 0 {
				t.Fatalf("cleanup_file_variables exit code %d:\n%s", code, o)
			}
			for _, p := range []string{wantPath, expanded} {
				if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("after cleanup_file_variables, stat %s = %v, want not exist", p, err)
				}
			}
		})
	}
}

func TestExpand(t *testing.T) {
	vals := map[string]string{"A": "a", "B_2": "b", "EMPTY": ""}
	lookup := func(k string) (string, bool) { v, ok := vals[k]; return v, ok }
	tests := []struct{ in, want string }{
		{"plain", "plain"},
		{"$A", "a"},
		{"${A}x", "ax"},
		{"$Ax", ""},
		{"$B_2-$A", "b-a"},
		{"$$A", "$A"},
		{"$", "$"},
		{"a$", "a$"},
		{"$1 $- $?", "$1 $- $?"},
		{"${", "${"},
		{"${A", "${A"},
		{"${not-valid}", "${not-valid}"},
		{"$MISSING.", "."},
		{"$EMPTY|", "|"},
		{"ü$A✓", "üa✓"},
	}
	for _, tt := range tests {
		if got := Expand(tt.in, lookup); got != tt.want {
			t.Errorf("Expand(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestMaskURL(t *testing.T) {
	tests := []struct{ in, want string }{
		{"https://gitlab-ci-token:glcbt-secret@gitlab.example.com/g/p.git", "https://gitlab-ci-token:[MASKED]@gitlab.example.com/g/p.git"},
		{"https://gitlab.example.com/g/p.git", "https://gitlab.example.com/g/p.git"},
		{"https://user@gitlab.example.com/g/p.git", "https://user@gitlab.example.com/g/p.git"},
		{"file:///tmp/repo", "file:///tmp/repo"},
		{"https://u:p w@%zz/x", "[MASKED]@%zz/x"},
	}
	for _, tt := range tests {
		if got := MaskURL(tt.in); got != tt.want {
			t.Errorf("MaskURL(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
