package junit

import (
	"bytes"
	"compress/gzip"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
)

const sample = `<?xml version="1.0" encoding="UTF-8"?>
<testsuites>
  <testsuite name="pkg/a" tests="4">
    <testcase name="TestOK" classname="pkg/a" time="0.5"/>
    <testcase name="TestBad" classname="pkg/a" time="1.25">
      <failure message="want 1, got 2" type="assert">a_test.go:12: want 1, got 2
more output</failure>
    </testcase>
    <testcase name="TestSkip" classname="pkg/a"><skipped/></testcase>
    <testcase name="TestPanic" classname="pkg/a"><error message="panic: boom">goroutine 1</error><system-out>x</system-out></testcase>
  </testsuite>
  <testsuite name="pkg/b"><testcase name="TestB" classname="pkg/b" time="2"/></testsuite>
</testsuites>`

func TestParse(t *testing.T) {
	t.Parallel()
	var rep Report
	if err := Parse(strings.NewReader(sample), Limits{}, &rep); err != nil {
		t.Fatalf("Parse = %v", err)
	}
	want := Report{Tests: 5, Failures: 1, Errors: 1, Skipped: 1, Time: 3.75, Cases: []Case{
		{Suite: "pkg/a", Name: "TestBad", Classname: "pkg/a", Kind: "failure", Type: "assert", Message: "want 1, got 2", Text: "a_test.go:12: want 1, got 2\nmore output", Time: 1.25},
		{Suite: "pkg/a", Name: "TestPanic", Classname: "pkg/a", Kind: "error", Message: "panic: boom", Text: "goroutine 1"},
	}}
	if diff := cmp.Diff(want, rep); diff != "" {
		t.Errorf("Parse (-want +got):\n%s", diff)
	}
	if rep.Passed() != 2 {
		t.Errorf("Passed = %d, want 2", rep.Passed())
	}
}

func TestParseBounds(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	b.WriteString("<testsuite name='s'>")
	for range 50 {
		b.WriteString("<testcase name='t'><failure message='m'>" + strings.Repeat("é", 100) + "</failure></testcase>")
	}
	b.WriteString("</testsuite>")
	for _, c := range []struct {
		name    string
		in      string
		lim     Limits
		cases   int
		tests   int
		cut     bool
		wantErr error
	}{
		{"failures capped", b.String(), Limits{MaxFailures: 3}, 3, 50, true, nil},
		{"text capped", b.String(), Limits{MaxText: 11}, 50, 50, false, nil},
		{"bytes capped", b.String(), Limits{MaxBytes: 500}, -1, -1, true, ErrTooLarge},
		{"deep", strings.Repeat("<a>", 100), Limits{MaxDepth: 10}, 0, 0, true, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			var rep Report
			err := Parse(strings.NewReader(c.in), c.lim, &rep)
			if c.wantErr != nil && !errors.Is(err, c.wantErr) {
				t.Fatalf("Parse = %v, want %v", err, c.wantErr)
			}
			if c.cases >= 0 && len(rep.Cases) != c.cases || c.tests >= 0 && rep.Tests != c.tests || rep.Cut != c.cut {
				t.Errorf("Parse: %d cases, %d tests, cut %v; want %d, %d, %v", len(rep.Cases), rep.Tests, rep.Cut, c.cases, c.tests, c.cut)
			}
			for _, cs := range rep.Cases {
				if c.lim.MaxText > 0 && len(cs.Text) > c.lim.MaxText+len("…") || !utf8.ValidString(cs.Text) {
					t.Errorf("text %q: longer than %d or not UTF-8", cs.Text, c.lim.MaxText)
				}
			}
		})
	}
}

// TestParseArtifactGzip: a gzip'd report of two files (two gzip
// members, as GitLab Runner uploads them) is read whole.
func TestParseArtifactGzip(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	for _, doc := range []string{sample, `<testsuite name="c"><testcase name="TestC"><failure message="no"/></testcase></testsuite>`} {
		zw := gzip.NewWriter(&buf)
		zw.Write([]byte(doc))
		zw.Close()
	}
	rep, err := ParseArtifact(bytes.NewReader(buf.Bytes()), int64(buf.Len()), "gzip", Limits{})
	if err != nil {
		t.Fatalf("ParseArtifact = %v", err)
	}
	if rep.Tests != 6 || rep.Failures != 2 || len(rep.Cases) != 3 || rep.Cases[2].Suite != "c" {
		t.Errorf("ParseArtifact = %+v; want 6 tests, 2 failures, 3 cases, the last of suite c", rep)
	}
	if _, err := ParseArtifact(bytes.NewReader(buf.Bytes()), int64(buf.Len()), "gzip", Limits{MaxBytes: 300}); !errors.Is(err, ErrTooLarge) {
		t.Errorf("ParseArtifact over 300 bytes = %v, want ErrTooLarge", err)
	}
	if _, err := ParseArtifact(strings.NewReader("not gzip"), 8, "gzip", Limits{}); err == nil {
		t.Error("ParseArtifact of a file that is not gzip = nil error")
	}
}

// FuzzJUnit: whatever the input, Parse stays within its bounds, keeps
// valid counts, and never panics.
func FuzzJUnit(f *testing.F) {
	for _, s := range []string{
		sample,
		"",
		"<testsuite><testcase><failure>",
		"<testcase name='a'><testcase name='b'><error/></testcase></testcase>",
		"<testsuites><testsuite name='x'><testcase name='\xff\xfe'><failure message='&lt;script&gt;'><![CDATA[<b>]]></failure></testcase></testsuite></testsuites>",
		"<?xml version='1.0' encoding='ISO-8859-1'?><testsuite><testcase/></testsuite>",
		"<a><b><c><d></d></c></b></a></a></a>",
		"<testsuite><testcase time='NaN'/><testcase time='-1'/><testcase time='1e400'/></testsuite>",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		lim := Limits{MaxBytes: 4 << 10, MaxFailures: 5, MaxText: 64, MaxDepth: 16}
		var rep Report
		_ = Parse(strings.NewReader(in), lim, &rep)
		if len(rep.Cases) > lim.MaxFailures {
			t.Fatalf("%d cases kept, more than %d", len(rep.Cases), lim.MaxFailures)
		}
		if rep.Failures+rep.Errors+rep.Skipped > rep.Tests || rep.Failures+rep.Errors < len(rep.Cases) {
			t.Fatalf("counts out of step: %+v", rep)
		}
		if rep.Time < 0 || rep.Time != rep.Time {
			t.Fatalf("time %v", rep.Time)
		}
		for _, c := range rep.Cases {
			if len(c.Text) > lim.MaxText+len("…") || len(c.Message) > lim.MaxText+len("…") {
				t.Fatalf("case %+v: text or message past %d bytes", c, lim.MaxText)
			}
			if c.Kind != "failure" && c.Kind != "error" {
				t.Fatalf("case kind %q", c.Kind)
			}
		}
	})
}
