package jobstore_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/clock"
	"github.com/drover-ci/drover/internal/jobstore"
)

// waitTimer waits until the code under test has started waiting on clk.
func waitTimer(t *testing.T, clk *clock.Fake) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for clk.Pending() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no timer started")
		}
		time.Sleep(time.Millisecond)
	}
}

func TestRetryBackoff(t *testing.T) {
	clk := clock.NewFake(storetest0)
	transient := errors.New("dial tcp: connection refused")
	calls := 0
	done := make(chan error, 1)
	go func() {
		done <- jobstore.Retry(t.Context(), clk, jobstore.Backoff{Initial: time.Second, Max: 3 * time.Second}, func(context.Context) error {
			calls++
			if calls < 5 {
				return transient
			}
			return nil
		})
	}()
	// Waits: 1s, 2s, 3s (capped), 3s.
	for _, d := range []time.Duration{time.Second, 2 * time.Second, 3 * time.Second, 3 * time.Second} {
		waitTimer(t, clk)
		clk.Advance(d - time.Millisecond)
		if clk.Pending() == 0 {
			t.Fatalf("retried before %v passed", d)
		}
		clk.Advance(time.Millisecond)
	}
	if err := <-done; err != nil || calls != 5 {
		t.Fatalf("Retry = %v after %d calls, want nil after 5", err, calls)
	}
}

func TestRetryStops(t *testing.T) {
	transient := errors.New("i/o timeout")
	tests := []struct {
		name      string
		b         jobstore.Backoff
		errs      func(call int) error
		wantCalls int
		wantIs    error
	}{
		{"not owner", jobstore.Backoff{}, func(int) error { return fmt.Errorf("save: %w", jobstore.ErrNotOwner) }, 1, jobstore.ErrNotOwner},
		{"corrupt", jobstore.Backoff{}, func(int) error { return jobstore.ErrCorrupt }, 1, jobstore.ErrCorrupt},
		{"attempts", jobstore.Backoff{Initial: time.Nanosecond, Attempts: 3}, func(int) error { return transient }, 3, transient},
		{"success", jobstore.Backoff{}, func(int) error { return nil }, 1, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			calls := 0
			err := jobstore.Retry(t.Context(), nil, tt.b, func(context.Context) error {
				calls++
				return tt.errs(calls)
			})
			if calls != tt.wantCalls || !errors.Is(err, tt.wantIs) || (tt.wantIs == nil) != (err == nil) {
				t.Errorf("Retry = %v after %d calls, want %v after %d", err, calls, tt.wantIs, tt.wantCalls)
			}
		})
	}
}

func TestRetryContextEnds(t *testing.T) {
	clk := clock.NewFake(storetest0)
	ctx, cancel := context.WithCancel(t.Context())
	transient := errors.New("connection reset")
	done := make(chan error, 1)
	go func() {
		done <- jobstore.Retry(ctx, clk, jobstore.Backoff{Jitter: true}, func(context.Context) error { return transient })
	}()
	waitTimer(t, clk)
	cancel()
	err := <-done
	if !errors.Is(err, context.Canceled) || !errors.Is(err, transient) {
		t.Errorf("Retry after cancel = %v, want context.Canceled wrapping the last error", err)
	}
}

var storetest0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
