package coordinator

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/pgtest"
	"github.com/drover-ci/drover/internal/store"
	"github.com/drover-ci/drover/internal/store/sqlite"
)

// watching returns how many jobs/watch calls c holds.
func watching(c *Coordinator) int {
	c.watch.mu.Lock()
	defer c.watch.mu.Unlock()
	n := map[chan struct{}]bool{}
	for _, s := range c.watch.subs {
		for ch := range s {
			n[ch] = true
		}
	}
	return len(n)
}

// waitWatching waits until c holds n watches.
func waitWatching(t testing.TB, c *Coordinator, n int) {
	t.Helper()
	waitUntil(t, func() bool { return watching(c) >= n }, nil)
}

// wantChanges checks a watch answer.
func wantChanges(t testing.TB, got []api.JobChange, want []api.JobChange) {
	t.Helper()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("watch = %+v, want %+v", got, want)
	}
}

// watchJobs sends a watch, with req.Token also in RUNNER-TOKEN as drover's
// manager sends it.
func (e *env) watchJobs(req api.WatchRequest) (*http.Response, api.WatchResponse) {
	e.t.Helper()
	resp, b := e.do("POST", "/api/v4/jobs/watch", map[string]string{hdrRunnerToken: req.Token}, req)
	var out api.WatchResponse
	if resp.StatusCode == http.StatusOK {
		e.decode(b, &out)
	}
	return resp, out
}

// heldWatch sends req in the background; the answer arrives on the
// returned channel.
func (e *env) heldWatch(req api.WatchRequest) <-chan api.WatchResponse {
	ch := make(chan api.WatchResponse, 1)
	go func() {
		resp, out := e.watchJobs(req)
		if resp.StatusCode != http.StatusOK {
			e.t.Errorf("watch = %d", resp.StatusCode)
		}
		ch <- out
	}()
	return ch
}

func TestJobWatch(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.LongPollTimeout = 5 * time.Minute })
	_, tok := e.runner(nil)
	e.submit(nil)
	resp, jr := e.request(tok, "", api.FeaturesInfo{})
	if resp.StatusCode != http.StatusCreated || jr == nil {
		t.Fatalf("request = %d", resp.StatusCode)
	}
	if got := resp.Header.Get(hdrJobWatch); got != "30" {
		t.Errorf("jobs/request %s = %q, want 30 (the coordinator serves jobs/watch)", hdrJobWatch, got)
	}
	running := api.WatchedJob{ID: jr.ID, Token: jr.Token, JobStatus: api.RemoteRunning}

	t.Run("answers at once when the status differs", func(t *testing.T) {
		_, out := e.watchJobs(api.WatchRequest{Token: tok, Jobs: []api.WatchedJob{{ID: jr.ID, Token: jr.Token, JobStatus: api.RemotePending}}})
		wantChanges(t, out.Jobs, []api.JobChange{{ID: jr.ID, StatusCode: 200, JobStatus: "running"}})
	})
	t.Run("bad requests", func(t *testing.T) {
		for _, req := range []api.WatchRequest{{Token: tok}, {Token: tok, Jobs: []api.WatchedJob{{ID: jr.ID}}}, {Token: tok, Jobs: []api.WatchedJob{{Token: "x"}}}} {
			if resp, _ := e.watchJobs(req); resp.StatusCode != http.StatusBadRequest {
				t.Errorf("watch %+v = %d, want 400", req, resp.StatusCode)
			}
		}
	})
	t.Run("unknown job and a token that never was the job's", func(t *testing.T) {
		_, out := e.watchJobs(api.WatchRequest{Token: tok, Jobs: []api.WatchedJob{
			{ID: 999, Token: "x", JobStatus: "running"}, {ID: jr.ID, Token: "not-its-token", JobStatus: "running"},
		}})
		wantChanges(t, out.Jobs, []api.JobChange{{ID: 999, StatusCode: 404}, {ID: jr.ID, StatusCode: 404}})
	})
	t.Run("ends empty after its timeout", func(t *testing.T) {
		_, out := e.watchJobs(api.WatchRequest{Token: tok, Jobs: []api.WatchedJob{running}, Timeout: 0.05})
		if out.Jobs == nil || len(out.Jobs) != 0 {
			t.Errorf("watch = %#v, want an empty list", out.Jobs)
		}
	})
	t.Run("a cancel answers a held watch", func(t *testing.T) {
		got := e.heldWatch(api.WatchRequest{Token: tok, Jobs: []api.WatchedJob{running}})
		waitWatching(t, e.c, 1)
		if resp, _ := e.admin("POST", fmt.Sprintf("/api/v1/jobs/%d/cancel", jr.ID), nil); resp.StatusCode != 200 {
			t.Fatalf("cancel = %d", resp.StatusCode)
		}
		out := <-got
		wantChanges(t, out.Jobs, []api.JobChange{{ID: jr.ID, StatusCode: 200, JobStatus: "canceling"}})
	})
	t.Run("the end of the job answers a watch of canceling", func(t *testing.T) {
		got := e.heldWatch(api.WatchRequest{Token: tok, Jobs: []api.WatchedJob{{ID: jr.ID, Token: jr.Token, JobStatus: api.RemoteCanceling}}})
		waitWatching(t, e.c, 1)
		if resp, _ := e.put(jr.ID, jr.Token, api.UpdateJobRequest{State: "failed", FailureReason: "script_failure"}); resp.StatusCode != 200 {
			t.Fatalf("final PUT = %d", resp.StatusCode)
		}
		out := <-got
		wantChanges(t, out.Jobs, []api.JobChange{{ID: jr.ID, StatusCode: 409, JobStatus: "canceled"}})
	})
	if n := watching(e.c); n != 0 {
		t.Errorf("%d watches left subscribed", n)
	}
}

