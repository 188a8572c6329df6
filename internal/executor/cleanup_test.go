package executor

import (
	"context"
	"errors"
	"sync"
	"testing"
)

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func TestCleaning(t *testing.T) {
	t.Run("prepared", func(t *testing.T) {
		var c Cleaning
		done := c.Done()
		work := c.Start(true)
		if work == nil {
			t.Fatal("Start(true) = nil, want the channel to close when done")
		}
		if c.Start(true) != nil || c.Start(false) != nil {
			t.Error("a second Start returned a channel: the clean-up would run twice")
		}
		if closed(done) {
			t.Fatal("Done closed before the background clean-up ended")
		}
		close(work)
		if !closed(done) || !closed(c.Done()) {
			t.Error("Done not closed after the background clean-up ended")
		}
	})
	t.Run("not prepared", func(t *testing.T) {
		var c Cleaning
		if c.Start(false) != nil {
			t.Error("Start(false) returned a channel, want nil: nothing to clean up")
		}
		if !closed(c.Done()) {
			t.Error("Done not closed after Start(false)")
		}
		if c.Start(true) != nil {
			t.Error("Start after Start(false) returned a channel: the clean-up would run twice")
		}
	})
}

func TestWaitGroup(t *testing.T) {
	var wg sync.WaitGroup
	release := make(chan struct{})
	wg.Go(func() { <-release })
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := WaitGroup(ctx, &wg); !errors.Is(err, context.Canceled) {
		t.Errorf("WaitGroup(ended ctx) = %v, want context.Canceled", err)
	}
	close(release)
	if err := WaitGroup(t.Context(), &wg); err != nil {
		t.Errorf("WaitGroup() = %v, want nil", err)
	}
}
