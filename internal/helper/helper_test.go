package helper

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/freeport"
)

// limit bounds every wait of these tests: far beyond what they need.
const limit = 20 * time.Second

// poll is the Poll the tests give Follow.
const poll = 2 * time.Millisecond

// notifyBuffer is a goroutine-safe writer whose content can be waited on.
type notifyBuffer struct {
	mu      sync.Mutex
	b       bytes.Buffer
	changed chan struct{} // closed and replaced on every write
}

func newNotifyBuffer() *notifyBuffer { return &notifyBuffer{changed: make(chan struct{})} }

func (n *notifyBuffer) Write(p []byte) (int, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	k, err := n.b.Write(p)
	close(n.changed)
	n.changed = make(chan struct{})
	return k, err
}

func (n *notifyBuffer) String() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.b.String()
}

// waitFor waits until the content satisfies ok.
func (n *notifyBuffer) waitFor(t *testing.T, what string, ok func(string) bool) {
	t.Helper()
	deadline := time.NewTimer(limit)
	defer deadline.Stop()
	for {
		n.mu.Lock()
		s, ch := n.b.String(), n.changed
		n.mu.Unlock()
		if ok(s) {
			return
		}
		select {
		case <-ch:
		case <-deadline.C:
			t.Fatalf("%s: not within %v; got %q", what, limit, s)
		}
	}
}

// stageFiles are a detached stage's files in a fresh directory.
type stageFiles struct {
	dir, log, exit, gone, claim string
}

func newStage(t *testing.T) stageFiles {
	d := t.TempDir()
	return stageFiles{dir: d, log: filepath.Join(d, "out"), exit: filepath.Join(d, "exit"),
		gone: filepath.Join(d, "gone"), claim: filepath.Join(d, "claim")}
}

func (s stageFiles) options() FollowOptions {
	return FollowOptions{Log: s.log, Exit: s.exit, Gone: s.gone, Claim: s.claim, Poll: poll}
}

// appendLog appends to the stage's output as the stage's wrapper does.
func (s stageFiles) appendLog(t *testing.T, b string) {
	f, err := os.OpenFile(s.log, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		t.Error(err)
		return
	}
	defer f.Close()
	if _, err := f.WriteString(b); err != nil {
		t.Error(err)
	}
}

// writeExit writes the exit file atomically, as the wrapper does.
func (s stageFiles) writeExit(t *testing.T, content string) {
	tmp := s.exit + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		t.Error(err)
		return
	}
	if err := os.Rename(tmp, s.exit); err != nil {
		t.Error(err)
	}
}

func (s stageFiles) touch(t *testing.T, p string) {
	if err := os.WriteFile(p, nil, 0o600); err != nil {
		t.Error(err)
	}
}

// follow runs Follow in the background; the channel gets its error.
func follow(ctx context.Context, o FollowOptions, out, status *notifyBuffer) <-chan error {
	done := make(chan error, 1)
	go func() { done <- Follow(ctx, o, out, status) }()
	return done
}

func waitDone(t *testing.T, done <-chan error) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(limit):
		t.Fatalf("Follow did not return within %v", limit)
		return nil
	}
}

// notDone fails when Follow already returned.
func notDone(t *testing.T, done <-chan error, why string) {
	t.Helper()
	select {
	case err := <-done:
		t.Fatalf("Follow returned (%v) %s", err, why)
	default:
	}
}

