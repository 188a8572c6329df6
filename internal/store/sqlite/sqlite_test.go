package sqlite_test

import (
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/buildinfo"
	"github.com/drover-ci/drover/internal/store"
	"github.com/drover-ci/drover/internal/store/sqlite"
	"github.com/drover-ci/drover/internal/store/storetest"
	"github.com/google/go-cmp/cmp"
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

// FailJobInserts implements storetest.JobInsertFailer with a trigger.
func (h *harness) FailJobInserts(t *testing.T, s store.Store, name string) {
	db, err := sql.Open("sqlite", "file:"+h.paths[s]+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.ExecContext(t.Context(), `CREATE TRIGGER refuse_job BEFORE INSERT ON jobs WHEN NEW.name = '`+strings.ReplaceAll(name, "'", "''")+`'
		BEGIN SELECT RAISE(ABORT, 'job refused by the test'); END`); err != nil {
		t.Fatalf("create trigger: %v", err)
	}
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

// migrated creates a database at a new path with sqlite.Open and closes
// it; it returns the path and a plain connection to the database, closed
// when the test ends.
func migrated(t *testing.T) (string, *sql.DB) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "db.sqlite")
	s, err := sqlite.Open(t.Context(), p)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	db, err := sql.Open("sqlite", p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return p, db
}

// TestNewerSchemaRefused: a database migrated by a newer drover is
// refused at Open with ErrSchemaTooNew, naming the database's schema
// version and the drover that migrated it (when that drover recorded its
// version: every drover from 0.2.0 on) and this drover's version; one
// migrated by an older drover (0.1.0 did not record its version) opens and
// records the version from then on.
func TestNewerSchemaRefused(t *testing.T) {
	for _, tc := range []struct {
		name, by string
		want     []string
	}{
		{"version recorded", "9.9.9", []string{"schema version 999", "migrated by drover 9.9.9", "run drover 9.9.9 or newer"}},
		{"version not recorded", "", []string{"schema version 999", "migrated by a newer drover"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			p, db := migrated(t)
			var known int
			if err := db.QueryRowContext(ctx, `SELECT MAX(version) FROM schema_migrations WHERE drover_version = ?`, buildinfo.Get().Version).Scan(&known); err != nil || known == 0 {
				t.Fatalf("the migrations applied are not recorded with this drover's version %q: max %d, %v", buildinfo.Get().Version, known, err)
			}
			if _, err := db.ExecContext(ctx, `INSERT INTO schema_migrations(version, applied_at, drover_version) VALUES (999, 0, ?)`, tc.by); err != nil {
				t.Fatal(err)
			}
			s, err := sqlite.Open(ctx, p)
			if err == nil {
				s.Close()
				t.Fatal("Open of a database with a newer schema succeeded")
			}
			want := append(tc.want, fmt.Sprintf("this drover %s knows schema versions up to %d", buildinfo.Get().Version, known), "downgrades are not supported")
			for _, w := range want {
				if !errors.Is(err, store.ErrSchemaTooNew) || !strings.Contains(err.Error(), w) {
					t.Errorf("Open = %v, want ErrSchemaTooNew saying %q", err, w)
				}
			}
		})
	}
}

// TestSchemaVersionColumnAdded: a database whose schema_migrations has no
// drover_version column (as drover 0.1.0 made it) opens, and gets the
// column.
func TestSchemaVersionColumnAdded(t *testing.T) {
	ctx := t.Context()
	p, db := migrated(t)
	if _, err := db.ExecContext(ctx, `ALTER TABLE schema_migrations DROP COLUMN drover_version`); err != nil {
		t.Fatal(err)
	}
	s, err := sqlite.Open(ctx, p)
	if err != nil {
		t.Fatalf("Open of a database without schema_migrations.drover_version = %v", err)
	}
	s.Close()
	var n int
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM schema_migrations WHERE drover_version = ''`).Scan(&n); err != nil || n == 0 {
		t.Errorf("schema_migrations.drover_version after Open: %d empty rows, %v", n, err)
	}
}

// TestOldJobSpec loads a job stored before services had more than a
// name: its spec holds services as strings and no image.
func TestOldJobSpec(t *testing.T) {
	ctx := t.Context()
	p := filepath.Join(t.TempDir(), "db.sqlite")
	s, err := sqlite.Open(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	j, err := s.CreateJob(ctx, store.Job{Name: "old", Project: "a/b", Status: store.StatusPending, Image: "alpine"})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()

	db, err := sql.Open("sqlite", p)
	if err != nil {
		t.Fatal(err)
	}
	old := `{"script":["echo hi"],"services":["redis:7","postgres:17"],"git":{}}`
	if _, err := db.ExecContext(ctx, `UPDATE jobs SET spec = ? WHERE id = ?`, old, j.ID); err != nil {
		t.Fatal(err)
	}
	db.Close()

	s, err = sqlite.Open(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	got, err := s.GetJob(ctx, j.ID)
	if err != nil {
		t.Fatalf("GetJob = %v", err)
	}
	want := store.JobSpec{Script: []string{"echo hi"}, Services: []store.ImageSpec{{Name: "redis:7"}, {Name: "postgres:17"}}}
	if d := cmp.Diff(want, got.Spec); d != "" || got.Image != "alpine" {
		t.Errorf("old spec: image %q (-want +got):\n%s", got.Image, d)
	}
}

// TestFilesArePrivate: the database and its -wal and -shm files hold job
// variables: a new database is created 0600 (whatever the umask), and an
// existing one readable by others is made 0600.
func TestFilesArePrivate(t *testing.T) {
	for _, existing := range []bool{false, true} {
		p := filepath.Join(t.TempDir(), "db.sqlite")
		if existing {
			s, err := sqlite.Open(t.Context(), p)
			if err != nil {
				t.Fatal(err)
			}
			s.Close()
			for _, f := range []string{p, p + "-wal", p + "-shm"} {
				if err := os.Chmod(f, 0o644); err != nil && !errors.Is(err, fs.ErrNotExist) {
					t.Fatal(err)
				}
			}
		}
		s, err := sqlite.Open(t.Context(), p)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.CreateJob(t.Context(), store.Job{Name: "secret", Project: "a/b", Status: store.StatusPending}); err != nil {
			t.Fatal(err)
		}
		for _, f := range []string{p, p + "-wal", p + "-shm"} {
			fi, err := os.Stat(f)
			if err != nil {
				t.Fatalf("existing %v: %v", existing, err)
			}
			if perm := fi.Mode().Perm(); perm != 0o600 {
				t.Errorf("existing %v: %s mode %o, want 600", existing, filepath.Base(f), perm)
			}
		}
		s.Close()
	}
}

// TestCheckpointsInBackground: with commits no longer checkpointing, the
// store's own checkpointer copies the WAL into the database file while
// nothing is written, and Close leaves no WAL behind.
func TestCheckpointsInBackground(t *testing.T) {
	p := filepath.Join(t.TempDir(), "db.sqlite")
	s, err := sqlite.Open(t.Context(), p)
	if err != nil {
		t.Fatal(err)
	}
	size := func(name string) int64 {
		fi, err := os.Stat(name)
		if errors.Is(err, fs.ErrNotExist) {
			return 0 // a WAL is removed when the last connection closes
		}
		if err != nil {
			t.Fatal(err)
		}
		return fi.Size()
	}
	before := size(p)
	big := strings.Repeat("x", 4096)
	for i := range 100 {
		if _, err := s.CreateJob(t.Context(), store.Job{
			Name: fmt.Sprintf("j%d", i), Project: "g/p", ProjectID: 1, Status: store.StatusPending, Tags: []string{},
			Spec: store.JobSpec{Script: []string{big}},
		}); err != nil {
			t.Fatal(err)
		}
	}
	if size(p+"-wal") < 100*4096 {
		t.Fatalf("WAL is %d bytes after 100 jobs of 4 KiB, want them in the WAL", size(p+"-wal"))
	}
	for deadline := time.Now().Add(2 * time.Minute); size(p) < before+100*4096; {
		if time.Now().After(deadline) {
			t.Fatalf("database file still %d bytes: the WAL was never checkpointed", size(p))
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if n := size(p + "-wal"); n != 0 {
		t.Errorf("WAL is %d bytes after Close, want 0", n)
	}
}
