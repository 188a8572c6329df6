package pgtest_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/drover-ci/drover/internal/pgtest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if err := pgtest.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
	os.Exit(code)
}

func start(t *testing.T) *pgtest.Server {
	t.Helper()
	begin := time.Now()
	srv, err := pgtest.Start(t.Context())
	if errors.Is(err, pgtest.ErrNotInstalled) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("PostgreSQL %s up in %v", srv.Version(), time.Since(begin).Round(time.Millisecond))
	t.Cleanup(func() { srv.Stop() })
	return srv
}

func query(t *testing.T, url, sql string) (string, error) {
	t.Helper()
	c, err := pgx.Connect(t.Context(), url)
	if err != nil {
		return "", err
	}
	defer c.Close(context.Background())
	var s string
	err = c.QueryRow(t.Context(), sql).Scan(&s)
	return s, err
}

func TestStartStop(t *testing.T) {
	srv := start(t)
	v, err := query(t, srv.URL("postgres"), `SELECT version()`)
	if err != nil || !strings.Contains(v, "PostgreSQL") {
		t.Fatalf("SELECT version() = %q, %v", v, err)
	}
	if err := srv.Stop(); err != nil {
		t.Fatalf("Stop = %v", err)
	}
	if _, err := query(t, srv.URL("postgres"), `SELECT 'x'`); err == nil {
		t.Errorf("server answers after Stop")
	}
	if err := srv.Stop(); err != nil {
		t.Errorf("second Stop = %v", err)
	}
}

func TestNewDatabase(t *testing.T) {
	var urls []string
	t.Run("create", func(t *testing.T) {
		a, b := pgtest.NewDatabase(t), pgtest.NewDatabase(t)
		if a == b {
			t.Fatalf("two databases at one URL %s", a)
		}
		for _, u := range []string{a, b} {
			if got, err := query(t, u, `SELECT current_database()`); err != nil || !strings.Contains(u, "/"+got+"?") {
				t.Errorf("current_database() at %s = %q, %v", u, got, err)
			}
		}
		urls = append(urls, a, b)
	})
	// The subtest's cleanup dropped them.
	for _, u := range urls {
		if _, err := query(t, u, `SELECT 'x'`); err == nil {
			t.Errorf("database at %s still there after its test", u)
		}
	}
}

// TestServersInParallel starts servers at once, as parallel test binaries
// do: each gets its own port and directory.
func TestServersInParallel(t *testing.T) {
	const n = 3
	srvs := make([]*pgtest.Server, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { srvs[i], errs[i] = pgtest.Start(t.Context()) })
	}
	wg.Wait()
	seen := map[string]bool{}
	for i, err := range errs {
		if errors.Is(err, pgtest.ErrNotInstalled) {
			t.Skip(err)
		}
		if err != nil {
			t.Errorf("Start #%d = %v", i, err)
			continue
		}
		defer srvs[i].Stop()
		u := srvs[i].URL("postgres")
		if seen[u] {
			t.Errorf("two servers at %s", u)
		}
		seen[u] = true
		if _, err := query(t, u, `SELECT 'x'`); err != nil {
			t.Errorf("server %d: %v", i, err)
		}
	}
}
