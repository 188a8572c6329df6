package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestReportRealGoTest runs the real `go test -json` on a small module
// whose packages pass, fail, panic, skip and do not build, and checks the
// report: every failure's output is there, a passing test's is not, the
// package lines are, and the slowest list names finished tests.
func TestReportRealGoTest(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go test on a generated module")
	}
	dir := t.TempDir()
	files := map[string]string{
		"go.mod": "module example.test/m\n\ngo 1.26\n",
		"good/good_test.go": `package good

import "testing"

func TestGood(t *testing.T) { t.Log("quiet-pass-log") }

func TestSkipped(t *testing.T) { t.Skip("not here") }
`,
		"bad/bad_test.go": `package bad

import "testing"

func TestPasses(t *testing.T) { t.Log("another-quiet-log") }

func TestFails(t *testing.T) {
	t.Log("before-the-failure")
	t.Error("the-failure-itself")
}

func TestSub(t *testing.T) {
	t.Run("ok", func(t *testing.T) { t.Log("sub-quiet") })
	t.Run("broken", func(t *testing.T) { t.Fatal("sub-broke") })
}

func TestParallelA(t *testing.T) { t.Parallel(); t.Log("par-a-quiet") }

func TestParallelB(t *testing.T) { t.Parallel(); t.Error("par-b-failed") }
`,
		"crash/crash_test.go": `package crash

import "testing"

func TestCrash(t *testing.T) {
	t.Log("crash-says-hello")
	panic("crash-panicked")
}
`,
		"nobuild/nobuild_test.go": `package nobuild

import "testing"

func TestNever(t *testing.T) { undefinedThing() }
`,
	}
	for name, body := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command("go", "test", "-json", "-count=1", "./...")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
	var stream, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stream, &stderr
	if err := cmd.Run(); err == nil {
		t.Fatalf("go test passed on a module with failing packages; stderr:\n%s", stderr.String())
	}

	var out bytes.Buffer
	failed, err := report(&stream, &out, 20)
	if err != nil {
		t.Fatal(err)
	}
	if !failed {
		t.Error("report said nothing failed")
	}
	got := out.String()
	for _, want := range []string{
		"before-the-failure", "the-failure-itself", "--- FAIL: TestFails",
		"--- FAIL: TestSub/broken", "sub-broke",
		"par-b-failed", "--- FAIL: TestParallelB",
		"crash-says-hello", "crash-panicked",
		"undefinedThing", // the compiler's error
		"ok  \texample.test/m/good", "FAIL\texample.test/m/bad", "FAIL\texample.test/m/crash", "FAIL\texample.test/m/nobuild",
		"== slowest tests",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("report lacks %q:\n%s", want, got)
		}
	}
	for _, unwanted := range []string{"quiet-pass-log", "another-quiet-log", "sub-quiet", "par-a-quiet", "\nPASS\n"} {
		if strings.Contains(got, unwanted) {
			t.Errorf("report shows %q, the output of a passing test or a bare PASS:\n%s", unwanted, got)
		}
	}
	slow := got[strings.Index(got, "== slowest tests"):]
	if !regexp.MustCompile(`s  example.test/m/good  TestGood\n`).MatchString(slow) {
		t.Errorf("the slowest list lacks TestGood:\n%s", slow)
	}
	if strings.Contains(slow, "TestSkipped") || strings.Contains(slow, "TestSub/") {
		t.Errorf("the slowest list names a skipped test or a subtest:\n%s", slow)
	}
}

