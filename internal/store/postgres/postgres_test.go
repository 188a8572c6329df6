package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/buildinfo"
	"github.com/drover-ci/drover/internal/freeport"
	"github.com/drover-ci/drover/internal/pgtest"
	"github.com/drover-ci/drover/internal/store"
	"github.com/drover-ci/drover/internal/store/postgres"
	"github.com/drover-ci/drover/internal/store/storetest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if err := pgtest.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
	os.Exit(code)
}

// harness opens each store on a fresh database of the binary's server.
type harness struct {
	mu   sync.Mutex
	urls map[store.Store]string
}

func (h *harness) Open(t *testing.T) store.Store {
	return h.open(t, pgtest.NewDatabase(t))
}

func (h *harness) Reopen(t *testing.T, s store.Store) store.Store {
	h.mu.Lock()
	url := h.urls[s]
	h.mu.Unlock()
	if err := s.Close(); err != nil {
		t.Fatalf("Close = %v", err)
	}
	return h.open(t, url)
}

func (h *harness) open(t *testing.T, url string) store.Store {
	t.Helper()
	s, err := postgres.Open(t.Context(), url)
	if err != nil {
		t.Fatalf("Open = %v", err)
	}
	h.mu.Lock()
	h.urls[s] = url
	h.mu.Unlock()
	return s
}

// FailJobInserts implements storetest.JobInsertFailer with a trigger.
func (h *harness) FailJobInserts(t *testing.T, s store.Store, name string) {
	h.mu.Lock()
	url := h.urls[s]
	h.mu.Unlock()
	sql(t, url, `CREATE FUNCTION refuse_job() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN RAISE EXCEPTION 'job refused by the test'; END $$`)
	sql(t, url, `CREATE TRIGGER refuse_job BEFORE INSERT ON jobs FOR EACH ROW
		WHEN (NEW.name = '`+strings.ReplaceAll(name, "'", "''")+`') EXECUTE FUNCTION refuse_job()`)
}

func TestConformance(t *testing.T) {
	storetest.Run(t, &harness{urls: map[store.Store]string{}})
}

