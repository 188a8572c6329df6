package trace_test

import (
	"bytes"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/drover-ci/drover/internal/trace"
	"github.com/google/go-cmp/cmp"
)

// maskAll is the reference: the whole log masked at once, written plainly
// from the definition in the package documentation.
func maskAll(in []byte, secrets, prefixes []string) []byte {
	var out []byte
	for i := 0; i < len(in); {
		best, bestPrefix, isToken := 0, "", false
		for _, s := range secrets {
			if s != "" && len(s) > best && bytes.HasPrefix(in[i:], []byte(s)) {
				best = len(s)
			}
		}
		for _, p := range prefixes {
			if p == "" || !bytes.HasPrefix(in[i:], []byte(p)) {
				continue
			}
			j := i + len(p)
			for j < len(in) && j-i-len(p) < trace.MaxTokenBody && isTokenChar(in[j]) {
				j++
			}
			l := j - i
			if l == len(p) {
				continue
			}
			if l > best || (l == best && isToken && len(p) > len(bestPrefix)) {
				best, bestPrefix, isToken = l, p, true
			}
		}
		if best == 0 {
			out = append(out, in[i])
			i++
			continue
		}
		if isToken {
			out = append(out, bestPrefix...)
		}
		out = append(out, "[MASKED]"...)
		i += best
	}
	return out
}

func isTokenChar(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-'
}

func newBuffer(t testing.TB, opts trace.Options) *trace.Buffer {
	t.Helper()
	if opts.Dir == "" {
		opts.Dir = t.TempDir()
	}
	b, err := trace.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Error(err)
		}
	})
	return b
}

// contents reads all stored bytes with ReadAt.
func contents(t testing.TB, b *trace.Buffer) []byte {
	t.Helper()
	size := b.Size()
	p := make([]byte, size+10)
	n, err := b.ReadAt(p, 0)
	if err != io.EOF && !(err == nil && size == 0) {
		t.Fatalf("ReadAt: n=%d err=%v, want io.EOF", n, err)
	}
	if int64(n) != size {
		t.Fatalf("ReadAt read %d bytes, Size %d", n, size)
	}
	return p[:n]
}

// writeSplit writes in as chunks ending at the given offsets, then the rest.
func writeSplit(t testing.TB, b *trace.Buffer, in []byte, cuts ...int) {
	t.Helper()
	prev := 0
	for _, c := range append(cuts, len(in)) {
		if c < prev {
			continue
		}
		n, err := b.Write(in[prev:c])
		if err != nil || n != c-prev {
			t.Fatalf("Write(%q) = %d, %v", in[prev:c], n, err)
		}
		prev = c
	}
}

var maskCases = []struct {
	name     string
	masked   []string
	prefixes []string
	in, want string
}{
	{"none", nil, nil, "hello world\n", "hello world\n"},
	{"empty masked value ignored", []string{""}, []string{""}, "hello\n", "hello\n"},
	{"one secret", []string{"s3cr3t"}, nil, "pw=s3cr3t\n", "pw=[MASKED]\n"},
	{"secret twice", []string{"s3cr3t"}, nil, "s3cr3ts3cr3t s3cr3", "[MASKED][MASKED] s3cr3"},
	{"secret at the very end", []string{"s3cr3t"}, nil, "pw=s3cr3t", "pw=[MASKED]"},
	{"prefix of secret at the end", []string{"s3cr3t"}, nil, "pw=s3cr3", "pw=s3cr3"},
	{"multiple secrets", []string{"alpha", "bravo"}, nil, "alpha,bravo;alphabravo", "[MASKED],[MASKED];[MASKED][MASKED]"},
	{"nested: longest wins", []string{"abc", "abcdef"}, nil, "abcdefg abcde", "[MASKED]g [MASKED]de"},
	{"overlapping: leftmost wins", []string{"abcd", "cdef"}, nil, "abcdef", "[MASKED]ef"},
	{"overlapping secret starting inside a partial one", []string{"aab"}, nil, "aaab", "a[MASKED]"},
	{"self overlapping", []string{"aaa"}, nil, "aaaaaaa", "[MASKED][MASKED]a"},
	{"token", nil, []string{"glpat-"}, "t=glpat-AbC_12-x9.", "t=glpat-[MASKED]."},
	{"token at the end", nil, []string{"glpat-"}, "t=glpat-AbC", "t=glpat-[MASKED]"},
	{"token prefix without body", nil, []string{"glpat-"}, "glpat- glpat-", "glpat- glpat-"},
	{"token prefix cut at the end", nil, []string{"glpat-"}, "x glpa", "x glpa"},
	{"two token kinds", nil, []string{"glpat-", "glrt-"}, "glrt-abc glpat-def\n", "glrt-[MASKED] glpat-[MASKED]\n"},
	{"longer prefix wins a tie", nil, []string{"gl", "glpat-"}, "glpat-x gla", "glpat-[MASKED] gl[MASKED]"},
	{"masked value wins a tie with a token", []string{"glpat-abc"}, []string{"glpat-"}, "glpat-abc glpat-abcd", "[MASKED] glpat-[MASKED]"},
	{"longer token beats a masked value", []string{"glpat-ab"}, []string{"glpat-"}, "glpat-abc", "glpat-[MASKED]"},
	{"longer masked value beats a token", []string{"glpat-ab cd"}, []string{"glpat-"}, "glpat-ab cd", "[MASKED]"},
	{"secret in a token body", []string{"abc"}, []string{"tok-"}, "tok-xabcx abc", "tok-[MASKED] [MASKED]"},
	{"token body limit", nil, []string{"t-"}, "t-" + strings.Repeat("a", trace.MaxTokenBody+3) + " ", "t-[MASKED]aaa "},
	{"multi-line secret", []string{"line1\nline2"}, nil, "a line1\nline2 b", "a [MASKED] b"},
	{"binary", []string{"\x00\xff"}, nil, "\x00\x00\xff\xff", "\x00[MASKED]\xff"},
}

