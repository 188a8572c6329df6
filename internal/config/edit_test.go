package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// A config.toml as people write it: comments, few keys, sub-tables, a
// multi-line string and a multi-line array whose lines look like headers.
const editSrc = `# drover on build-1
concurrent = 4   # two per CPU
log_level = "debug"

# The shell runner.
[[runners]]
  name = "one"
  url = "https://gitlab.example.com"
  token = "glrt-one"
  executor = "shell"
  pre_build_script = """
[[runners]]
echo not a table
"""

# The docker runner.
# Second comment line.
[[runners]]
  name = "two"
  url = "https://gitlab.example.com"
  token = "$TWO_TOKEN"
  executor = "docker"
  [runners.docker]
    image = "alpine"
    volumes = [
      "/cache",
    ]
    [[runners.docker.services]]
      name = "redis"

[[runners]]
  name = "three"
  url = "http://127.0.0.1:8080"
  token = "t3"
  executor = "shell"
  nested = [
["x"],
  ]
`

func TestEditRemoveRunners(t *testing.T) {
	t.Parallel()
	// The blocks of editSrc, each with the comment lines above its header.
	lines := strings.SplitAfter(editSrc, "\n")
	join := func(from, to int) string { return strings.Join(lines[from:to], "") }
	top, one, two, three := join(0, 4), join(4, 15), join(15, 30), join(30, len(lines))
	if !strings.HasPrefix(one, "# The shell runner.") || !strings.HasPrefix(two, "# The docker runner.") || !strings.HasPrefix(three, "[[runners]]\n  name = \"three\"") {
		t.Fatalf("test blocks cut wrong:\n%q\n%q\n%q", one, two, three)
	}
	for _, tc := range []struct {
		name string
		drop []int
		want string
	}{
		{"first", []int{0}, top + two + three},
		{"middle, with its sub-tables", []int{1}, top + one + three},
		// The last one takes the blank line before it along.
		{"last", []int{2}, top + one + strings.TrimSuffix(two, "\n")},
		{"two of them", []int{2, 0}, top + strings.TrimSuffix(two, "\n")},
		{"all", []int{0, 1, 2}, strings.TrimSuffix(top, "\n")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path := writeConfig(t, editSrc)
			e, err := EditFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if err := e.RemoveRunners(tc.drop...); err != nil {
				t.Fatalf("RemoveRunners(%v) = %v", tc.drop, err)
			}
			if err := e.Write(); err != nil {
				t.Fatalf("Write() = %v", err)
			}
			got, _ := os.ReadFile(path)
			if diff := cmp.Diff(tc.want, string(got)); diff != "" {
				t.Errorf("file after RemoveRunners(%v) (-want +got):\n%s", tc.drop, diff)
			}
		})
	}
}

func TestEditAddRunner(t *testing.T) {
	t.Parallel()
	r := RunnerConfig{
		Name: "new", URL: "https://gitlab.example.com", ID: 12, Token: "glrt-new",
		TokenObtainedAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
		Executor:        "docker", Limit: 2, Environment: []string{"A=1"},
		UnhealthyInterval: DefaultUnhealthyInterval, // the default: not written
		Docker:            map[string]any{"image": "alpine", "privileged": true, "volumes": []any{"/cache"}},
	}
	const block = `[[runners]]
  name = "new"
  url = "https://gitlab.example.com"
  id = 12
  token = "glrt-new"
  token_obtained_at = 2026-01-02T03:04:05Z
  executor = "docker"
  limit = 2
  environment = ["A=1"]
  [runners.docker]
    image = "alpine"
    privileged = true
    volumes = ["/cache"]
`
	for _, tc := range []struct{ name, src, want string }{
		{"after the others", editSrc, editSrc + "\n" + block},
		{"no final newline", "concurrent = 1", "concurrent = 1\n\n" + block},
		{"empty file", "", block},
		{"CRLF", "concurrent = 1\r\n", "concurrent = 1\r\n\r\n" + strings.ReplaceAll(block, "\n", "\r\n")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path := writeConfig(t, tc.src)
			e, err := EditFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if err := e.AddRunner(&r); err != nil {
				t.Fatalf("AddRunner() = %v", err)
			}
			if err := e.Write(); err != nil {
				t.Fatalf("Write() = %v", err)
			}
			got, _ := os.ReadFile(path)
			if diff := cmp.Diff(tc.want, string(got)); diff != "" {
				t.Errorf("file (-want +got):\n%s", diff)
			}
		})
	}

	// A non-default unhealthy_interval is written, 0 included.
	e, _ := NewEdit("config.toml", nil)
	r0 := RunnerConfig{Name: "z", URL: "http://x", Token: "t", Executor: "shell"}
	if err := e.AddRunner(&r0); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(e.Bytes()), `unhealthy_interval = "0s"`) {
		t.Errorf("a zero unhealthy_interval is not written:\n%s", e.Bytes())
	}
}