// TestFollowGrowingFile: Follow waits for the output to appear, copies it
// from byte From as it grows, and after the exit file appears copies what
// was written just before it and reports the exit code.
func TestFollowGrowingFile(t *testing.T) {
	for _, from := range []int64{0, 1, 7, 12} {
		t.Run(fmt.Sprint("from ", from), func(t *testing.T) {
			s := newStage(t)
			o := s.options()
			o.From = from
			out, status := newNotifyBuffer(), newNotifyBuffer()
			done := follow(context.Background(), o, out, status)
			chunks := []string{"first line\n", "second\x00binary\xff\n", strings.Repeat("big", 50000) + "\n", "no newline at the end"}
			var all string
			for i, c := range chunks[:len(chunks)-1] {
				if i == 0 {
					// Not an assertion: only lets Follow wait for the
					// output to appear first (the result is the same
					// either way).
					time.Sleep(5 * poll)
				}
				notDone(t, done, "before the stage ended")
				s.appendLog(t, c)
				all += c
				want := all[min(int(from), len(all)):]
				out.waitFor(t, fmt.Sprintf("chunk %d copied", i), func(got string) bool { return len(got) >= len(want) })
			}
			// The last output and the exit file at once.
			s.appendLog(t, chunks[len(chunks)-1])
			all += chunks[len(chunks)-1]
			s.writeExit(t, "3\n")
			if err := waitDone(t, done); err != nil {
				t.Fatalf("Follow: %v", err)
			}
			if got, want := out.String(), all[from:]; got != want {
				t.Errorf("output: got %d bytes, want %d (the stage's from byte %d); equal prefix %d",
					len(got), len(want), from, commonPrefix(got, want))
			}
			if got := status.String(); got != "drover-exit:3\n" {
				t.Errorf("status = %q, want %q", got, "drover-exit:3\n")
			}
		})
	}
}

func commonPrefix(a, b string) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

// TestFollowEnded: stages that ended before Follow looked: the whole
// output and the status, at once.
func TestFollowEnded(t *testing.T) {
	cases := []struct {
		name      string
		log       *string
		exit      *string
		gone      bool
		from      int64
		wantOut   string
		wantState string
	}{
		{"exit 0", ptr("done\n"), ptr("0"), false, 0, "done\n", "drover-exit:0\n"},
		{"exit code with spaces", ptr("x"), ptr("  42 \n"), false, 0, "x", "drover-exit:42\n"},
		{"negative exit code", ptr("x"), ptr("-1"), false, 0, "x", "drover-exit:-1\n"},
		{"exit and gone", ptr("abc"), ptr("5"), true, 1, "bc", "drover-exit:5\n"},
		{"from the end", ptr("abc"), ptr("0"), false, 3, "", "drover-exit:0\n"},
		{"from beyond the end", ptr("abc"), ptr("0"), false, 10, "", "drover-exit:0\n"},
		{"empty output", ptr(""), ptr("1"), false, 0, "", "drover-exit:1\n"},
		{"gone without exit file", ptr("partial"), nil, true, 0, "partial", "drover-vanished\n"},
		{"gone, garbage exit file", ptr("partial"), ptr("killed"), true, 0, "partial", "drover-vanished\n"},
		{"gone, empty exit file", ptr("p"), ptr(""), true, 0, "p", "drover-vanished\n"},
		{"gone before any output", nil, nil, true, 0, "", "drover-vanished\n"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := newStage(t)
			if tc.log != nil {
				s.appendLog(t, *tc.log)
			}
			if tc.exit != nil {
				s.writeExit(t, *tc.exit)
			}
			if tc.gone {
				s.touch(t, s.gone)
			}
			o := s.options()
			o.Claim, o.From = "", tc.from
			out, status := newNotifyBuffer(), newNotifyBuffer()
			if err := waitDone(t, follow(context.Background(), o, out, status)); err != nil {
				t.Fatalf("Follow: %v", err)
			}
			if got := out.String(); got != tc.wantOut {
				t.Errorf("output = %q, want %q", got, tc.wantOut)
			}
			if got := status.String(); got != tc.wantState {
				t.Errorf("status = %q, want %q", got, tc.wantState)
			}
		})
	}
}

func ptr(s string) *string { return &s }

// TestFollowVanishes: the stage's container stops while it is followed,
// without writing its exit file: Follow copies the output to its end and
// reports drover-vanished.
func TestFollowVanishes(t *testing.T) {
	s := newStage(t)
	s.appendLog(t, "one\n")
	out, status := newNotifyBuffer(), newNotifyBuffer()
	done := follow(context.Background(), s.options(), out, status)
	out.waitFor(t, "first output", func(got string) bool { return got == "one\n" })
	notDone(t, done, "before the gone mark")
	s.appendLog(t, "two\n")
	s.touch(t, s.gone)
	if err := waitDone(t, done); err != nil {
		t.Fatalf("Follow: %v", err)
	}
	if got := out.String(); got != "one\ntwo\n" {
		t.Errorf("output = %q", got)
	}
	if got := status.String(); got != StatusVanished+"\n" {
		t.Errorf("status = %q, want %q", got, StatusVanished+"\n")
	}
}

