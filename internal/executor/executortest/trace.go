package executortest

import (
	"bytes"
	"sync"
)

// Trace is a job's log for a test: the executor's goroutines may write it
// while the test reads it.
type Trace struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (t *Trace) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.b.Write(p)
}

// String returns what was written so far.
func (t *Trace) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.b.String()
}
