package jobstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/drover-ci/drover/internal/clock"
)

// Backoff is the policy of Retry. The zero value means the defaults.
type Backoff struct {
	// Initial is the first wait (default 100ms); each wait doubles it up
	// to Max (default 30s).
	Initial, Max time.Duration
	// Attempts bounds the calls to fn; 0 means until ctx ends.
	Attempts int
	// Jitter waits a random duration between half and all of each step,
	// so managers sharing a Redis do not retry in lockstep.
	Jitter bool
}

// Retry calls fn until it succeeds, returns an error IsRetryable rejects
// (a record's owner changed, a corrupt record, a closed store, ...), the
// attempts run out or ctx ends, waiting with capped exponential backoff
// on clk between calls. It returns nil or fn's last error (wrapped with
// ctx's error when ctx ended first). The store methods do not retry
// themselves; the manager wraps the calls it wants retried, such as
// health writes while Redis is away.
func Retry(ctx context.Context, clk clock.Clock, b Backoff, fn func(context.Context) error) error {
	clk = clock.OrReal(clk)
	if b.Initial <= 0 {
		b.Initial = 100 * time.Millisecond
	}
	if b.Max <= 0 {
		b.Max = 30 * time.Second
	}
	wait := b.Initial
	for attempt := 1; ; attempt++ {
		err := fn(ctx)
		if err == nil || !IsRetryable(err) || (b.Attempts > 0 && attempt >= b.Attempts) {
			return err
		}
		d := min(wait, b.Max)
		if b.Jitter {
			d = d/2 + rand.N(d/2+1)
		}
		t := clk.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w (last error: %w)", ctx.Err(), err)
		case <-t.C():
		}
		wait = min(wait*2, b.Max)
	}
}
