package coordinator

import (
	"bytes"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/pgtest"
	"github.com/drover-ci/drover/internal/secretbox"
	"github.com/drover-ci/drover/internal/store"
	"github.com/drover-ci/drover/internal/store/postgres"
	"github.com/jackc/pgx/v5"
)

// unique returns a string found nowhere else: what the tests look for in
// the bytes of the data directory.
func unique(prefix string) string {
	b := make([]byte, 12)
	rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// secretJob is a job spec with a masked variable, a plain one and a
// service variable, each a unique value.
type secretJob struct {
	name, masked, plain, service string
}

func newSecretJob() secretJob {
	return secretJob{name: unique("name-"), masked: unique("masked-"), plain: unique("plain-"), service: unique("service-")}
}

func (s secretJob) spec() map[string]any {
	return map[string]any{
		"name": s.name,
		"variables": []map[string]any{
			{"key": "DEPLOY_TOKEN", "value": s.masked, "masked": true},
			{"key": "REGION", "value": s.plain},
		},
		"services": []any{"redis:7", map[string]any{"name": "postgres:17", "variables": []map[string]string{{"key": "POSTGRES_PASSWORD", "value": s.service}}}},
	}
}

// check fails unless the payload carries the job's variables with their
// values, the service's on its service.
func (s secretJob) check(t *testing.T, jr *api.JobResponse) {
	t.Helper()
	if got := jr.Variables.Get("DEPLOY_TOKEN"); got != s.masked {
		t.Errorf("payload DEPLOY_TOKEN = %q, want %q", got, s.masked)
	}
	for _, v := range jr.Variables {
		if v.Key == "DEPLOY_TOKEN" && !v.Masked {
			t.Errorf("DEPLOY_TOKEN lost its masked flag")
		}
	}
	if got := jr.Variables.Get("REGION"); got != s.plain {
		t.Errorf("payload REGION = %q, want %q", got, s.plain)
	}
	if len(jr.Services) != 2 || len(jr.Services[0].Variables) != 0 || len(jr.Services[1].Variables) != 1 ||
		jr.Services[1].Variables[0] != (api.Variable{Key: "POSTGRES_PASSWORD", Value: s.service}) {
		t.Errorf("payload services = %+v, want postgres:17 with POSTGRES_PASSWORD=%s", jr.Services, s.service)
	}
}

// filesContaining returns the files under dir whose bytes contain one of
// the values, as "file: value".
func filesContaining(t *testing.T, dir string, values ...string) []string {
	t.Helper()
	var found []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for _, v := range values {
			if bytes.Contains(b, []byte(v)) {
				found = append(found, filepath.Base(p)+": "+v)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return found
}

// TestVariablesSealedAtRest: the variables of a submitted job (a masked
// one, a plain one, a service's) are nowhere in the data directory's
// bytes (the database, its WAL and shared memory, the traces), neither
// while the coordinator runs nor after it closed the database, yet the
// runner's payload carries them. The job's name, stored in the clear, is
// found: the search itself works.
func TestVariablesSealedAtRest(t *testing.T) {
	dir := t.TempDir()
	e := openEnv(t, dir, nil)
	_, tok := e.runner(nil)
	sj := newSecretJob()
	e.submit(sj.spec())
	if _, err := os.Stat(filepath.Join(dir, "coordinator.db-wal")); err != nil {
		t.Fatalf("no WAL while the coordinator runs: %v", err)
	}
	for _, when := range []string{"while running", "after close"} {
		if when == "after close" {
			e.close() // checkpoints the WAL into the database file
		}
		if got := filesContaining(t, dir, sj.masked, sj.plain, sj.service); len(got) > 0 {
			t.Errorf("%s: variable values in the clear in %v", when, got)
		}
		if got := filesContaining(t, dir, sj.name); len(got) == 0 {
			t.Errorf("%s: the job's name is in no file: the search does not see the database", when)
		}
	}

	// Started again on that directory, the coordinator opens them for the
	// runner.
	e = openEnv(t, dir, nil)
	sj.check(t, e.take(tok))
}

// TestUpgradeFromPlaintext: a database from before variables were sealed
// (no settings table, no key file, a job with its variables in the clear)
// is taken over: a key is created and recorded, the old job is served with
// its variables, and a new job is sealed.
func TestUpgradeFromPlaintext(t *testing.T) {
	dir := t.TempDir()
	e := openEnv(t, dir, nil)
	_, tok := e.runner(nil)
	now := e.c.clock.Now()
	_, err := e.c.st.CreateJob(t.Context(), store.Job{
		Name: "old", Project: "g/p", Stage: "test", Status: store.StatusPending, Timeout: 60,
		Spec: store.JobSpec{
			Script:    []string{"true"},
			Variables: []api.Variable{{Key: "OLD", Value: "in the clear", Masked: true}},
			Services:  []store.ImageSpec{{Name: "db", Variables: []api.Variable{{Key: "S", Value: "too"}}}},
		},
		CreatedAt: now, QueuedAt: now, UpdatedAt: now,
	})
	if err != nil {
		t.Fatal(err)
	}
	e.close()
	db, err := sql.Open("sqlite", filepath.Join(dir, "coordinator.db"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(t.Context(), `DROP TABLE settings; DROP TABLE artifacts; DROP INDEX jobs_token_hash; DROP INDEX jobs_project_name;
		ALTER TABLE runner_managers DROP COLUMN fleet_url;
		DROP TABLE pipelines; DROP INDEX jobs_pipeline_id; ALTER TABLE jobs DROP COLUMN pipeline_id;
		DROP TABLE webhook_deliveries; DROP TABLE pipeline_schedules; DROP TABLE project_tokens;
		ALTER TABLE projects DROP COLUMN registered;
		ALTER TABLE projects DROP COLUMN repo_url;
		ALTER TABLE projects DROP COLUMN default_branch;
		ALTER TABLE projects DROP COLUMN config_path;
		ALTER TABLE projects DROP COLUMN variables;
		ALTER TABLE projects DROP COLUMN webhook_secret;
		ALTER TABLE projects DROP COLUMN forge_kind;
		ALTER TABLE projects DROP COLUMN forge_url;
		ALTER TABLE projects DROP COLUMN forge_repo;
		ALTER TABLE projects DROP COLUMN forge_token;
		ALTER TABLE projects DROP COLUMN created_at;
		ALTER TABLE projects DROP COLUMN updated_at;
		ALTER TABLE projects DROP COLUMN version;
		ALTER TABLE projects DROP COLUMN pipeline_iid;
		ALTER TABLE jobs DROP COLUMN coverage;
		DELETE FROM schema_migrations WHERE version >= 4`); err != nil {
		t.Fatal(err)
	}
	db.Close()
	if err := os.Remove(filepath.Join(dir, "secret-key")); err != nil {
		t.Fatal(err)
	}

	e = openEnv(t, dir, nil)
	jr := e.take(tok)
	if jr.Variables.Get("OLD") != "in the clear" || len(jr.Services) != 1 || len(jr.Services[0].Variables) != 1 || jr.Services[0].Variables[0].Value != "too" {
		t.Errorf("payload of a job stored in the clear: variables %v, services %+v", jr.Variables, jr.Services)
	}
	id := e.submit(newSecretJob().spec()).ID
	if got, want := sealedWith(t, e, id), keyFileID(t, filepath.Join(dir, "secret-key")); got != want {
		t.Errorf("new job sealed with %s, want the new key file's %s", got, want)
	}
	e.close()
	if err := newErr(t, dir, func(c *Config) { c.SecretKey, _ = secretbox.NewRandomKey() }); !strings.Contains(err.Error(), "sealed with secret key") {
		t.Errorf("New with another key after the upgrade = %v, want a refusal", err)
	}
}

// TestJobsWithoutVariablesNotSealed: a job with no variables has nothing
// sealed, and its payload has no variables of its own.
func TestJobsWithoutVariablesNotSealed(t *testing.T) {
	e := newEnv(t, nil)
	_, tok := e.runner(nil)
	v := e.submit(map[string]any{"services": []string{"redis:7"}})
	j, err := e.c.st.GetJob(t.Context(), v.ID)
	if err != nil || j.Spec.Sealed != "" {
		t.Fatalf("stored spec: sealed %q, %v; want nothing sealed", j.Spec.Sealed, err)
	}
	if jr := e.take(tok); jr.Variables.Get("CI_JOB_ID") == "" || len(jr.Services) != 1 {
		t.Errorf("payload: %+v", jr)
	}
}

// sealedWith returns the id of the key job id's variables are sealed with.
func sealedWith(t *testing.T, e *env, id int64) string {
	t.Helper()
	j, err := e.c.st.GetJob(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	kid, err := secretbox.KeyID(j.Spec.Sealed)
	if err != nil {
		t.Fatalf("job %d: spec.sealed = %q: %v", id, j.Spec.Sealed, err)
	}
	return kid
}

// keyFileID returns the id of the key in the file at path.
func keyFileID(t *testing.T, path string) string {
	t.Helper()
	k, err := secretbox.ReadKeyFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return k.ID()
}

// newErr runs New on dir with mod, which must fail; it returns the error.
func newErr(t *testing.T, dir string, mod func(*Config)) error {
	t.Helper()
	cfg := Config{DataDir: dir}
	if mod != nil {
		mod(&cfg)
	}
	c, err := New(t.Context(), slog.New(slog.DiscardHandler), cfg)
	if err == nil {
		c.Close()
		t.Fatalf("New succeeded; want a refusal")
	}
	return err
}

// TestSecretKeyRefusals: a coordinator whose key is not the one the
// database's variables are sealed with, or whose key cannot be read,
// refuses to start and says why.
func TestSecretKeyRefusals(t *testing.T) {
	other, _ := secretbox.NewRandomKey()
	tests := []struct {
		name string
		// prepare changes the data directory of a coordinator that ran
		// once (its key file is secret-key) and returns the Config change
		// of the next start.
		prepare func(t *testing.T, dir string) func(*Config)
		want    []string // in the error; "{db}" stands for the database's key id
		gone    string   // a file the refusal must not leave behind
	}{
		{
			name:    "another key given",
			prepare: func(*testing.T, string) func(*Config) { return func(c *Config) { c.SecretKey = other } },
			want:    []string{"sealed with secret key {db}", "this coordinator's key is " + other.ID(), "DROVER_SECRET_KEY_OLD"},
		},
		{
			name: "key file lost",
			prepare: func(t *testing.T, dir string) func(*Config) {
				if err := os.Remove(filepath.Join(dir, "secret-key")); err != nil {
					t.Fatal(err)
				}
				return nil
			},
			want: []string{"sealed with secret key {db}", "created by this start, was removed again"},
			gone: "secret-key",
		},
		{
			name: "old key is not the database's",
			prepare: func(*testing.T, string) func(*Config) {
				k, _ := secretbox.NewRandomKey()
				return func(c *Config) { c.SecretKey, c.OldSecretKeys = k, []*secretbox.Key{other} }
			},
			want: []string{"sealed with secret key {db}", "old " + other.ID()},
		},
		{
			name: "key file readable by others",
			prepare: func(t *testing.T, dir string) func(*Config) {
				if err := os.Chmod(filepath.Join(dir, "secret-key"), 0o644); err != nil {
					t.Fatal(err)
				}
				return nil
			},
			want: []string{"chmod 600 "},
		},
		{
			name: "bad old key file",
			prepare: func(t *testing.T, dir string) func(*Config) {
				if err := os.WriteFile(filepath.Join(dir, "secret-key.old"), []byte("not a key\n"), 0o600); err != nil {
					t.Fatal(err)
				}
				return nil
			},
			want: []string{"old key", "secret-key.old"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			e := openEnv(t, dir, nil)
			e.runner(nil)
			id := e.submit(newSecretJob().spec()).ID
			dbKey := sealedWith(t, e, id)
			if fileKey := keyFileID(t, filepath.Join(dir, "secret-key")); fileKey != dbKey {
				t.Fatalf("job sealed with %s, the key file holds %s", dbKey, fileKey)
			}
			e.close()
			err := newErr(t, dir, tt.prepare(t, dir))
			for _, w := range tt.want {
				if w = strings.ReplaceAll(w, "{db}", dbKey); !strings.Contains(err.Error(), w) {
					t.Errorf("New = %v\nwant it to say %q", err, w)
				}
			}
			if tt.gone != "" {
				if _, serr := os.Stat(filepath.Join(dir, tt.gone)); serr == nil {
					t.Errorf("%s left behind by the refusal", tt.gone)
				}
			}
		})
	}
}

// TestSecretKeyRotation: jobs sealed with key A, then the coordinator is
// started with a new key B and A as the old key (given in Config, or as
// files: secret-key.old and a new secret-key). The old job's payload is
// whole, a new job is sealed with B, and later starts need B: with B alone
// the database is accepted (and a job still sealed with A fails with
// data_integrity_failure when claimed, saying which key it needs), with A
// alone it is refused.
func TestSecretKeyRotation(t *testing.T) {
	tests := []struct {
		name string
		// rotate sets up the start with B and A as the old key.
		rotate func(t *testing.T, dir string, a, b *secretbox.Key, bText string) func(*Config)
	}{
		{"config", func(_ *testing.T, _ string, a, b *secretbox.Key, _ string) func(*Config) {
			return func(c *Config) { c.SecretKey, c.OldSecretKeys = b, []*secretbox.Key{a} }
		}},
		{"files", func(t *testing.T, dir string, _, _ *secretbox.Key, bText string) func(*Config) {
			p := filepath.Join(dir, "secret-key")
			if err := os.Rename(p, p+".old"); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte(bText+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			return nil
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			e := openEnv(t, dir, nil)
			_, tok := e.runner(nil)
			oldJob, stuck := newSecretJob(), newSecretJob()
			oldID := e.submit(oldJob.spec()).ID
			stuckID := e.submit(stuck.spec()).ID
			e.close()
			a, err := secretbox.ReadKeyFile(filepath.Join(dir, "secret-key"))
			if err != nil {
				t.Fatal(err)
			}
			b, bText := secretbox.NewRandomKey()

			e = openEnv(t, dir, tt.rotate(t, dir, a, b, bText))
			newJob := newSecretJob()
			newID := e.submit(newJob.spec()).ID
			if got := sealedWith(t, e, newID); got != b.ID() {
				t.Errorf("job submitted after the rotation sealed with %s, want the new key %s", got, b.ID())
			}
			if got := sealedWith(t, e, oldID); got != a.ID() {
				t.Errorf("job from before the rotation sealed with %s, want %s as it was", got, a.ID())
			}
			jr := e.take(tok)
			if jr.ID != oldID {
				t.Fatalf("took job %d, want %d", jr.ID, oldID)
			}
			oldJob.check(t, jr)
			e.close()

			// The database now records B. With B alone it is accepted, but
			// the job still sealed with A cannot run: it fails when its
			// turn comes, and the next job is handed out.
			if err := os.Remove(filepath.Join(dir, "secret-key.old")); err != nil && !errors.Is(err, fs.ErrNotExist) {
				t.Fatal(err)
			}
			e = openEnv(t, dir, func(c *Config) { c.SecretKey = b })
			jr = e.take(tok)
			if jr.ID != newID {
				t.Fatalf("took job %d, want %d (the one sealed with B)", jr.ID, newID)
			}
			newJob.check(t, jr)
			if g := e.job(stuckID); g.Status != "failed" || g.FailureReason != string(api.DataIntegrityFailure) {
				t.Errorf("job sealed with a key the coordinator lacks = %s (%s), want failed data_integrity_failure", g.Status, g.FailureReason)
			}
			if tr := e.trace(stuckID); !strings.Contains(tr, "sealed with secret key "+a.ID()) || strings.Contains(tr, stuck.masked) {
				t.Errorf("trace of the failed job = %q, want it to name key %s", tr, a.ID())
			}
			e.close()

			// With A alone: refused, naming both.
			err = newErr(t, dir, func(c *Config) { c.SecretKey = a })
			if !strings.Contains(err.Error(), "sealed with secret key "+b.ID()) || !strings.Contains(err.Error(), "this coordinator's key is "+a.ID()) {
				t.Errorf("New with the replaced key alone = %v, want a refusal naming %s and %s", err, b.ID(), a.ID())
			}
		})
	}
}

// TestSharedSecretKey: coordinators on one PostgreSQL database share their
// key. A job submitted through one is served whole through another, and
// the database holds its variables sealed only (and the key's id, never
// the key). A coordinator with another key is refused, naming both ids
// and saying every coordinator needs the same key; one given the
// database's key as its old key rotates the database to its new key.
func TestSharedSecretKey(t *testing.T) {
	url := pgtest.NewDatabase(t)
	envs := cluster(t, 2, url, nil)
	a, b := envs[0], envs[1]
	key := a.c.cfg.SecretKey
	_, tok := a.runner(nil)
	sj := newSecretJob()
	a.submit(sj.spec())
	sj.check(t, b.take(tok))

	conn, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.WithoutCancel(t.Context()))
	var name, spec, recorded string
	if err := conn.QueryRow(t.Context(), `SELECT name, spec FROM jobs`).Scan(&name, &spec); err != nil {
		t.Fatal(err)
	}
	if name != sj.name {
		t.Fatalf("jobs.name = %q, want %q", name, sj.name)
	}
	for _, v := range []string{sj.masked, sj.plain, sj.service} {
		if strings.Contains(spec, v) {
			t.Errorf("jobs.spec holds the value %s in the clear: %s", v, spec)
		}
	}
	if err := conn.QueryRow(t.Context(), `SELECT value FROM settings WHERE key = $1`, settingKeyID).Scan(&recorded); err != nil || recorded != key.ID() {
		t.Errorf("settings %s = %q, %v; want %s", settingKeyID, recorded, err, key.ID())
	}

	open := func() store.Store {
		st, err := postgres.Open(t.Context(), url)
		if err != nil {
			t.Fatal(err)
		}
		return st // New closes it
	}
	other, _ := secretbox.NewRandomKey()
	err = newErr(t, t.TempDir(), func(c *Config) { c.Store, c.SecretKey = open(), other })
	for _, w := range []string{key.ID(), other.ID(), "give every coordinator on the database the same DROVER_SECRET_KEY or secret-key file"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("New with another key = %v\nwant it to say %q", err, w)
		}
	}
	dir := t.TempDir()
	newErr(t, dir, func(c *Config) { c.Store = open() })
	if _, err := os.Stat(filepath.Join(dir, "secret-key")); err == nil {
		t.Errorf("a refused coordinator left the key file it created")
	}

	newKey, _ := secretbox.NewRandomKey()
	newEnv(t, func(c *Config) { c.Store, c.SecretKey, c.OldSecretKeys = open(), newKey, []*secretbox.Key{key} })
	if err := conn.QueryRow(t.Context(), `SELECT value FROM settings WHERE key = $1`, settingKeyID).Scan(&recorded); err != nil || recorded != newKey.ID() {
		t.Errorf("after a rotation settings %s = %q, %v; want %s", settingKeyID, recorded, err, newKey.ID())
	}
}
