package config

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// BurntSushi/toml does not expose the position of keys, so the lines that
// errors and warnings point at come from this small scanner. It only runs
// on input the TOML parser has already accepted, so it can be lenient: it
// must merely never panic or loop, and find the line of every key path it
// can. Paths are keyPath strings with array indexes ("runners[1].limit").

// keyPath is a key in the document: formatted keys, and "[i]" elements for
// array indexes.
type keyPath []string

func (p keyPath) key(k string) keyPath {
	return append(p[:len(p):len(p)], quoteKey(k))
}

func (p keyPath) index(i int) keyPath {
	return append(p[:len(p):len(p)], "["+strconv.Itoa(i)+"]")
}

func (p keyPath) String() string {
	var b strings.Builder
	for i, s := range p {
		if i > 0 && s[0] != '[' {
			b.WriteByte('.')
		}
		b.WriteString(s)
	}
	return b.String()
}

// quoteKey returns k as written in a key path: bare when TOML allows it,
// quoted otherwise.
func quoteKey(k string) string {
	if k == "" {
		return `""`
	}
	for i := 0; i < len(k); i++ {
		if !isBare(k[i]) {
			return strconv.Quote(k)
		}
	}
	return k
}

func isBare(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-'
}

// lineIndex maps keyPath strings to the 1-based line where the key (or
// table header) first appears.
type lineIndex map[string]int

// lineOf returns the line of p, or of its nearest ancestor that has one,
// or 0.
func (x lineIndex) lineOf(p keyPath) int {
	for n := len(p); n > 0; n-- {
		if l, ok := x[p[:n].String()]; ok {
			return l
		}
	}
	return 0
}

type lineScanner struct {
	s    string
	i    int
	line int
	idx  lineIndex
	aot  map[string]int // array-of-tables path -> number of elements so far
}

func indexLines(src string) lineIndex {
	sc := &lineScanner{
		s:    strings.TrimPrefix(src, "\ufeff"),
		line: 1,
		idx:  lineIndex{},
		aot:  map[string]int{},
	}
	sc.document()
	return sc.idx
}

func (sc *lineScanner) eof() bool { return sc.i >= len(sc.s) }

func (sc *lineScanner) peek() byte {
	if sc.eof() {
		return 0
	}
	return sc.s[sc.i]
}

// next consumes one byte, counting lines.
func (sc *lineScanner) next() {
	if sc.eof() {
		return
	}
	if sc.s[sc.i] == '\n' {
		sc.line++
	}
	sc.i++
}

func (sc *lineScanner) mark(p keyPath, line int) {
	k := p.String()
	if _, ok := sc.idx[k]; !ok {
		sc.idx[k] = line
	}
}

func (sc *lineScanner) skipSpace() {
	for c := sc.peek(); c == ' ' || c == '\t'; c = sc.peek() {
		sc.i++
	}
}

// skipBlank skips whitespace, newlines and comments.
func (sc *lineScanner) skipBlank() {
	for !sc.eof() {
		switch sc.peek() {
		case ' ', '\t', '\r', '\n':
			sc.next()
		case '#':
			sc.skipLine()
		default:
			return
		}
	}
}

// skipLine moves to the newline ending the current line (not past it).
func (sc *lineScanner) skipLine() {
	for !sc.eof() && sc.peek() != '\n' {
		sc.i++
	}
}

func (sc *lineScanner) document() {
	var table keyPath
	for !sc.eof() {
		start := sc.i
		sc.skipSpace()
		switch c := sc.peek(); {
		case sc.eof():
		case c == '\n' || c == '\r':
			sc.next()
		case c == '#':
			sc.skipLine()
		case c == '[':
			table = sc.header()
		default:
			line := sc.line
			keys := sc.key()
			if len(keys) == 0 {
				sc.skipLine()
				break
			}
			p := table
			for _, k := range keys {
				p = p.key(k)
				sc.mark(p, line)
			}
			sc.skipSpace()
			if sc.peek() == '=' {
				sc.i++
			}
			sc.skipSpace()
			sc.value(p, 0)
		}
		if sc.i == start {
			sc.next() // never loop on input the grammar above does not expect
		}
	}
}

// header reads a [table] or [[array]] header and returns the path of the
// table it opens.
func (sc *lineScanner) header() keyPath {
	line := sc.line
	array := strings.HasPrefix(sc.s[sc.i:], "[[")
	if array {
		sc.i += 2
	} else {
		sc.i++
	}
	keys := sc.key()
	sc.skipLine()
	if len(keys) == 0 {
		return nil
	}
	if !array {
		p := sc.resolve(keys, line)
		return p
	}
	full := sc.resolve(keys[:len(keys)-1], line).key(keys[len(keys)-1])
	n := sc.aot[full.String()]
	sc.aot[full.String()] = n + 1
	sc.mark(full, line)
	p := full.index(n)
	sc.mark(p, line)
	return p
}

// resolve turns header keys into a path, pointing every array of tables
// on the way at its latest element, and marks the tables it passes.
func (sc *lineScanner) resolve(keys []string, line int) keyPath {
	var p keyPath
	for _, k := range keys {
		p = p.key(k)
		if n, ok := sc.aot[p.String()]; ok && n > 0 {
			p = p.index(n - 1)
		}
		sc.mark(p, line)
	}
	return p
}

// key reads a possibly dotted key and returns its parts.
func (sc *lineScanner) key() []string {
	var keys []string
	for {
		sc.skipSpace()
		var k string
		switch c := sc.peek(); {
		case sc.eof():
			return keys
		case c == '"' || c == '\'':
			k = sc.str()
		case isBare(c):
			start := sc.i
			for !sc.eof() && isBare(sc.peek()) {
				sc.i++
			}
			k = sc.s[start:sc.i]
		default:
			return keys
		}
		keys = append(keys, k)
		sc.skipSpace()
		if sc.peek() != '.' {
			return keys
		}
		sc.i++
	}
}

