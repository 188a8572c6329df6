package pgtest

import (
	"context"
	"errors"
	"sync"
	"testing"
)

// shared is the test binary's server, started by the first NewDatabase
// and stopped by Stop. It is this package's one piece of package-level
// state, on purpose: one server per test binary is the point.
var shared struct {
	mu      sync.Mutex
	srv     *Server
	err     error // why there is no server: start failed, or stopped
	started bool
}

var errStopped = errors.New("pgtest: the shared server was stopped")

// Shared returns the test binary's server, starting it on first use. The
// test is skipped when PostgreSQL is not installed, and fails when the
// server does not start.
func Shared(t testing.TB) *Server {
	t.Helper()
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if !shared.started {
		shared.started = true
		// Not the test's context: the server serves the whole binary.
		shared.srv, shared.err = Start(context.Background())
	}
	if errors.Is(shared.err, ErrNotInstalled) {
		t.Skipf("%v (the PostgreSQL tests need it)", shared.err)
	}
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	return shared.srv
}

// NewDatabase creates a fresh database on the test binary's server and
// returns its URL; the database is dropped when t ends.
func NewDatabase(t testing.TB) string {
	t.Helper()
	return Shared(t).NewDatabase(t)
}

// Stop stops the shared server, if one was started, and removes its
// directory. Call it from TestMain after m.Run.
func Stop() error {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	shared.started, shared.err = true, errStopped
	if shared.srv == nil {
		return nil
	}
	err := shared.srv.Stop()
	shared.srv = nil
	return err
}
