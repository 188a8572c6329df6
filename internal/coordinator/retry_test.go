package coordinator

import (
	"fmt"
	"net/http"
	"sync"
	"testing"

	"github.com/drover-ci/drover/internal/pgtest"
)

// TestRetryOnce: 30 concurrent retries of one finished job, through the
// admin API of every coordinator on the store, make exactly one new job;
// the others are 409 naming it, as GitLab refuses to retry a job retried
// already. The web UI's retry of it leads to that job; the new job can be
// retried in its turn, the first one still cannot.
func TestRetryOnce(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		envs func(t *testing.T) []*env
	}{
		{"sqlite", func(t *testing.T) []*env { return []*env{newEnv(t, nil)} }},
		{"postgres, two coordinators", func(t *testing.T) []*env { return cluster(t, 2, pgtest.NewDatabase(t), nil) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			envs := tc.envs(t)
			e := envs[0]
			_, tok := e.runner(nil)
			jr := e.running(tok, map[string]any{"name": "flaky", "project": "g/retry"})
			e.succeed(jr)

			const n = 30
			type answer struct {
				code int
				body []byte
			}
			answers := make([]answer, n)
			var wg sync.WaitGroup
			start := make(chan struct{})
			for i := range n {
				wg.Go(func() {
					<-start
					resp, b := envs[i%len(envs)].admin("POST", fmt.Sprintf("/api/v1/jobs/%d/retry", jr.ID), nil)
					answers[i] = answer{resp.StatusCode, b}
				})
			}
			close(start)
			wg.Wait()
			var created []jobView
			var conflicts []retriedAnswer
			for _, a := range answers {
				switch a.code {
				case http.StatusCreated:
					var v jobView
					e.decode(a.body, &v)
					created = append(created, v)
				case http.StatusConflict:
					var r retriedAnswer
					e.decode(a.body, &r)
					conflicts = append(conflicts, r)
				default:
					t.Errorf("retry = %d %s, want 201 or 409", a.code, a.body)
				}
			}
			if len(created) != 1 {
				t.Fatalf("%d concurrent retries made %d jobs, want 1", n, len(created))
			}
			retry := created[0]
			for _, r := range conflicts {
				if r.RetriedBy != retry.ID {
					t.Errorf("409 = %+v, want retried_by %d", r, retry.ID)
				}
			}
			resp, b := e.admin("GET", "/api/v1/jobs?project=g/retry", nil)
			var list []jobView
			if resp.StatusCode == http.StatusOK {
				e.decode(b, &list)
			}
			if len(list) != 2 {
				t.Errorf("jobs of the project = %d (%s), want 2: the job and its one retry", len(list), b)
			}
			for _, ev := range envs {
				if id, err := (webSource{ev.c}).RetryJob(t.Context(), jr.ID); err != nil || id != retry.ID {
					t.Errorf("web UI retry = %d, %v; want the retry there is, %d", id, err, retry.ID)
				}
			}

			// The retry runs, ends, and can be retried in its turn.
			jr2 := e.take(tok)
			if jr2.ID != retry.ID {
				t.Fatalf("handed out %d, want the retry %d", jr2.ID, retry.ID)
			}
			e.succeed(jr2)
			if resp, b := envs[len(envs)-1].admin("POST", fmt.Sprintf("/api/v1/jobs/%d/retry", retry.ID), nil); resp.StatusCode != http.StatusCreated {
				t.Errorf("retry of the retry = %d %s, want 201", resp.StatusCode, b)
			}
			resp, b = e.admin("POST", fmt.Sprintf("/api/v1/jobs/%d/retry", jr.ID), nil)
			var r retriedAnswer
			if e.decode(b, &r); resp.StatusCode != http.StatusConflict || r.RetriedBy != retry.ID {
				t.Errorf("retry of the first job again = %d %s, want 409 retried_by %d", resp.StatusCode, b, retry.ID)
			}
		})
	}
}