// TestFollowVanishesBeforeStart: no output yet, then the gone mark: the
// stage never wrote anything and never will.
func TestFollowVanishesBeforeStart(t *testing.T) {
	s := newStage(t)
	out, status := newNotifyBuffer(), newNotifyBuffer()
	o := s.options()
	o.Claim = ""
	done := follow(context.Background(), o, out, status)
	time.Sleep(5 * poll) // not an assertion: lets Follow wait first
	notDone(t, done, "before the gone mark")
	s.touch(t, s.gone)
	if err := waitDone(t, done); err != nil {
		t.Fatalf("Follow: %v", err)
	}
	if out.String() != "" || status.String() != StatusVanished+"\n" {
		t.Errorf("output %q, status %q; want none and %q", out.String(), status.String(), StatusVanished+"\n")
	}
}

// TestFollowClaim: --claim. With no output yet the claim is taken and
// the stage reported not started; when the stage's wrapper took it
// first, its output is followed as it appears.
func TestFollowClaim(t *testing.T) {
	t.Run("not started", func(t *testing.T) {
		s := newStage(t)
		o := s.options()
		o.ClaimIfNotStarted = true
		out, status := newNotifyBuffer(), newNotifyBuffer()
		if err := waitDone(t, follow(context.Background(), o, out, status)); err != nil {
			t.Fatalf("Follow: %v", err)
		}
		if got := status.String(); got != StatusNotStarted+"\n" {
			t.Errorf("status = %q, want %q", got, StatusNotStarted+"\n")
		}
		if fi, err := os.Stat(s.claim); err != nil || !fi.IsDir() {
			t.Errorf("the claim directory was not made: %v", err)
		}
		if out.String() != "" {
			t.Errorf("output = %q", out.String())
		}
		if _, err := os.Stat(s.log); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("Follow made the output file: %v", err)
		}
	})
	t.Run("started", func(t *testing.T) {
		// The output exists: the claim is not touched.
		s := newStage(t)
		s.appendLog(t, "running\n")
		s.writeExit(t, "0")
		o := s.options()
		o.ClaimIfNotStarted = true
		out, status := newNotifyBuffer(), newNotifyBuffer()
		if err := waitDone(t, follow(context.Background(), o, out, status)); err != nil {
			t.Fatalf("Follow: %v", err)
		}
		if out.String() != "running\n" || status.String() != "drover-exit:0\n" {
			t.Errorf("output %q, status %q", out.String(), status.String())
		}
		if _, err := os.Stat(s.claim); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the claim was taken from a started stage: %v", err)
		}
	})
	t.Run("claimed by the stage", func(t *testing.T) {
		s := newStage(t)
		if err := os.Mkdir(s.claim, 0o700); err != nil {
			t.Fatal(err)
		}
		o := s.options()
		o.ClaimIfNotStarted = true
		out, status := newNotifyBuffer(), newNotifyBuffer()
		done := follow(context.Background(), o, out, status)
		time.Sleep(5 * poll) // not an assertion: lets Follow wait first
		notDone(t, done, "while the stage that claimed had no output yet")
		s.appendLog(t, "late start\n")
		out.waitFor(t, "output", func(got string) bool { return got == "late start\n" })
		notDone(t, done, "before the exit file")
		s.appendLog(t, "end\n")
		s.writeExit(t, "9")
		if err := waitDone(t, done); err != nil {
			t.Fatalf("Follow: %v", err)
		}
		if out.String() != "late start\nend\n" || status.String() != "drover-exit:9\n" {
			t.Errorf("output %q, status %q", out.String(), status.String())
		}
	})
	t.Run("claimed by the stage, then gone", func(t *testing.T) {
		// The stage claimed but its container stopped before any
		// output: vanished, not "not started" (the claim is not ours).
		s := newStage(t)
		if err := os.Mkdir(s.claim, 0o700); err != nil {
			t.Fatal(err)
		}
		s.touch(t, s.gone)
		o := s.options()
		o.ClaimIfNotStarted = true
		out, status := newNotifyBuffer(), newNotifyBuffer()
		if err := waitDone(t, follow(context.Background(), o, out, status)); err != nil {
			t.Fatalf("Follow: %v", err)
		}
		if got := status.String(); got != StatusVanished+"\n" {
			t.Errorf("status = %q, want %q", got, StatusVanished+"\n")
		}
	})
}

