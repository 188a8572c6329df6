package manager

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/api"
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

// changeRecorder is a watched job's side of the watch: it records the
// answers the watch hands it.
type changeRecorder struct {
	mu  sync.Mutex
	got []string
}

func (r *changeRecorder) handle(resp *api.Response) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, fmt.Sprintf("%d %s", resp.StatusCode, resp.JobStatus))
	return false
}

func (r *changeRecorder) answers() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.got)
}

// watchSizes is a transport that records how many jobs each jobs/watch
// request it carries names.
type watchSizes struct {
	mu    sync.Mutex
	sizes []int
}

func (ws *watchSizes) RoundTrip(r *http.Request) (*http.Response, error) {
	if strings.HasSuffix(r.URL.Path, "/jobs/watch") && r.Body != nil {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			return nil, err
		}
		var req api.WatchRequest
		if err := json.Unmarshal(b, &req); err != nil {
			return nil, err
		}
		ws.mu.Lock()
		ws.sizes = append(ws.sizes, len(req.Jobs))
		ws.mu.Unlock()
		r.Body = io.NopCloser(bytes.NewReader(b))
	}
	return http.DefaultTransport.RoundTrip(r)
}

// TestWatchSplitsManyJobs: a manager running more jobs on one coordinator
// than one watch may name splits them over several requests, none over
// the limit, and the cancel of any of them reaches it through the watch.
// (The limit is api.MaxWatchedJobs; a small one here spares claiming a
// thousand jobs, which takes a minute under the race detector.)
func TestWatchSplitsManyJobs(t *testing.T) {
	const perRequest, n = 10, 25
	url, admin, tok := realCoordinator(t)
	m := newTestManager(t, discard(), url, shell.NewProvider(), func(c *config.Config) { c.Runners[0].Token = tok }, nil)
	sizes := &watchSizes{}
	rc, err := api.NewClient(url, api.ClientOptions{HTTPClient: &http.Client{Transport: sizes}})
	if err != nil {
		t.Fatal(err)
	}
	for range n {
		if _, err := admin.Submit(t.Context(), client.JobSpec{Name: "many", Script: []string{"true"}}); err != nil {
			t.Fatal(err)
		}
	}
	// Claim them all as this manager's runner would, then watch them; the
	// coordinator's job answers say that it serves jobs/watch.
	var jobs []*api.JobResponse
	var advert *api.Response
	for range n {
		jr, r, err := rc.RequestJob(t.Context(), api.JobRequest{Token: tok, SystemID: "s_many", Info: api.VersionInfo{Name: "drover"}})
		if err != nil || jr == nil {
			t.Fatalf("jobs/request = %v, %v", r, err)
		}
		jobs, advert = append(jobs, jr), r
	}
	m.noteWatch(rc.URL(), advert)
	w := m.watcherFor(rc.URL(), tok, rc)
	if w == nil {
		t.Fatalf("the coordinator did not advertise jobs/watch (%s = %v)", api.HeaderJobWatch, advert.JobWatch)
	}
	w.perRequest = perRequest
	var ids []int64
	targets := map[int64]*changeRecorder{}
	for _, jr := range jobs {
		ids = append(ids, jr.ID)
		targets[jr.ID] = &changeRecorder{}
		t.Cleanup(w.add(jr.ID, jr.Token, api.RemoteRunning, targets[jr.ID]))
	}
	// The first, the last and one in the middle: whichever request
	// covers them, each hears of its cancel.
	canceled := []int64{ids[0], ids[n/2], ids[n-1]}
	for _, id := range canceled {
		if _, err := admin.Cancel(t.Context(), id); err != nil {
			t.Fatal(err)
		}
	}
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		heard := 0
		for _, id := range canceled {
			if got := targets[id].answers(); len(got) > 0 {
				if got[0] != "200 canceling" {
					t.Fatalf("job %d heard %q, want 200 canceling", id, got)
				}
				heard++
			}
		}
		if heard == len(canceled) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of the %d canceled jobs heard of it through the watch", heard, len(canceled))
		}
	}
	for id, r := range targets {
		if got := r.answers(); len(got) > 0 && !slices.Contains(canceled, id) {
			t.Errorf("job %d, not canceled, heard %q", id, got)
		}
	}
	sizes.mu.Lock()
	defer sizes.mu.Unlock()
	if len(sizes.sizes) == 0 || slices.Max(sizes.sizes) > perRequest {
		t.Errorf("watch requests named %v jobs, want at most %d each", sizes.sizes, perRequest)
	}
}
