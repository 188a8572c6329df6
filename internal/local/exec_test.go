package local

import (
	"bytes"
	"strings"
	"testing"

	"github.com/drover-ci/drover/internal/client"
)

// TestPipelineSummaryCoverage: the summary shows a job's coverage in its
// row and the pipeline's on the last line; jobs without one leave the
// column empty, and a pipeline without one says nothing of it.
func TestPipelineSummaryCoverage(t *testing.T) {
	t.Parallel()
	exit := 0
	p := &client.Pipeline{ID: 7, Status: "success", Coverage: "89.23", Jobs: []client.Job{
		{ID: 1, Stage: "test", Name: "unit", Status: "success", ExitCode: &exit, Coverage: "78.46"},
		{ID: 2, Stage: "test", Name: "lint", Status: "success", ExitCode: &exit},
		{ID: 3, Stage: "test", Name: "e2e", Status: "failed", FailureReason: "script_failure", Coverage: "100"},
	}}
	var b bytes.Buffer
	PipelineSummary(&b, p)
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	want := []string{
		"STAGE  JOB   ID  STATUS   REASON          EXIT  TIME  COVERAGE",
		"test   unit  1   success                  0           78.46%",
		"test   lint  2   success                  0",
		"test   e2e   3   failed   script_failure              100%",
		"",
		"pipeline 7: success, coverage 89.23%",
	}
	for i := range lines {
		lines[i] = strings.TrimRight(lines[i], " ")
	}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Errorf("PipelineSummary =\n%s\nwant\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
	p.Coverage = ""
	b.Reset()
	PipelineSummary(&b, p)
	if !strings.HasSuffix(b.String(), "\npipeline 7: success\n") {
		t.Errorf("PipelineSummary without a pipeline coverage ends %q, want %q", b.String()[b.Len()-30:], "pipeline 7: success")
	}
}
