package executor

import (
	"strings"
	"testing"
)

// TestServiceLogWriter: each whole line of a service's output is one
// write between the prefix and the colour reset, whatever the chunks it
// came in; a carriage return before the newline is dropped; a last line
// without a newline is written by flush.
func TestServiceLogWriter(t *testing.T) {
	for _, tc := range []struct {
		name   string
		chunks []string
		want   []string
	}{
		{"one line", []string{"hello\n"}, []string{"\x1b[0;37m[service:a-b] hello\x1b[0;m\n"}},
		{"two lines in one chunk", []string{"a\nb\n"}, []string{"\x1b[0;37m[service:a-b] a\x1b[0;m\n", "\x1b[0;37m[service:a-b] b\x1b[0;m\n"}},
		{"a line over three chunks", []string{"he", "ll", "o\n"}, []string{"\x1b[0;37m[service:a-b] hello\x1b[0;m\n"}},
		{"crlf", []string{"dos\r\n"}, []string{"\x1b[0;37m[service:a-b] dos\x1b[0;m\n"}},
		{"empty line", []string{"\n"}, []string{"\x1b[0;37m[service:a-b] \x1b[0;m\n"}},
		{"unfinished last line", []string{"a\nrest"}, []string{"\x1b[0;37m[service:a-b] a\x1b[0;m\n", "\x1b[0;37m[service:a-b] rest\x1b[0;m\n"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var writes []string
			w := NewServiceLogWriter(writeFunc(func(p []byte) { writes = append(writes, string(p)) }), []string{"a", "b"})
			for _, c := range tc.chunks {
				if n, err := w.Write([]byte(c)); n != len(c) || err != nil {
					t.Fatalf("Write(%q) = %d, %v", c, n, err)
				}
			}
			w.Flush()
			if strings.Join(writes, "|") != strings.Join(tc.want, "|") {
				t.Errorf("writes %q, want %q", writes, tc.want)
			}
		})
	}
}

type writeFunc func([]byte)

func (f writeFunc) Write(p []byte) (int, error) { f(p); return len(p), nil }
