//go:build unix

package executortest

import (
	"bytes"
	"context"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/executor"
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

// RunCanceled runs script in e, a prepared executor, as the step_script
// stage and cancels the Run once the script has written a line to marker
// (see WaitFile). It returns that line, how long Run took to return after
// the cancel, and what it returned; a Run that has not returned 20
// seconds after the cancel fails the test.
func RunCanceled(t testing.TB, e executor.Executor, script, marker string) (line string, took time.Duration, err error) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		errc <- e.Run(ctx, executor.Command{Stage: executor.StageStepScript, Script: script})
	}()
	line = WaitFile(t, marker)
	start := time.Now()
	cancel()
	select {
	case err = <-errc:
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
	return line, time.Since(start), err
}
