package helper

import (
	"bufio"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// stageTree is a process tree like a detached stage's: a wrapper shell
// that writes its pid to a file, has children and grandchildren, waits for
// them and then exits 7 (a wrapper that is killed cannot).
type stageTree struct {
	pidFile string
	cmd     *exec.Cmd
	exited  chan struct{} // closed when the wrapper has exited
	err     error         // cmd.Wait's, once exited is closed
}

// Scripts of stageTree wrappers. Each process prints "ready" once it is
// set up (its trap set, its child forked); the wrapper last, after writing
// its pid file.
const (
	// Two children and, below a third, a grandchild.
	plainTree = `(echo ready; exec sleep 1000) &
(echo ready; exec sleep 1000) &
(sh -c 'sleep 1000 & echo ready; wait') &
echo $$ > "$PIDFILE"
echo ready
wait
exit 7
`
	// One child ignores SIGTERM (sleep inherits the ignored signal).
	stubbornTree = `(trap '' TERM; echo ready; exec sleep 1000) &
(echo ready; exec sleep 1000) &
echo $$ > "$PIDFILE"
echo ready
wait
exit 7
`
)

// startTree starts script and returns once its ready processes are. The
// wrapper is in a process group of its own, which the test's cleanup
// kills whatever happened.
func startTree(t *testing.T, script string, ready int) *stageTree {
	t.Helper()
	tr := &stageTree{pidFile: filepath.Join(t.TempDir(), "stage.pid"), exited: make(chan struct{})}
	tr.cmd = exec.Command("sh", "-c", script)
	tr.cmd.Env = append(os.Environ(), "PIDFILE="+tr.pidFile)
	tr.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := tr.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		tr.err = tr.cmd.Wait()
		close(tr.exited)
	}()
	t.Cleanup(func() {
		_ = syscall.Kill(-tr.cmd.Process.Pid, syscall.SIGKILL)
		<-tr.exited
	})
	sc := bufio.NewScanner(out)
	for n := 0; n < ready; {
		if !sc.Scan() {
			t.Fatalf("the tree ended before %d processes were ready (%d were): %v", ready, n, sc.Err())
		}
		if sc.Text() == "ready" {
			n++
		}
	}
	return tr
}

// waitExit waits for the wrapper to exit and checks that it exited by
// itself, with its own code: KillStage does not signal it.
func (tr *stageTree) waitExit(t *testing.T) {
	t.Helper()
	select {
	case <-tr.exited:
	case <-time.After(time.Minute):
		t.Fatal("the wrapper did not exit within a minute of its processes being stopped")
	}
	var ee *exec.ExitError
	if !errors.As(tr.err, &ee) || ee.ExitCode() != 7 {
		t.Fatalf("wrapper: Wait() = %v, want exit status 7 (it was not to be killed)", tr.err)
	}
	if ws := ee.Sys().(syscall.WaitStatus); ws.Signaled() {
		t.Fatalf("wrapper killed by %v, want it to exit by itself", ws.Signal())
	}
}

// alive returns the pids that are still running processes. A zombie is
// dead: its parent (or, in a container, a PID 1 that does not reap) has
// not collected it yet.
func alive(pids []int) []int {
	var out []int
	for _, p := range pids {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(p) + "/stat")
		if err != nil {
			continue
		}
		s := string(b)
		if f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:]); len(f) > 0 && f[0] != "Z" {
			out = append(out, p)
		}
	}
	return out
}

func TestKillStage(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name   string
		script string
		ready  int
		grace  time.Duration
		killed bool // some process needed SIGKILL
	}{
		{"children and grandchildren", plainTree, 4, time.Minute, false},
		{"a child ignoring SIGTERM", stubbornTree, 3, 300 * time.Millisecond, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tr := startTree(t, tt.script, tt.ready)
			root := tr.cmd.Process.Pid
			before := descendants("/proc", root)
			if len(before) < tt.ready-1 {
				t.Fatalf("descendants(%d) = %v, want at least the %d ready ones", root, before, tt.ready-1)
			}
			var log strings.Builder
			n, err := KillStage(t.Context(), KillOptions{PIDFile: tr.pidFile, Grace: tt.grace}, &log)
			if err != nil || n != len(before) {
				t.Fatalf("KillStage() = %d, %v; want %d (the processes below the wrapper), nil\n%s", n, err, len(before), log.String())
			}
			tr.waitExit(t)
			if left := alive(before); len(left) > 0 {
				t.Errorf("processes %v of the stage still exist", left)
			}
			if !strings.Contains(log.String(), "sent SIGTERM to ") {
				t.Errorf("log = %q, want it to say SIGTERM was sent", log.String())
			}
			if got := strings.Contains(log.String(), "sent SIGKILL to 1 processes"); got != tt.killed {
				t.Errorf("log = %q: SIGKILL said %v, want %v", log.String(), got, tt.killed)
			}
		})
	}
}