// TestFollowWrapperDead: with a pid file, a stage whose wrapper is dead
// (or a zombie) and left no exit file is vanished, before or after its
// output appeared; a live wrapper, or an exit file, says nothing of the
// kind.
func TestFollowWrapperDead(t *testing.T) {
	dead := exec.Command("sh", "-c", "exit 0")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	zombie := exec.Command("sh", "-c", "exit 0")
	if err := zombie.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = zombie.Wait() })
	// Not reaped: a zombie once it exited.
	for len(alive([]int{zombie.Process.Pid})) > 0 {
		time.Sleep(5 * time.Millisecond)
	}
	for _, tc := range []struct {
		name     string
		pid      int
		log      string
		exit     string // "" = none
		wantOut  string
		wantStat string
	}{
		{"dead before the output", dead.Process.Pid, "", "", "", StatusVanished},
		{"dead after some output", dead.Process.Pid, "partial\n", "", "partial\n", StatusVanished},
		{"a zombie", zombie.Process.Pid, "partial\n", "", "partial\n", StatusVanished},
		{"dead with an exit file", dead.Process.Pid, "all\n", "3", "all\n", StatusExit + "3"},
		{"alive with an exit file", os.Getpid(), "all\n", "0", "all\n", StatusExit + "0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newStage(t)
			pidFile := filepath.Join(s.dir, "pid")
			if err := os.WriteFile(pidFile, []byte(fmt.Sprintf("%d\n", tc.pid)), 0o600); err != nil {
				t.Fatal(err)
			}
			if tc.log != "" {
				s.appendLog(t, tc.log)
			}
			if tc.exit != "" {
				s.writeExit(t, tc.exit)
			}
			o := s.options()
			o.PID = pidFile
			out, status := newNotifyBuffer(), newNotifyBuffer()
			if err := waitDone(t, follow(t.Context(), o, out, status)); err != nil {
				t.Fatalf("Follow: %v", err)
			}
			if out.String() != tc.wantOut || status.String() != tc.wantStat+"\n" {
				t.Errorf("output %q, status %q; want %q, %q", out.String(), status.String(), tc.wantOut, tc.wantStat+"\n")
			}
		})
	}
	// Alive, no exit file: Follow goes on following.
	s := newStage(t)
	pidFile := filepath.Join(s.dir, "pid")
	if err := os.WriteFile(pidFile, []byte(fmt.Sprintf("%d\n", os.Getpid())), 0o600); err != nil {
		t.Fatal(err)
	}
	s.appendLog(t, "running\n")
	o := s.options()
	o.PID = pidFile
	out, status := newNotifyBuffer(), newNotifyBuffer()
	done := follow(t.Context(), o, out, status)
	out.waitFor(t, "output", func(got string) bool { return got == "running\n" })
	time.Sleep(5 * poll) // not an assertion: lets Follow look again
	notDone(t, done, "while the wrapper lives")
	s.writeExit(t, "0")
	if err := waitDone(t, done); err != nil || status.String() != StatusExit+"0\n" {
		t.Errorf("Follow = %v, status %q", err, status.String())
	}
}

