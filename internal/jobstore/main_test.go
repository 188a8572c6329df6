package jobstore_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/jobstore"
)

// helperEnv selects a helper mode when the test binary is re-run as a
// child process (see TestMain).
const helperEnv = "JOBSTORE_TEST_HELPER"

func TestMain(m *testing.M) {
	if mode := os.Getenv(helperEnv); mode != "" {
		os.Exit(helperMain(mode))
	}
	os.Exit(m.Run())
}

// helperMain runs in a child process. Mode "lock:<dir>" opens the file
// store at dir, says "locked" and waits to be killed.
func helperMain(mode string) int {
	dir, ok := cutPrefix(mode, "lock:")
	if !ok {
		fmt.Fprintln(os.Stderr, "unknown helper mode", mode)
		return 2
	}
	s, err := jobstore.Open(context.Background(), &jobstore.Config{Name: jobstore.NameFile, File: jobstore.FileConfig{Path: dir}}, jobstore.Options{Owner: "child-manager"})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer s.Close()
	fmt.Println("locked")
	time.Sleep(time.Hour)
	return 0
}

func cutPrefix(s, p string) (string, bool) {
	if len(s) >= len(p) && s[:len(p)] == p {
		return s[len(p):], true
	}
	return "", false
}

// startLockHolder re-runs the test binary as a process holding the file
// store lock on dir, and returns once it holds it.
func startLockHolder(t *testing.T, dir string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"=lock:"+dir)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start helper: %v", err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "locked\n" {
		t.Fatalf("helper said %q, %v; want \"locked\"", line, err)
	}
	return cmd
}
