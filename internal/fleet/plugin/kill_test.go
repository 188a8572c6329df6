package plugin

import (
	"log/slog"
	"os/exec"
	"testing"
	"time"
)

// TestKillBoundsAStuckStop: when go-plugin's Kill does not return (the
// plugin stopped answering between its last call and the Kill, so Kill's
// shutdown request waits on it with no deadline), kill sends SIGKILL after
// the grace and returns once that ended the wait. The process is a real
// one; the stop function stands in for go-plugin's Kill and waits, as
// Kill does then, until the process is gone.
func TestKillBoundsAStuckStop(t *testing.T) {
	for _, hung := range []bool{false, true} {
		cmd := exec.Command("sleep", "600")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		waited := make(chan error, 1)
		sink := newProcSink(slog.New(slog.DiscardHandler))
		sink.pid = cmd.Process.Pid
		proc := &process{sink: sink, stop: func() { waited <- cmd.Wait() }}
		proc.kill(slog.New(slog.DiscardHandler), hung, 50*time.Millisecond)
		select {
		case err := <-waited:
			if err == nil {
				t.Errorf("hung=%v: sleep exited cleanly, want it killed", hung)
			}
		default:
			t.Fatalf("hung=%v: kill returned before the process was gone", hung)
		}
	}
}

// TestKillLeavesAnUnkillableStop: a stop that never returns, even after
// SIGKILL, does not hold kill forever.
func TestKillLeavesAnUnkillableStop(t *testing.T) {
	block := make(chan struct{})
	defer close(block)
	proc := &process{sink: newProcSink(slog.New(slog.DiscardHandler)), stop: func() { <-block }}
	proc.kill(slog.New(slog.DiscardHandler), false, time.Millisecond)
}
