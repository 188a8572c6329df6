// Package junit reads JUnit XML test reports (GitLab's artifacts:reports:
// junit) for the web UI: the totals and the failed and errored test cases,
// read as a stream (encoding/xml's Decoder) within fixed bounds, whatever
// the report's size or shape. A report is outside input: a job writes it.
//
// # Bounds
//
// Limits caps the bytes read (decompressed), the failures kept, the text
// kept of each, and the nesting of elements. What is past a bound is
// counted where it can be (test cases and failures beyond MaxFailures are
// in the totals) and Report.Cut says that the report was cut.
package junit

import (
	"bufio"
	"compress/gzip"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/drover-ci/drover/internal/archive"
)

// Limits bounds Parse. Zero fields mean the defaults.
type Limits struct {
	MaxBytes    int64 // decompressed bytes read; default 32 MiB
	MaxFailures int   // failed or errored cases kept; default 100
	MaxText     int   // bytes kept of a failure's message and of its text; default 4 KiB
	MaxDepth    int   // element nesting; default 64
}

func (l Limits) withDefaults() Limits {
	if l.MaxBytes <= 0 {
		l.MaxBytes = 32 << 20
	}
	if l.MaxFailures <= 0 {
		l.MaxFailures = 100
	}
	if l.MaxText <= 0 {
		l.MaxText = 4 << 10
	}
	if l.MaxDepth <= 0 {
		l.MaxDepth = 64
	}
	return l
}

// Case is a failed or errored test case.
type Case struct {
	Suite     string // the innermost testsuite's name
	Name      string
	Classname string
	// Kind is "failure" (an assertion failed) or "error" (the test
	// could not run to its end).
	Kind    string
	Type    string // the failure's type attribute
	Message string // its message attribute
	Text    string // its text (a stack trace, the output), cut at Limits.MaxText
	Time    float64
}

// Report is what Parse read of a report.
type Report struct {
	Tests, Failures, Errors, Skipped int
	// Time is the sum of the test cases' times, in seconds.
	Time float64
	// Cases are the failed and errored cases, in the report's order, at
	// most Limits.MaxFailures.
	Cases []Case
	// Cut is set when the report went past a bound: more failures than
	// kept, more bytes than read.
	Cut bool
}

// Passed is the number of cases that neither failed, errored nor were
// skipped.
func (r *Report) Passed() int { return max(r.Tests-r.Failures-r.Errors-r.Skipped, 0) }

// ErrTooLarge is wrapped by Parse's error when the report is larger than
// Limits.MaxBytes: what was read before is in the Report.
var ErrTooLarge = errors.New("junit: report larger than the limit")

// Parse reads the JUnit XML report in r (one document, or several one
// after another) into rep, adding to what rep holds already (Parse is
// called once a file of a report of several files). On an error, rep
// holds what was read before it.
func Parse(r io.Reader, lim Limits, rep *Report) error {
	lim = lim.withDefaults()
	lr := &limitReader{r: r, n: lim.MaxBytes}
	d := xml.NewDecoder(bufio.NewReaderSize(lr, 32<<10))
	d.Strict = false // reports in the wild are not always well formed
	d.CharsetReader = func(charset string, in io.Reader) (io.Reader, error) {
		// Latin-1 and the like read as bytes: the text is shown, not
		// interpreted.
		return in, nil
	}
	p := parser{lim: lim, rep: rep}
	for {
		tok, err := d.Token()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			if lr.over {
				rep.Cut = true
				return fmt.Errorf("%w (%d bytes)", ErrTooLarge, lim.MaxBytes)
			}
			return fmt.Errorf("junit: %w", err)
		}
		if err := p.token(tok); err != nil {
			return err
		}
	}
}

// parser is Parse's state between tokens.
type parser struct {
	lim    Limits
	rep    *Report
	depth  int
	suites []string // names of the open testsuites
	inCase bool
	cur    Case // the open testcase
	// failed is set once the open testcase has a failure or error;
	// skipped once it was skipped.
	failed, skipped bool
	// text collects the open failure's text when kept (the case is among
	// the first MaxFailures); textDepth is its element's depth.
	text      *strings.Builder
	textDepth int
}

func attr(e xml.StartElement, name string) string {
	for _, a := range e.Attr {
		if a.Name.Local == name {
			return a.Value
		}
	}
	return ""
}

// clip is s cut to at most n bytes, at a rune boundary, "…" added when
// cut.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	i := n
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	s = s[:i]
	return s + "…"
}

