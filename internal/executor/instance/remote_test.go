package instance

import (
	"os/exec"
	"path"
	"strings"
	"testing"
)

// FuzzQuote checks that a quoted string reaches sh as exactly one word,
// unchanged, whatever it holds: every path and the shell name in the
// remote scripts go through quote.
func FuzzQuote(f *testing.F) {
	for _, s := range []string{"", "plain", "it's", `"$HOME" $(id) ` + "`x`", "a'b'c", "'''", "\\'", "line\nbreak", "*?[a]", "-n"} {
		f.Add(s)
	}
	sh, err := exec.LookPath("sh")
	if err != nil {
		f.Skip("no sh")
	}
	f.Fuzz(func(t *testing.T, s string) {
		if strings.ContainsRune(s, 0) {
			t.Skip("an argument cannot hold NUL")
		}
		out, err := exec.Command(sh, "-c", "printf '%s|' "+quote(s)+" ; printf '%s' \"$#\"", "sh").Output()
		if err != nil {
			t.Fatalf("sh -c printf %s: %v", quote(s), err)
		}
		if got := string(out); got != s+"|0" {
			t.Errorf("sh saw %q, want %q", got, s+"|0")
		}
	})
}

// FuzzParsePrepare checks that whatever an instance prints, parsePrepare
// either fails or returns clean absolute directories and a printable host
// name.
func FuzzParsePrepare(f *testing.F) {
	for _, s := range []string{
		"/builds\n/cache\n/tmp/drover-job.abc\nhost\n",
		"/builds\n/cache\n/tmp/x\n",
		"builds\n/cache\n/tmp/x\nh\n",
		"/b/../c\n/cache\n/tmp/x\nh\n",
		"/b\n/c\n/\nh\n",
		"/b\n/c\n/d\n\x1b[31mh\n",
		"",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, out []byte) {
		p, err := parsePrepare(out)
		if err != nil {
			return
		}
		for _, d := range []string{p.buildsDir, p.cacheDir, p.scriptDir} {
			if !path.IsAbs(d) || path.Clean(d) != d {
				t.Errorf("parsePrepare(%q) accepted directory %q", out, d)
			}
		}
		if p.scriptDir == "/" || p.hostname == "" || strings.ContainsAny(p.hostname, "\n\r\x1b") {
			t.Errorf("parsePrepare(%q) = %+v", out, p)
		}
	})
}

func TestParsePrepare(t *testing.T) {
	p, err := parsePrepare([]byte("/builds\n/cache\n/tmp/drover-job.x\nbox\n"))
	if err != nil || p != (prepared{"/builds", "/cache", "/tmp/drover-job.x", "box"}) {
		t.Errorf("parsePrepare(good) = %+v, %v", p, err)
	}
	for _, bad := range []string{"", "/b\n/c\n/d\n", "/b\n/c\n/d\nh\nextra\n", "b\n/c\n/d\nh\n", "/b\n/c\n/\nh\n", "/b\n/c\n/d\n \n"} {
		if _, err := parsePrepare([]byte(bad)); err == nil {
			t.Errorf("parsePrepare(%q) = nil error, want one", bad)
		}
	}
}