func open(t *testing.T, url string) *postgres.Store {
	t.Helper()
	s, err := postgres.Open(t.Context(), url)
	if err != nil {
		t.Fatalf("Open(%s) = %v", url, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// sql runs a statement on the database at url, bypassing the store.
func sql(t *testing.T, url, query string, args ...any) {
	t.Helper()
	c, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	if _, err := c.Exec(t.Context(), query, args...); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
}

// schemaVersions returns the versions recorded in schema_migrations.
func schemaVersions(t *testing.T, url string) []int {
	t.Helper()
	c, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	rows, _ := c.Query(t.Context(), `SELECT version FROM schema_migrations ORDER BY version`)
	vs, err := pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil {
		t.Fatal(err)
	}
	return vs
}

func TestOpenTwice(t *testing.T) {
	url := pgtest.NewDatabase(t)
	for i := range 2 {
		s, err := postgres.Open(t.Context(), url)
		if err != nil {
			t.Fatalf("Open #%d = %v", i+1, err)
		}
		if err := s.Ping(t.Context()); err != nil {
			t.Errorf("Ping = %v", err)
		}
		s.Close()
	}
	if vs := schemaVersions(t, url); len(vs) == 0 || vs[0] != 1 || vs[len(vs)-1] != len(vs) {
		t.Errorf("schema_migrations = %v, want 1..n once each", vs)
	}
}

// TestConcurrentOpen opens one fresh database from four goroutines at
// once, as coordinators starting together do: the migration lock makes
// one apply the schema and the others find it done.
func TestConcurrentOpen(t *testing.T) {
	url := pgtest.NewDatabase(t)
	const n = 4
	stores := make([]*postgres.Store, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { stores[i], errs[i] = postgres.Open(t.Context(), url) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("Open #%d = %v", i, err)
			continue
		}
		defer stores[i].Close()
	}
	if vs := schemaVersions(t, url); len(vs) == 0 || vs[len(vs)-1] != len(vs) {
		t.Errorf("schema_migrations = %v, want 1..n once each", vs)
	}
	// Every store works on the one schema.
	for i, s := range stores {
		if s == nil {
			continue
		}
		if _, err := s.CreateJob(t.Context(), store.Job{Name: "j", Project: "a/b", Status: store.StatusPending}); err != nil {
			t.Errorf("store %d: CreateJob = %v", i, err)
		}
	}
}

func TestNewerSchemaRefused(t *testing.T) {
	url := pgtest.NewDatabase(t)
	s, err := postgres.Open(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	// A database as drover 0.1.0 left it: no drover_version column.
	sql(t, url, `ALTER TABLE schema_migrations DROP COLUMN drover_version`)
	s, err = postgres.Open(t.Context(), url)
	if err != nil {
		t.Fatalf("Open of a database without schema_migrations.drover_version = %v", err)
	}
	s.Close()
	sql(t, url, `INSERT INTO schema_migrations (version, applied_at, drover_version) VALUES (999, 0, '9.9.9')`)
	s, err = postgres.Open(t.Context(), url)
	if err == nil {
		s.Close()
		t.Fatal("Open of a database with a newer schema succeeded")
	}
	for _, want := range []string{"schema version 999", "migrated by drover 9.9.9", "this drover " + buildinfo.Get().Version + " knows schema versions up to", "downgrades are not supported"} {
		if !errors.Is(err, postgres.ErrSchemaTooNew) || !strings.Contains(err.Error(), want) {
			t.Errorf("Open = %v, want ErrSchemaTooNew saying %q", err, want)
		}
	}
}

// TestClaimAcrossStores claims 200 jobs from 8 stores, each with its own
// pool as separate coordinators have: every job is claimed exactly once,
// and every claim retires the job's previous token.
func TestClaimAcrossStores(t *testing.T) {
	ctx := t.Context()
	url := pgtest.NewDatabase(t)
	const jobs, coordinators = 200, 8
	seed := open(t, url)
	oldHash := func(id int64) string { return store.HashToken(fmt.Sprintf("old-%d", id)) }
	for i := range jobs {
		j, err := seed.CreateJob(ctx, store.Job{Name: "j", Project: fmt.Sprintf("p/%d", i%5), Status: store.StatusPending, CreatedAt: time.Now()})
		if err != nil {
			t.Fatal(err)
		}
		h := oldHash(j.ID)
		if _, err := seed.TransitionJob(ctx, j.ID, []store.Status{store.StatusPending}, store.JobChange{Status: store.StatusPending, TokenHash: &h, At: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	stores := make([]*postgres.Store, coordinators)
	for i := range stores {
		stores[i] = open(t, url)
	}

	var mu sync.Mutex
	claimedBy := map[int64]int64{}
	var wg sync.WaitGroup
	pending := []store.Status{store.StatusPending}
	for w, s := range stores {
		wg.Go(func() {
			rid := int64(w + 1)
			for {
				heads, err := s.QueueHeads(ctx, pending, []store.Status{store.StatusRunning}, 10)
				if err != nil {
					t.Error(err)
					return
				}
				if len(heads) == 0 {
					return
				}
				for _, j := range heads {
					tok := store.HashToken(fmt.Sprintf("new-%d", j.ID))
					got, err := s.TransitionJob(ctx, j.ID, pending, store.JobChange{Status: store.StatusRunning, RunnerID: &rid, TokenHash: &tok, At: time.Now()})
					if errors.Is(err, store.ErrConflict) {
						if got.Status != store.StatusRunning {
							t.Errorf("conflict on job %d gave it as %s", j.ID, got.Status)
						}
						continue
					}
					if err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					if prev, dup := claimedBy[j.ID]; dup {
						t.Errorf("job %d claimed by %d and %d", j.ID, prev, rid)
					}
					claimedBy[j.ID] = rid
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	if len(claimedBy) != jobs {
		t.Errorf("claimed %d jobs, want %d", len(claimedBy), jobs)
	}
	all, err := seed.ListJobs(ctx, store.JobFilter{})
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range all {
		if j.Status != store.StatusRunning || j.RunnerID != claimedBy[j.ID] || j.Version != 3 {
			t.Errorf("job %d: %s by %d, version %d; want running by %d, version 3", j.ID, j.Status, j.RunnerID, j.Version, claimedBy[j.ID])
		}
		if id, err := seed.RetiredJobToken(ctx, oldHash(j.ID)); err != nil || id != j.ID {
			t.Errorf("RetiredJobToken(old token of %d) = %d, %v", j.ID, id, err)
		}
	}
}

// TestOldJobSpec loads a job stored before services had more than a
// name: its spec holds services as strings and no image.
func TestOldJobSpec(t *testing.T) {
	ctx := t.Context()
	url := pgtest.NewDatabase(t)
	s := open(t, url)
	j, err := s.CreateJob(ctx, store.Job{Name: "old", Project: "a/b", Status: store.StatusPending, Image: "alpine"})
	if err != nil {
		t.Fatal(err)
	}
	sql(t, url, `UPDATE jobs SET spec = $1 WHERE id = $2`, `{"script":["echo hi"],"services":["redis:7","postgres:17"],"git":{}}`, j.ID)
	got, err := s.GetJob(ctx, j.ID)
	if err != nil {
		t.Fatalf("GetJob = %v", err)
	}
	want := store.JobSpec{Script: []string{"echo hi"}, Services: []store.ImageSpec{{Name: "redis:7"}, {Name: "postgres:17"}}}
	if d := cmp.Diff(want, got.Spec); d != "" || got.Image != "alpine" {
		t.Errorf("old spec: image %q (-want +got):\n%s", got.Image, d)
	}
}

// TestExactValues checks what a PostgreSQL type could round: times to the
// nanosecond (TIMESTAMPTZ keeps microseconds), a NUL in a variable (JSONB
// rejects \u0000), and times before 1970.
func TestExactValues(t *testing.T) {
	ctx := t.Context()
	s := open(t, pgtest.NewDatabase(t))
	at := time.Date(2026, 3, 4, 5, 6, 7, 123456789, time.UTC)
	in := store.Job{
		Name: "exact", Project: "a/b", Status: store.StatusPending, Tags: []string{},
		Spec:      store.JobSpec{Script: []string{"printf 'a\\0b'"}, Variables: []api.Variable{{Key: "NUL", Value: "a\x00b"}}},
		CreatedAt: at, QueuedAt: time.Date(1969, 7, 20, 20, 17, 40, 1, time.UTC), UpdatedAt: at,
	}
	j, err := s.CreateJob(ctx, in)
	if err != nil {
		t.Fatalf("CreateJob = %v", err)
	}
	in.ID, in.ProjectID, in.Version = j.ID, j.ProjectID, 1
	got, err := s.GetJob(ctx, j.ID)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(in, got); d != "" {
		t.Errorf("GetJob (-want +got):\n%s", d)
	}
}

func TestUnavailable(t *testing.T) {
	ctx := t.Context()

	t.Run("nothing listening", func(t *testing.T) {
		addr, err := freeport.Addr()
		if err != nil {
			t.Fatal(err)
		}
		s, err := postgres.Open(ctx, "postgres://postgres@"+addr+"/x?sslmode=disable")
		if err == nil {
			s.Close()
			t.Fatal("Open with nothing listening succeeded")
		}
		if !postgres.IsUnavailable(err) {
			t.Errorf("Open = %v, want IsUnavailable", err)
		}
	})

	t.Run("server stopped", func(t *testing.T) {
		srv, err := pgtest.Start(ctx)
		if errors.Is(err, pgtest.ErrNotInstalled) {
			t.Skip(err)
		}
		if err != nil {
			t.Fatal(err)
		}
		defer srv.Stop()
		// Not srv.NewDatabase: its cleanup would drop the database from a
		// stopped server.
		name, err := srv.CreateDatabase(ctx)
		if err != nil {
			t.Fatal(err)
		}
		s := open(t, srv.URL(name))
		j, err := s.CreateJob(ctx, store.Job{Name: "j", Project: "a/b", Status: store.StatusPending})
		if err != nil {
			t.Fatal(err)
		}
		if err := srv.Stop(); err != nil {
			t.Fatal(err)
		}
		if _, err := s.GetJob(ctx, j.ID); !postgres.IsUnavailable(err) {
			t.Errorf("GetJob with the server stopped = %v, want IsUnavailable", err)
		}
		if err := s.Ping(ctx); !postgres.IsUnavailable(err) {
			t.Errorf("Ping with the server stopped = %v, want IsUnavailable", err)
		}
	})

	t.Run("not for query errors or cancellation", func(t *testing.T) {
		s := open(t, pgtest.NewDatabase(t))
		if _, err := s.GetJob(ctx, 42); !errors.Is(err, store.ErrNotFound) || postgres.IsUnavailable(err) {
			t.Errorf("GetJob(unknown) = %v, want ErrNotFound only", err)
		}
		if _, err := s.CreateRunner(ctx, store.Runner{TokenHash: "same"}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.CreateRunner(ctx, store.Runner{TokenHash: "same"}); err == nil || postgres.IsUnavailable(err) {
			t.Errorf("CreateRunner(duplicate token) = %v, want an error that is not unavailability", err)
		}
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		if _, err := s.GetJob(cctx, 1); !errors.Is(err, context.Canceled) || postgres.IsUnavailable(err) {
			t.Errorf("GetJob(cancelled) = %v, want context.Canceled only", err)
		}
	})
}

func TestStat(t *testing.T) {
	s := open(t, pgtest.NewDatabase(t))
	if err := s.Ping(t.Context()); err != nil {
		t.Fatal(err)
	}
	if st := s.Stat(); st.MaxConns() <= 0 || st.TotalConns() < 1 {
		t.Errorf("Stat: max %d, total %d conns", st.MaxConns(), st.TotalConns())
	}
}

// traceHarness: traces in the database, jobs created in it for the FK.
type traceHarness struct{}

func (traceHarness) OpenTraces(t *testing.T) (store.Traces, func(t *testing.T) int64) {
	s := open(t, pgtest.NewDatabase(t))
	return s.Traces(), func(t *testing.T) int64 {
		j, err := s.CreateJob(t.Context(), store.Job{Name: "j", Project: "p", Status: store.StatusCreated, CreatedAt: time.Now()})
		if err != nil {
			t.Fatal(err)
		}
		return j.ID
	}
}

func TestTraces(t *testing.T) {
	storetest.RunTraces(t, traceHarness{})
}

// TestPipelinesAcrossStores creates pipelines of one project through
// four stores, each with its own pool as separate coordinators have: the
// IIDs are 1 to n, none given twice.
func TestPipelinesAcrossStores(t *testing.T) {
	ctx := t.Context()
	url := pgtest.NewDatabase(t)
	const coordinators, each = 4, 5
	var mu sync.Mutex
	var iids []int64
	var wg sync.WaitGroup
	for range coordinators {
		s := open(t, url)
		wg.Go(func() {
			for range each {
				p, _, err := s.CreatePipeline(ctx, store.Pipeline{Project: "a/b", Ref: "main", Status: store.PipelineCreated},
					[]store.Job{{Name: "j", Status: store.StatusCreated}})
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				iids = append(iids, p.IID)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	slices.Sort(iids)
	want := []int64{}
	for i := range coordinators * each {
		want = append(want, int64(i+1))
	}
	if d := cmp.Diff(want, iids); d != "" {
		t.Errorf("IIDs (-want +got):\n%s", d)
	}
}

// TestPipelineJobsAnnounced: the queued jobs of a pipeline are announced
// to the other coordinators when, and only if, the pipeline is committed;
// its jobs waiting (created, manual) are not.
func TestPipelineJobsAnnounced(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	url := pgtest.NewDatabase(t)
	a, b := open(t, url), open(t, url)
	events := make(chan store.QueueEvent, 16)
	ready := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		b.ListenQueue(ctx, ready, func(ev store.QueueEvent) { events <- ev })
	}()
	defer func() { cancel(); <-done }()
	<-ready

	pl := store.Pipeline{Project: "a/b", Ref: "main", Status: store.PipelinePending}
	jobs := []store.Job{
		{Name: "build", Status: store.StatusPending, Tags: []string{"linux"}, Image: "alpine"},
		{Name: "test", Status: store.StatusCreated},
		{Name: "deploy", Status: store.StatusManual},
	}
	_, created, err := a.CreatePipeline(ctx, pl, jobs)
	if err != nil {
		t.Fatal(err)
	}
	// A pipeline that fails after its queued job was inserted announces
	// nothing.
	h := &harness{urls: map[store.Store]string{a: url}}
	h.FailJobInserts(t, a, "refused")
	if _, _, err := a.CreatePipeline(ctx, pl, append(jobs[:1:1], store.Job{Name: "refused", Status: store.StatusPending})); err == nil {
		t.Fatal("CreatePipeline with a refused job succeeded")
	}
	marker, err := a.CreateJob(ctx, store.Job{Name: "marker", Project: "a/b", Status: store.StatusPending})
	if err != nil {
		t.Fatal(err)
	}
	var got []store.QueueEvent
	for ev := range events {
		got = append(got, ev)
		if ev.JobID == marker.ID {
			break
		}
	}
	want := []store.QueueEvent{{JobID: created[0].ID, Tags: []string{"linux"}, Image: true}, {JobID: marker.ID, Tags: []string{}}}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("events (-want +got):\n%s", d)
	}
}