func TestMaskReference(t *testing.T) {
	for _, tc := range maskCases {
		got := string(maskAll([]byte(tc.in), tc.masked, tc.prefixes))
		if got != tc.want {
			t.Errorf("%s: maskAll = %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestMask(t *testing.T) {
	for _, tc := range maskCases {
		t.Run(tc.name, func(t *testing.T) {
			in := []byte(tc.in)
			check := func(t *testing.T, cuts ...int) {
				t.Helper()
				b := newBuffer(t, trace.Options{Masked: tc.masked, TokenPrefixes: tc.prefixes})
				writeSplit(t, b, in, cuts...)
				b.Finish()
				if diff := cmp.Diff(tc.want, string(contents(t, b))); diff != "" {
					t.Fatalf("cuts %v: stored log (-want +got):\n%s", cuts, diff)
				}
			}
			check(t)
			// Every split in two and in three pieces (small inputs only).
			for i := 0; i <= len(in); i++ {
				check(t, i)
				if len(in) > 64 {
					continue
				}
				for j := i; j <= len(in); j++ {
					check(t, i, j)
				}
			}
			// 1-byte writes.
			ones := make([]int, len(in))
			for i := range ones {
				ones[i] = i
			}
			check(t, ones...)
		})
	}
}

// TestHoldBack checks that only the tail that can still become a match is
// held back before Finish.
func TestHoldBack(t *testing.T) {
	for _, tc := range []struct {
		name      string
		masked    []string
		prefixes  []string
		writes    []string
		wantSizes []int // Size after each write
		final     string
	}{
		{"secret prefix", []string{"secret"}, nil, []string{"foo sec", "re", "t!"}, []int{4, 4, 4 + 8 + 1}, "foo [MASKED]!"},
		{"not a prefix", []string{"secret"}, nil, []string{"foo sex", "y"}, []int{7, 8}, "foo sexy"},
		{"longest proper prefix", []string{"abcabd"}, nil, []string{"xabcab", "c", "abd"}, []int{1, 4, 12}, "xabc[MASKED]"},
		{"full match that cannot grow", []string{"abab", "abc"}, nil, []string{"xabab", "a"}, []int{9, 9}, "x[MASKED]a"},
		{"shortest tail that can match", []string{"aab"}, nil, []string{"aaaa", "b"}, []int{2, 2 + 8}, "aa[MASKED]"},
		{"complete secret that may grow", []string{"ab", "abcd"}, nil, []string{"xab", "c", "x"}, []int{1, 1, 1 + 8 + 2}, "x[MASKED]cx"},
		{"unfinished token", nil, []string{"glpat-"}, []string{"x glp", "at-abc", "def", "\n"}, []int{2, 2, 2, 2 + 14 + 1}, "x glpat-[MASKED]\n"},
		{"secret at the end, flushed", []string{"secret"}, nil, []string{"a secre"}, []int{2}, "a secre"},
		{"token at the end, flushed", nil, []string{"glrt-"}, []string{"a glrt-xyz"}, []int{2}, "a glrt-[MASKED]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newBuffer(t, trace.Options{Masked: tc.masked, TokenPrefixes: tc.prefixes})
			for i, w := range tc.writes {
				if _, err := b.Write([]byte(w)); err != nil {
					t.Fatal(err)
				}
				if got := b.Size(); got != int64(tc.wantSizes[i]) {
					t.Errorf("after write %d (%q): Size = %d, want %d; stored %q", i, w, got, tc.wantSizes[i], contents(t, b))
				}
			}
			b.Finish()
			if got := string(contents(t, b)); got != tc.final {
				t.Errorf("final log %q, want %q", got, tc.final)
			}
		})
	}
}

func TestSetMasked(t *testing.T) {
	b := newBuffer(t, trace.Options{Masked: []string{"one"}})
	writeSplit(t, b, []byte("one two thr"))
	b.SetMasked([]string{"two", "three", ""})
	writeSplit(t, b, []byte("ee two"))
	b.Finish()
	// "two" was stored before SetMasked; "thr" was held back for nothing
	// then, but is masked with the rest once "three" is known.
	if got, want := string(contents(t, b)), "[MASKED] two thr"+"ee [MASKED]"; got != want {
		t.Errorf("log %q, want %q", got, want)
	}
}

func TestSetMaskedHeldBack(t *testing.T) {
	b := newBuffer(t, trace.Options{Masked: []string{"thx"}})
	writeSplit(t, b, []byte("a th"))
	b.SetMasked([]string{"three"})
	writeSplit(t, b, []byte("ree"))
	b.Finish()
	if got, want := string(contents(t, b)), "a [MASKED]"; got != want {
		t.Errorf("log %q, want %q", got, want)
	}
}

func notice(limit int) string {
	return fmt.Sprintf("\nJob's log exceeded limit of %d bytes.\nJob execution will continue but no more output will be collected.\n", limit)
}

func TestLimit(t *testing.T) {
	for _, tc := range []struct {
		name          string
		limit         int
		masked        []string
		writes        []string
		want          string
		wantTruncated bool
	}{
		{"below", 10, nil, []string{"0123", "45678"}, "012345678", false},
		{"exactly", 10, nil, []string{"01234", "56789"}, "0123456789", false},
		{"one over", 10, nil, []string{"01234", "56789", "a"}, "0123456789" + notice(10), true},
		{"over in one write", 10, nil, []string{"0123456789abcdef"}, "0123456789" + notice(10), true},
		{"later writes dropped", 4, nil, []string{"abcdef", "ghi", "jkl"}, "abcd" + notice(4), true},
		{"counted after masking", 12, []string{"longsecretvalue"}, []string{"a longsecretvalue b"}, "a [MASKED] b", false},
		{"cut inside a mask", 5, []string{"pw"}, []string{"a pw b"}, "a [MA" + notice(5), true},
		{"held back tail flushed over the limit", 3, []string{"secret"}, []string{"ab secr"}, "ab " + notice(3), true},
		{"unlimited", 0, nil, []string{strings.Repeat("x", 100000)}, strings.Repeat("x", 100000), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newBuffer(t, trace.Options{Limit: int64(tc.limit), Masked: tc.masked})
			for _, w := range tc.writes {
				n, err := b.Write([]byte(w))
				if err != nil || n != len(w) {
					t.Fatalf("Write(%q) = %d, %v; want %d, nil", w, n, err, len(w))
				}
			}
			b.Finish()
			if diff := cmp.Diff(tc.want, string(contents(t, b))); diff != "" {
				t.Errorf("log (-want +got):\n%s", diff)
			}
			if b.Truncated() != tc.wantTruncated {
				t.Errorf("Truncated = %v, want %v", b.Truncated(), tc.wantTruncated)
			}
		})
	}
}

func TestChecksum(t *testing.T) {
	b := newBuffer(t, trace.Options{Masked: []string{"hunter2"}, TokenPrefixes: []string{"glpat-"}})
	if got, want := b.Checksum(), "crc32:00000000"; got != want {
		t.Errorf("empty Checksum = %q, want %q", got, want)
	}
	for i := range 1000 {
		fmt.Fprintf(b, "line %d hunter2 glpat-%d\n", i, i*7919)
		data := contents(t, b)
		if got, want := b.Checksum(), fmt.Sprintf("crc32:%08x", crc32.ChecksumIEEE(data)); got != want {
			t.Fatalf("after %d lines: Checksum = %q, want %q", i+1, got, want)
		}
	}
	b.Finish()
	if got, want := b.Checksum(), fmt.Sprintf("crc32:%08x", crc32.ChecksumIEEE(contents(t, b))); got != want {
		t.Errorf("Checksum = %q, want %q", got, want)
	}
}

func TestReadAt(t *testing.T) {
	b := newBuffer(t, trace.Options{})
	writeSplit(t, b, []byte("0123456789"))
	p := make([]byte, 4)
	for _, tc := range []struct {
		off     int64
		want    string
		wantErr error
	}{
		{0, "0123", nil},
		{6, "6789", nil},
		{7, "789", io.EOF},
		{10, "", io.EOF},
		{11, "", io.EOF},
	} {
		n, err := b.ReadAt(p, tc.off)
		if string(p[:n]) != tc.want || err != tc.wantErr {
			t.Errorf("ReadAt(_, %d) = %q, %v; want %q, %v", tc.off, p[:n], err, tc.want, tc.wantErr)
		}
	}
	if _, err := b.ReadAt(p, -1); err == nil {
		t.Error("ReadAt at -1: no error")
	}
	var _ io.ReaderAt = b
	var _ io.Writer = b
}

func TestFinishAndClose(t *testing.T) {
	dir := t.TempDir()
	b, err := trace.New(trace.Options{Dir: dir, Masked: []string{"abc"}})
	if err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*"))
	if len(files) != 1 {
		t.Fatalf("backing files in Dir: %v", files)
	}
	writeSplit(t, b, []byte("x ab"))
	b.Finish()
	b.Finish()
	if n, err := b.Write([]byte("more")); err == nil || n != 0 {
		t.Errorf("Write after Finish = %d, %v; want an error", n, err)
	} else if !errors.Is(err, trace.ErrFinished) {
		t.Errorf("Write after Finish: %v, want ErrFinished", err)
	}
	if got := string(contents(t, b)); got != "x ab" {
		t.Errorf("log %q", got)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := os.Stat(files[0]); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("backing file after Close: %v", err)
	}
	if _, err := b.ReadAt(make([]byte, 1), 0); err == nil {
		t.Error("ReadAt after Close: no error")
	}
	if _, err := b.Write([]byte("x")); err == nil {
		t.Error("Write after Close: no error")
	}
}

func TestNewBadDir(t *testing.T) {
	if _, err := trace.New(trace.Options{Dir: filepath.Join(t.TempDir(), "missing")}); err == nil {
		t.Error("New in a missing Dir: no error")
	}
	if _, err := trace.New(trace.Options{Limit: -1, Dir: t.TempDir()}); err == nil {
		t.Error("New with a negative Limit: no error")
	}
}

// TestConcurrent has writers (like stdout and stderr) and a streamer read
// the log at the same time; run it with -race.
func TestConcurrent(t *testing.T) {
	const (
		writers = 4
		lines   = 2000
	)
	b := newBuffer(t, trace.Options{Masked: []string{"topsecret"}, TokenPrefixes: []string{"glpat-"}})
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range lines {
				// Writes from different goroutines interleave, so a
				// secret is only masked if one write holds it whole.
				line := fmt.Sprintf("w%d line %d topsecret glpat-%dxyz\n", w, i, i)
				writeSplit(t, b, []byte(line))
			}
		})
	}
	// The streamer: read what is new from the last offset, as PATCHes do;
	// what was read once must never change.
	done := make(chan struct{})
	streamed := make(chan []byte)
	go func() {
		var got []byte
		buf := make([]byte, 1000)
		for {
			select {
			case <-done:
				streamed <- got
				return
			default:
			}
			_ = b.Checksum()
			n, err := b.ReadAt(buf, int64(len(got)))
			if err != nil && err != io.EOF {
				t.Error(err)
			}
			got = append(got, buf[:n]...)
		}
	}()
	wg.Wait()
	b.Finish()
	close(done)
	got := <-streamed
	all := contents(t, b)
	if !bytes.HasPrefix(all, got) {
		t.Fatalf("streamed bytes are not a prefix of the log")
	}
	got = append(got, all[len(got):]...)
	if bytes.Contains(got, []byte("topsecret")) || bytes.Contains(got, []byte("xyz")) {
		t.Error("a secret leaked")
	}
	if n := bytes.Count(got, []byte(" [MASKED] glpat-[MASKED]\n")); n != writers*lines {
		t.Errorf("%d masked lines, want %d", n, writers*lines)
	}
	if got, want := b.Checksum(), fmt.Sprintf("crc32:%08x", crc32.ChecksumIEEE(all)); got != want {
		t.Errorf("Checksum = %q, want %q", got, want)
	}
}

// TestLargeWrite checks that a write bigger than the internal chunk masks
// secrets across the chunks' borders.
func TestLargeWrite(t *testing.T) {
	var in bytes.Buffer
	for in.Len() < 1<<20 {
		in.WriteString("some log text with a sekrit-value inside and glpat-abcdefghij; ")
	}
	b := newBuffer(t, trace.Options{Masked: []string{"sekrit-value"}, TokenPrefixes: []string{"glpat-"}})
	writeSplit(t, b, in.Bytes())
	b.Finish()
	want := maskAll(in.Bytes(), []string{"sekrit-value"}, []string{"glpat-"})
	if !bytes.Equal(contents(t, b), want) {
		t.Error("stored log differs from the reference")
	}
}
