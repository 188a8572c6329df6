package clock

import (
	"context"
	"runtime"
	"testing"
	"time"
)

// TestEvery: fn runs once per period of the clock, the next period counted
// from when fn returned, and Every returns once ctx is done.
func TestEvery(t *testing.T) {
	f := NewFake(time.Unix(0, 0))
	ctx, cancel := context.WithCancel(context.Background())
	calls := make(chan time.Time)
	done := make(chan struct{})
	go func() {
		defer close(done)
		Every(ctx, f, time.Second, func(context.Context) { calls <- f.Now() })
	}()
	waitTimer := func() {
		for f.Pending() == 0 {
			runtime.Gosched()
		}
	}
	for i := 1; i <= 3; i++ {
		waitTimer()
		f.Advance(999 * time.Millisecond)
		select {
		case at := <-calls:
			t.Fatalf("fn ran at %v, before its period", at)
		default:
		}
		f.Advance(time.Millisecond)
		if at := <-calls; at != time.Unix(int64(i), 0) {
			t.Errorf("call %d at %v, want %v", i, at, time.Unix(int64(i), 0))
		}
	}
	cancel()
	<-done
}