// TestFollowProbe: a probe reports started as soon as the output exists,
// without waiting for the stage to end and without copying anything.
func TestFollowProbe(t *testing.T) {
	s := newStage(t)
	s.appendLog(t, "still running\n")
	o := s.options()
	o.Probe = true
	out, status := newNotifyBuffer(), newNotifyBuffer()
	if err := waitDone(t, follow(context.Background(), o, out, status)); err != nil {
		t.Fatalf("Follow: %v", err)
	}
	if got := status.String(); got != StatusStarted+"\n" {
		t.Errorf("status = %q, want %q", got, StatusStarted+"\n")
	}
	if out.String() != "" {
		t.Errorf("a probe copied output: %q", out.String())
	}

	// Not started yet: with --claim, the probe takes the claim.
	s = newStage(t)
	o = s.options()
	o.Probe, o.ClaimIfNotStarted = true, true
	status = newNotifyBuffer()
	if err := waitDone(t, follow(context.Background(), o, newNotifyBuffer(), status)); err != nil {
		t.Fatalf("Follow: %v", err)
	}
	if got := status.String(); got != StatusNotStarted+"\n" {
		t.Errorf("probe before start: status = %q, want %q", got, StatusNotStarted+"\n")
	}
}

// TestFollowCanceled: Follow returns the context's error when it is
// canceled while it waits, and writes no status.
func TestFollowCanceled(t *testing.T) {
	for _, started := range []bool{false, true} {
		t.Run(fmt.Sprint("started ", started), func(t *testing.T) {
			s := newStage(t)
			if started {
				s.appendLog(t, "x")
			}
			ctx, cancel := context.WithCancel(context.Background())
			out, status := newNotifyBuffer(), newNotifyBuffer()
			done := follow(ctx, s.options(), out, status)
			if started {
				out.waitFor(t, "output", func(got string) bool { return got == "x" })
			}
			cancel()
			if err := waitDone(t, done); !errors.Is(err, context.Canceled) {
				t.Errorf("Follow = %v, want %v", err, context.Canceled)
			}
			if status.String() != "" {
				t.Errorf("status %q after a cancel", status.String())
			}
		})
	}
}

// TestFollowErrors: an output that cannot be read and a status writer
// that fails are errors.
func TestFollowErrors(t *testing.T) {
	s := newStage(t)
	if err := os.Mkdir(s.log, 0o700); err != nil { // a directory: opens, but cannot be read
		t.Fatal(err)
	}
	if err := Follow(context.Background(), s.options(), newNotifyBuffer(), newNotifyBuffer()); err == nil || !strings.Contains(err.Error(), "read the stage output") {
		t.Errorf("Follow of a directory = %v, want a read error", err)
	}

	s = newStage(t)
	s.appendLog(t, "x")
	s.writeExit(t, "0")
	err := Follow(context.Background(), s.options(), failWriter{}, newNotifyBuffer())
	if err == nil || !strings.Contains(err.Error(), "write the stage output") {
		t.Errorf("Follow with a failing output = %v", err)
	}
	if err := Follow(context.Background(), s.options(), newNotifyBuffer(), failWriter{}); err == nil {
		t.Errorf("Follow with a failing status writer = nil")
	}
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("broken pipe") }

func TestParseStatus(t *testing.T) {
	cases := []struct {
		in                   string
		code                 int
		vanished, notStarted bool
		ok                   bool
	}{
		{"drover-exit:0", 0, false, false, true},
		{"drover-exit:1\n", 1, false, false, true},
		{"drover-exit:137", 137, false, false, true},
		{"drover-exit:-1", -1, false, false, true},
		{"  drover-exit:2  \r\n", 2, false, false, true},
		{"drover-vanished\n", 0, true, false, true},
		{"drover-not-started\n", 0, false, true, true},
		{"drover-started\n", 0, false, false, true},
		// The status is the last line: whatever else went to stderr before
		// it is skipped.
		{"some warning\nanother\ndrover-exit:4\n", 4, false, false, true},
		{"follow: noise\ndrover-vanished", 0, true, false, true},
		{"drover-exit:4\ntrailing noise", 0, false, false, false},
		{"", 0, false, false, false},
		{"\n\n", 0, false, false, false},
		{"drover-exit:", 0, false, false, false},
		{"drover-exit:abc", 0, false, false, false},
		{"drover-exit:1.5", 0, false, false, false},
		{"drover-exit: 3", 0, false, false, false},
		{"drover-exit:99999999999999999999", 0, false, false, false},
		{"drover-vanished-not", 0, false, false, false},
		{"DROVER-EXIT:1", 0, false, false, false},
		{"follow: open the stage output: permission denied", 0, false, false, false},
	}
	for _, tc := range cases {
		code, vanished, notStarted, err := ParseStatus(tc.in)
		if (err == nil) != tc.ok {
			t.Errorf("ParseStatus(%q) error = %v, want ok %v", tc.in, err, tc.ok)
			continue
		}
		if code != tc.code || vanished != tc.vanished || notStarted != tc.notStarted {
			t.Errorf("ParseStatus(%q) = %d, %v, %v; want %d, %v, %v", tc.in, code, vanished, notStarted, tc.code, tc.vanished, tc.notStarted)
		}
	}
}

