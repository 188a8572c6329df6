//go:build unix

package executortest

import (
	"bytes"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// WaitFile waits up to 10 seconds until path holds a complete line (a
// stage's script writes a pid or a marker there) and returns it, trimmed.
func WaitFile(t testing.TB, path string) string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if b, err := os.ReadFile(path); err == nil && strings.HasSuffix(string(b), "\n") {
			return strings.TrimSpace(string(b))
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("%s never written", path)
	return ""
}

// Alive reports whether the process of pidText (a pid as WaitFile returns
// it) is live. A zombie is dead: some containers' init never reaps
// orphans.
func Alive(t testing.TB, pidText string) bool {
	t.Helper()
	pid, err := strconv.Atoi(pidText)
	if err != nil {
		t.Fatalf("pid %q: %v", pidText, err)
	}
	stat, err := os.ReadFile("/proc/" + pidText + "/stat")
	if err != nil {
		return syscall.Kill(pid, 0) == nil
	}
	i := bytes.LastIndexByte(stat, ')')
	return i >= 0 && len(stat) > i+2 && stat[i+2] != 'Z' && stat[i+2] != 'X'
}