func TestEditSetConcurrent(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, src, want string }{
		{"keeps the comment", editSrc, strings.Replace(editSrc, "concurrent = 4   #", "concurrent = 9   #", 1)},
		{"added when missing", "# c\n[[runners]]\n  name = \"a\"\n", "concurrent = 9\n# c\n[[runners]]\n  name = \"a\"\n"},
		{"empty file", "", "concurrent = 9\n"},
		{"odd spacing", "\tconcurrent=1\n", "\tconcurrent=9\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e, err := NewEdit("config.toml", []byte(tc.src))
			if err != nil {
				t.Fatal(err)
			}
			if err := e.SetConcurrent(9); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, string(e.Bytes())); diff != "" {
				t.Errorf("text (-want +got):\n%s", diff)
			}
		})
	}
}

// TestEditRefuses: what Edit cannot do as text, it does not do.
func TestEditRefuses(t *testing.T) {
	t.Parallel()
	inline := "runners = [{ name = \"a\", url = \"http://x\", token = \"t\", executor = \"shell\" }]\n"
	e, err := NewEdit("config.toml", []byte(inline))
	if err != nil {
		t.Fatal(err)
	}
	if err := e.RemoveRunners(0); err == nil || !strings.Contains(err.Error(), "edit the file by hand") {
		t.Errorf("RemoveRunners on inline runners = %v, want a refusal", err)
	}
	if err := e.AddRunner(&RunnerConfig{Name: "b"}); err == nil {
		t.Error("AddRunner after inline runners succeeded, want a refusal")
	}
	e, _ = NewEdit("config.toml", []byte(editSrc))
	if err := e.RemoveRunners(3); err == nil || !strings.Contains(err.Error(), "no runners[3]") {
		t.Errorf("RemoveRunners(3) of 3 = %v", err)
	}
	if _, err := NewEdit("config.toml", []byte("a = ")); err == nil || !strings.Contains(err.Error(), "config.toml") {
		t.Errorf("NewEdit of bad TOML = %v, want an error naming the file", err)
	}

	// Write checks the text against the intended content: a
	// "concurrent" line inside a multi-line string is not the key.
	path := filepath.Join(t.TempDir(), "config.toml")
	tricky := "s = \"\"\"\nconcurrent = 1\n\"\"\"\n"
	e, _ = NewEdit(path, []byte(tricky))
	if err := e.SetConcurrent(3); err != nil {
		t.Fatal(err)
	}
	if err := e.Write(); err == nil || !strings.Contains(err.Error(), "nothing written") {
		t.Errorf("Write of a wrong edit = %v, want a refusal", err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("a refused Write created the file: %v", err)
	}
}

func TestEditFileKeepsMode(t *testing.T) {
	t.Parallel()
	// edit makes one change to the file at path and writes it.
	edit := func(path string, change func(*Edit) error) os.FileMode {
		t.Helper()
		e, err := EditFile(path)
		if err == nil {
			err = change(e)
		}
		if err == nil {
			err = e.Write()
		}
		st, serr := os.Stat(path)
		if err != nil || serr != nil {
			t.Fatalf("editing %s: %v, %v", path, err, serr)
		}
		return st.Mode().Perm()
	}
	path := writeConfig(t, editSrc)
	if err := os.Chmod(path, 0o640); err != nil {
		t.Fatal(err)
	}
	if mode := edit(path, func(e *Edit) error { return e.RemoveRunners(0) }); mode != 0o640 {
		t.Errorf("mode after Write = %v, want 0640", mode)
	}
	// A missing file is created with mode 0600.
	path = filepath.Join(t.TempDir(), "new.toml")
	if mode := edit(path, func(e *Edit) error { return e.SetConcurrent(1) }); mode != 0o600 {
		t.Errorf("mode of a new file = %v, want 0600", mode)
	}
}
