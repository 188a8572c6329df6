package shell

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/executor"
)

// fileVarsJob has file variables that are raw, expanded, and that refer
// to another file variable, and plain variables that refer to them.
func fileVarsJob(out string) *api.JobResponse {
	return scriptJob([]string{
		`printf '%s' "$SECRET_FILE" > '` + filepath.Join(out, "path") + `'`,
		`cat "$SECRET_FILE" > '` + filepath.Join(out, "content") + `'`,
		`cat "$REF_FILE" > '` + filepath.Join(out, "ref") + `'`,
		`printf '%s' "$PLAIN" > '` + filepath.Join(out, "plain") + `'`,
	}, []string{`cat "$EXPANDED_FILE" > '` + filepath.Join(out, "after") + `'`},
		api.Variable{Key: "SECRET_FILE", Value: "secret-file-content\n" + torture["SINGLE"] + torture["DOLLAR"], File: true, Raw: true, Masked: true},
		api.Variable{Key: "EXPANDED_FILE", Value: "dir=$CI_PROJECT_DIR env=$FROM_ENV", File: true},
		api.Variable{Key: "REF_FILE", Value: "other=$SECRET_FILE", File: true},
		api.Variable{Key: "PLAIN", Value: "points at $SECRET_FILE"},
	)
}

// With FileVarsDir the executor has put the file variables there: the
// scripts point each one at FileVarsDir/KEY, hold none of their content,
// and neither write nor remove the files.
func TestFileVarsDir(t *testing.T) {
	for _, sh := range shells {
		t.Run(sh, func(t *testing.T) {
			t.Parallel()
			out := t.TempDir()
			job := fileVarsJob(out)
			info := testInfo(t, sh, job)
			info.Variables = append(api.Variables{{Key: "CI_PROJECT_DIR", Value: info.ProjectDir, Raw: true}}, job.Variables...)
			info.FileVarsDir = filepath.Join(t.TempDir(), "drover-secrets")

			// What the executor does: the files, from FileVariables, read-only.
			files := FileVariables(info.Variables, info.FileVarsDir, info.LookupEnv)
			if err := os.Mkdir(info.FileVarsDir, 0o755); err != nil {
				t.Fatal(err)
			}
			for k, v := range files {
				if err := os.WriteFile(filepath.Join(info.FileVarsDir, k), []byte(v), 0o444); err != nil {
					t.Fatal(err)
				}
			}

			path := func(k string) string { return filepath.Join(info.FileVarsDir, k) }
			for _, stage := range []executor.Stage{executor.StagePrepareScript, StepStage(api.StepScript), executor.StageAfterScript} {
				script := generate(t, stage, info)
				for _, k := range []string{"SECRET_FILE", "EXPANDED_FILE", "REF_FILE"} {
					if want := "export " + k + "=" + quote(path(k)) + "\n"; !strings.Contains(script, want) {
						t.Errorf("%s script lacks %q:\n%s", stage, want, script)
					}
				}
				for _, content := range []string{"secret-file-content", "dir=", "other="} {
					if strings.Contains(script, content) {
						t.Errorf("%s script holds file content %q:\n%s", stage, content, script)
					}
				}
				if strings.Contains(script, info.ProjectDir+".tmp") || strings.Contains(script, "umask") || strings.Contains(script, "rm -f") {
					t.Errorf("%s script writes or removes file variables:\n%s", stage, script)
				}
			}

			for _, stage := range []executor.Stage{StepStage(api.StepScript), executor.StageAfterScript} {
				if o, code := runScript(t, sh, generate(t, stage, info), info.ProjectDir); code != 0 {
					t.Fatalf("%s: exit code %d:\n%s", stage, code, o)
				}
			}
			read := func(name string) string {
				b, err := os.ReadFile(filepath.Join(out, name))
				if err != nil {
					t.Fatal(err)
				}
				return string(b)
			}
			if got := read("path"); got != path("SECRET_FILE") {
				t.Errorf("$SECRET_FILE = %q, want %q", got, path("SECRET_FILE"))
			}
			if got, want := read("content"), job.Variables[0].Value; got != want {
				t.Errorf("content of $SECRET_FILE = %q, want %q", got, want)
			}
			// A file variable's content refers to another one as the
			// scripts see it: by its path in FileVarsDir.
			if got, want := read("ref"), "other="+path("SECRET_FILE"); got != want {
				t.Errorf("content of $REF_FILE = %q, want %q", got, want)
			}
			if got, want := read("plain"), "points at "+path("SECRET_FILE"); got != want {
				t.Errorf("$PLAIN = %q, want %q", got, want)
			}
			if got, want := read("after"), "dir="+info.ProjectDir+" env=env-value"; got != want {
				t.Errorf("after_script: content of $EXPANDED_FILE = %q, want %q", got, want)
			}

			// Removing them is the executor's business.
			if script := generate(t, executor.StageCleanupFileVariables, info); script != "" {
				t.Errorf("cleanup_file_variables script = %q, want none", script)
			}
			for k, v := range files {
				if b, err := os.ReadFile(path(k)); err != nil || string(b) != v {
					t.Errorf("%s after the stages = %q, %v; want it untouched", k, b, err)
				}
			}
			if _, err := os.Stat(info.ProjectDir + ".tmp"); !os.IsNotExist(err) {
				t.Errorf("stat %s.tmp = %v, want it not made", info.ProjectDir, err)
			}
		})
	}
}

// FileVariables returns the content of each file variable, expanded as the
// scripts expand it (raw ones as they are, names no variable defines from
// env), the last definition of a key winning.
func TestFileVariablesContent(t *testing.T) {
	t.Parallel()
	vars := api.Variables{
		{Key: "HOST", Value: "db.example.com"},
		{Key: "CONF", Value: "host=$HOST port=${PORT} env=$FROM_ENV", File: true},
		{Key: "RAW", Value: "host=$HOST", File: true, Raw: true},
		{Key: "REF", Value: "conf at $CONF", File: true},
		{Key: "TWICE", Value: "first", File: true},
		{Key: "TWICE", Value: "second $HOST", File: true},
		{Key: "NOT_A_FILE_ANY_MORE", Value: "file", File: true},
		{Key: "NOT_A_FILE_ANY_MORE", Value: "plain"},
		{Key: "bad name", Value: "x", File: true},
		{Key: "PORT", Value: "5432"},
	}
	env := func(name string) (string, bool) {
		if name == "FROM_ENV" {
			return "env-value", true
		}
		return "", false
	}
	want := map[string]string{
		// PORT is defined after CONF: its value as written, as GitLab
		// Runner looks names up in the whole list.
		"CONF":  "host=db.example.com port=5432 env=env-value",
		"RAW":   "host=$HOST",
		"REF":   "conf at /drover-secrets/CONF",
		"TWICE": "second db.example.com",
	}
	if diff := cmp.Diff(want, FileVariables(vars, "/drover-secrets", env)); diff != "" {
		t.Errorf("FileVariables() mismatch (-want +got):\n%s", diff)
	}
	want["CONF"] = "host=db.example.com port=5432 env="
	if diff := cmp.Diff(want, FileVariables(vars, "/drover-secrets", nil)); diff != "" {
		t.Errorf("FileVariables(env nil) mismatch (-want +got):\n%s", diff)
	}
	if got := FileVariables(api.Variables{{Key: "A", Value: "a"}}, "/d", nil); len(got) != 0 {
		t.Errorf("FileVariables(no file variables) = %v, want empty", got)
	}
}
