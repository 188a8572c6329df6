package e2e

import (
	"context"
	"net/http"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/pgtest"
)

// TestCoordinatorPostgres runs drover's coordinator on a real PostgreSQL
// server (Debian's, started by the test): jobs run end to end through a
// shell runner, /health/ready reports the database, and a coordinator
// started again on the same database (with a fresh data directory: the
// queue is in the database) still knows the runner and every job.
func TestCoordinatorPostgres(t *testing.T) {
	url := pgtest.NewDatabase(t)
	dir := t.TempDir()
	c := startCoordinator(t, filepath.Join(dir, "coord1"), "--database-url", url)
	c.waitLog(`job store: PostgreSQL`, 10*time.Second)
	if strings.Contains(c.log.String(), url) {
		t.Errorf("the coordinator logged the database URL as given (with any password) instead of a description")
	}
	cl := c.client()
	cfg := writeConfig(t, dir, c.url, c.runnerToken(t), 2, "")
	m := start(t, dir, "run", "--config", cfg)
	m.waitLog("runner manager started", 20*time.Second)
	var ids []int64
	for _, name := range []string{"a", "b", "c"} {
		ids = append(ids, submitJSON(t, c, map[string]any{"name": name, "script": []string{"echo on-postgres-" + name}}))
	}
	for i, id := range ids {
		j := waitJob(t, cl, id, time.Minute, finished)
		log := trace(t, cl, id)
		if j.Status != "success" || !strings.Contains(log, "on-postgres-"+[]string{"a", "b", "c"}[i]) {
			t.Fatalf("job %d: %s\n%s", id, j.Status, log)
		}
	}
	resp, err := http.Get(c.url + "/health/ready")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("/health/ready = %v, %v", resp, err)
	}
	resp.Body.Close()

	// A second coordinator on the same database, with a data directory of
	// its own, sees the same queue: the runner's token works there and the
	// jobs are listed with their results.
	// It needs the first one's secret key (the database records its id).
	c2 := startCoordinator(t, filepath.Join(dir, "coord2"), "--database-url", url,
		"--secret-key-file", filepath.Join(dir, "coord1", "secret-key"))
	c2.waitLog(`job store: PostgreSQL`, 10*time.Second)
	c2cl := c2.client()
	for _, id := range ids {
		j, err := c2cl.Job(context.Background(), id)
		if err != nil || j.Status != "success" {
			t.Errorf("job %d through the second coordinator: %+v, %v", id, j, err)
		}
	}
	m.signal(syscall.SIGTERM)
	m.wait(30 * time.Second)
}

// TestCoordinatorPostgresBadURL: a database that cannot be reached or a
// URL that does not parse stops the coordinator at start with exit code
// 2, naming the database but never its password.
func TestCoordinatorPostgresBadURL(t *testing.T) {
	for _, tc := range []struct {
		name, url, want string
	}{
		{"unreachable", "postgres://drover:s3cret@127.0.0.1:1/queue?connect_timeout=2", "drover@127.0.0.1:1/queue"},
		{"not a URL", "postgres://drover:s3cret@[::1/queue", "--database-url"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			out, code := runCLI(t, dir, nil, "coordinator", "--listen", "127.0.0.1:0", "--data", filepath.Join(dir, "d"), "--database-url", tc.url)
			if code != 2 {
				t.Fatalf("exit code %d, want 2; output:\n%s", code, out)
			}
			if !strings.Contains(out, tc.want) || strings.Contains(out, "s3cret") {
				t.Errorf("output lacks %q or shows the password:\n%s", tc.want, out)
			}
		})
	}
}
