package forge

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

func badge(t *testing.T, label string, st PipelineStatus) string {
	t.Helper()
	var b bytes.Buffer
	if err := WriteBadge(&b, label, st); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func TestBadgeGolden(t *testing.T) {
	t.Parallel()
	const want = `<svg xmlns="http://www.w3.org/2000/svg" width="106" height="20" role="img" aria-label="pipeline: passed">` +
		`<title>pipeline: passed</title>` +
		`<linearGradient id="s" x2="0" y2="100%"><stop offset="0" stop-color="#bbb" stop-opacity=".1"/><stop offset="1" stop-opacity=".1"/></linearGradient>` +
		`<clipPath id="r"><rect width="106" height="20" rx="3" fill="#fff"/></clipPath>` +
		`<g clip-path="url(#r)"><rect width="54" height="20" fill="#555"/><rect x="54" width="52" height="20" fill="#4c1"/><rect width="106" height="20" fill="url(#s)"/></g>` +
		`<g fill="#fff" text-anchor="middle" font-family="Verdana,Geneva,DejaVu Sans,sans-serif" font-size="11">` +
		`<text x="27" y="15" fill="#010101" fill-opacity=".3">pipeline</text><text x="27" y="14">pipeline</text>` +
		`<text x="80" y="15" fill="#010101" fill-opacity=".3">passed</text><text x="80" y="14">passed</text></g></svg>` + "\n"
	// pipeline: 44px of text (p e n 7, i l 3), passed: 42px; 5px padding each side.
	if got := badge(t, "", StatusSuccess); got != want {
		t.Errorf("WriteBadge(\"\", success) =\n%s\nwant\n%s", got, want)
	}
	if badge(t, "", StatusSuccess) != badge(t, "pipeline", StatusSuccess) {
		t.Error("label \"\" is not \"pipeline\"")
	}
}

func TestBadgeStatuses(t *testing.T) {
	t.Parallel()
	widthRe := regexp.MustCompile(`<svg [^>]*width="(\d+)"`)
	for st, want := range map[PipelineStatus][2]string{
		StatusSuccess: {"passed", "#4c1"}, StatusFailed: {"failed", "#e05d44"}, StatusRunning: {"running", "#007ec6"},
		StatusPending: {"pending", "#dfb317"}, StatusCreated: {"created", "#dfb317"}, StatusScheduled: {"scheduled", "#dfb317"},
		StatusManual: {"manual", "#9f9f9f"}, StatusCanceled: {"canceled", "#9f9f9f"}, StatusSkipped: {"skipped", "#9f9f9f"},
		"<bogus>": {"unknown", "#9f9f9f"},
	} {
		svg := badge(t, "", st)
		if !strings.Contains(svg, `<text x="`) || !strings.Contains(svg, ">"+want[0]+"</text>") || !strings.Contains(svg, `fill="`+want[1]+`"`) {
			t.Errorf("badge of %q lacks text %q or colour %s:\n%s", st, want[0], want[1], svg)
		}
		if svg != badge(t, "", st) {
			t.Errorf("badge of %q differs between calls", st)
		}
		checkXML(t, svg)
		m := widthRe.FindStringSubmatch(svg)
		w, _ := strconv.Atoi(m[1])
		if want := 20 + textWidth("pipeline") + textWidth(want[0]); w != want {
			t.Errorf("badge of %q is %d wide, want %d", st, w, want)
		}
	}
	if badge(t, "", StatusRunning) == badge(t, "", StatusScheduled) {
		t.Error("different statuses give the same badge")
	}
}

func TestBadgeEscapesLabel(t *testing.T) {
	t.Parallel()
	svg := badge(t, `<script>&"x"</script>`, StatusFailed)
	if strings.Contains(svg, "<script>") {
		t.Fatalf("label not escaped:\n%s", svg)
	}
	if !strings.Contains(svg, "&lt;script&gt;&amp;&#34;x&#34;&lt;/script&gt;") {
		t.Errorf("label escaped unexpectedly:\n%s", svg)
	}
	checkXML(t, svg)
	if textWidth("build and deploy") <= textWidth("build") || textWidth("WWW") <= textWidth("iii") {
		t.Error("textWidth does not grow with the text")
	}
}

func TestBadgeWriteError(t *testing.T) {
	t.Parallel()
	want := errors.New("disk full")
	if err := WriteBadge(failWriter{want}, "", StatusSuccess); !errors.Is(err, want) {
		t.Errorf("WriteBadge = %v, want %v", err, want)
	}
}

type failWriter struct{ err error }

func (f failWriter) Write([]byte) (int, error) { return 0, f.err }

// checkXML fails unless svg is well-formed XML.
func checkXML(t *testing.T, svg string) {
	t.Helper()
	d := xml.NewDecoder(strings.NewReader(svg))
	for {
		_, err := d.Token()
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatalf("badge is not well-formed XML: %v\n%s", err, svg)
		}
	}
}