// TestJobWatchAcrossCoordinators: a job canceled through one coordinator
// answers the watch its runner holds on another at once.
func TestJobWatchAcrossCoordinators(t *testing.T) {
	envs := cluster(t, 2, pgtest.NewDatabase(t), nil)
	a, b := envs[0], envs[1]
	_, tok := a.runner(nil)
	a.submit(nil)
	jr := a.take(tok)
	got := a.heldWatch(api.WatchRequest{Token: tok, Jobs: []api.WatchedJob{{ID: jr.ID, Token: jr.Token, JobStatus: api.RemoteRunning}}})
	waitWatching(t, a.c, 1)
	if resp, _ := b.admin("POST", fmt.Sprintf("/api/v1/jobs/%d/cancel", jr.ID), nil); resp.StatusCode != 200 {
		t.Fatalf("cancel through b = %d", resp.StatusCode)
	}
	out := <-got
	wantChanges(t, out.Jobs, []api.JobChange{{ID: jr.ID, StatusCode: 200, JobStatus: "canceling"}})
}

// TestJobWatchNeedsRunnerToken: a watch without a runner token, or with one
// that is no runner's, is refused as jobs/request refuses it, before any
// job is looked at.
func TestJobWatchNeedsRunnerToken(t *testing.T) {
	e := newEnv(t, nil)
	_, tok := e.runner(nil)
	e.submit(nil)
	jr := e.take(tok)
	jobs := []api.WatchedJob{{ID: jr.ID, Token: jr.Token, JobStatus: api.RemotePending}}
	for _, tc := range []struct {
		name   string
		body   string // the body's token
		header string // RUNNER-TOKEN
		want   int
	}{
		{"none", "", "", http.StatusForbidden},
		{"not a runner's", "glrt-nobody", "glrt-nobody", http.StatusForbidden},
		{"in the body", tok, "", http.StatusOK},
		{"in the header", "", tok, http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, b := e.do("POST", "/api/v4/jobs/watch", map[string]string{hdrRunnerToken: tc.header}, api.WatchRequest{Token: tc.body, Jobs: jobs})
			if resp.StatusCode != tc.want {
				t.Errorf("watch = %d %s, want %d", resp.StatusCode, b, tc.want)
			}
		})
	}
}