func (p *parser) token(tok xml.Token) error {
	switch t := tok.(type) {
	case xml.StartElement:
		p.depth++
		if p.depth > p.lim.MaxDepth {
			p.rep.Cut = true
			return fmt.Errorf("junit: elements nested deeper than %d", p.lim.MaxDepth)
		}
		switch t.Name.Local {
		case "testsuite":
			p.suites = append(p.suites, clip(attr(t, "name"), 512))
		case "testcase":
			if p.inCase {
				break // a testcase in a testcase: not one of its own
			}
			p.inCase, p.failed, p.skipped = true, false, false
			p.cur = Case{Name: clip(attr(t, "name"), 1024), Classname: clip(attr(t, "classname"), 1024)}
			if n := len(p.suites); n > 0 {
				p.cur.Suite = p.suites[n-1]
			}
			if f, err := strconv.ParseFloat(attr(t, "time"), 64); err == nil && f >= 0 && f < 1e12 {
				p.cur.Time = f
			}
		case "failure", "error":
			if !p.inCase || p.failed {
				break // a second failure of a case counts once
			}
			p.failed = true
			p.cur.Kind = t.Name.Local
			p.cur.Type = clip(attr(t, "type"), 256)
			p.cur.Message = clip(attr(t, "message"), p.lim.MaxText)
			if len(p.rep.Cases) < p.lim.MaxFailures {
				p.text, p.textDepth = &strings.Builder{}, p.depth
			}
		case "skipped":
			if p.inCase {
				p.skipped = true
			}
		}
	case xml.CharData:
		if p.text != nil && p.text.Len() <= p.lim.MaxText {
			p.text.Write(t[:min(len(t), p.lim.MaxText+1-p.text.Len())])
		}
	case xml.EndElement:
		if p.text != nil && p.depth == p.textDepth {
			p.cur.Text = clip(strings.TrimSpace(p.text.String()), p.lim.MaxText)
			p.text = nil
		}
		switch t.Name.Local {
		case "testsuite":
			if n := len(p.suites); n > 0 {
				p.suites = p.suites[:n-1]
			}
		case "testcase":
			if p.inCase {
				p.endCase()
			}
		}
		p.depth--
	}
	return nil
}

// endCase counts the open testcase, and keeps it when it failed.
func (p *parser) endCase() {
	p.inCase = false
	r := p.rep
	r.Tests++
	r.Time += p.cur.Time
	switch {
	case p.failed && p.cur.Kind == "error":
		r.Errors++
	case p.failed:
		r.Failures++
	case p.skipped:
		r.Skipped++
	}
	if !p.failed {
		return
	}
	if len(r.Cases) < p.lim.MaxFailures {
		r.Cases = append(r.Cases, p.cur)
	} else {
		r.Cut = true
	}
}

// limitReader reads at most n bytes of r, and notes when there was more.
type limitReader struct {
	r    io.Reader
	n    int64
	over bool
}

func (l *limitReader) Read(p []byte) (int, error) {
	if l.n <= 0 {
		// One byte more tells a report of exactly n bytes from a
		// larger one.
		var b [1]byte
		if k, _ := l.r.Read(b[:]); k > 0 {
			l.over = true
			return 0, ErrTooLarge
		}
		return 0, io.EOF
	}
	if int64(len(p)) > l.n {
		p = p[:l.n]
	}
	n, err := l.r.Read(p)
	l.n -= int64(n)
	return n, err
}

// ParseArtifact reads a stored junit artifact of size bytes in r, in
// format (GitLab Runner's: "gzip", each file of the report one gzip
// member; "raw"; or "zip", each file an entry), into a Report. The bytes
// bound covers the whole artifact, decompressed.
func ParseArtifact(r io.ReaderAt, size int64, format string, lim Limits) (Report, error) {
	lim = lim.withDefaults()
	var rep Report
	sr := io.NewSectionReader(r, 0, size)
	switch format {
	case "gzip":
		br := bufio.NewReader(sr)
		zr, err := gzip.NewReader(br)
		if err != nil {
			return rep, fmt.Errorf("junit: %w", err)
		}
		defer zr.Close()
		budget := lim.MaxBytes
		for {
			zr.Multistream(false)
			counted := &countReader{r: zr}
			l := lim
			l.MaxBytes = budget
			err := Parse(counted, l, &rep)
			budget -= counted.n
			if err != nil {
				return rep, err
			}
			if err := zr.Reset(br); err == io.EOF {
				return rep, nil
			} else if err != nil {
				return rep, fmt.Errorf("junit: %w", err)
			}
			if budget <= 0 {
				rep.Cut = true
				return rep, fmt.Errorf("%w (%d bytes)", ErrTooLarge, lim.MaxBytes)
			}
		}
	case "zip":
		// The first MaxFiles entries: a report is a few files.
		const maxFiles = 100
		entries, total, err := archive.List(r, size, 0, maxFiles)
		if err != nil {
			return rep, fmt.Errorf("junit: %w", err)
		}
		if total > maxFiles {
			rep.Cut = true
		}
		budget := lim.MaxBytes
		for _, e := range entries {
			if e.IsDir() {
				continue
			}
			rc, _, err := archive.OpenEntry(r, size, e.Name)
			if err != nil {
				return rep, fmt.Errorf("junit: %s: %w", e.Name, err)
			}
			counted := &countReader{r: rc}
			l := lim
			l.MaxBytes = budget
			err = Parse(counted, l, &rep)
			rc.Close()
			budget -= counted.n
			if err != nil {
				return rep, err
			}
			if budget <= 0 {
				rep.Cut = true
				return rep, fmt.Errorf("%w (%d bytes)", ErrTooLarge, lim.MaxBytes)
			}
		}
		return rep, nil
	default:
		return rep, Parse(sr, lim, &rep)
	}
}

// countReader counts the bytes read through it.
type countReader struct {
	r io.Reader
	n int64
}

func (c *countReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}
