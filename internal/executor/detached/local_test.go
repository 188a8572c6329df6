package detached

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/helper"
	"github.com/drover-ci/drover/internal/lockedbuf"
)

// localTarget is a real Target that needs no engine: stages run as
// processes of this host (sh -c, in a session of their own), their files
// in a temporary directory. "drover helper …" commands run in this
// process (helper.Main), everything else as a process.
type localTarget struct {
	tool  Tool
	grace time.Duration
	// bin, when set, is the only directory of commands (busybox's):
	// commands and the stages' scripts find nothing else.
	bin string

	mu       sync.Mutex
	sessions []int // the started wrappers' process groups, killed by cleanup
}

func newLocal(t testing.TB, tool Tool) *localTarget {
	l := &localTarget{tool: tool, grace: 300 * time.Millisecond}
	t.Cleanup(l.killAll)
	return l
}

// busyboxApplets are the commands a busybox target has.
var busyboxApplets = []string{"sh", "wc", "tail", "head", "sleep", "kill", "mkdir", "mv", "rm", "cat", "sed", "ps"}

// newBusybox is a local target whose commands are busybox's alone.
func newBusybox(t testing.TB, tool Tool) *localTarget {
	bb, err := exec.LookPath("busybox")
	if err != nil {
		t.Skip("no busybox")
	}
	bin := t.TempDir()
	for _, a := range busyboxApplets {
		if err := os.Symlink(bb, filepath.Join(bin, a)); err != nil {
			t.Fatal(err)
		}
	}
	l := &localTarget{tool: tool, grace: 300 * time.Millisecond, bin: bin}
	t.Cleanup(l.killAll)
	return l
}

// command is argv as a process of the target.
func (l *localTarget) command(ctx context.Context, argv ...string) *exec.Cmd {
	if l.bin == "" {
		return exec.CommandContext(ctx, argv[0], argv[1:]...)
	}
	cmd := exec.CommandContext(ctx, filepath.Join(l.bin, argv[0]), argv[1:]...)
	cmd.Env = []string{"PATH=" + l.bin}
	return cmd
}

func (l *localTarget) WriteFile(_ context.Context, name string, data []byte) error {
	tmp := name + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, name)
}

// Start runs the script in a session of its own; a goroutine reaps it (a
// zombie would pass for alive).
func (l *localTarget) Start(_ context.Context, script string) error {
	cmd := l.command(context.Background(), "sh", "-c", script)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return err
	}
	l.mu.Lock()
	l.sessions = append(l.sessions, cmd.Process.Pid)
	l.mu.Unlock()
	go func() { _ = cmd.Wait() }()
	return nil
}

func (l *localTarget) Exec(ctx context.Context, argv []string, stdout, stderr io.Writer) (int, error) {
	if len(argv) > 2 && argv[0] == "drover" && argv[1] == "helper" {
		code := helper.Main(ctx, argv[2:], stdout, stderr)
		if ctx.Err() != nil {
			return -1, ctx.Err()
		}
		return code, nil
	}
	cmd := l.command(ctx, argv...)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	err := cmd.Run()
	if ctx.Err() != nil {
		return -1, ctx.Err()
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode(), nil
	}
	if err != nil {
		return -1, err
	}
	return 0, nil
}

func (l *localTarget) Stop(ctx context.Context, f Files) error {
	var out lockedbuf.Buffer
	code, err := l.Exec(ctx, l.tool.Stop(f, l.grace), &out, &out)
	if err == nil && code != 0 {
		err = errors.New("exit " + strconv.Itoa(code) + ": " + out.String())
	}
	return err
}

// killAll kills whatever the test's stages left running.
func (l *localTarget) killAll() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, pid := range l.sessions {
		_ = syscall.Kill(-pid, syscall.SIGKILL)
	}
}

// severable is a target whose followers can be cut off, as the death of
// the manager running them does: the stage goes on.
type severable struct {
	Target
	cut chan struct{}
}

func (s *severable) Exec(ctx context.Context, argv []string, stdout, stderr io.Writer) (int, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-s.cut:
			cancel()
		case <-ctx.Done():
		}
	}()
	code, err := s.Target.Exec(ctx, argv, stdout, stderr)
	select {
	case <-s.cut:
		return -1, errors.New("the manager died")
	default:
	}
	return code, err
}

// oneTrip is a target that stores the script and starts the wrapper in
// one call (WriteStarter), counting them.
type oneTrip struct {
	*localTarget
	mu    sync.Mutex
	calls int
}

func (o *oneTrip) WriteStart(ctx context.Context, name string, data []byte, script string) error {
	o.mu.Lock()
	o.calls++
	o.mu.Unlock()
	if err := o.localTarget.WriteFile(ctx, name, data); err != nil {
		return err
	}
	return o.localTarget.Start(ctx, script)
}

