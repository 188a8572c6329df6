package executor

import (
	"context"
	"sync"
)

// Cleaning is the state of an executor's Cleanup that runs once and
// finishes in the background (removing a job's containers, deleting its
// pod), so that the job's result need not wait for it. The zero value is
// a Cleanup not started. It has no lock of its own: the executor's mutex
// guards it.
type Cleaning struct {
	started bool
	done    chan struct{}
}

// Start marks Cleanup started. It returns the channel that the background
// clean-up closes when it has finished; or nil when Cleanup had started
// already, or when prepared is false (nothing to clean up: Done is closed
// at once).
func (c *Cleaning) Start(prepared bool) chan<- struct{} {
	if c.started {
		return nil
	}
	c.started = true
	if !prepared {
		close(c.channel())
		return nil
	}
	return c.channel()
}

// Done is closed when the clean-up has finished (or its failures were
// logged).
func (c *Cleaning) Done() <-chan struct{} { return c.channel() }

func (c *Cleaning) channel() chan struct{} {
	if c.done == nil {
		c.done = make(chan struct{})
	}
	return c.done
}

// WaitGroup waits until wg's goroutines have returned (a provider's
// background clean-ups), or ctx ends: then it returns ctx's error.
func WaitGroup(ctx context.Context, wg *sync.WaitGroup) error {
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
