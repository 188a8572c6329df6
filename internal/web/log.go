package web

import (
	"bytes"
	"regexp"
	"strconv"
	"time"
)

// The job log, parsed.
//
// GitLab's log format is terminal output with section markers:
//
//	section_start:<unix time>:<name>[collapsed=true]\r\033[0K<header>
//	...
//	section_end:<unix time>:<name>\r\033[0K
//
// Parser turns it into a sequence of Events: lines (as HTML), section
// starts and section ends. It is fed the log as it grows and keeps its
// state between feeds, so a live log is parsed once, chunk by chunk, and
// the state at any line boundary is the state of parsing everything
// before it: the page renders the log up to a line boundary and the live
// stream carries on from there.

// EventKind is what an Event is.
type EventKind uint8

// Kinds of Event.
const (
	// EventLine is one line; HTML is its content.
	EventLine EventKind = iota + 1
	// EventStart opens section Name; HTML is its header (the text after
	// the marker on the same line, often empty).
	EventStart
	// EventEnd closes section Name, Duration after its start.
	EventEnd
)

// Event is one element of a parsed log.
type Event struct {
	Kind EventKind
	// HTML is safe HTML made by the parser: escaped text in spans whose
	// classes name colours and attributes.
	HTML string
	// Name is the section's (a marker's name: [A-Za-z0-9_.-], at most
	// 100 bytes).
	Name string
	// Collapsed is set on a start whose marker asks for the section to be
	// shown collapsed ([collapsed=true]).
	Collapsed bool
	// Duration is an end's: the times of the two markers apart (never
	// negative).
	Duration time.Duration
	// End is the offset in the log just past the line the event came
	// from.
	End int64
}

// Limits of the parser: they bound its memory and the page's depth
// whatever the log holds.
const (
	// maxLine is the longest line; a longer one is split.
	maxLine = 64 << 10
	// maxDepth is how deeply sections nest; deeper markers are ignored.
	maxDepth = 32
	// maxSectionSecs caps a section's duration (about 136 years).
	maxSectionSecs = 1 << 32
)

var sectionRE = regexp.MustCompile(`section_(start|end):(\d{1,12}):([A-Za-z0-9_.-]{1,100})(\[[^\]\r\n]{0,200}\])?\r\x1b\[0K`)

// GitLab Runner 19 starts every line of a log, and every part of one
// after a carriage return, with a timestamp and a stream tag
// ("2025-07-04T10:08:01.123456Z 00O "). The page shows the line's time
// (UTC, to the second) in a span of its own and drops the rest.
var (
	stampRE      = regexp.MustCompile(`^[0-9]{4}-[0-9]{2}-[0-9]{2}T([0-9]{2}:[0-9]{2}:[0-9]{2})(?:\.[0-9]{1,9})?Z [0-9a-f]{2}[OE][ +]`)
	innerStampRE = regexp.MustCompile(`\r[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]{1,9})?Z [0-9a-f]{2}[OE][ +]`)
)

type openSection struct {
	name  string
	start int64 // unix seconds
}

// Parser parses a job log fed to it in pieces of any size. The zero value
// is not ready: use NewParser.
type Parser struct {
	ansi    *ansiHTML
	open    []openSection
	partial []byte // the line being read
	offset  int64  // bytes parsed into events: the end of the last line
}

// NewParser returns a Parser at the start of a log.
func NewParser() *Parser { return NewParserAt(0) }

// NewParserAt returns a Parser that starts at offset off of a log (a line
// boundary) as if it were the start: no colours, no sections open. Its
// offsets (Offset, Event.End) are the log's.
func NewParserAt(off int64) *Parser { return &Parser{ansi: newANSIHTML(), offset: off} }

// Offset is how much of the log the events so far cover: the end of the
// last complete line.
func (p *Parser) Offset() int64 { return p.offset }

// Depth is how many sections are open.
func (p *Parser) Depth() int { return len(p.open) }

// Feed parses b, the bytes that follow those fed before, and calls emit
// for the events of each complete line (a line longer than maxLine is
// complete at maxLine bytes).
func (p *Parser) Feed(b []byte, emit func(Event)) {
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		room := maxLine - len(p.partial)
		if i < 0 || i > room {
			if len(b) < room {
				p.partial = append(p.partial, b...)
				return
			}
			// A line of maxLine bytes, newline or not: parse it now.
			p.partial = append(p.partial, b[:room]...)
			b = b[room:]
			p.line(p.partial, int64(len(p.partial)), emit)
			p.partial = p.partial[:0]
			continue
		}
		var line []byte
		if len(p.partial) > 0 {
			p.partial = append(p.partial, b[:i]...)
			line = p.partial
		} else {
			line = b[:i]
		}
		p.line(line, int64(len(line))+1, emit)
		p.partial = p.partial[:0]
		b = b[i+1:]
	}
}