// TestJobWatchTellsNothingOfOtherJobs: a job of another runner, named with
// its real job token, is answered exactly as a job that does not exist,
// whether the job runs, waits for its runner's accept or has finished.
func TestJobWatchTellsNothingOfOtherJobs(t *testing.T) {
	e := newEnv(t, nil)
	_, mine := e.runner(nil)
	_, other := e.runner(nil)
	e.submit(nil)
	e.submit(nil)
	e.submit(nil)
	running := e.take(other)
	_, waiting := e.request(other, "", api.FeaturesInfo{TwoPhaseJobCommit: true})
	if waiting == nil {
		t.Fatal("no job for the two-phase request")
	}
	done := e.take(other)
	if resp, _ := e.put(done.ID, done.Token, api.UpdateJobRequest{State: api.StateSuccess}); resp.StatusCode != http.StatusOK {
		t.Fatalf("final PUT = %d", resp.StatusCode)
	}
	const missing = 99999
	for _, jr := range []*api.JobResponse{running, waiting, done} {
		// The same question about the other runner's job and about one that
		// does not exist (with the same token, and every status one could
		// guess): the answers must differ in nothing but the id.
		for _, status := range []string{"", api.RemotePending, api.RemoteRunning, api.RemoteCanceling, "success"} {
			resp, out := e.watchJobs(api.WatchRequest{Token: mine, Timeout: 0.01, Jobs: []api.WatchedJob{
				{ID: jr.ID, Token: jr.Token, JobStatus: status}, {ID: missing, Token: jr.Token, JobStatus: status},
			}})
			if resp.StatusCode != http.StatusOK || len(out.Jobs) != 2 {
				t.Fatalf("watch of job %d as %q = %d %+v, want 200 with both jobs", jr.ID, status, resp.StatusCode, out.Jobs)
			}
			theirs, none := out.Jobs[0], out.Jobs[1]
			theirs.ID = none.ID
			if theirs != none || none.StatusCode != http.StatusNotFound {
				t.Errorf("job %d of another runner, as %q: %+v; a job that does not exist: %+v; want both 404 alike", jr.ID, status, out.Jobs[0], out.Jobs[1])
			}
		}
	}
	// Its own runner still hears of it.
	_, out := e.watchJobs(api.WatchRequest{Token: other, Jobs: []api.WatchedJob{{ID: running.ID, Token: running.Token, JobStatus: api.RemotePending}}})
	wantChanges(t, out.Jobs, []api.JobChange{{ID: running.ID, StatusCode: 200, JobStatus: "running"}})
}

// jobReadCounter counts the job reads a watch makes.
type jobReadCounter struct {
	store.Store
	reads atomic.Int64
}

func (s *jobReadCounter) GetJob(ctx context.Context, id int64) (store.Job, error) {
	s.reads.Add(1)
	return s.Store.GetJob(ctx, id)
}

func (s *jobReadCounter) RetiredJobToken(ctx context.Context, hash string) (int64, error) {
	s.reads.Add(1)
	return s.Store.RetiredJobToken(ctx, hash)
}

func (s *jobReadCounter) JobStates(ctx context.Context, ids []int64) ([]store.JobState, error) {
	s.reads.Add(1)
	return s.Store.JobStates(ctx, ids)
}

func (s *jobReadCounter) RetiredJobTokens(ctx context.Context, hashes []string) (map[string]int64, error) {
	s.reads.Add(1)
	return s.Store.RetiredJobTokens(ctx, hashes)
}

// TestJobWatchBounded: a watch names at most api.MaxWatchedJobs jobs (more
// is a 400 that says so), and a full one costs a couple of reads of the
// store, not two per job, even when every token is wrong.
func TestJobWatchBounded(t *testing.T) {
	dir := t.TempDir()
	st, err := sqlite.Open(t.Context(), filepath.Join(dir, "coordinator.db"))
	if err != nil {
		t.Fatal(err)
	}
	cs := &jobReadCounter{Store: st}
	e := openEnv(t, dir, func(c *Config) { c.Store = cs })
	_, tok := e.runner(nil)
	e.submit(nil)
	jr := e.take(tok)
	bogus := func(n int) []api.WatchedJob {
		jobs := make([]api.WatchedJob, n)
		for i := range jobs {
			// Half the real job with a wrong token, half unknown jobs.
			jobs[i] = api.WatchedJob{ID: jr.ID + int64(i%2)*int64(1+i), Token: fmt.Sprintf("glcbt-bogus-%d", i), JobStatus: "running"}
		}
		return jobs
	}

	resp, b := e.do("POST", "/api/v4/jobs/watch", map[string]string{hdrRunnerToken: tok}, api.WatchRequest{Token: tok, Jobs: bogus(api.MaxWatchedJobs + 1)})
	if want := fmt.Sprintf("at most %d", api.MaxWatchedJobs); resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), want) {
		t.Errorf("watch of %d jobs = %d %s, want 400 saying %q", api.MaxWatchedJobs+1, resp.StatusCode, b, want)
	}

	before := cs.reads.Load()
	resp, out := e.watchJobs(api.WatchRequest{Token: tok, Jobs: bogus(api.MaxWatchedJobs)})
	reads := cs.reads.Load() - before
	if resp.StatusCode != http.StatusOK || len(out.Jobs) != api.MaxWatchedJobs {
		t.Fatalf("watch of %d bogus jobs = %d with %d changes, want 200 with all", api.MaxWatchedJobs, resp.StatusCode, len(out.Jobs))
	}
	for _, ch := range out.Jobs {
		if ch.StatusCode != http.StatusNotFound {
			t.Fatalf("bogus job answered %+v, want 404", ch)
		}
	}
	if reads > 2 {
		t.Errorf("a watch of %d jobs read the store's jobs %d times, want at most 2", api.MaxWatchedJobs, reads)
	}
}
