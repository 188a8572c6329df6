package trace

import (
	"bytes"
	"math"
	"slices"
)

// MaxTokenBody is the most bytes of a token's body (the part after its
// prefix) that are masked. It bounds how much a Buffer holds back while a
// token is not yet terminated; token characters beyond it are treated as
// ordinary text.
const MaxTokenBody = 1024

// maskedText replaces a masked value, or a token's body.
const maskedText = "[MASKED]"

// isTokenChar tells the characters a token's body is made of: [A-Za-z0-9_-].
var isTokenChar = func() (t [256]bool) {
	for c := 'a'; c <= 'z'; c++ {
		t[c] = true
	}
	for c := 'A'; c <= 'Z'; c++ {
		t[c] = true
	}
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	t['_'] = true
	t['-'] = true
	return t
}()

// matcher masks data as it streams in. It is not safe for concurrent use;
// the Buffer serialises access to it.
type matcher struct {
	secrets  [][]byte // masked values, deduplicated, none empty
	prefixes [][]byte // token prefixes, deduplicated, none empty
	patterns [][]byte // secrets followed by prefixes
	// needles are what mask searches for: each pattern starts with one of
	// them. Patterns that share a prefix of two bytes or more share the
	// needle of their common prefix, so that, for example, the many
	// "gl...-" token prefixes cost one search and not one each.
	needles []needle
	next    []int // scratch for mask: next occurrence of each needle
}

// newMatcher returns a matcher for the given masked values and token
// prefixes; empty strings and duplicates are ignored.
func newMatcher(secrets, prefixes []string) *matcher {
	m := &matcher{}
	m.add(secrets, prefixes)
	return m
}

func (m *matcher) add(secrets, prefixes []string) {
	m.secrets = appendUnique(m.secrets, secrets)
	m.prefixes = appendUnique(m.prefixes, prefixes)
	m.patterns = append(append(m.patterns[:0:0], m.secrets...), m.prefixes...)
	m.needles = makeNeedles(m.patterns)
	m.next = make([]int, len(m.needles))
}

// makeNeedles groups the patterns by common prefixes of at least two bytes
// and returns a needle for each group.
func makeNeedles(patterns [][]byte) []needle {
	sorted := slices.Clone(patterns)
	slices.SortFunc(sorted, bytes.Compare)
	var needles []needle
	for i := 0; i < len(sorted); {
		common := sorted[i]
		j := i + 1
		for ; j < len(sorted); j++ {
			l := commonPrefix(common, sorted[j])
			if l < 2 {
				break
			}
			common = common[:l]
		}
		needles = append(needles, newNeedle(common))
		i = j
	}
	return needles
}

