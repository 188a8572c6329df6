package manager

import (
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/client"
	"github.com/drover-ci/drover/internal/config"
	"github.com/drover-ci/drover/internal/coordinator"
	"github.com/drover-ci/drover/internal/executor/shell"
)

// realCoordinator serves drover's coordinator (SQLite in a temporary
// directory) over loopback and returns its admin client and a runner token.
func realCoordinator(t testing.TB) (url string, admin *client.Client, runnerToken string) {
	t.Helper()
	c, err := coordinator.New(t.Context(), discard(), coordinator.Config{DataDir: t.TempDir()})
	if err != nil {
		t.Fatalf("coordinator.New = %v", err)
	}
	srv := httptest.NewServer(c.Handler())
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
		c.Close()
	})
	admin = client.New(srv.URL, c.AdminToken(), nil)
	r, err := admin.CreateRunner(t.Context(), client.RunnerSpec{Description: "watch"})
	if err != nil {
		t.Fatal(err)
	}
	return srv.URL, admin, r.Token
}

// runManager runs a manager with one shell runner; keepAlive is how long
// a silent job goes without a keep-alive PUT.
func runManager(t testing.TB, url, token string, keepAlive time.Duration, noWatch bool) {
	t.Helper()
	startManagerOpts(t, url, shell.NewProvider(), func(c *config.Config) {
		c.Runners[0].Token = token
	}, func(o *Options) {
		o.ForceSendInterval, o.NoJobWatch = keepAlive, noWatch
	})
}

// startSilentJob submits a job that prints one line and then nothing, and
// waits until that line has reached the coordinator.
func startSilentJob(t testing.TB, admin *client.Client) int64 {
	t.Helper()
	j, err := admin.Submit(t.Context(), client.JobSpec{
		Name: "silent", Script: []string{"echo started", "sleep 300"}, AfterScript: []string{"echo after-$CI_JOB_STATUS"},
	})
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		tr, _, err := admin.Trace(t.Context(), j.ID, 0)
		if err == nil && strings.Contains(string(tr), "started") {
			return j.ID
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %d did not start: %q", j.ID, tr)
		}
	}
}

// waitDone waits for job id to finish, at most d.
func waitDone(t testing.TB, admin *client.Client, id int64, d time.Duration) *client.Job {
	t.Helper()
	for deadline := time.Now().Add(d); ; time.Sleep(5 * time.Millisecond) {
		j, err := admin.Job(t.Context(), id)
		if err == nil && j.Finished() {
			return j
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %d not finished after %v", id, d)
		}
	}
}

// TestCancelReachesSilentJob: the keep-alive is an hour away and the job
// prints nothing, yet a cancel reaches the manager through jobs/watch: the
// after_script runs and the job ends canceled.
func TestCancelReachesSilentJob(t *testing.T) {
	url, admin, tok := realCoordinator(t)
	runManager(t, url, tok, time.Hour, false)
	id := startSilentJob(t, admin)
	if _, err := admin.Cancel(t.Context(), id); err != nil {
		t.Fatal(err)
	}
	j := waitDone(t, admin, id, 60*time.Second)
	if j.Status != "canceled" {
		t.Errorf("status = %s, want canceled", j.Status)
	}
	tr, _, _ := admin.Trace(t.Context(), id, 0)
	if !strings.Contains(string(tr), "after-canceled") {
		t.Errorf("after_script did not run on the cancel:\n%s", tr)
	}
	// A second job after the first one's watch ended is watched too.
	id = startSilentJob(t, admin)
	if _, err := admin.Cancel(t.Context(), id); err != nil {
		t.Fatal(err)
	}
	if j := waitDone(t, admin, id, 60*time.Second); j.Status != "canceled" {
		t.Errorf("second job status = %s, want canceled", j.Status)
	}
}

// BenchmarkCancelSilentJob measures the time from a cancel to the end of a
// job that prints nothing: through jobs/watch, and through the keep-alive
// PUT every 10 s (what a coordinator without jobs/watch, or GitLab
// Runner's 30 s, offers).
func BenchmarkCancelSilentJob(b *testing.B) {
	for _, bc := range []struct {
		name    string
		noWatch bool
	}{{"watch", false}, {"keepalive-10s", true}} {
		b.Run(bc.name, func(b *testing.B) {
			url, admin, tok := realCoordinator(b)
			runManager(b, url, tok, 10*time.Second, bc.noWatch)
			var total time.Duration
			for b.Loop() {
				b.StopTimer()
				id := startSilentJob(b, admin)
				b.StartTimer()
				start := time.Now()
				if _, err := admin.Cancel(b.Context(), id); err != nil {
					b.Fatal(err)
				}
				if j := waitDone(b, admin, id, 60*time.Second); j.Status != "canceled" {
					b.Fatalf("status = %s", j.Status)
				}
				total += time.Since(start)
			}
			b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "ms/cancel")
		})
	}
}
