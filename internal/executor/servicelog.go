package executor

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
)

// ServiceLogs follows the output of a job's services into its log for
// CI_DEBUG_SERVICES (Settings.DebugServices), one follower per service,
// until Stop: the executors with services (docker, kubernetes) share it.
// The zero value is ready; Stop without Follow does nothing.
type ServiceLogs struct {
	mu     sync.Mutex
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// Followable reports whether the services of a job (services of them)
// may be followed into its log trace: not when there are none, and not
// for a job a job store keeps (resumable), whose log is written again
// byte for byte when it is resumed, which lines arriving at any time
// would break: that job gets a warning in its log instead.
func Followable(trace io.Writer, services int, resumable bool) bool {
	if services == 0 || trace == nil {
		return false
	}
	if resumable {
		fmt.Fprint(trace, "\033[0;33mWARNING: CI_DEBUG_SERVICES: the services' output is not written into the log of a job a job store keeps ([runners.store]): a resumed job writes its log again byte for byte\033[0;m\n")
		return false
	}
	return true
}

// Follow starts following the service known by names: open opens its
// output stream (from its start, following), copyOut moves that stream's
// bytes into the writer it is given (a demultiplexer, or io.Copy).
// Every line goes into trace through a ServiceLogWriter.
func (l *ServiceLogs) Follow(ctx context.Context, trace io.Writer, names []string, logger *slog.Logger,
	open func(context.Context) (io.ReadCloser, error), copyOut func(w io.Writer, r io.Reader) error) {
	l.mu.Lock()
	if l.ctx == nil {
		l.ctx, l.cancel = context.WithCancel(context.WithoutCancel(ctx))
	}
	ctx = l.ctx
	l.mu.Unlock()
	l.wg.Go(func() {
		rc, err := open(ctx)
		if err != nil {
			if ctx.Err() == nil {
				fmt.Fprintf(trace, "\033[0;33mWARNING: failed to open the log stream of the service %s: %v\033[0;m\n", strings.Join(names, "-"), err)
			}
			return
		}
		defer rc.Close()
		w := NewServiceLogWriter(trace, names)
		if err := copyOut(w, rc); err != nil && !errors.Is(err, io.EOF) && ctx.Err() == nil {
			logger.Warn("following a service's output stopped", "service", strings.Join(names, "-"), "err", err)
		}
		w.Flush()
	})
}

// Stop stops every follower and waits until each has written what it
// read: call it before the job's log ends.
func (l *ServiceLogs) Stop() {
	l.mu.Lock()
	if l.cancel != nil {
		l.cancel()
	}
	l.mu.Unlock()
	l.wg.Wait()
}

// ServiceLogWriter writes a service container's output into a job's log
// for CI_DEBUG_SERVICES (Settings.DebugServices) as GitLab Runner does:
// each whole line as one write, after "[service:<its names joined by
// ->] " in grey and before the colour reset, so that lines of several
// services and of the job do not mix within a line. Safe for concurrent
// use (stdout and stderr of a container come through one writer).
type ServiceLogWriter struct {
	mu      sync.Mutex
	w       io.Writer
	prefix  string
	partial []byte
}

// NewServiceLogWriter returns the writer of a service known by names
// into the job's log w.
func NewServiceLogWriter(w io.Writer, names []string) *ServiceLogWriter {
	return &ServiceLogWriter{w: w, prefix: "\033[0;37m[service:" + strings.Join(names, "-") + "] "}
}

// Write writes the whole lines of p, keeping an unfinished one for the
// next write (or Flush). A carriage return before a newline is dropped.
func (s *ServiceLogWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := len(p)
	for {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			s.partial = append(s.partial, p...)
			return n, nil
		}
		line := append(s.partial, p[:i]...)
		s.partial = nil
		p = p[i+1:]
		if err := s.line(line); err != nil {
			return n, err
		}
	}
}

func (s *ServiceLogWriter) line(b []byte) error {
	out := make([]byte, 0, len(s.prefix)+len(b)+len("\033[0;m\n"))
	out = append(out, s.prefix...)
	out = append(out, bytes.TrimSuffix(b, []byte("\r"))...)
	out = append(out, "\033[0;m\n"...)
	_, err := s.w.Write(out)
	return err
}

// Flush writes a last line the service did not end.
func (s *ServiceLogWriter) Flush() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.partial) > 0 {
		_ = s.line(s.partial)
		s.partial = nil
	}
}
