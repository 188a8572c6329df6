package docker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"time"
)

// An exec's output comes back on a stream the engine ends when the
// process ends. When the link to the engine dies without closing (an
// instance's SSH connection whose far end vanished behind a proxy that
// keeps the near end open, a half-open TCP connection), the stream
// neither ends nor errs, and a job would wait on it until its timeout.
// watchStream bounds that wait: after streamProbe of silence it asks the
// engine whether the process still runs; once the engine says it ended,
// the stream has streamGrace to deliver anything more and end, or it is
// given up as lost.
const (
	defaultStreamProbe = 15 * time.Second
	defaultStreamGrace = 10 * time.Second
)

// errStreamLost is returned (wrapped) by exec when the exec's process
// ended but its output stream did not: what it printed last may be lost.
var errStreamLost = errors.New("the output stream of the process was lost")

// activity is an io.Reader that records when data last came.
type activity struct {
	r    io.Reader
	last atomic.Int64 // unix nanoseconds
}

func newActivity(r io.Reader) *activity {
	a := &activity{r: r}
	a.last.Store(time.Now().UnixNano())
	return a
}

func (a *activity) Read(p []byte) (int, error) {
	n, err := a.r.Read(p)
	if n > 0 {
		a.last.Store(time.Now().UnixNano())
	}
	return n, err
}

func (a *activity) idle() time.Duration {
	return time.Since(time.Unix(0, a.last.Load()))
}

// watchStream watches a process's output stream (its reads recorded by
// act) until ctx ends; ended asks the engine whether the process has
// ended (an exec's inspect, or a probe of a session's stage). The
// returned channel gets an error wrapping errStreamLost when the process
// ended and the stream went on being silent for streamGrace after that.
// Engine errors are not its business: the process's own calls report
// them.
func (e *Executor) watchStream(ctx context.Context, act *activity, ended func(context.Context) (bool, error)) <-chan error {
	e.mu.Lock()
	probe, grace := e.streamProbe, e.streamGrace
	e.mu.Unlock()
	if probe <= 0 {
		probe = defaultStreamProbe
	}
	if grace <= 0 {
		grace = defaultStreamGrace
	}
	lost := make(chan error, 1)
	go func() {
		t := time.NewTimer(probe)
		defer t.Stop()
		var endedAt time.Time // when the engine said the process had ended
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			idle := act.idle()
			switch {
			case !endedAt.IsZero() && idle >= grace && time.Since(endedAt) >= grace:
				lost <- fmt.Errorf("%w: the process ended %s ago and nothing came on its stream for %s "+
					"(the connection to the engine likely died without closing: for an autoscaled instance, check its SSH link)",
					errStreamLost, time.Since(endedAt).Round(time.Second), idle.Round(time.Second))
				return
			case !endedAt.IsZero():
				t.Reset(grace - min(idle, time.Since(endedAt)))
			case idle < probe:
				t.Reset(probe - idle)
			default:
				// The question is bounded (a dead link would hold it),
				// but never by less than the default probe: a busy
				// engine answers an exec's inspect or a session's probe
				// (itself an exec) in more than a short probe interval,
				// and a bound that cuts every answer would never see the
				// process end.
				ictx, cancel := context.WithTimeout(ctx, max(probe, defaultStreamProbe))
				done, err := ended(ictx)
				cancel()
				if err == nil && done {
					endedAt = time.Now()
					t.Reset(grace)
				} else {
					t.Reset(probe)
				}
			}
		}
	}()
	return lost
}
