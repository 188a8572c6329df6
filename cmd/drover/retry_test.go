package main

import (
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/drover-ci/drover/internal/client"
	"github.com/drover-ci/drover/internal/coordinator"
)

// TestRetryAndCancelCommands: drover cancel and drover retry against a
// real coordinator: a pending job canceled (a second cancel refused with
// the job's state), then queued again as a new job; retrying a job that
// has not finished is refused.
func TestRetryAndCancelCommands(t *testing.T) {
	srvURL, adminToken, cl := adminServer(t)
	j, err := cl.Submit(t.Context(), client.JobSpec{Name: "build", Script: []string{"true"}})
	if err != nil {
		t.Fatal(err)
	}
	flags := []string{"--url", srvURL, "--token", adminToken}
	run := func(args ...string) (string, int, error) {
		return drover(t, append(args, flags...)...)
	}
	if out, code, err := run("retry", fmt.Sprint(j.ID)); code == 0 || err == nil || !strings.Contains(err.Error(), "only a finished job can be retried") {
		t.Errorf("retry of a pending job: exit %d, %v\n%s", code, err, out)
	}
	if out, code, err := run("cancel", fmt.Sprint(j.ID)); code != 0 || out != fmt.Sprintf("job %d: canceled\n", j.ID) {
		t.Fatalf("cancel: exit %d, %v\n%s", code, err, out)
	}
	// A second cancel is too late, and says so with the job's state.
	if out, code, err := run("cancel", fmt.Sprint(j.ID)); code == 0 || err == nil || err.Error() != fmt.Sprintf("job %d already finished: canceled", j.ID) {
		t.Errorf("cancel of a canceled job: exit %d, %v, want the error \"job %d already finished: canceled\"\n%s", code, err, j.ID, out)
	}
	out, code, err := run("retry", fmt.Sprint(j.ID))
	if want := fmt.Sprintf("job %d: pending (retry of job %d)\n", j.ID+1, j.ID); code != 0 || out != want {
		t.Fatalf("retry: exit %d, %v\n%q, want %q", code, err, out, want)
	}
	if got, err := cl.Job(t.Context(), j.ID+1); err != nil || got.Name != "build" || got.Status != "pending" {
		t.Errorf("the retry job = %+v, %v", got, err)
	}
}

// adminServer starts a real coordinator (SQLite in a temporary directory)
// behind an httptest server, both stopped when t ends, and returns the
// server's URL, the admin token and an admin client.
func adminServer(t *testing.T) (url, token string, cl *client.Client) {
	t.Helper()
	c, err := coordinator.New(t.Context(), nil, coordinator.Config{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	srv := httptest.NewServer(c.Handler())
	t.Cleanup(srv.Close)
	return srv.URL, c.AdminToken(), client.New(srv.URL, c.AdminToken(), nil)
}
