package executortest

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/drover-ci/drover/internal/cachedir"
)

// TestWithEmptyHome checks that run sees an empty HOME, removed
// afterwards, while drover's cache directory and Go's build cache stay
// where they were under the real one.
func TestWithEmptyHome(t *testing.T) {
	real := t.TempDir()
	t.Setenv("HOME", real)
	for _, k := range []string{cachedir.Env, "GOCACHE", "GOPATH", "DOCKER_CONFIG", "GIT_CONFIG_GLOBAL", "GOENV", "XDG_CACHE_HOME", "XDG_CONFIG_HOME"} {
		t.Setenv(k, "")
		os.Unsetenv(k)
	}
	var seen string
	code := WithEmptyHome(func() int {
		seen = os.Getenv("HOME")
		entries, err := os.ReadDir(seen)
		if err != nil || len(entries) != 0 {
			t.Errorf("HOME %s: %d entries, %v; want an empty directory", seen, len(entries), err)
		}
		for k, want := range map[string]string{
			cachedir.Env: filepath.Join(real, ".cache", "drover"),
			"GOCACHE":    filepath.Join(real, ".cache", "go-build"),
			"GOPATH":     filepath.Join(real, "go"),
		} {
			if got := os.Getenv(k); got != want {
				t.Errorf("%s = %q, want %q (pinned under the real HOME)", k, got, want)
			}
		}
		return 7
	})
	if code != 7 {
		t.Errorf("exit code %d, want run's 7", code)
	}
	if seen == real || seen == "" {
		t.Fatalf("run saw HOME %q, want a new directory", seen)
	}
	if _, err := os.Stat(seen); !os.IsNotExist(err) {
		t.Errorf("the empty HOME %s is still there after run: %v", seen, err)
	}
}