// statusLine is the line Follow writes for a parsed status.
func statusLine(code int, vanished, notStarted bool) string {
	switch {
	case vanished:
		return StatusVanished + "\n"
	case notStarted:
		return StatusNotStarted + "\n"
	}
	return fmt.Sprintf("%s%d\n", StatusExit, code)
}

func FuzzParseStatus(f *testing.F) {
	for _, s := range []string{"drover-exit:0", "drover-exit:-5\n", "x\ndrover-vanished\n", "drover-not-started",
		"drover-started", "", "drover-exit:", "drover-exit:+7", "a\r\nb", "drover-exit:0x10"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		code, vanished, notStarted, err := ParseStatus(s)
		if err != nil {
			if code != 0 || vanished || notStarted {
				t.Fatalf("ParseStatus(%q) = %d, %v, %v with error %v", s, code, vanished, notStarted, err)
			}
			return
		}
		if vanished && notStarted {
			t.Fatalf("ParseStatus(%q): both vanished and not started", s)
		}
		if (vanished || notStarted) && code != 0 {
			t.Fatalf("ParseStatus(%q): code %d with vanished %v, not started %v", s, code, vanished, notStarted)
		}
		line := statusLine(code, vanished, notStarted)
		c2, v2, n2, err := ParseStatus(line)
		if err != nil || c2 != code || v2 != vanished || n2 != notStarted {
			t.Fatalf("ParseStatus(%q) = %d, %v, %v; its line %q parses as %d, %v, %v, %v", s, code, vanished, notStarted, line, c2, v2, n2, err)
		}
		// After other stderr output too.
		if c3, v3, n3, err := ParseStatus("follow: something\n" + line); err != nil || c3 != code || v3 != vanished || n3 != notStarted {
			t.Fatalf("%q after another line parses as %d, %v, %v, %v", line, c3, v3, n3, err)
		}
	})
}

// freeAddr returns a loopback address nothing listens on (one just
// closed).
func freeAddr(t *testing.T) string {
	addr, err := freeport.Addr()
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

func listen(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	return ln.Addr().String()
}

func TestWaitTCP(t *testing.T) {
	up1, up2, down := listen(t), listen(t), freeAddr(t)
	if failed := WaitTCP(context.Background(), []string{up1, up2}, limit); len(failed) != 0 {
		t.Errorf("WaitTCP(listening) = %v, want none", failed)
	}
	if failed := WaitTCP(context.Background(), nil, time.Millisecond); len(failed) != 0 {
		t.Errorf("WaitTCP(nothing) = %v", failed)
	}
	start := time.Now()
	failed := WaitTCP(context.Background(), []string{up1, down, up2}, 300*time.Millisecond)
	if !slices.Equal(failed, []string{down}) {
		t.Errorf("WaitTCP(%s listening, %s not) = %v, want [%s]", up1, down, failed, down)
	}
	if d := time.Since(start); d < 300*time.Millisecond || d > limit {
		t.Errorf("WaitTCP took %v for a timeout of 300ms", d)
	}
	// A canceled context ends the wait early.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if failed := WaitTCP(ctx, []string{down}, limit); !slices.Equal(failed, []string{down}) {
		t.Errorf("WaitTCP(canceled) = %v, want [%s]", failed, down)
	}
}