func TestReportStreams(t *testing.T) {
	tests := []struct {
		name       string
		in         string
		slowest    int
		wantFailed bool
		wantErr    bool
		want       []string
		unwanted   []string
	}{
		{
			name: "all pass",
			in: `{"Action":"start","Package":"p"}
{"Action":"run","Package":"p","Test":"TestA"}
{"Action":"output","Package":"p","Test":"TestA","Output":"=== RUN   TestA\n"}
{"Action":"output","Package":"p","Test":"TestA","Output":"    a_test.go:3: hidden\n"}
{"Action":"output","Package":"p","Test":"TestA","Output":"--- PASS: TestA (2.50s)\n"}
{"Action":"pass","Package":"p","Test":"TestA","Elapsed":2.5}
{"Action":"run","Package":"p","Test":"TestB"}
{"Action":"pass","Package":"p","Test":"TestB","Elapsed":7}
{"Action":"output","Package":"p","Output":"PASS\n"}
{"Action":"output","Package":"p","Output":"ok  \tp\t9.6s\n"}
{"Action":"pass","Package":"p","Elapsed":9.6}
`,
			slowest:  1,
			want:     []string{"ok  \tp\t9.6s\n", "== slowest tests (1 of 2, 10 s of tests in all", "     7.0s  p  TestB\n"},
			unwanted: []string{"hidden", "TestA\n", "PASS\n"},
		},
		{
			name: "a test still running when the package fails (a timeout)",
			in: `{"Action":"run","Package":"p","Test":"TestSlow"}
{"Action":"output","Package":"p","Test":"TestSlow","Output":"    slow_test.go:9: waiting for the engine\n"}
{"Action":"output","Package":"p","Output":"panic: test timed out after 1m0s\n"}
{"Action":"output","Package":"p","Output":"FAIL\tp\t60.0s\n"}
{"Action":"fail","Package":"p","Elapsed":60}
`,
			wantFailed: true,
			want:       []string{"panic: test timed out", "--- output of TestSlow, which did not finish:\n    slow_test.go:9: waiting for the engine\n", "FAIL\tp\t60.0s"},
		},
		{
			name:       "a build failure",
			in:         `{"ImportPath":"p [p.test]","Action":"build-output","Output":"p/x_test.go:3:1: syntax error\n"}` + "\n" + `{"ImportPath":"p [p.test]","Action":"build-fail"}` + "\n",
			wantFailed: true,
			want:       []string{"syntax error"},
		},
		{
			name:    "no events at all",
			in:      "go: cannot find main module\n",
			wantErr: true,
			want:    []string{"cannot find main module"},
		},
		{
			name:    "empty",
			in:      "",
			wantErr: true,
		},
		{
			name: "slowest 0 lists none",
			in: `{"Action":"pass","Package":"p","Test":"TestA","Elapsed":1}
`,
			slowest:  0,
			unwanted: []string{"slowest"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			failed, err := report(strings.NewReader(tt.in), &out, tt.slowest)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, want an error: %v", err, tt.wantErr)
			}
			if err == nil && failed != tt.wantFailed {
				t.Errorf("failed = %v, want %v", failed, tt.wantFailed)
			}
			for _, w := range tt.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("output lacks %q:\n%s", w, out.String())
				}
			}
			for _, u := range tt.unwanted {
				if strings.Contains(out.String(), u) {
					t.Errorf("output has %q:\n%s", u, out.String())
				}
			}
		})
	}
}

// FuzzReport: any stream is reported without a panic, and a stream with a
// failing test's event is reported as failed.
func FuzzReport(f *testing.F) {
	f.Add(`{"Action":"fail","Package":"p","Test":"T","Elapsed":1}`)
	f.Add(`{"Action":"output","Package":"p","Test":"T","Output":"x\n"}` + "\n" + `{"Action":"fail","Package":"p"}`)
	f.Add("not json\n{\"Action\":\"pass\"}")
	f.Fuzz(func(t *testing.T, in string) {
		var out bytes.Buffer
		failed, err := report(strings.NewReader(in), &out, 3)
		if err == nil && strings.Contains(in, `"Action":"fail","Package":"p","Test":"T"`) && !failed {
			for _, l := range strings.Split(in, "\n") {
				if strings.HasPrefix(l, `{"Action":"fail","Package":"p","Test":"T"`) && strings.HasSuffix(l, "}") {
					t.Errorf("a failing test's event was not reported as a failure: %q", in)
				}
			}
		}
	})
}