// WriteFile and Start are not to be called: WriteStart does both.
func (o *oneTrip) WriteFile(context.Context, string, []byte) error {
	return errors.New("WriteFile called on a WriteStarter")
}

func (o *oneTrip) Start(context.Context, string) error {
	return errors.New("Start called on a WriteStarter")
}

// watched is a target that also tells when the stage's place stopped
// (Watcher, Explainer), as the container executors do: stop kills the
// whole place (the stage's session) and closes stopped.
type watched struct {
	*localTarget
	once    sync.Once
	stopped chan struct{}
}

func (w *watched) WaitStopped(ctx context.Context) bool {
	select {
	case <-w.stopped:
		return true
	case <-ctx.Done():
		return false
	}
}

func (w *watched) Gone(context.Context) string {
	select {
	case <-w.stopped:
		return "the place stopped"
	default:
		return ""
	}
}

func (w *watched) Stop(context.Context, Files) error {
	w.stopPlace()
	return nil
}

func (w *watched) stopPlace() {
	w.killAll()
	w.once.Do(func() { close(w.stopped) })
}

// notifyBuffer is a goroutine-safe writer whose content can be waited on:
// every write wakes the waiters.
type notifyBuffer struct {
	mu    sync.Mutex
	grown sync.Cond
	b     []byte
}

func newNotifyBuffer() *notifyBuffer {
	n := &notifyBuffer{}
	n.grown.L = &n.mu
	return n
}

func (n *notifyBuffer) Write(p []byte) (int, error) {
	n.mu.Lock()
	n.b = append(n.b, p...)
	n.mu.Unlock()
	n.grown.Broadcast()
	return len(p), nil
}

func (n *notifyBuffer) String() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return string(n.b)
}

// waitFor waits until the content satisfies ok, or the test ends.
func (n *notifyBuffer) waitFor(t *testing.T, what string, ok func(string) bool) {
	t.Helper()
	stop := context.AfterFunc(t.Context(), func() {
		n.mu.Lock()
		defer n.mu.Unlock()
		n.grown.Broadcast()
	})
	defer stop()
	n.mu.Lock()
	defer n.mu.Unlock()
	for !ok(string(n.b)) {
		if t.Context().Err() != nil {
			t.Fatalf("%s: test ended; got %q", what, n.b)
		}
		n.grown.Wait()
	}
}

// waitFile waits until the file p exists, polling (the test's timeout
// bounds it).
func waitFile(t *testing.T, p string) {
	t.Helper()
	for {
		if _, err := os.Stat(p); err == nil {
			return
		}
		select {
		case <-time.After(10 * time.Millisecond):
		case <-t.Context().Done():
			t.Fatalf("%s never appeared", p)
		}
	}
}

// readPID reads a pid file.
func readPID(t *testing.T, p string) int {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// alive reports whether process pid runs (a zombie does not).
func alive(pid int) bool {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return false
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	return len(f) > 0 && f[0] != "Z"
}

// deadPID returns the pid of a process that ran and is gone.
func deadPID(t *testing.T) int {
	cmd := exec.Command("sh", "-c", "exit 0")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	return cmd.Process.Pid
}

// syscallKill kills process pid with SIGKILL.
func syscallKill(pid int) error { return syscall.Kill(pid, syscall.SIGKILL) }

// waitDead waits until process pid is dead (or a zombie): a process sent
// SIGKILL dies within moments; limit only bounds a test that fails.
func waitDead(t *testing.T, pid int, limit time.Duration) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for alive(pid) {
		if time.Now().After(deadline) {
			t.Errorf("process %d of the stage still runs %v after the stop", pid, limit)
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// cutShort is a target that stores and starts in one call through the
// sh of StoreStart, as the kubernetes and instance executors do, and
// whose manager dies while it sends the script: the shell's input ends
// after cut bytes of it (all of it when cut < 0). before runs first.
type cutShort struct {
	*localTarget
	cut    int
	before func()
}

func (c *cutShort) WriteStart(ctx context.Context, name string, data []byte, script string) error {
	if c.before != nil {
		c.before()
	}
	sent := data
	if c.cut >= 0 {
		sent = data[:c.cut]
	}
	cmd := c.command(ctx, "sh", "-c", StoreStart(`"$1"`, len(data), `sh -c "$2" </dev/null >/dev/null 2>&1 &`), "sh", name, script)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	cmd.Stdin = strings.NewReader(string(sent))
	var out lockedbuf.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return err
	}
	c.mu.Lock()
	c.sessions = append(c.sessions, cmd.Process.Pid)
	c.mu.Unlock()
	if err := cmd.Wait(); err != nil {
		return fmt.Errorf("%w: %s", err, strings.TrimSpace(out.String()))
	}
	return errors.New("the manager died")
}
