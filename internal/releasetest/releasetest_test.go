package releasetest

import (
	"os/exec"
	"strings"
	"testing"
)

// TestBinary: the previous release's drover is built (or found in the
// cache) and says it is that release.
func TestBinary(t *testing.T) {
	bin := Binary(t, Previous)
	out, err := exec.Command(bin, "version").CombinedOutput()
	if err != nil {
		t.Fatalf("%s version: %v\n%s", bin, err, out)
	}
	if want := "drover " + Previous.Version + "\n"; !strings.HasPrefix(string(out), want) {
		t.Errorf("%s version = %q, want it to start with %q", bin, out, want)
	}
}

// TestBuildMissingCommit: a release whose commit is not in the checkout's
// history is an error that says how to fetch it, not a skip.
func TestBuildMissingCommit(t *testing.T) {
	t.Setenv("DROVER_CACHE_DIR", t.TempDir())
	r := Release{Version: "9.9.9", Commit: strings.Repeat("0123456789", 4)}
	_, err := Build(r, t.Logf)
	if err == nil {
		t.Fatal("Build of a commit not in the history succeeded")
	}
	for _, want := range []string{r.Commit, "9.9.9", "git fetch --unshallow", "git fetch origin " + r.Commit} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Build = %v, want it to name %q", err, want)
		}
	}
}
