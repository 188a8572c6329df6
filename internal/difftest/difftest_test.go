package difftest

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"path/filepath"
	"slices"
	"testing"
)

// TestExpand: the suite's placeholders, and @@ID:x@@ as a number where it
// is a whole JSON string, as digits inside a longer one.
func TestExpand(t *testing.T) {
	in := `{"repo":"@@REPO_URL@@","dep":{"id":"@@ID:a@@"},"url":"/jobs/@@ID:a@@/x","q":"@@Q@@"}`
	got, err := Expand([]byte(in), map[string]string{"REPO_URL": "file:///r", "Q": `say "hi"`}, map[string]int64{"a": 42})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"repo":"file:///r","dep":{"id":42},"url":"/jobs/42/x","q":"say \"hi\""}`
	if string(got) != want {
		t.Errorf("Expand = %s\nwant %s", got, want)
	}
	if _, err := Expand([]byte(`"@@ID:missing@@"`), nil, nil); err == nil {
		t.Error("an unknown fixture's id expanded")
	}
}

// TestLoadFixtures: every fixture file is a merge patch over base.json
// whose variables are appended; the suite has at least 40.
func TestLoadFixtures(t *testing.T) {
	fs, err := LoadFixtures(filepath.Join("testdata", "fixtures"))
	if err != nil {
		t.Fatal(err)
	}
	if len(fs) < 40 {
		t.Errorf("%d fixtures, want at least 40", len(fs))
	}
	for _, f := range fs {
		var p struct {
			JobInfo   map[string]any   `json:"job_info"`
			Variables []map[string]any `json:"variables"`
			Steps     []map[string]any `json:"steps"`
		}
		if err := json.Unmarshal(f.Payload, &p); err != nil {
			t.Fatalf("%s: %v", f.Name, err)
		}
		if f.Description == "" || p.JobInfo["name"] != "test" || len(p.Steps) == 0 || len(p.Variables) < 50 {
			t.Errorf("%s: description %q, job_info %v, %d steps, %d variables: want the base's merged in", f.Name, f.Description, p.JobInfo, len(p.Steps), len(p.Variables))
		}
	}
}

func TestMergePatch(t *testing.T) {
	base := map[string]any{"a": map[string]any{"x": 1.0, "y": 2.0}, "b": "keep", "c": []any{1.0}}
	patch := map[string]any{"a": map[string]any{"y": nil, "z": 3.0}, "c": []any{2.0}}
	got, _ := json.Marshal(mergePatch(base, patch))
	if want := `{"a":{"x":1,"z":3},"b":"keep","c":[2]}`; string(got) != want {
		t.Errorf("mergePatch = %s, want %s", got, want)
	}
}

// TestNormalise: GitLab Runner 19's line prefixes go (a '+' line joins
// the last), section times, tokens and the run's paths get names.
func TestNormalise(t *testing.T) {
	n := normaliser{root: "/tmp/run1", serverURL: "http://127.0.0.1:4242", runnerToken: "glrt-ABCDEFGHIJKLMNOP"}
	log := "2026-11-30T09:00:00.123456Z 00O Running with x\n" +
		"2026-11-30T09:00:00.223456Z 00O section_start:1764493200:get_sources\r\x1b[0Kpart one \n" +
		"2026-11-30T09:00:00.323456Z 00O+and two\n" +
		"plain /tmp/run1/builds/ABCDEFGHI/0 at http://127.0.0.1:4242/x token glcbt-64_abcdefghijklmnop\n"
	got := n.trace(log, 1)
	want := []string{
		"Running with x",
		"section_start:T:get_sources\r\x1b[0Kpart one and two",
		"plain $ROOT/builds/$SHORT_TOKEN/0 at $SERVER_URL/x token $JOB_TOKEN",
	}
	if !slices.Equal(got, want) {
		t.Errorf("trace =\n%q\nwant\n%q", got, want)
	}
}

// TestListArchive: GitLab's gzip artifact format is one member per file,
// named in its header.
func TestListArchive(t *testing.T) {
	var buf bytes.Buffer
	for _, name := range []string{"b.xml", "a.xml"} {
		zw := gzip.NewWriter(&buf)
		zw.Name = name
		_, _ = zw.Write([]byte("<x/>"))
		_ = zw.Close()
	}
	if got := listArchive("gzip", buf.Bytes()); !slices.Equal(got, []string{"a.xml", "b.xml"}) {
		t.Errorf("listArchive(gzip) = %v", got)
	}
	if got := listArchive("raw", buf.Bytes()); got != nil {
		t.Errorf("listArchive(raw) = %v, want nothing", got)
	}
}

// TestCompare: the deliberate differences are the only ones let through.
func TestCompare(t *testing.T) {
	glr := Observation{State: "success", Updates: []string{"running", "success"}, Trace: []string{"\x1b[0KRunning with gitlab-runner 19.3.0 (abc)", "hello"}}
	drover := Observation{State: "success", Updates: []string{"provisioning:pending", "provisioning:accepted", "success"}, Trace: []string{"\x1b[0KRunning with drover 0.2.0-dev", "hello"}}
	if d := Compare(glr, drover); len(d) != 0 {
		t.Errorf("Compare = %q, want only deliberate differences", d)
	}
	drover.Trace[1] = "hullo"
	drover.State = "failed"
	if d := Compare(glr, drover); len(d) != 2 {
		t.Errorf("Compare = %q, want the state and the trace", d)
	}
}
