package difftest

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
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
		"plain /tmp/run1/builds/ABCDEFGHI/0 at http://127.0.0.1:4242/x token glcbt-64_abcdefghijklmnop\n" +
		"\x1b[32;1mGitaly correlation ID: fa93ffdca5c84fe385f3c30eb4460ccb\x1b[0;m\n" +
		"Using docker image sha256:" + strings.Repeat("ab", 32) + " for x:1\n" +
		"Using helper image:  drover-difftest-gitlab-runner-helper:8d4da382bc5e  (overridden)\n" +
		"Running on runner-abcdefghi-project-7-concurrent-0 via h...\n"
	got, stderr := n.trace(log+"2026-11-30T09:00:00.423456Z 01E oops\n", 1)
	want := []string{
		"Running with x",
		"section_start:T:get_sources\r\x1b[0Kpart one and two",
		"plain $ROOT/builds/$SHORT_TOKEN/0 at $SERVER_URL/x token $JOB_TOKEN",
		"\x1b[32;1mGitaly correlation ID: $CORRELATION_ID\x1b[0;m",
		"Using docker image $IMAGE_ID for x:1",
		"Using helper image:  drover-difftest-gitlab-runner-helper:$HELPER_TAG  (overridden)",
		"Running on runner-$SHORT_TOKEN-project-7-concurrent-0 via h...",
		"oops",
	}
	if !slices.Equal(got, want) {
		t.Errorf("trace =\n%q\nwant\n%q", got, want)
	}
	if !slices.Equal(stderr, []string{"oops"}) {
		t.Errorf("stderr = %q, want the stderr stream's line", stderr)
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

// TestRules: each deliberate rule rewrites what it names and nothing
// else.
func TestRules(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   []string
		want []string
	}{
		{
			name: "layout joins nothing and splits GitLab Runner's shared section lines",
			in: []string{
				"section_end:T:a\r\x1b[0Ksection_start:T:b\r\x1b[0K\x1b[0K\x1b[36;1mB\x1b[0;m\x1b[0;m",
				"section_end:T:b\r\x1b[0K\x1b[0;33mWARNING: w\x1b[0;m",
				"\x1b[0KUsing Shell (bash) executor...\x1b[0;m",
				"\x1b[32;1mJob succeeded\x1b[0;m",
			},
			want: []string{
				"section_end:T:a\r\x1b[0K",
				"section_start:T:b\r\x1b[0K\x1b[0K\x1b[36;1mB\x1b[0;m",
				"section_end:T:b\r\x1b[0K",
				"\x1b[0;33mWARNING: w\x1b[0;m",
				"Using Shell (bash) executor...",
				"\x1b[32;1mJob succeeded\x1b[0;m",
			},
		},
		{
			name: "banner",
			in:   []string{"\x1b[0KRunning with gitlab-runner 19.3.0 (9cbf0074)\x1b[0;m", "Running with drover 0.2.0-dev"},
			want: []string{"Running with <runner>", "Running with <runner>"},
		},
		{
			name: "helper-log drops the platform line and the fields",
			in: []string{
				"Runtime platform                                  \x1b[0;m  arch\x1b[0;m=amd64 os\x1b[0;m=linux pid\x1b[0;m=3093",
				"out/: found 4 matching artifact files and directories\x1b[0;m ",
				"Uploading artifacts as \"archive\" to coordinator... 201 Created\x1b[0;m  correlation_id\x1b[0;m=d15 id\x1b[0;m=30 status_code\x1b[0;m=201 token\x1b[0;m=7ZAzegdJc",
				"\x1b[0;33mWARNING: Cache file does not exist                \x1b[0;m ",
				"\x1b[32;1mUploading artifacts...\x1b[0;m",
			},
			want: []string{
				"out/: found 4 matching artifact files and directories",
				"Uploading artifacts as \"archive\" to coordinator... 201 Created",
				"\x1b[0;33mWARNING: Cache file does not exist\x1b[0;m",
				"\x1b[32;1mUploading artifacts...\x1b[0;m",
			},
		},
		{
			name: "transfer-detail drops drover's sizes",
			in: []string{
				"Uploading artifacts as \"junit\" to coordinator... (1 files, 84 bytes)",
				"Uploading artifacts as \"junit\" to coordinator... 201 Created",
				"Archive is 263 bytes (1 files, 4 bytes uncompressed)",
				"Downloading artifacts from coordinator... ok (3 files, 6 bytes)",
			},
			want: []string{
				"Uploading artifacts as \"junit\" to coordinator... 201 Created",
				"Downloading artifacts from coordinator... ok",
			},
		},
		{
			name: "debug-trace keeps markers and the runner's lines of a traced log",
			in:   []string{"section_start:T:s\r\x1b[0K", "+ set -o pipefail", "export A=1", "\x1b[32;1m$ echo x\x1b[0;m", "x", "section_end:T:s\r\x1b[0K"},
			want: []string{"section_start:T:s\r\x1b[0K", "\x1b[32;1m$ echo x\x1b[0;m", "section_end:T:s\r\x1b[0K"},
		},
		{
			name: "docker-setup drops the lines about images and the default bridge",
			in: []string{
				"\x1b[32;1mUsing default image\x1b[0;m",
				"Using effective pull policy of [if-not-present] for container x:1",
				"Using docker image $IMAGE_ID for x:1 ...",
				"Using locally found image x:1 (0fcf1c2d48ae)",
				"Built the helper image drover-helper:5e9437028a53",
				"\x1b[32;1mContainer runner-a-project-7-concurrent-0-b651d39a-svc-0 disconnected from network bridge\x1b[0;m",
				"Pulling docker image x:1 ...",
				"Using Docker executor with image x:1 ...",
			},
			want: []string{"Pulling docker image x:1 ...", "Using Docker executor with image x:1 ..."},
		},
		{
			name: "an untraced log keeps its output",
			in:   []string{"\x1b[32;1m$ echo x\x1b[0;m", "x"},
			want: []string{"\x1b[32;1m$ echo x\x1b[0;m", "x"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := applyRules(tc.in); !slices.Equal(got, tc.want) {
				t.Errorf("applyRules =\n%q\nwant\n%q", got, tc.want)
			}
		})
	}
}

// TestStderrOrder: a stderr line GitLab Runner logged late matches
// drover's in the order written; one drover lacks is a difference.
func TestStderrOrder(t *testing.T) {
	glr := Observation{State: "success", Trace: []string{"one", "three", "two"}, Stderr: []string{"two"}}
	drover := Observation{State: "success", Trace: []string{"one", "two", "three"}}
	if d := Compare(glr, drover); len(d) != 0 {
		t.Errorf("Compare = %q, want no difference", d)
	}
	drover.Trace = []string{"one", "three"}
	if d := Compare(glr, drover); len(d) != 1 || !strings.Contains(d[0], "stderr") {
		t.Errorf("Compare = %q, want the missing stderr line", d)
	}
}
