package coordinator

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"log/slog"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"testing/fstest"
	"testing/iotest"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/pipeline/ciconfig"
	"github.com/drover-ci/drover/internal/store"
)

// shellLog is a job log as GitLab Runner's shell executor writes it: the
// step in a section, each command echoed in colour before its output.
func shellLog(out ...string) string {
	var b strings.Builder
	b.WriteString("\x1b[0KRunning with gitlab-runner 19.4.0\x1b[0;m\n")
	b.WriteString("section_start:1767225600:step_script\r\x1b[0K\x1b[0K\x1b[36;1mExecuting \"step_script\" stage of the job script\x1b[0;m\x1b[0;m\n")
	for _, o := range out {
		b.WriteString("\x1b[32;1m$ echo \"" + o + "\"\x1b[0;m\n" + o + "\n")
	}
	b.WriteString("section_end:1767225601:step_script\r\x1b[0K\x1b[32;1mJob succeeded\x1b[0;m\n")
	return b.String()
}

func TestExtractCoverage(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", maxCoverageLine)
	for _, tc := range []struct {
		name, re, log, want string
	}{
		// gitlab-ci-local's coverage cases (internal/pipeline/testdata).
		{"last matching line", `^\s*Lines:\s*(\d+.\d+)\%`,
			shellLog("  Lines:   48.46% (510/650)", "  Lines:   78.46% (510/650)"), "78.46"},
		{"jest table", `All files.*?\|.*?\|.*?([\d\.]+)`,
			shellLog("All files            |    99.3 |    97.91 |     100 |     100 |                   "), "97.91"},
		{"flags", `(?i)total.*? (100(?:\.0+)?\%|[1-9]?\d(?:\.\d+)?\%)$`,
			shellLog("TOTAL                        18      0   100%"), "100"},

		{"no match", `^Lines: (\d+)%`, shellLog("Branches: 50%"), ""},
		{"empty log", `(\d+)%`, "", ""},
		{"whole match without groups", `Coverage: \d+\.\d+%`, "Coverage: 97.906% of 12 files\n", "97.91"},
		{"last match of the line", `(\d+)%`, "10% then 20% then 30%\n", "30"},
		{"last non-empty group", `Lines: (\d+)%|Total: (\d+)%`, "Lines: 40%\n", "40"},
		{"a group that is empty does not count", `Lines: (\d*)%`, "Lines: 12%\nLines: %\n", "12"},
		{"a line whose match has no number does not count", `Coverage: (\S+)`, "Coverage: 50%\nCoverage: n/a\n", "50"},
		{"the first number of the match", `Coverage: .*`, "Coverage: 61.5% (123/200)\n", "61.5"},
		{"rounded", `(\d+\.\d+)`, "33.333333\n", "33.33"},
		{"no trailing zeros", `(\d+\.\d+)`, "100.00\n", "100"},
		{"zero", `Lines: (\d+)`, "Lines: 0\n", "0"},
		{"colours stripped", `^Lines: (\d+\.\d+)%$`, "\x1b[32mLines: \x1b[1m78.456%\x1b[0m\n", "78.46"},
		{"section marker stripped", `^Lines: (\d+)%`, "section_start:1767225600:coverage[collapsed=true]\r\x1b[0KLines: 12%\n", "12"},
		{"timestamps stripped", `^Lines: (\d+)%`, "2025-07-04T10:08:01.123456Z 00O Lines: 12%\n2025-07-04T10:08:01.223456Z 00E other\n", "12"},
		{"CRLF", `^Lines: (\d+)%$`, "Lines: 7%\r\n", "7"},
		{"progress", `Coverage: (\d+)%`, "Coverage: 10%\rCoverage: 90%\n", "90"},
		{"no final newline", `(\d+)%`, "1%\n2%", "2"},
		{"a long line is cut", `^Coverage: (\d+)%`, long + "Coverage: 33%\n", "33"},
		{"after a long line", `^Coverage: (\d+)%`, "Coverage: 1%\n" + long + long + "\nCoverage: 2%\n", "2"},
		{"more digits than a float holds", `^(\d+)$`, "42\n1" + strings.Repeat("0", 400) + "\n", "42"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			re := regexp.MustCompile(tc.re)
			got, err := extractCoverage(t.Context(), strings.NewReader(tc.log), re)
			if err != nil || got != tc.want {
				t.Errorf("extractCoverage(%q) = %q, %v; want %q", tc.re, got, err, tc.want)
			}
			// The same read a byte at a time.
			got, err = extractCoverage(t.Context(), iotest.OneByteReader(strings.NewReader(tc.log)), re)
			if err != nil || got != tc.want {
				t.Errorf("extractCoverage(%q) read byte by byte = %q, %v; want %q", tc.re, got, err, tc.want)
			}
		})
	}
}

