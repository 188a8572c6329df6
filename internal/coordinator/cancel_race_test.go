package coordinator

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"testing"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/pgtest"
)

// answer is one HTTP answer, read in full.
type answer struct {
	code      int
	jobStatus string // Job-Status
	body      []byte
	err       error
}

// send is env.do for goroutines other than the test's: it reports
// failures in the answer instead of stopping the test.
func (e *env) send(method, path string, hdr map[string]string, body any) answer {
	js, err := json.Marshal(body)
	if err != nil {
		return answer{err: err}
	}
	req, err := http.NewRequest(method, e.srv.URL+path, bytes.NewReader(js))
	if err != nil {
		return answer{err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		return answer{err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return answer{code: resp.StatusCode, jobStatus: resp.Header.Get(hdrJobStatus), body: b, err: err}
}

// TestCancelRacesFinalUpdate races an admin cancel against the runner's
// final PUT success of the same running job, many times, on SQLite and
// on PostgreSQL (the PUT through one coordinator, the cancel through
// another). Whichever comes first decides, and every party hears the same
// story: either the PUT won (the cancel is 409 naming the job's state,
// success, and the job stays success), or the cancel won (the cancel
// answers canceling, the runner's PUT is told canceled, and the job ends
// canceled). A cancel answered "canceling" for a job that then ends
// success is the bug this guards against.
func TestCancelRacesFinalUpdate(t *testing.T) {
	const pairs = 200
	t.Run("sqlite", func(t *testing.T) {
		e := newEnv(t, nil)
		raceCancelAndSuccess(t, e, e, pairs)
	})
	t.Run("postgres", func(t *testing.T) {
		envs := cluster(t, 2, pgtest.NewDatabase(t), nil)
		raceCancelAndSuccess(t, envs[0], envs[1], pairs)
	})
}

func raceCancelAndSuccess(t *testing.T, runner, admin *env, pairs int) {
	_, tok := runner.runner(nil)
	outcomes := map[string]int{}
	for i := range pairs {
		admin.submit(nil)
		jr := runner.take(tok)
		var put, cancel answer
		start := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() {
			<-start
			put = runner.send("PUT", fmt.Sprintf("/api/v4/jobs/%d", jr.ID), map[string]string{hdrJobToken: jr.Token},
				api.UpdateJobRequest{Token: jr.Token, State: api.StateSuccess})
		})
		wg.Go(func() {
			<-start
			cancel = admin.send("POST", fmt.Sprintf("/api/v1/jobs/%d/cancel", jr.ID),
				map[string]string{"Authorization": "Bearer " + admin.c.AdminToken()}, struct{}{})
		})
		close(start)
		wg.Wait()
		if put.err != nil || cancel.err != nil {
			t.Fatalf("pair %d: PUT: %v; cancel: %v", i, put.err, cancel.err)
		}
		final := runner.job(jr.ID).Status
		var said struct {
			Status string `json:"status"`
			Error  string `json:"error"`
		}
		if err := json.Unmarshal(cancel.body, &said); err != nil {
			t.Fatalf("pair %d: cancel answer %q: %v", i, cancel.body, err)
		}
		story := fmt.Sprintf("cancel %d %q %q; PUT %d Job-Status %q; job %s", cancel.code, said.Status, said.Error, put.code, put.jobStatus, final)
		switch {
		case cancel.code == http.StatusConflict:
			// The runner's success came first.
			want := fmt.Sprintf("job %d already finished: success", jr.ID)
			if said.Status != "success" || said.Error != want || put.code != http.StatusOK || put.jobStatus != "success" || final != "success" {
				t.Errorf("pair %d: %s; want cancel 409 %q (status success), PUT 200 success, job success", i, story, want)
			}
			outcomes["success first"]++
		case cancel.code == http.StatusOK:
			// The cancel came first: the job is the cancel's, whatever the
			// runner reports after it.
			if said.Status != "canceling" || put.code != http.StatusOK || put.jobStatus != "canceled" || final != "canceled" {
				t.Errorf("pair %d: %s; want cancel 200 canceling, PUT 200 canceled, job canceled", i, story)
			}
			outcomes["cancel first"]++
		default:
			t.Errorf("pair %d: %s; want the cancel answered 200 or 409", i, story)
		}
	}
	t.Logf("%d pairs: %v", pairs, outcomes)
}
