package jobstore_test

import (
	"sync"
	"testing"

	"github.com/drover-ci/drover/internal/jobstore"
)

// storeHomes remembers where each store a harness opened keeps its
// records (the file store's directory, the redis store's key prefix), so
// that the harness can open it again or reach into it.
type storeHomes struct {
	mu sync.Mutex
	m  map[jobstore.Store]string
}

// open opens the store of cfg, whose records are at home.
func (h *storeHomes) open(t *testing.T, cfg *jobstore.Config, home string, opts jobstore.Options) jobstore.Store {
	t.Helper()
	s, err := jobstore.Open(t.Context(), cfg, opts)
	if err != nil {
		t.Fatalf("Open(%s, %s) = %v", cfg.Name, home, err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m == nil {
		h.m = map[jobstore.Store]string{}
	}
	h.m[s] = home
	return s
}

// of returns where s keeps its records.
func (h *storeHomes) of(s jobstore.Store) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.m[s]
}