func TestHelperMainFlagErrors(t *testing.T) {
	s := newStage(t)
	cases := [][]string{
		nil,
		{},
		{"nope"},
		{"follow"},
		{"follow", "--log", s.log},
		{"follow", "--exit", s.exit},
		{"follow", "--log", s.log, "--exit", s.exit, "--from", "ten"},
		{"follow", "--log", s.log, "--exit", s.exit, "--unknown"},
		{"follow", "--log"},
		{"follow", "--probe=maybe", "--log", s.log, "--exit", s.exit},
		{"wait", "--timeout", "soon", "127.0.0.1:1"},
		{"wait", "--bogus"},
		{"--log", s.log},
	}
	for _, args := range cases {
		var stdout, stderr bytes.Buffer
		if code := Main(context.Background(), args, &stdout, &stderr); code != 2 {
			t.Errorf("Main(%q) = %d, want 2; stderr %q", args, code, stderr.String())
		}
		if stderr.Len() == 0 {
			t.Errorf("Main(%q) said nothing on stderr", args)
		}
		if stdout.Len() != 0 {
			t.Errorf("Main(%q) wrote %q on stdout", args, stdout.String())
		}
	}
	// Nothing was followed or claimed.
	for _, p := range []string{s.log, s.claim} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: %v", p, err)
		}
	}
}

func TestHelperMainFollow(t *testing.T) {
	s := newStage(t)
	s.appendLog(t, "0123456789")
	s.writeExit(t, "7\n")
	var stdout, stderr bytes.Buffer
	code := Main(context.Background(), []string{"follow", "--log", s.log, "--exit", s.exit, "--gone", s.gone, "--from", "4", "--claim", s.claim}, &stdout, &stderr)
	if code != 0 || stdout.String() != "456789" || stderr.String() != "drover-exit:7\n" {
		t.Errorf("Main(follow) = %d, stdout %q, stderr %q", code, stdout.String(), stderr.String())
	}

	// --claim without output: the claim is the caller's.
	s = newStage(t)
	stdout.Reset()
	stderr.Reset()
	code = Main(context.Background(), []string{"follow", "--log", s.log, "--exit", s.exit, "--claim", s.claim}, &stdout, &stderr)
	if code != 0 || stderr.String() != StatusNotStarted+"\n" {
		t.Errorf("Main(follow --claim) = %d, stderr %q", code, stderr.String())
	}
	if _, err := os.Stat(s.claim); err != nil {
		t.Errorf("claim: %v", err)
	}

	// --probe.
	s = newStage(t)
	s.appendLog(t, "x")
	stdout.Reset()
	stderr.Reset()
	code = Main(context.Background(), []string{"follow", "--probe", "--log", s.log, "--exit", s.exit}, &stdout, &stderr)
	if code != 0 || stdout.Len() != 0 || stderr.String() != StatusStarted+"\n" {
		t.Errorf("Main(follow --probe) = %d, stdout %q, stderr %q", code, stdout.String(), stderr.String())
	}

	// A failure to follow is 1, with the reason.
	s = newStage(t)
	if err := os.Mkdir(s.log, 0o700); err != nil {
		t.Fatal(err)
	}
	stderr.Reset()
	if code := Main(context.Background(), []string{"follow", "--log", s.log, "--exit", s.exit}, &stdout, &stderr); code != 1 || !strings.HasPrefix(stderr.String(), "follow: ") {
		t.Errorf("Main(follow a directory) = %d, stderr %q", code, stderr.String())
	}
}

func TestHelperMainWait(t *testing.T) {
	up, down := listen(t), freeAddr(t)
	var stdout, stderr bytes.Buffer
	if code := Main(context.Background(), []string{"wait", "--timeout", "20s", up}, &stdout, &stderr); code != 0 || stdout.Len() != 0 {
		t.Errorf("Main(wait listening) = %d, stdout %q, stderr %q", code, stdout.String(), stderr.String())
	}
	stdout.Reset()
	if code := Main(context.Background(), []string{"wait", "--timeout", "200ms", up, down}, &stdout, &stderr); code != 1 || stdout.String() != down+"\n" {
		t.Errorf("Main(wait %s) = %d, stdout %q, want 1 and %q", down, code, stdout.String(), down+"\n")
	}
	stdout.Reset()
	if code := Main(context.Background(), []string{"wait"}, &stdout, &stderr); code != 0 {
		t.Errorf("Main(wait nothing) = %d", code)
	}
}
