package sqlite_test

import (
	"path/filepath"
	"testing"

	"github.com/drover-ci/drover/internal/coordinator/store"
	"github.com/drover-ci/drover/internal/coordinator/store/sqlite"
	"github.com/drover-ci/drover/internal/coordinator/store/storetest"
)

type harness struct{ paths map[store.Store]string }

func (h *harness) Open(t *testing.T) store.Store {
	p := filepath.Join(t.TempDir(), "db.sqlite")
	s, err := sqlite.Open(t.Context(), p)
	if err != nil {
		t.Fatalf("Open = %v", err)
	}
	h.paths[s] = p
	return s
}

func (h *harness) Reopen(t *testing.T, s store.Store) store.Store {
	p := h.paths[s]
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2, err := sqlite.Open(t.Context(), p)
	if err != nil {
		t.Fatalf("reopen = %v", err)
	}
	h.paths[s2] = p
	return s2
}

func TestConformance(t *testing.T) {
	storetest.Run(t, &harness{paths: map[store.Store]string{}})
}

func TestMigrateTwice(t *testing.T) {
	p := filepath.Join(t.TempDir(), "db.sqlite")
	for range 2 {
		s, err := sqlite.Open(t.Context(), p)
		if err != nil {
			t.Fatalf("Open = %v", err)
		}
		s.Close()
	}
}