func TestExtractCoverageErrors(t *testing.T) {
	t.Parallel()
	re := regexp.MustCompile(`(\d+)%`)
	broken := errors.New("disk on fire")
	if _, err := extractCoverage(t.Context(), iotest.ErrReader(broken), re); !errors.Is(err, broken) {
		t.Errorf("extractCoverage of a failing reader = %v, want %v", err, broken)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	log := strings.Repeat("1%\n", 2*coverageCtxLines)
	if _, err := extractCoverage(ctx, strings.NewReader(log), re); !errors.Is(err, context.Canceled) {
		t.Errorf("extractCoverage with a canceled context = %v, want context.Canceled", err)
	}
}

func TestFormatCoverage(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   float64
		want string
	}{
		{78.456, "78.46"}, {100, "100"}, {97.91, "97.91"}, {0, "0"}, {5.5, "5.5"}, {0.004, "0"},
		{1e20, "100000000000000000000"},
	} {
		if got := formatCoverage(tc.in); got != tc.want {
			t.Errorf("formatCoverage(%v) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestPipelineCoverage(t *testing.T) {
	t.Parallel()
	jobs := func(covs ...string) []store.Job {
		var out []store.Job
		for _, c := range covs {
			out = append(out, store.Job{Coverage: c})
		}
		return out
	}
	for _, tc := range []struct {
		jobs []store.Job
		want string
	}{
		{jobs("78.46", "", "100"), "89.23"},
		{jobs("50"), "50"},
		{jobs("", ""), ""},
		{nil, ""},
	} {
		if got := pipelineCoverage(tc.jobs); got != tc.want {
			t.Errorf("pipelineCoverage(%+v) = %q, want %q", tc.jobs, got, tc.want)
		}
	}
}

// coverageValueRE is what a coverage looks like: at most two decimals,
// without trailing zeros.
var coverageValueRE = regexp.MustCompile(`^(0|[1-9]\d*)(\.\d?[1-9])?$`)

// FuzzExtractCoverage: any log and regex give no coverage or one in
// GitLab's form, whatever the pieces the log is read in, and a line
// without digits at the end changes nothing.
func FuzzExtractCoverage(f *testing.F) {
	for _, s := range []struct{ re, log string }{
		{`^\s*Lines:\s*(\d+.\d+)\%`, shellLog("  Lines:   48.46% (510/650)", "  Lines:   78.46% (510/650)")},
		{`All files.*?\|.*?\|.*?([\d\.]+)`, "All files |  99.3 |  97.91 |  100 |\n"},
		{`Lines: (\d+)%|Total: (\d+)%`, "Total: 5%\nLines: 40%"},
		{`(\d+)`, "\x1b[31section_start:1:a\r\x1b[0K9\r\n"},
		{`(\d*)`, "2025-07-04T10:08:01.123456Z 00O 1\r2025-07-04T10:08:01.123456Z 00O 2\n"},
		{`.*`, "1" + strings.Repeat("0", 400)},
	} {
		f.Add(s.re, s.log)
	}
	f.Fuzz(func(t *testing.T, pattern, log string) {
		re, err := regexp.Compile(pattern)
		if err != nil {
			return
		}
		got, err := extractCoverage(t.Context(), strings.NewReader(log), re)
		if err != nil {
			t.Fatalf("extractCoverage = %v", err)
		}
		if got != "" && !coverageValueRE.MatchString(got) {
			t.Fatalf("extractCoverage(%q) = %q, not a coverage", pattern, got)
		}
		pieces, err := extractCoverage(t.Context(), iotest.HalfReader(strings.NewReader(log)), re)
		if err != nil || pieces != got {
			t.Fatalf("extractCoverage(%q) read in halves = %q, %v; want %q", pattern, pieces, err, got)
		}
		more := log + "\nno digits here\n"
		if after, err := extractCoverage(t.Context(), strings.NewReader(more), re); err != nil || after != got {
			t.Fatalf("extractCoverage(%q) with a line without digits after = %q, %v; want %q", pattern, after, err, got)
		}
	})
}

// TestPipelineJobCoverage drives a pipeline's jobs through the runner API
// with logs as GitLab Runner sends them: a job with coverage: gets the
// coverage of its log when it succeeds or fails, not when it is canceled;
// a job without coverage: gets none whatever its log; the pipeline's is
// their average, in the API and on its page.
func TestPipelineJobCoverage(t *testing.T) {
	e := newEnv(t, nil)
	_, tok := e.runner(nil)
	compiled, err := ciconfig.Compile(ciconfig.Input{
		FS: fstest.MapFS{".gitlab-ci.yml": &fstest.MapFile{Data: []byte(`
unit:
  script: [make test]
  coverage: '/^\s*Lines:\s*(\d+.\d+)\%/'
e2e:
  script: [make e2e]
  coverage: /total.*? (\d+)%$/i
lint:
  script: [make lint]
stopped:
  script: [make slow]
  coverage: /^\s*Lines:\s*(\d+.\d+)\%/
`)}},
		File:       ".gitlab-ci.yml",
		Predefined: map[string]string{"CI_COMMIT_BRANCH": "main", "CI_COMMIT_REF_NAME": "main", "CI_PIPELINE_SOURCE": "push"},
	})
	if err != nil {
		t.Fatal(err)
	}
	p, err := e.c.storePipeline(t.Context(), store.Pipeline{
		Project: "g/p", Source: "push", Ref: "main", SHA: strings.Repeat("a", 40), Status: store.PipelineCreated,
		Spec: store.PipelineSpec{RepoURL: "https://example.com/g/p.git", Stages: compiled.Stages},
	}, compiled, map[string]string{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// The pipeline's advance (Run's, not started here) queues its jobs.
	if err := e.c.advancePipeline(t.Context(), p.ID); err != nil {
		t.Fatal(err)
	}
	jobs := map[string]*api.JobResponse{}
	for range 4 {
		jr := e.take(tok)
		jobs[jr.JobInfo.Name] = jr
	}
	logs := map[string]string{
		"unit":    shellLog("  Lines:   48.46% (510/650)", "Branches: 12.5%", "  Lines:   78.456% (510/650)"),
		"e2e":     shellLog("TOTAL 18 0 100%", "3 tests failed"),
		"lint":    shellLog("  Lines:   50.00%"),
		"stopped": shellLog("  Lines:   50.00%"),
	}
	if resp, _ := e.admin("POST", fmt.Sprintf("/api/v1/jobs/%d/cancel", jobs["stopped"].ID), nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("cancel stopped = %d", resp.StatusCode)
	}
	for name, jr := range jobs {
		log := []byte(logs[name])
		if resp := e.patch(jr.ID, jr.Token, fmt.Sprintf("0-%d", len(log)-1), log); resp.StatusCode != http.StatusAccepted {
			t.Fatalf("PATCH %s's log = %d", name, resp.StatusCode)
		}
		req := api.UpdateJobRequest{Token: jr.Token, State: api.StateSuccess,
			Output: api.JobOutput{Checksum: fmt.Sprintf("crc32:%08x", crc32.ChecksumIEEE(log)), Bytesize: int64(len(log))}}
		if name == "e2e" {
			req.State, req.FailureReason, req.ExitCode = api.StateFailed, api.ScriptFailure, ptr(1)
		}
		if resp, b := e.put(jr.ID, jr.Token, req); resp.StatusCode != http.StatusOK {
			t.Fatalf("final PUT of %s = %d %s", name, resp.StatusCode, b)
		}
	}
	want := map[string]string{"unit": "success 78.46", "e2e": "failed 100", "lint": "success ", "stopped": "canceled "}
	for name, jr := range jobs {
		j := e.job(jr.ID)
		if got := j.Status + " " + j.Coverage; got != want[name] {
			t.Errorf("job %s: %q, want %q", name, got, want[name])
		}
	}
	resp, b := e.admin("GET", fmt.Sprintf("/api/v1/pipelines/%d", p.ID), nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET pipeline = %d %s", resp.StatusCode, b)
	}
	var pv struct {
		Coverage string `json:"coverage"`
		Jobs     []struct {
			Name     string `json:"name"`
			Coverage string `json:"coverage"`
		} `json:"jobs"`
	}
	e.decode(b, &pv)
	if pv.Coverage != "89.23" {
		t.Errorf("pipeline coverage = %q, want 89.23 (the average of 78.46 and 100)", pv.Coverage)
	}
	if !bytes.Contains(b, []byte(`"coverage":"78.46"`)) || bytes.Count(b, []byte(`"coverage"`)) != 3 {
		t.Errorf("pipeline JSON: want coverage on the pipeline and its two jobs with one, omitted elsewhere:\n%s", b)
	}
	resp, b = e.admin("GET", fmt.Sprintf("/pipelines/%d", p.ID), nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET pipeline page = %d", resp.StatusCode)
	}
	for _, w := range []string{"<dt>Coverage</dt><dd>89.23%</dd>", "<th>Coverage</th>", "<td>78.46%</td>", "<td>100%</td>"} {
		if !bytes.Contains(b, []byte(w)) {
			t.Errorf("the pipeline page lacks %q:\n%s", w, b)
		}
	}
	if _, b := e.admin("GET", fmt.Sprintf("/jobs/%d", jobs["unit"].ID), nil); !bytes.Contains(b, []byte("<dt>Coverage</dt><dd>78.46%</dd>")) {
		t.Errorf("unit's page lacks its coverage:\n%s", b)
	}
}

// TestJobCoverageBadRegex: a job whose stored regex does not compile (the
// pipeline compiler refuses such) ends with no coverage and a warning.
func TestJobCoverageBadRegex(t *testing.T) {
	e := newEnv(t, nil)
	var logged bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logged, nil))
	j := store.Job{ID: 1, Spec: store.JobSpec{Pipeline: &store.PipelineJob{Coverage: `(\d+`}}}
	if got := e.c.jobCoverage(t.Context(), log, &j); got != "" {
		t.Errorf("jobCoverage with a bad regex = %q, want none", got)
	}
	if !strings.Contains(logged.String(), "level=WARN") || !strings.Contains(logged.String(), "bad regex") {
		t.Errorf("log = %q, want a warning about the regex", logged.String())
	}
}
