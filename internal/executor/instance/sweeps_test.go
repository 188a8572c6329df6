package instance

import (
	"testing"
	"time"
)

func TestSweepsOnce(t *testing.T) {
	var s Sweeps
	calls := 0
	count := func(string, func(int64) bool) { calls++ }
	s.Once(t.Context(), "h1", count)
	if calls != 0 {
		t.Fatal("Once before Record swept")
	}

	var held func(int64) bool
	s.SetKeepHeld(func(keep func(int64) bool) { held = keep })
	s.Record("sys", func(id int64) bool { return id == 7 })
	if held == nil || !held(7) || held(8) {
		t.Error("Record did not pass keep on to the SetKeepHeld function")
	}

	// The first caller for a key sweeps; one that comes meanwhile waits
	// for it and sweeps nothing.
	release, started := make(chan struct{}), make(chan struct{})
	go s.Once(t.Context(), "h1", func(systemID string, keep func(int64) bool) {
		if systemID != "sys" || !keep(7) {
			t.Errorf("sweep got %q and a keep that does not keep job 7", systemID)
		}
		close(started)
		<-release
	})
	<-started
	waited := make(chan struct{})
	go func() {
		s.Once(t.Context(), "h1", count)
		close(waited)
	}()
	select {
	case <-waited:
		t.Fatal("a second Once for the key returned while the first one's sweep ran")
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	<-waited
	s.Once(t.Context(), "h2", count)
	s.Once(t.Context(), "h2", count)
	if calls != 1 {
		t.Errorf("%d sweeps after the first of h1, want 1 (h2's first)", calls)
	}
}
