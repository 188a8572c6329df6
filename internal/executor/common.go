package executor

import (
	"fmt"
	"io"
	"log/slog"
	"sync"

	"github.com/drover-ci/drover/internal/api"
)

// StageRecorder records the stage an executor runs, for metrics. Embed it
// to implement CurrentStage and SetCurrentStage. The zero value is ready.
type StageRecorder struct {
	mu    sync.Mutex
	stage Stage
}

// CurrentStage returns the stage last set.
func (r *StageRecorder) CurrentStage() Stage {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stage
}

// SetCurrentStage records the stage being run.
func (r *StageRecorder) SetCurrentStage(s Stage) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stage = s
}

// SyncWriter serialises writes to W: a trace written by several
// goroutines (a stage's output, the executor's own lines).
type SyncWriter struct {
	mu sync.Mutex
	W  io.Writer // the writer every Write goes to, one at a time
}

// Write writes p to W, after any Write in progress from another goroutine
// has returned.
func (s *SyncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.W.Write(p)
}

// Sinks returns the trace of opts, serialised (io.Discard when nil), and
// its logger (discarding when nil).
func Sinks(opts PrepareOptions) (io.Writer, *slog.Logger) {
	trace := opts.Trace
	if trace == nil {
		trace = io.Discard
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &SyncWriter{W: trace}, logger
}

// PrepareHeader writes the first line of prepare_executor to trace, as
// GitLab Runner words it: Preparing the "<name>" executor.
func PrepareHeader(trace io.Writer, name string) {
	fmt.Fprintf(trace, "\033[0K\033[36;1mPreparing the %q executor\033[0;m\n", name)
}

// ScriptFeatures sets the features of drover's bash/sh stage scripts and
// of its job log handling: what every executor running those scripts
// supports.
func ScriptFeatures(f *api.FeaturesInfo) {
	f.Variables = true
	f.Masking = true
	f.RawVariables = true
	f.MultiBuildSteps = true
	f.ReturnExitCode = true
	f.Refspecs = true
	f.Cancelable = true
	f.CancelGracefully = true
	f.TraceReset = true
	f.TraceChecksum = true
	f.TraceSize = true
}
