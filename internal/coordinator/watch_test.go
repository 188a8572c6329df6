package coordinator

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/pgtest"
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

func (e *env) watchJobs(req api.WatchRequest) (*http.Response, api.WatchResponse) {
	e.t.Helper()
	resp, b := e.do("POST", "/api/v4/jobs/watch", nil, req)
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
		_, out := e.watchJobs(api.WatchRequest{Jobs: []api.WatchedJob{{ID: jr.ID, Token: jr.Token, JobStatus: api.RemotePending}}})
		wantChanges(t, out.Jobs, []api.JobChange{{ID: jr.ID, StatusCode: 200, JobStatus: "running"}})
	})
	t.Run("bad requests", func(t *testing.T) {
		for _, req := range []api.WatchRequest{{}, {Jobs: []api.WatchedJob{{ID: jr.ID}}}, {Jobs: []api.WatchedJob{{Token: "x"}}}} {
			if resp, _ := e.watchJobs(req); resp.StatusCode != http.StatusBadRequest {
				t.Errorf("watch %+v = %d, want 400", req, resp.StatusCode)
			}
		}
	})
	t.Run("unknown job and foreign token", func(t *testing.T) {
		_, out := e.watchJobs(api.WatchRequest{Jobs: []api.WatchedJob{
			{ID: 999, Token: "x", JobStatus: "running"}, {ID: jr.ID, Token: "not-its-token", JobStatus: "running"},
		}})
		wantChanges(t, out.Jobs, []api.JobChange{{ID: 999, StatusCode: 404}, {ID: jr.ID, StatusCode: 403}})
	})
	t.Run("ends empty after its timeout", func(t *testing.T) {
		_, out := e.watchJobs(api.WatchRequest{Jobs: []api.WatchedJob{running}, Timeout: 0.05})
		if out.Jobs == nil || len(out.Jobs) != 0 {
			t.Errorf("watch = %#v, want an empty list", out.Jobs)
		}
	})
	t.Run("a cancel answers a held watch", func(t *testing.T) {
		got := e.heldWatch(api.WatchRequest{Jobs: []api.WatchedJob{running}})
		waitWatching(t, e.c, 1)
		if resp, _ := e.admin("POST", fmt.Sprintf("/api/v1/jobs/%d/cancel", jr.ID), nil); resp.StatusCode != 200 {
			t.Fatalf("cancel = %d", resp.StatusCode)
		}
		out := <-got
		wantChanges(t, out.Jobs, []api.JobChange{{ID: jr.ID, StatusCode: 200, JobStatus: "canceling"}})
	})
	t.Run("the end of the job answers a watch of canceling", func(t *testing.T) {
		got := e.heldWatch(api.WatchRequest{Jobs: []api.WatchedJob{{ID: jr.ID, Token: jr.Token, JobStatus: api.RemoteCanceling}}})
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
	got := a.heldWatch(api.WatchRequest{Jobs: []api.WatchedJob{{ID: jr.ID, Token: jr.Token, JobStatus: api.RemoteRunning}}})
	waitWatching(t, a.c, 1)
	if resp, _ := b.admin("POST", fmt.Sprintf("/api/v1/jobs/%d/cancel", jr.ID), nil); resp.StatusCode != 200 {
		t.Fatalf("cancel through b = %d", resp.StatusCode)
	}
	out := <-got
	wantChanges(t, out.Jobs, []api.JobChange{{ID: jr.ID, StatusCode: 200, JobStatus: "canceling"}})
}
