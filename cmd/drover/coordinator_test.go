package main

import (
	"database/sql"
	"path/filepath"
	"strings"
	"testing"

	"github.com/drover-ci/drover/internal/buildinfo"
	"github.com/drover-ci/drover/internal/store/sqlite"
)

// TestCoordinatorSecretKeyEnv: a DROVER_SECRET_KEY or DROVER_SECRET_KEY_OLD
// that is not a key stops the coordinator at start with exit code 2 and a
// message naming the variable, never quoting its value.
func TestCoordinatorSecretKeyEnv(t *testing.T) {
	const bad = "my-passphrase-is-not-a-key"
	for _, name := range []string{"DROVER_SECRET_KEY", "DROVER_SECRET_KEY_OLD"} {
		t.Run(name, func(t *testing.T) {
			t.Setenv(name, bad)
			out, code, err := drover(t, "coordinator", "--listen", "127.0.0.1:0", "--data", t.TempDir())
			if code != 2 || err == nil || !strings.HasPrefix(err.Error(), name+": ") {
				t.Fatalf("drover coordinator with a bad %s: exit %d, %v; want 2 and an error naming it\n%s", name, code, err, out)
			}
			if strings.Contains(err.Error(), bad) || strings.Contains(out, bad) {
				t.Errorf("the error quotes the variable's value: %v", err)
			}
		})
	}
}

// TestCoordinatorRefusesNewerSchema: a data directory whose database a
// newer drover migrated stops the coordinator at start with exit code 2
// and an error naming the database file, its schema version, the drover
// that migrated it and this one: downgrades are not supported.
func TestCoordinatorRefusesNewerSchema(t *testing.T) {
	data := t.TempDir()
	db := filepath.Join(data, "coordinator.db")
	s, err := sqlite.Open(t.Context(), db)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	raw, err := sql.Open("sqlite", db)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	if _, err := raw.ExecContext(t.Context(), `INSERT INTO schema_migrations(version, applied_at, drover_version) VALUES (999, 0, '9.9.9')`); err != nil {
		t.Fatal(err)
	}
	out, code, err := drover(t, "coordinator", "--listen", "127.0.0.1:0", "--data", data)
	if code != 2 || err == nil {
		t.Fatalf("drover coordinator on a newer database: exit %d, %v; want 2 and an error\n%s", code, err, out)
	}
	for _, want := range []string{db, "schema version 999", "drover 9.9.9", "this drover " + buildinfo.Get().Version, "downgrades are not supported"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
}
