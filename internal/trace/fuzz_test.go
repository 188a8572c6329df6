package trace_test

import (
	"bytes"
	"testing"

	"github.com/drover-ci/drover/internal/trace"
)

// mapInto maps every byte of b onto alphabet.
func mapInto(b []byte, alphabet string) []byte {
	out := make([]byte, len(b))
	for i, c := range b {
		out[i] = alphabet[int(c)%len(alphabet)]
	}
	return out
}

// FuzzWrite checks that however the log is split into writes, the stored
// log is the whole log masked at once. In mapped mode the log is made of a
// few characters so that secrets and tokens occur often, and the secrets of
// characters that appear neither in "[MASKED]" nor in the token prefix, so
// that the stored log must not contain any of them.
func FuzzWrite(f *testing.F) {
	f.Add([]byte("password=hunter2 token=glpat-abc123\n"), "hunter2", "abc", []byte{3, 9, 1}, false)
	f.Add([]byte("aaaabaaab"), "aab", "aaa", []byte{1, 1, 1, 1, 1}, false)
	f.Add([]byte("glpat-glpat-x gl"), "glpat-x", "", []byte{5}, false)
	f.Add([]byte("abcabcabd tk-xyz tk-"), "abcabd", "ca", []byte{2, 7, 0, 4}, true)
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, "\x01\x02", "\x09", []byte{}, true)
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte, s1, s2 string, cuts []byte, mapped bool) {
		if len(data) > 4096 || len(s1) > 256 || len(s2) > 256 {
			return
		}
		secrets := []string{s1, s2}
		prefixes := []string{"glpat-", "gl", "glrt-"}
		if mapped {
			data = mapInto(data, "abcx _.\ntk-")
			secrets = []string{string(mapInto([]byte(s1), "abcx _.\n")), string(mapInto([]byte(s2), "abcx _.\n"))}
			prefixes = []string{"tk-"}
		}
		b, err := trace.New(trace.Options{Masked: secrets, TokenPrefixes: prefixes, Dir: dir})
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		// cuts are the sizes of the writes, cycled; 0 is an empty write.
		// Should they be all 0, the rest goes in one write in the end.
		for off, k := 0, 0; off < len(data); k++ {
			size := len(data) - off
			if len(cuts) > 0 && k < 4*len(data)+4 {
				size = min(size, int(cuts[k%len(cuts)])%64)
			}
			if n, err := b.Write(data[off : off+size]); err != nil || n != size {
				t.Fatalf("Write = %d, %v", n, err)
			}
			off += size
		}
		b.Finish()
		got := contents(t, b)
		want := maskAll(data, secrets, prefixes)
		if !bytes.Equal(got, want) {
			t.Fatalf("secrets %q, prefixes %q, input %q:\nstored    %q\nreference %q", secrets, prefixes, data, got, want)
		}
		if mapped {
			for _, s := range secrets {
				if s != "" && bytes.Contains(got, []byte(s)) {
					t.Fatalf("stored log %q contains secret %q", got, s)
				}
			}
		}
	})
}