// maxDepth bounds the recursion into nested arrays and inline tables.
const maxDepth = 1000

// value skips one value, marking the keys and array elements inside it.
func (sc *lineScanner) value(p keyPath, depth int) {
	if depth > maxDepth {
		sc.skipLine()
		return
	}
	switch sc.peek() {
	case '"', '\'':
		sc.str()
	case '[':
		sc.i++
		n := 0
		sc.items(']', func() {
			e := p.index(n)
			sc.mark(e, sc.line)
			sc.value(e, depth+1)
			n++
		})
	case '{':
		sc.i++
		sc.items('}', func() {
			line := sc.line
			q := p
			for _, k := range sc.key() {
				q = q.key(k)
				sc.mark(q, line)
			}
			sc.skipSpace()
			if sc.peek() == '=' {
				sc.i++
				sc.skipSpace()
				sc.value(q, depth+1)
			}
		})
	default:
		for !sc.eof() && !strings.ContainsRune(",]}\r\n#", rune(sc.peek())) {
			sc.i++
		}
	}
}

// items scans the items of an array or an inline table, from past its
// opening bracket to past its closing one, end; item scans one, and a byte
// is skipped when it did not move on.
func (sc *lineScanner) items(end byte, item func()) {
	for {
		sc.skipBlank()
		switch sc.peek() {
		case 0:
			if sc.eof() {
				return
			}
		case end:
			sc.i++
			return
		case ',':
			sc.i++
			continue
		}
		start := sc.i
		item()
		if sc.i == start {
			sc.next()
		}
	}
}

// str reads a string of any of TOML's four kinds and returns its value
// (escapes decoded for basic strings; multi-line strings return "", they
// cannot be keys).
func (sc *lineScanner) str() string {
	q := sc.peek()
	triple := strings.Repeat(string(q), 3)
	if strings.HasPrefix(sc.s[sc.i:], triple) {
		sc.i += 3
		for !sc.eof() {
			if q == '"' && sc.peek() == '\\' {
				sc.i++
				sc.next()
				continue
			}
			if strings.HasPrefix(sc.s[sc.i:], triple) {
				sc.i += 3
				// Up to two more quotes belong to the content.
				for n := 0; n < 2 && sc.peek() == q; n++ {
					sc.i++
				}
				return ""
			}
			sc.next()
		}
		return ""
	}
	sc.i++
	var b strings.Builder
	for !sc.eof() {
		c := sc.peek()
		switch {
		case c == q:
			sc.i++
			return b.String()
		case c == '\n':
			return b.String()
		case c == '\\' && q == '"':
			sc.i++
			sc.escape(&b)
		default:
			b.WriteByte(c)
			sc.i++
		}
	}
	return b.String()
}

// escape decodes the escape sequence after a backslash.
func (sc *lineScanner) escape(b *strings.Builder) {
	c := sc.peek()
	if sc.eof() {
		return
	}
	sc.i++
	switch c {
	case 'b':
		b.WriteByte('\b')
	case 't':
		b.WriteByte('\t')
	case 'n':
		b.WriteByte('\n')
	case 'f':
		b.WriteByte('\f')
	case 'r':
		b.WriteByte('\r')
	case 'e':
		b.WriteByte(0x1b)
	case 'x', 'u', 'U':
		n := map[byte]int{'x': 2, 'u': 4, 'U': 8}[c]
		if sc.i+n > len(sc.s) {
			sc.i = len(sc.s)
			return
		}
		r, err := strconv.ParseUint(sc.s[sc.i:sc.i+n], 16, 32)
		sc.i += n
		if err == nil && utf8.ValidRune(rune(r)) {
			b.WriteRune(rune(r))
		}
	default:
		b.WriteByte(c)
	}
}

// KeyLine locates a key of this runner for messages about the raw
// sub-tables (Machine, Autoscaler, ...) that other packages interpret. key
// is relative to the runner, with dots between keys and [i] for array
// elements ("machine.autoscaling[1].Periods"). It returns the key's full
// path as Error.Key spells it ("runners[0].machine.autoscaling[1].Periods")
// and the 1-based line where it, or its nearest written ancestor, appears;
// line is 0 when unknown (for example for a RunnerConfig not made by
// Parse, whose path is then key itself).
func (r *RunnerConfig) KeyLine(key string) (path string, line int) {
	p := append(r.path[:len(r.path):len(r.path)], splitKey(key)...)
	return p.String(), r.lines.lineOf(p)
}

// splitKey turns "a.b[2].\"c.d\"" into keyPath elements. Quoted parts are
// kept as written, which is how quoteKey spells keys that need quotes.
func splitKey(key string) keyPath {
	var p keyPath
	for i := 0; i < len(key); {
		switch c := key[i]; {
		case c == '.':
			i++
		case c == '[':
			j := strings.IndexByte(key[i:], ']')
			if j < 0 {
				j = len(key) - i - 1
			}
			p = append(p, key[i:i+j+1])
			i += j + 1
		case c == '"':
			j := i + 1
			for j < len(key) && key[j] != '"' {
				if key[j] == '\\' {
					j++
				}
				j++
			}
			j = min(j+1, len(key))
			p = append(p, key[i:j])
			i = j
		default:
			j := i
			for j < len(key) && key[j] != '.' && key[j] != '[' {
				j++
			}
			p = append(p, quoteKey(key[i:j]))
			i = j
		}
	}
	return p
}
