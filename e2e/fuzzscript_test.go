package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestFuzzScript runs scripts/fuzz.sh, the test suite's fuzz loop, on a
// module it generates: a package whose target passes, one whose target
// finds a failing input at once, one without targets and one that does not
// build. It checks what the loop promises: every target of the packages
// asked for runs, a finding fails the run with the target's output and
// its reproducer written under the package's testdata, and a package that
// does not build fails it with the compiler's message.
func TestFuzzScript(t *testing.T) {
	if testing.Short() {
		t.Skip("builds fuzzing binaries")
	}
	script, err := filepath.Abs("../scripts/fuzz.sh")
	if err != nil {
		t.Fatal(err)
	}
	mod := t.TempDir()
	files := map[string]string{
		"go.mod":       "module example.com/fz\n\ngo 1.26\n",
		"pass/pass.go": "package pass\n\nfunc Len(s string) int { return len(s) }\n",
		"pass/pass_test.go": `package pass

import "testing"

func FuzzLen(f *testing.F) {
	f.Add("a")
	f.Fuzz(func(t *testing.T, s string) {
		if Len(s) != len(s) {
			t.Fatal("Len disagrees")
		}
	})
}

func FuzzAgain(f *testing.F) {
	f.Add(1)
	f.Fuzz(func(t *testing.T, n int) {})
}
`,
		"finds/finds_test.go": `package finds

import "testing"

func FuzzShort(f *testing.F) {
	f.Add("a")
	f.Fuzz(func(t *testing.T, s string) {
		if len(s) > 3 {
			t.Fatalf("too long: %q", s)
		}
	})
}
`,
		"none/none.go":      "package none\n",
		"none/none_test.go": "package none\n\nimport \"testing\"\n\nfunc TestNothing(t *testing.T) {}\n",
		"broken/broken_test.go": `package broken

import "testing"

func FuzzBroken(f *testing.F) { undefinedHelper() }
`,
	}
	for name, body := range files {
		p := filepath.Join(mod, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	for _, tc := range []struct {
		name     string
		pkgs     []string
		ok       bool
		want     []string
		dontWant []string
	}{
		{
			name: "targets pass, a package without any is skipped",
			pkgs: []string{"./pass", "./none"},
			ok:   true,
			want: []string{
				"-- example.com/fz/pass: fuzzing binary built in",
				"-- example.com/fz/pass FuzzAgain ok (",
				"-- example.com/fz/pass FuzzLen ok (",
			},
			dontWant: []string{"example.com/fz/none"},
		},
		{
			name: "a finding fails the run with its output and reproducer",
			pkgs: []string{"./finds"},
			want: []string{
				"too long:",
				"Failing input written to testdata/fuzz/FuzzShort/",
				"-- FAIL example.com/fz/finds FuzzShort",
			},
		},
		{
			name: "a package that does not build fails the run",
			pkgs: []string{"./broken"},
			want: []string{"undefined: undefinedHelper"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(script, tc.pkgs...)
			cmd.Env = append(os.Environ(), "DROVER_FUZZ_MODULE="+mod, "FUZZTIME=1s", "GOWORK=off", "GOFLAGS=-mod=mod")
			out, err := cmd.CombinedOutput()
			if tc.ok && err != nil {
				t.Fatalf("fuzz.sh %v: %v\n%s", tc.pkgs, err, out)
			}
			if !tc.ok && err == nil {
				t.Fatalf("fuzz.sh %v succeeded, want a failure:\n%s", tc.pkgs, out)
			}
			for _, w := range tc.want {
				if !strings.Contains(string(out), w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
			for _, w := range tc.dontWant {
				if strings.Contains(string(out), w) {
					t.Errorf("output has %q:\n%s", w, out)
				}
			}
		})
	}
	corpus, err := filepath.Glob(filepath.Join(mod, "finds/testdata/fuzz/FuzzShort/*"))
	if err != nil || len(corpus) == 0 {
		t.Errorf("no reproducer under finds/testdata/fuzz/FuzzShort (err %v)", err)
	}
}
