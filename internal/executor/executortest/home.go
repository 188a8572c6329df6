package executortest

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/drover-ci/drover/internal/cachedir"
)

// RunWithEmptyHome runs m (from TestMain) with HOME pointing at a new
// empty directory and returns the exit code (WithEmptyHome).
func RunWithEmptyHome(m *testing.M) int { return WithEmptyHome(m.Run) }

// WithEmptyHome runs run with HOME pointing at a new empty directory,
// removed afterwards, and returns its exit code. The shell executor's
// stages are login shells, which read the user's profile: what the
// profile of the machine running the tests does (slow tool set-ups, a
// PATH of its own) is then no part of them. One such profile, pyenv's,
// takes a lock in every login shell that the others wait on, up to a
// minute each when a killed shell left it behind. A test of the profile
// sets HOME itself.
//
// What the tests' own tools keep under the real HOME stays in use: the
// Go build and module caches and go's settings (tests that build drover
// would start from nothing), docker's and git's configuration, drover's
// cache directory (Debian roots, VM images, tools built once per
// machine). Each is pinned with its variable, unless that is set already.
func WithEmptyHome(run func() int) int {
	pinned := map[string]string{}
	if home, err := os.UserHomeDir(); err == nil {
		pinned["GOPATH"] = filepath.Join(home, "go")
		pinned["DOCKER_CONFIG"] = filepath.Join(home, ".docker")
		pinned["GIT_CONFIG_GLOBAL"] = filepath.Join(home, ".gitconfig")
	}
	if dir, err := os.UserCacheDir(); err == nil {
		pinned["GOCACHE"] = filepath.Join(dir, "go-build")
	}
	if dir, err := os.UserConfigDir(); err == nil {
		pinned["GOENV"] = filepath.Join(dir, "go", "env")
	}
	if dir, err := cachedir.Dir(); err == nil {
		pinned[cachedir.Env] = dir
	}
	for k, v := range pinned {
		if _, set := os.LookupEnv(k); !set {
			if err := os.Setenv(k, v); err != nil {
				fmt.Fprintln(os.Stderr, "empty HOME:", err)
				return 1
			}
		}
	}
	home, err := os.MkdirTemp("", "drover-test-home-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "empty HOME:", err)
		return 1
	}
	defer os.RemoveAll(home)
	if err := os.Setenv("HOME", home); err != nil {
		fmt.Fprintln(os.Stderr, "empty HOME:", err)
		return 1
	}
	return run()
}
