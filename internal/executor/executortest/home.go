package executortest

import (
	"fmt"
	"os"
	"testing"
)

// RunWithEmptyHome runs m (from TestMain) with HOME pointing at a new
// empty directory and returns the exit code. The shell executor's stages
// are login shells, which read the user's profile: what the profile of
// the machine running the tests does (slow tool set-ups, a PATH of its
// own) is then no part of them. A test of the profile sets HOME itself.
func RunWithEmptyHome(m *testing.M) int {
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
	return m.Run()
}
