package coordinator

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/drover-ci/drover/internal/pgtest"
	"github.com/drover-ci/drover/internal/store/postgres"
)

// PostgreSQL faults the red-team pass did not reach (docs/SECURITY.md):
// the coordinator's connection dropped in the middle of a transaction,
// and a statement held past the database's statement timeout.

// pgEnv is a coordinator on a fresh PostgreSQL database, and a connection
// of the test's own to that database. before, if set, runs on that
// connection before the coordinator opens the database.
func pgEnv(t *testing.T, before string) (*env, *pgx.Conn) {
	t.Helper()
	url := pgtest.NewDatabase(t)
	conn, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	if before != "" {
		if _, err := conn.Exec(t.Context(), strings.ReplaceAll(before, "{db}", pgx.Identifier{conn.Config().Database}.Sanitize())); err != nil {
			t.Fatalf("%s: %v", before, err)
		}
	}
	st, err := postgres.Open(t.Context(), url)
	if err != nil {
		t.Fatalf("postgres.Open = %v", err)
	}
	return newEnv(t, func(c *Config) { c.Store = st }), conn
}

// bgAnswer is what a request sent in the background got.
type bgAnswer struct {
	code int
	hdr  http.Header
	body string
	err  error
}

// async sends a request in the background, bounded by a generous overall
// timeout so that a coordinator that hangs fails the test instead of
// hanging it.
func (e *env) async(method, path string, body any) <-chan bgAnswer {
	ch := make(chan bgAnswer, 1)
	go func() {
		ctx, cancel := context.WithTimeout(e.t.Context(), 2*time.Minute)
		defer cancel()
		var b []byte
		if body != nil {
			b, _ = json.Marshal(body)
		}
		rd := bytes.NewReader(b)
		req, _ := http.NewRequestWithContext(ctx, method, e.srv.URL+path, rd)
		req.Header.Set("Authorization", "Bearer "+e.c.AdminToken())
		resp, err := e.srv.Client().Do(req)
		if err != nil {
			ch <- bgAnswer{err: err}
			return
		}
		defer resp.Body.Close()
		out, err := io.ReadAll(resp.Body)
		ch <- bgAnswer{code: resp.StatusCode, hdr: resp.Header, body: string(out), err: err}
	}()
	return ch
}

