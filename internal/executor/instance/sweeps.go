package instance

import (
	"context"
	"sync"
)

// Sweeps holds the manager's Sweep at start (its system id and which of
// its jobs it keeps) for a provider whose hosts are swept when this
// process first reaches each, before any job of this process runs there:
// autoscaled instances, which are not reachable before their pools
// re-adopt them. The instance and dockerfleet providers keep one. The
// zero value holds no Sweep yet; it is safe for concurrent use.
type Sweeps struct {
	mu       sync.Mutex
	systemID string
	keep     func(jobID int64) bool            // nil before Record
	keepHeld func(keep func(jobID int64) bool) // SetKeepHeld
	swept    map[string]chan struct{}          // per host key: closed once swept
}

// Record records the manager's Sweep and passes keep on to the function
// SetKeepHeld gave, if any.
func (s *Sweeps) Record(systemID string, keep func(jobID int64) bool) {
	s.mu.Lock()
	s.systemID, s.keep = systemID, keep
	keepHeld := s.keepHeld
	s.mu.Unlock()
	if keepHeld != nil {
		keepHeld(keep)
	}
}

// SetKeepHeld gives where to pass the manager's Sweep keep function: the
// pools then free at once the slots held before a restart by jobs that
// will not be resumed (runnerpool.Set.KeepHeld).
func (s *Sweeps) SetKeepHeld(fn func(keep func(jobID int64) bool)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.keepHeld = fn
}

// Once calls sweep with the recorded Sweep the first time it is called
// for the host key. The callers that come while sweep runs, and after,
// wait until it has returned (or their ctx ends) and call nothing; so do
// callers before Sweep was recorded, without waiting.
func (s *Sweeps) Once(ctx context.Context, key string, sweep func(systemID string, keep func(jobID int64) bool)) {
	s.mu.Lock()
	if s.keep == nil {
		s.mu.Unlock()
		return
	}
	if done, ok := s.swept[key]; ok {
		s.mu.Unlock()
		select {
		case <-done:
		case <-ctx.Done():
		}
		return
	}
	if s.swept == nil {
		s.swept = map[string]chan struct{}{}
	}
	done := make(chan struct{})
	s.swept[key] = done
	systemID, keep := s.systemID, s.keep
	s.mu.Unlock()
	defer close(done)
	sweep(systemID, keep)
}