// A child that ignores SIGTERM below a shell that does not is adopted
// elsewhere when that shell dies of the SIGTERM: it is still the stage's
// and gets SIGKILL after the grace period.
func TestKillStageOrphan(t *testing.T) {
	t.Parallel()
	tr := startTree(t, `sh -c '(trap "" TERM; echo ready; exec sleep 1000) & echo ready; wait' &
echo $$ > "$PIDFILE"
echo ready
wait
exit 7
`, 3)
	before := descendants("/proc", tr.cmd.Process.Pid)
	if len(before) != 2 {
		t.Fatalf("descendants = %v, want the shell and its child", before)
	}
	var log strings.Builder
	n, err := KillStage(t.Context(), KillOptions{PIDFile: tr.pidFile, Grace: 300 * time.Millisecond}, &log)
	if err != nil || n != 2 {
		t.Fatalf("KillStage() = %d, %v; want 2, nil\n%s", n, err, log.String())
	}
	tr.waitExit(t)
	if !strings.Contains(log.String(), "sent SIGKILL to 1 processes") {
		t.Errorf("log = %q, want SIGKILL sent to the orphan", log.String())
	}
	// SIGKILL was sent: the orphan dies at once; the minute only bounds
	// a failing test.
	for deadline := time.Now().Add(time.Minute); len(alive(before)) > 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("processes %v of the stage still exist", alive(before))
		}
	}
}

// A stage whose wrapper has no processes left (it ended, or is writing its
// exit code) is not an error, and nothing is signalled, the wrapper least
// of all.
func TestKillStageNothingRunning(t *testing.T) {
	t.Parallel()
	wrapper := exec.Command("sleep", "1000")
	wrapper.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := wrapper.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-wrapper.Process.Pid, syscall.SIGKILL)
		_ = wrapper.Wait()
	})
	pidFile := filepath.Join(t.TempDir(), "stage.pid")
	if err := os.WriteFile(pidFile, []byte(strconv.Itoa(wrapper.Process.Pid)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var log strings.Builder
	n, err := KillStage(t.Context(), KillOptions{PIDFile: pidFile, Grace: time.Minute}, &log)
	if n != 0 || err != nil || log.Len() > 0 {
		t.Fatalf("KillStage() = %d, %v (log %q); want 0, nil, nothing said", n, err, log.String())
	}
	if len(alive([]int{wrapper.Process.Pid})) != 1 {
		t.Errorf("the wrapper (pid %d) is gone, want it left alone", wrapper.Process.Pid)
	}
}

// The pid file of a stage that has not started is missing: not an error.
func TestKillStageNoPIDFile(t *testing.T) {
	t.Parallel()
	n, err := KillStage(t.Context(), KillOptions{PIDFile: filepath.Join(t.TempDir(), "none.pid")}, &strings.Builder{})
	if n != 0 || err != nil {
		t.Errorf("KillStage(missing pid file) = %d, %v; want 0, nil", n, err)
	}
}

func TestKillStageBadPIDFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, content := range []string{"", "\n", "abc", "12abc", "1", "0", "-5", "12 13", "99999999999999999999"} {
		p := filepath.Join(dir, "stage.pid")
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		n, err := KillStage(t.Context(), KillOptions{PIDFile: p}, &strings.Builder{})
		if n != 0 || err == nil || !strings.Contains(err.Error(), "bad pid") || !strings.Contains(err.Error(), p) {
			t.Errorf("KillStage(pid file %q) = %d, %v; want 0 and a bad pid error naming the file", content, n, err)
		}
	}
	// A pid file that cannot be read.
	n, err := KillStage(t.Context(), KillOptions{PIDFile: dir}, &strings.Builder{})
	if n != 0 || err == nil || !strings.Contains(err.Error(), "read the stage's pid") {
		t.Errorf("KillStage(a directory) = %d, %v; want 0 and a read error", n, err)
	}
}

// signalWriter reports the first write containing want.
type signalWriter struct {
	mu   sync.Mutex
	b    strings.Builder
	want string
	seen chan struct{}
	once sync.Once
}

func (w *signalWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.b.Write(p)
	if strings.Contains(w.b.String(), w.want) {
		w.once.Do(func() { close(w.seen) })
	}
	return len(p), nil
}

// Cancelling KillStage during the grace period returns at once, without
// SIGKILL: the processes that ignore SIGTERM are left.
func TestKillStageCancelled(t *testing.T) {
	t.Parallel()
	tr := startTree(t, `(trap '' TERM; echo ready; exec sleep 1000) &
echo $$ > "$PIDFILE"
echo ready
wait
exit 7
`, 2)
	before := descendants("/proc", tr.cmd.Process.Pid)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	log := &signalWriter{want: "sent SIGTERM", seen: make(chan struct{})}
	type result struct {
		n   int
		err error
	}
	done := make(chan result, 1)
	go func() {
		n, err := KillStage(ctx, KillOptions{PIDFile: tr.pidFile, Grace: time.Hour}, log)
		done <- result{n, err}
	}()
	select {
	case <-log.seen:
	case r := <-done:
		t.Fatalf("KillStage() = %d, %v before saying it sent SIGTERM", r.n, r.err)
	}
	cancel()
	r := <-done
	if !errors.Is(r.err, context.Canceled) || r.n != 1 {
		t.Fatalf("KillStage() = %d, %v; want 1, context.Canceled", r.n, r.err)
	}
	// The child that ignores SIGTERM got no SIGKILL, and the wrapper
	// waits for it.
	if left := alive(before); len(before) != 1 || !slices.Equal(left, before) {
		t.Errorf("alive(%v) = %v, want the child that ignores SIGTERM", before, left)
	}
	select {
	case <-tr.exited:
		t.Errorf("the wrapper exited (%v) with a process of the stage left", tr.err)
	default:
	}
}