// Flush parses the last line, which has no newline: the log is over. The
// sections still open stay open.
func (p *Parser) Flush(emit func(Event)) {
	if len(p.partial) > 0 {
		p.line(p.partial, int64(len(p.partial)), emit)
		p.partial = p.partial[:0]
	}
}

// line parses one line of n bytes in the log (its newline counted).
func (p *Parser) line(b []byte, n int64, emit func(Event)) {
	p.offset += n
	end := p.offset
	stamp := ""
	if m := stampRE.FindSubmatchIndex(b); m != nil {
		// Digits and colons only: safe as it is.
		stamp = `<span class="ts">` + string(b[m[2]:m[3]]) + `</span>`
		b = b[m[1]:]
	}
	if bytes.IndexByte(b, '\r') >= 0 && innerStampRE.Match(b) {
		b = innerStampRE.ReplaceAll(b, []byte("\r"))
	}
	html := func(t []byte) string {
		if h := p.ansi.line(t); h != "" {
			return stamp + h
		}
		return "" // an empty header still shows its section's name
	}
	marks := sectionRE.FindAllSubmatchIndex(b, -1)
	if len(marks) == 0 {
		emit(Event{Kind: EventLine, HTML: html(b), End: end})
		return
	}
	// Text before the first marker is a line of its own; text after a
	// start marker is that section's header; text after an end marker is
	// a line again.
	if pre := b[:marks[0][0]]; len(trimCR(pre)) > 0 {
		emit(Event{Kind: EventLine, HTML: html(pre), End: end})
	}
	for k, m := range marks {
		textEnd := len(b)
		if k+1 < len(marks) {
			textEnd = marks[k+1][0]
		}
		text := b[m[1]:textEnd]
		kind := string(b[m[2]:m[3]])
		at, _ := strconv.ParseInt(string(b[m[4]:m[5]]), 10, 64)
		name := string(b[m[6]:m[7]])
		if kind == "start" {
			if len(p.open) >= maxDepth {
				if len(trimCR(text)) > 0 {
					emit(Event{Kind: EventLine, HTML: html(text), End: end})
				}
				continue
			}
			collapsed := m[8] >= 0 && bytes.Contains(b[m[8]:m[9]], []byte("collapsed=true"))
			p.open = append(p.open, openSection{name: name, start: at})
			emit(Event{Kind: EventStart, Name: name, Collapsed: collapsed, HTML: html(text), End: end})
			continue
		}
		p.end(name, at, end, emit)
		if len(trimCR(text)) > 0 {
			emit(Event{Kind: EventLine, HTML: html(text), End: end})
		}
	}
}

// PlainText appends to dst the text of line, one line of a job log
// without its newline, for matching it (the coverage: regex): without
// the timestamps GitLab Runner puts on lines, section markers, terminal
// escape sequences and carriage returns. Unlike a page, which shows what
// follows a carriage return over what comes before, it keeps both.
func PlainText(dst, line []byte) []byte {
	if m := stampRE.FindIndex(line); m != nil {
		line = line[m[1]:]
	}
	// Inner timestamps and section markers follow a carriage return:
	// most lines have none and skip the regexes.
	if bytes.IndexByte(line, '\r') >= 0 {
		if innerStampRE.Match(line) {
			line = innerStampRE.ReplaceAll(line, []byte("\r"))
		}
		if bytes.Contains(line, []byte("section_")) {
			line = sectionRE.ReplaceAll(line, nil)
		}
	}
	for i := 0; i < len(line); {
		switch c := line[i]; c {
		case 0x1b:
			n, _, _ := escapeSeq(line[i:])
			i += n
		case '\r':
			i++
		default:
			dst = append(dst, c)
			i++
		}
	}
	return dst
}

// end closes section name, and the sections opened in it that are still
// open; an end of no open section is ignored.
func (p *Parser) end(name string, at, end int64, emit func(Event)) {
	i := len(p.open) - 1
	for i >= 0 && p.open[i].name != name {
		i--
	}
	if i < 0 {
		return
	}
	for j := len(p.open) - 1; j >= i; j-- {
		s := p.open[j]
		// Clamped: marker times are up to 12 digits, far past what a
		// Duration holds in seconds.
		d := time.Duration(min(max(0, at-s.start), maxSectionSecs)) * time.Second
		emit(Event{Kind: EventEnd, Name: s.name, Duration: d, End: end})
	}
	p.open = p.open[:i]
}
