package web

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// ANSI to HTML.
//
// A job log is written by the job: everything in it is attacker-controlled.
// The converter therefore builds its output from two things only: text,
// escaped by escapeText, and <span class="..."> elements whose class names
// it makes itself from numbers it parsed. Colours become classes (style.css
// colours them), never style attributes: the Content-Security-Policy
// allows no inline style.

// Style flags of SGR attributes.
const (
	attrBold uint8 = 1 << iota
	attrFaint
	attrItalic
	attrUnderline
	attrStrike
)

// style is the graphic rendition in effect: colours 0-255, or -1 for the
// terminal's default, and attribute flags.
type style struct {
	fg, bg int16
	attrs  uint8
}

var plain = style{fg: -1, bg: -1}

// classes is the class attribute of a span in style s ("" for plain).
func (s style) classes() string {
	var b strings.Builder
	add := func(c string) {
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(c)
	}
	if s.fg >= 0 {
		add("fg-" + strconv.Itoa(int(s.fg)))
	}
	if s.bg >= 0 {
		add("bg-" + strconv.Itoa(int(s.bg)))
	}
	for _, a := range []struct {
		flag uint8
		name string
	}{{attrBold, "bold"}, {attrFaint, "faint"}, {attrItalic, "italic"}, {attrUnderline, "underline"}, {attrStrike, "strike"}} {
		if s.attrs&a.flag != 0 {
			add(a.name)
		}
	}
	return b.String()
}

// sgr applies the parameters of one SGR sequence (ESC [ params m).
func (s *style) sgr(params string) {
	if params == "" {
		*s = plain
		return
	}
	// Sub-parameters (38:5:n) are read as parameters (38;5;n).
	ps := strings.FieldsFunc(params, func(r rune) bool { return r == ';' || r == ':' })
	if len(ps) == 0 { // only separators: resets, as "0;" does
		*s = plain
		return
	}
	num := func(i int) int {
		if i >= len(ps) {
			return -1
		}
		n, err := strconv.Atoi(ps[i])
		if err != nil || n > 255 {
			return -1
		}
		return n
	}
	for i := 0; i < len(ps); i++ {
		n := num(i)
		switch {
		case n == 0:
			*s = plain
		case n == 1:
			s.attrs |= attrBold
		case n == 2:
			s.attrs |= attrFaint
		case n == 3:
			s.attrs |= attrItalic
		case n == 4:
			s.attrs |= attrUnderline
		case n == 9:
			s.attrs |= attrStrike
		case n == 21 || n == 22:
			s.attrs &^= attrBold | attrFaint
		case n == 23:
			s.attrs &^= attrItalic
		case n == 24:
			s.attrs &^= attrUnderline
		case n == 29:
			s.attrs &^= attrStrike
		case n >= 30 && n <= 37:
			s.fg = int16(n - 30)
		case n == 39:
			s.fg = -1
		case n >= 40 && n <= 47:
			s.bg = int16(n - 40)
		case n == 49:
			s.bg = -1
		case n >= 90 && n <= 97:
			s.fg = int16(n - 90 + 8)
		case n >= 100 && n <= 107:
			s.bg = int16(n - 100 + 8)
		case n == 38 || n == 48:
			// 38;5;n is a 256-colour index; 38;2;r;g;b a true colour,
			// which has no class: it is skipped, the colour left as is.
			c := -1
			switch num(i + 1) {
			case 5:
				c = num(i + 2)
				i += 2
			case 2:
				i += 4
			default:
				i = len(ps)
			}
			if c >= 0 && n == 38 {
				s.fg = int16(c)
			} else if c >= 0 {
				s.bg = int16(c)
			}
		}
	}
}

// ansiHTML converts lines of terminal output to HTML. Its style carries
// over from one line to the next, as a terminal's does.
type ansiHTML struct {
	cur style
}

func newANSIHTML() *ansiHTML { return &ansiHTML{cur: plain} }

// line returns the HTML of one line (without its newline). A carriage
// return starts the line over, as on a terminal that then overwrites it;
// escape sequences other than colours and other control characters but
// tab are dropped.
func (a *ansiHTML) line(b []byte) string {
	b = trimCR(b)
	var out strings.Builder
	open := false // a span is open in out
	var text []byte
	flush := func() {
		if len(text) == 0 {
			return
		}
		if !open && a.cur != plain {
			out.WriteString(`<span class="`)
			out.WriteString(a.cur.classes())
			out.WriteString(`">`)
			open = true
		}
		escapeText(&out, text)
		text = text[:0]
	}
	setStyle := func(s style) {
		if s == a.cur {
			return
		}
		flush()
		if open {
			out.WriteString("</span>")
			open = false
		}
		a.cur = s
	}
	for i := 0; i < len(b); {
		c := b[i]
		switch {
		case c == 0x1b:
			n, params, final := escapeSeq(b[i:])
			if final == 'm' {
				s := a.cur
				s.sgr(params)
				setStyle(s)
			}
			i += n
		case c == '\r':
			text = text[:0]
			if open {
				open = false
			}
			out.Reset()
			i++
		case c == '\t' || c >= 0x20 && c != 0x7f:
			text = append(text, c)
			i++
		default: // other control characters
			i++
		}
	}
	flush()
	if open {
		out.WriteString("</span>")
	}
	return out.String()
}

// trimCR drops the carriage returns that end a line (CRLF line ends).
func trimCR(b []byte) []byte {
	for len(b) > 0 && b[len(b)-1] == '\r' {
		b = b[:len(b)-1]
	}
	return b
}

// escapeSeq measures the escape sequence at the start of b (b[0] is ESC):
// its length, and for a CSI sequence (ESC [) its parameters and final
// byte. An unterminated sequence runs to the end of b.
func escapeSeq(b []byte) (n int, params string, final byte) {
	if len(b) < 2 {
		return len(b), "", 0
	}
	switch b[1] {
	case '[':
		i := 2
		for i < len(b) && b[i] >= 0x30 && b[i] <= 0x3f {
			i++
		}
		p := string(b[2:i])
		for i < len(b) && b[i] >= 0x20 && b[i] <= 0x2f {
			i++
		}
		if i < len(b) && b[i] >= 0x40 && b[i] <= 0x7e {
			return i + 1, p, b[i]
		}
		return i, "", 0
	case ']', 'P', '_', '^':
		// OSC and other strings: up to BEL or ST (ESC \).
		for i := 2; i < len(b); i++ {
			if b[i] == 0x07 {
				return i + 1, "", 0
			}
			if b[i] == 0x1b && i+1 < len(b) && b[i+1] == '\\' {
				return i + 2, "", 0
			}
		}
		return len(b), "", 0
	}
	return 2, "", 0
}

// escapeText writes text to out escaped for HTML element content and
// attribute values, invalid UTF-8 replaced by U+FFFD.
func escapeText(out *strings.Builder, text []byte) {
	for len(text) > 0 {
		r, size := utf8.DecodeRune(text)
		text = text[size:]
		switch r {
		case '<':
			out.WriteString("&lt;")
		case '>':
			out.WriteString("&gt;")
		case '&':
			out.WriteString("&amp;")
		case '"':
			out.WriteString("&#34;")
		case '\'':
			out.WriteString("&#39;")
		default:
			out.WriteRune(r) // utf8.RuneError for invalid bytes
		}
	}
}
