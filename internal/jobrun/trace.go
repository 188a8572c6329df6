package jobrun

import (
	"fmt"
	"io"
	"sync"

	"github.com/drover-ci/drover/internal/clock"
	"github.com/drover-ci/drover/internal/executor"
)

// ANSI sequences of the job log, as GitLab Runner writes them.
const (
	ansiClear     = "\033[0K"
	ansiReset     = "\033[0;m"
	ansiBoldRed   = "\033[31;1m"
	ansiBoldGreen = "\033[32;1m"
	ansiBoldCyan  = "\033[36;1m"
	ansiYellow    = "\033[0;33m"
)

// traceWriter is the job log as the build and its executor share it:
// writes are serialised, and it knows whether the last line is complete so
// that a section end always starts a line.
type traceWriter struct {
	mu      sync.Mutex
	w       io.Writer
	clk     clock.Clock
	midLine bool
	// stamp, when set, writes w with a timestamp on every line
	// (FF_TIMESTAMPS): the build's lines as one stream, the stages'
	// output as another.
	stamp *stamper

	// The stage whose output the executor is writing, and how much of it
	// is written: what a checkpoint records.
	stage    executor.Stage
	inStage  bool
	stageOff int64
	// attempt is the stage's attempt (GET_SOURCES_ATTEMPTS and the like),
	// run the executor's run of it (EXECUTOR_JOB_SECTION_ATTEMPTS), from
	// 1; 0 outside the stages that count them.
	attempt, run int
}

// startStageAt records that the executor writes run `run` of stage, from
// byte off of that run's output on.
func (t *traceWriter) startStageAt(stage executor.Stage, off int64, run int) {
	t.mu.Lock()
	t.stage, t.inStage, t.stageOff, t.run = stage, true, off, run
	t.mu.Unlock()
}

// setAttempt records the attempt of the stage about to run (0: a stage
// without attempts).
func (t *traceWriter) setAttempt(n int) {
	t.mu.Lock()
	t.attempt, t.run = n, 0
	t.mu.Unlock()
}

func (t *traceWriter) endStage() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.inStage, t.run = false, 0
	if t.stamp != nil {
		// The stage's last line ends with it, as its stream does.
		_ = t.stamp.flush(streamStage)
		t.midLine = false
	}
}

// finish writes what the log holds back (a stamped stream's unfinished
// line).
func (t *traceWriter) finish() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stamp != nil {
		_ = t.stamp.flush(streamStage)
		_ = t.stamp.flush(streamRunner)
	}
}

// stageWriter is the log as the executor sees it: it counts the stage's
// output and takes a checkpoint after each write.
type stageWriter struct{ b *build }

func (s *stageWriter) Write(p []byte) (int, error) {
	t := s.b.trace
	t.mu.Lock()
	defer t.mu.Unlock()
	n, err := t.writeStream(streamStage, p)
	if t.inStage && n > 0 {
		t.stageOff += int64(n)
		s.b.checkpoint(t.stage, true, t.stageOff, false)
	}
	return n, err
}

func (t *traceWriter) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.writeLocked(p)
}

// writeLocked writes the build's own text. t.mu is held.
func (t *traceWriter) writeLocked(p []byte) (int, error) { return t.writeStream(streamRunner, p) }

// writeStream writes p as stream i (which matters with timestamps). t.mu
// is held.
func (t *traceWriter) writeStream(i int, p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	var n int
	var err error
	if t.stamp != nil {
		n, err = t.stamp.write(i, p)
	} else {
		n, err = t.w.Write(p)
	}
	if n > 0 {
		t.midLine = p[n-1] != '\n'
	}
	return n, err
}

// printf writes a formatted message; errors of the log sink are the trace
// uploader's business, not the build's.
func (t *traceWriter) printf(format string, args ...any) {
	t.mu.Lock()
	defer t.mu.Unlock()
	_, _ = t.writeLocked(fmt.Appendf(nil, format, args...))
}

// line writes text as a line of its own, in colour when color is set.
func (t *traceWriter) line(color, text string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.midLine {
		_, _ = t.writeLocked([]byte("\n"))
	}
	if color != "" {
		text = color + text + ansiReset
	}
	_, _ = t.writeLocked([]byte(text + "\n"))
}

// sectionStart opens the log section of stage; header, when set, is its
// visible title.
func (t *traceWriter) sectionStart(stage executor.Stage, header string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.midLine {
		_, _ = t.writeLocked([]byte("\n"))
	}
	_, _ = t.writeLocked(fmt.Appendf(nil, "section_start:%d:%s\r%s", t.clk.Now().Unix(), stage, ansiClear))
	if header != "" {
		_, _ = t.writeLocked([]byte(ansiClear + ansiBoldCyan + header + ansiReset + "\n"))
	}
}

// sectionEnd closes the log section of stage, on a line of its own.
func (t *traceWriter) sectionEnd(stage executor.Stage) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.midLine {
		_, _ = t.writeLocked([]byte("\n"))
	}
	// The marker ends its line, as in GitLab Runner 19's logs: the next
	// section starts on a line of its own.
	_, _ = t.writeLocked(fmt.Appendf(nil, "section_end:%d:%s\r%s\n", t.clk.Now().Unix(), stage, ansiClear))
	t.midLine = false
}