func commonPrefix(a, b []byte) int {
	n := min(len(a), len(b))
	for i := range n {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}

func appendUnique(dst [][]byte, values []string) [][]byte {
outer:
	for _, v := range values {
		if v == "" {
			continue
		}
		for _, d := range dst {
			if string(d) == v {
				continue outer
			}
		}
		dst = append(dst, []byte(v))
	}
	return dst
}

// mask appends the masked form of the head of buf that can be decided now
// to dst. It returns dst and how many bytes of buf it consumed; the rest of
// buf must be held back and passed again, followed by more data. With final
// set, the end of buf is the end of the log and all of buf is consumed.
func (m *matcher) mask(dst, buf []byte, final bool) ([]byte, int) {
	n := len(buf)
	if len(m.patterns) == 0 {
		return append(dst, buf...), n
	}
	next := m.next
	for k := range next {
		next[k] = -1 // unknown
	}
	partial := -1 // unknown
	i := 0
	for i < n {
		// c: the first position at or after i where something may match.
		c := n
		for k := range m.needles {
			if next[k] < i {
				if x := m.needles[k].index(buf[i:]); x >= 0 {
					next[k] = i + x
				} else {
					next[k] = math.MaxInt // never again in this buf
				}
			}
			c = min(c, next[k])
		}
		if !final {
			if partial < i {
				partial = m.partialAt(buf, i)
			}
			c = min(c, partial)
		}
		dst = append(dst, buf[i:c]...)
		i = c
		if i >= n {
			break
		}
		l, prefix, ok := m.decide(buf[i:], final)
		switch {
		case !ok:
			return dst, i
		case l == 0:
			dst = append(dst, buf[i])
			i++
		default:
			dst = append(append(dst, prefix...), maskedText...)
			i += l
		}
	}
	return dst, n
}

// partialAt returns the first position t >= from such that buf[t:] is a
// proper prefix of a pattern, or len(buf) if there is none.
func (m *matcher) partialAt(buf []byte, from int) int {
	n := len(buf)
	best := n
	for _, p := range m.patterns {
		// buf[t:] is shorter than p: t > n-len(p).
		t := max(from, n-len(p)+1)
		for t < best {
			x := bytes.IndexByte(buf[t:best], p[0])
			if x < 0 {
				break
			}
			t += x
			if bytes.HasPrefix(p, buf[t:]) {
				best = t
				break
			}
			t++
		}
	}
	return best
}

// decide looks at the start of rest for the longest match. It returns the
// match's length (0 for none), the token prefix to keep visible (nil for a
// masked value), and ok false if more data could still make a longer match.
func (m *matcher) decide(rest []byte, final bool) (l int, prefix []byte, ok bool) {
	isToken := false
	for _, s := range m.secrets {
		if len(rest) < len(s) {
			if !final && bytes.HasPrefix(s, rest) {
				return 0, nil, false
			}
			continue
		}
		if len(s) > l && bytes.HasPrefix(rest, s) {
			l = len(s)
		}
	}
	for _, p := range m.prefixes {
		if len(rest) < len(p) {
			if !final && bytes.HasPrefix(p, rest) {
				return 0, nil, false
			}
			continue
		}
		if !bytes.HasPrefix(rest, p) {
			continue
		}
		body := tokenBody(rest[len(p):])
		if !final && body < MaxTokenBody && len(p)+body == len(rest) {
			return 0, nil, false // the token may go on
		}
		if body == 0 {
			continue
		}
		tl := len(p) + body
		if tl > l || (tl == l && isToken && len(p) > len(prefix)) {
			l, prefix, isToken = tl, p, true
		}
	}
	return l, prefix, true
}

// tokenBody returns the length of the run of token characters that starts
// b, at most MaxTokenBody.
func tokenBody(b []byte) int {
	b = b[:min(len(b), MaxTokenBody)]
	for i, c := range b {
		if !isTokenChar[c] {
			return i
		}
	}
	return len(b)
}

// needle finds a byte string fast in log text: instead of scanning for its
// first byte, which may be a common letter, it scans for its rarest byte
// (by a rough estimate of byte frequencies in logs) and checks the string
// around each hit, falling back on bytes.Index when hits are mostly false.
type needle struct {
	s      []byte
	anchor int // offset in s of its rarest byte
}

func newNeedle(s []byte) needle {
	n := needle{s: s}
	for i, c := range s {
		if byteRank[c] < byteRank[s[n.anchor]] {
			n.anchor = i
		}
	}
	return n
}

// index returns the offset of the first occurrence of n.s in h, or -1.
func (n *needle) index(h []byte) int {
	if len(n.s) <= 1 || len(h) <= 64 {
		return bytes.Index(h, n.s)
	}
	// An occurrence at p has its anchor at p+a; scan anchors in [a, end).
	a, c := n.anchor, n.s[n.anchor]
	end := len(h) - len(n.s) + a + 1
	fails := 0
	for i := a; i < end; {
		x := bytes.IndexByte(h[i:end], c)
		if x < 0 {
			return -1
		}
		p := i + x - a
		if bytes.Equal(h[p:p+len(n.s)], n.s) {
			return p
		}
		i += x + 1
		if fails++; fails > 8+i>>4 {
			if x := bytes.Index(h[i-a:], n.s); x >= 0 {
				return i - a + x
			}
			return -1
		}
	}
	return -1
}

// byteRank estimates how common a byte is in job logs: the higher the more
// common. Bytes not listed (control characters, non-ASCII, rare
// punctuation) rank 0.
var byteRank = func() (r [256]int) {
	// From the most common to the least.
	const common = " etaoinsrlcdhupmgf\n.b/_-y0w1k:v2=x3,()4\"5[]986'7TSAECIRNDPLMOFBG" +
		"UHWVjqz;KYJ<>XQZ+*#@$%&!?|{}~^`\t\\\r"
	for i := 0; i < len(common); i++ {
		r[common[i]] = len(common) - i
	}
	return r
}()