// waitBackends waits until n of the coordinator's backends wait on a lock,
// and returns their pids.
func waitBackends(t *testing.T, conn *pgx.Conn, n int) []int32 {
	t.Helper()
	for {
		rows, err := conn.Query(t.Context(), `SELECT pid FROM pg_stat_activity
			WHERE datname = current_database() AND application_name = 'drover-coordinator' AND wait_event_type = 'Lock'`)
		if err != nil {
			t.Fatalf("pg_stat_activity: %v", err)
		}
		pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
		if err != nil {
			t.Fatalf("pg_stat_activity: %v", err)
		}
		if len(pids) >= n {
			return pids
		}
		select {
		case <-t.Context().Done():
			t.Fatal("test ended waiting for the coordinator to wait on the lock")
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// TestPostgresDroppedConnection: the coordinator's connection is
// terminated in the middle of a transaction (a cancel waiting on the row
// lock the test holds). The request is answered 503 with Retry-After,
// the transaction's change is not made, and the next requests are served
// without a restart. Then every connection is terminated while
// submissions are in flight: each is answered 201 or 503, never 500, and
// every job answered 201 is there.
func TestPostgresDroppedConnection(t *testing.T) {
	e, conn := pgEnv(t, "")
	ctx := t.Context()
	j := e.submit(nil)

	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SELECT id FROM jobs WHERE id = $1 FOR UPDATE`, j.ID); err != nil {
		t.Fatal(err)
	}
	canceled := e.async("POST", fmt.Sprintf("/api/v1/jobs/%d/cancel", j.ID), nil)
	pids := waitBackends(t, conn, 1)
	if _, err := tx.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM unnest($1::int[]) AS pid`, pids); err != nil {
		t.Fatalf("pg_terminate_backend: %v", err)
	}
	a := <-canceled
	if a.err != nil || a.code != http.StatusServiceUnavailable || a.hdr.Get("Retry-After") == "" || !strings.Contains(a.body, "database unavailable") {
		t.Errorf("cancel whose connection was terminated mid-transaction = %d %v %q (Retry-After %q), want 503 naming the database, with Retry-After",
			a.code, a.err, a.body, a.hdr.Get("Retry-After"))
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if got := e.job(j.ID).Status; got != "pending" {
		t.Errorf("job after the dropped cancel = %s, want pending (the transaction did not commit)", got)
	}
	if resp, b := e.admin("POST", fmt.Sprintf("/api/v1/jobs/%d/cancel", j.ID), nil); resp.StatusCode != http.StatusOK || !strings.Contains(string(b), `"status":"canceled"`) {
		t.Errorf("cancel again = %d %s, want 200 canceled", resp.StatusCode, b)
	}

	// Every connection dropped while submissions are in flight.
	const n = 24
	answers := make([]<-chan bgAnswer, n)
	var wg sync.WaitGroup
	for i := range answers {
		answers[i] = e.async("POST", "/api/v1/jobs", map[string]any{"name": fmt.Sprintf("burst-%d", i), "script": []string{"true"}})
		if i == n/2 {
			wg.Go(func() {
				if _, err := conn.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
					WHERE datname = current_database() AND application_name = 'drover-coordinator'`); err != nil {
					t.Errorf("pg_terminate_backend: %v", err)
				}
			})
		}
	}
	wg.Wait()
	var created []int64
	unavailable := 0
	for i, ch := range answers {
		a := <-ch
		switch {
		case a.err != nil:
			t.Errorf("submission %d: %v", i, a.err)
		case a.code == http.StatusCreated:
			var v jobView
			e.decode([]byte(a.body), &v)
			created = append(created, v.ID)
		case a.code == http.StatusServiceUnavailable && a.hdr.Get("Retry-After") != "":
			unavailable++
		default:
			t.Errorf("submission %d while connections were dropped = %d %q, want 201, or 503 with Retry-After", i, a.code, a.body)
		}
	}
	t.Logf("%d submissions: %d answered 201, %d answered 503", n, len(created), unavailable)

	// Served again without a restart: the pool replaces the dropped
	// connections (a request may still meet one and be answered 503).
	var after jobView
	for i := 0; ; i++ {
		resp, b := e.admin("POST", "/api/v1/jobs", map[string]any{"name": "after", "script": []string{"true"}})
		if resp.StatusCode == http.StatusCreated {
			e.decode(b, &after)
			break
		}
		if resp.StatusCode != http.StatusServiceUnavailable || i == 10 {
			t.Fatalf("submission after the drop (attempt %d) = %d %s, want 201", i+1, resp.StatusCode, b)
		}
	}
	for _, id := range append(created, after.ID) {
		if resp, b := e.admin("GET", fmt.Sprintf("/api/v1/jobs/%d", id), nil); resp.StatusCode != http.StatusOK {
			t.Errorf("job %d, answered 201, = %d %s, want it there", id, resp.StatusCode, b)
		}
	}
	if resp, b := e.do("GET", "/health/ready", nil, nil); resp.StatusCode != http.StatusOK {
		t.Errorf("ready after the drop = %d %s, want 200", resp.StatusCode, b)
	}
}

// TestPostgresStatementTimeout: the test holds an exclusive lock on the
// jobs table, and the database's statement_timeout is 1s. Requests that
// need the table are answered 503 naming a database timeout, with
// Retry-After (not 500, and not held until the lock goes); /health/ready
// still answers, naming the database; once the lock is released
// everything works.
func TestPostgresStatementTimeout(t *testing.T) {
	e, conn := pgEnv(t, `ALTER DATABASE {db} SET statement_timeout = '1s'`)
	ctx := t.Context()
	j := e.submit(nil)

	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `LOCK TABLE jobs IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	reqs := []struct{ method, path string }{
		{"GET", fmt.Sprintf("/api/v1/jobs/%d", j.ID)},
		{"GET", "/api/v1/jobs"},
		{"POST", "/api/v1/jobs"},
		{"POST", fmt.Sprintf("/api/v1/jobs/%d/cancel", j.ID)},
		{"GET", fmt.Sprintf("/jobs/%d", j.ID)}, // the web UI
		{"GET", "/jobs"},
	}
	chs := make([]<-chan bgAnswer, len(reqs))
	for i, r := range reqs {
		var body any
		if r.path == "/api/v1/jobs" && r.method == "POST" {
			body = map[string]any{"name": "during", "script": []string{"true"}}
		}
		chs[i] = e.async(r.method, r.path, body)
	}
	for i, ch := range chs {
		a := <-ch
		if a.err != nil || a.code != http.StatusServiceUnavailable || a.hdr.Get("Retry-After") == "" || !strings.Contains(a.body, "database timeout") {
			t.Errorf("%s %s while the table is locked = %d %v %q (Retry-After %q), want 503 naming a database timeout, with Retry-After",
				reqs[i].method, reqs[i].path, a.code, a.err, a.body, a.hdr.Get("Retry-After"))
		}
	}
	ready := <-e.async("GET", "/health/ready", nil)
	if ready.err != nil || ready.code != http.StatusOK || !strings.Contains(ready.body, "store: postgres") {
		t.Errorf("ready while the table is locked = %d %v %q, want 200 naming the database", ready.code, ready.err, ready.body)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}

	if got := e.job(j.ID).Status; got != "pending" {
		t.Errorf("job after the timed-out cancel = %s, want pending", got)
	}
	resp, b := e.admin("GET", "/api/v1/jobs", nil)
	var l []jobView
	e.decode(b, &l)
	if resp.StatusCode != http.StatusOK || len(l) != 1 {
		t.Errorf("list after the lock = %d with %d jobs, want 200 with 1 (the timed-out submission stored nothing)", resp.StatusCode, len(l))
	}
	e.submit(nil)
	if resp, b := e.admin("POST", fmt.Sprintf("/api/v1/jobs/%d/cancel", j.ID), nil); resp.StatusCode != http.StatusOK {
		t.Errorf("cancel after the lock = %d %s, want 200", resp.StatusCode, b)
	}
}
