package coordinator

import (
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/clock"
	"github.com/drover-ci/drover/internal/runnerapi"
	"github.com/prometheus/client_golang/prometheus"
)

func TestAdminAuth(t *testing.T) {
	e := newEnv(t, nil)
	for _, tc := range []struct {
		name string
		hdr  map[string]string
		want int
	}{
		{"missing", nil, 401},
		{"not bearer", map[string]string{"Authorization": "Basic abc"}, 401},
		{"wrong", map[string]string{"Authorization": "Bearer nope"}, 403},
		{"right", map[string]string{"Authorization": "Bearer " + e.c.AdminToken()}, 200},
	} {
		resp, _ := e.do("GET", "/api/v1/jobs", tc.hdr, nil)
		if resp.StatusCode != tc.want {
			t.Errorf("%s: GET /api/v1/jobs = %d, want %d", tc.name, resp.StatusCode, tc.want)
		}
	}
}

func TestSubmitJobValidation(t *testing.T) {
	e := newEnv(t, nil)
	for _, tc := range []struct {
		name  string
		body  any
		code  int
		field string
	}{
		{"ok minimal", `{"name":"a","script":["x"]}`, 201, ""},
		{"ok full", map[string]any{"name": "a", "project": "g/p", "stage": "build", "script": []string{"x"}, "after_script": []string{"y"},
			"variables": []map[string]any{{"key": "A_1", "value": "v", "masked": false, "file": true, "public": true, "raw": true}},
			"tags":      []string{"t"}, "timeout": 60, "image": "alpine", "services": []string{"redis"},
			"git": map[string]any{"repo_url": "https://x/y.git", "ref": "main", "sha": "abcdef1", "depth": 1}}, 201, ""},
		{"no name", `{"script":["x"]}`, 400, "name"},
		{"no script", `{"name":"a"}`, 400, "script"},
		{"empty script", `{"name":"a","script":[]}`, 400, "script"},
		{"unknown field", `{"name":"a","script":["x"],"bogus":1}`, 400, "bogus"},
		{"wrong type", `{"name":"a","script":"x"}`, 400, "script"},
		{"nested wrong type", `{"name":"a","script":["x"],"git":{"depth":"deep"}}`, 400, "git.depth"},
		{"bad key", `{"name":"a","script":["x"],"variables":[{"key":"1A","value":"v"}]}`, 400, "variables[0].key"},
		{"dash key", `{"name":"a","script":["x"],"variables":[{"key":"A-B","value":"v"}]}`, 400, "variables[0].key"},
		{"short masked", `{"name":"a","script":["x"],"variables":[{"key":"A","value":"1234567","masked":true}]}`, 400, "variables[0].value"},
		{"unknown variable field", `{"name":"a","script":["x"],"variables":[{"key":"A","value":"v","internal":true}]}`, 400, "internal"},
		{"bad project", `{"name":"a","script":["x"],"project":"noslash"}`, 400, "project"},
		{"bad timeout", `{"name":"a","script":["x"],"timeout":-1}`, 400, "timeout"},
		{"bad tag", `{"name":"a","script":["x"],"tags":["a,b"]}`, 400, "tags"},
		{"bad sha", `{"name":"a","script":["x"],"git":{"repo_url":"u","sha":"zz"}}`, 400, "git.sha"},
		{"malformed", `{"name":`, 400, ""},
		{"trailing data", `{"name":"a","script":["x"]} {}`, 400, ""},
		{"too large", `{"name":"a","script":["` + strings.Repeat("x", maxV1Body) + `"]}`, 413, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, b := e.admin("POST", "/api/v1/jobs", tc.body)
			if resp.StatusCode != tc.code {
				t.Fatalf("POST /api/v1/jobs = %d %s, want %d", resp.StatusCode, b, tc.code)
			}
			if tc.code >= 400 {
				var ae runnerapi.APIError
				e.decode(b, &ae)
				if ae.Error == "" || ae.Field != tc.field {
					t.Errorf("error body %s: want field %q", b, tc.field)
				}
			}
		})
	}
}

func TestSubmitJobDefaults(t *testing.T) {
	e := newEnv(t, nil)
	j := e.submit(map[string]any{"name": "n"})
	if j.Project != "default/default" || j.Stage != "test" || j.Timeout != 3600 || j.Status != "pending" ||
		j.CreatedAt == nil || j.QueuedAt == nil || j.StartedAt != nil || j.FinishedAt != nil || j.RunnerID != 0 {
		t.Errorf("job = %+v", j)
	}
	if _, err := time.Parse(time.RFC3339, *j.CreatedAt); err != nil {
		t.Errorf("created_at %q: %v", *j.CreatedAt, err)
	}
	resp, b := e.admin("GET", fmt.Sprintf("/api/v1/jobs/%d", j.ID), nil)
	if resp.StatusCode != 200 || strings.Contains(string(b), "started_at") || strings.Contains(string(b), "exit_code") {
		t.Errorf("GET job = %d %s", resp.StatusCode, b)
	}
	if resp, _ := e.admin("GET", "/api/v1/jobs/424242", nil); resp.StatusCode != 404 {
		t.Errorf("GET unknown job = %d", resp.StatusCode)
	}
	if resp, _ := e.admin("GET", "/api/v1/jobs/abc", nil); resp.StatusCode != 404 {
		t.Errorf("GET job abc = %d", resp.StatusCode)
	}
	if resp, _ := e.admin("GET", "/api/v1/jobs/424242/trace", nil); resp.StatusCode != 404 {
		t.Errorf("GET unknown trace = %d", resp.StatusCode)
	}
}

func TestListJobs(t *testing.T) {
	e := newEnv(t, nil)
	_, tok := e.runner(nil)
	var ids []int64
	for i := range 5 {
		p := "a/a"
		if i >= 3 {
			p = "b/b"
		}
		ids = append(ids, e.submit(map[string]any{"project": p}).ID)
	}
	e.take(tok)
	list := func(q string) []int64 {
		t.Helper()
		resp, b := e.admin("GET", "/api/v1/jobs"+q, nil)
		if resp.StatusCode != 200 {
			t.Fatalf("GET /api/v1/jobs%s = %d %s", q, resp.StatusCode, b)
		}
		var js []jobView
		e.decode(b, &js)
		out := []int64{}
		for _, j := range js {
			out = append(out, j.ID)
		}
		return out
	}
	for _, tc := range []struct {
		q    string
		want []int64
	}{
		{"", ids},
		{"?status=running", ids[:1]},
		{"?status=pending", ids[1:]},
		{"?status=pending,running&limit=2", ids[:2]},
		{"?project=b/b", ids[3:]},
		{fmt.Sprintf("?after_id=%d", ids[1]), ids[2:]},
		{fmt.Sprintf("?after_id=%d&limit=1", ids[1]), ids[2:3]},
	} {
		if got := list(tc.q); fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("GET /api/v1/jobs%s = %v, want %v", tc.q, got, tc.want)
		}
	}
	for _, q := range []string{"?status=bogus", "?limit=0", "?limit=x", "?after_id=-1"} {
		if resp, _ := e.admin("GET", "/api/v1/jobs"+q, nil); resp.StatusCode != 400 {
			t.Errorf("GET /api/v1/jobs%s = %d, want 400", q, resp.StatusCode)
		}
	}
}

func TestAdminRunners(t *testing.T) {
	e := newEnv(t, nil)
	for _, tc := range []struct {
		body  string
		code  int
		field string
	}{
		{`{"description":"d","tag_list":["a","b"],"run_untagged":false,"locked":true,"paused":true,"maximum_timeout":60}`, 201, ""},
		{`{"tag_list":"a, b,,c"}`, 201, ""},
		{`{}`, 201, ""},
		{`{"tag_list":5}`, 400, "tag_list"},
		{`{"maximum_timeout":-1}`, 400, "maximum_timeout"},
		{`{"nope":1}`, 400, "nope"},
	} {
		resp, b := e.admin("POST", "/api/v1/runners", tc.body)
		if resp.StatusCode != tc.code {
			t.Errorf("POST /api/v1/runners %s = %d %s, want %d", tc.body, resp.StatusCode, b, tc.code)
			continue
		}
		if tc.code != 201 {
			var ae runnerapi.APIError
			e.decode(b, &ae)
			if ae.Field != tc.field {
				t.Errorf("POST /api/v1/runners %s: field %q, want %q", tc.body, ae.Field, tc.field)
			}
		}
	}
	resp, b := e.admin("GET", "/api/v1/runners", nil)
	var rs []runnerapi.RunnerView
	e.decode(b, &rs)
	if resp.StatusCode != 200 || len(rs) != 3 {
		t.Fatalf("GET runners = %d %s", resp.StatusCode, b)
	}
	r0 := rs[0]
	if r0.Description != "d" || r0.RunUntagged || !r0.Locked || !r0.Paused || r0.MaximumTimeout != 60 || len(r0.TagList) != 2 || r0.Managers == nil {
		t.Errorf("runner 0 = %+v", r0)
	}
	// As GitLab: a runner with tags takes untagged jobs only when asked to,
	// one without tags does.
	if fmt.Sprint(rs[1].TagList) != "[a b c]" || rs[1].RunUntagged {
		t.Errorf("runner 1 (tags, run_untagged not given) = %+v, want run_untagged false", rs[1])
	}
	if len(rs[2].TagList) != 0 || !rs[2].RunUntagged {
		t.Errorf("runner 2 (no tags) = %+v, want run_untagged true", rs[2])
	}
	if resp, _ := e.admin("DELETE", fmt.Sprintf("/api/v1/runners/%d", r0.ID), nil); resp.StatusCode != 204 {
		t.Errorf("DELETE runner = %d", resp.StatusCode)
	}
	if resp, _ := e.admin("DELETE", fmt.Sprintf("/api/v1/runners/%d", r0.ID), nil); resp.StatusCode != 404 {
		t.Errorf("DELETE deleted runner = %d", resp.StatusCode)
	}
	if resp, _ := e.admin("GET", fmt.Sprintf("/api/v1/runners/%d", r0.ID), nil); resp.StatusCode != 404 {
		t.Errorf("GET deleted runner = %d", resp.StatusCode)
	}
}

func TestReaper(t *testing.T) {
	fc := clock.NewFake(fakeStart)
	e := newEnv(t, func(c *Config) {
		c.Clock = fc
		c.StaleTimeout = 10 * time.Minute
		c.TimeoutGrace = 5 * time.Minute
	})
	_, tok := e.runner(map[string]any{"maximum_timeout": 3600})
	timeoutJob := e.submit(map[string]any{"timeout": 1800})
	staleJob := e.submit(nil)
	cancelJob := e.submit(nil)
	aliveJob := e.submit(nil)
	jt, js, jc, ja := e.take(tok), e.take(tok), e.take(tok), e.take(tok)
	if jt.ID != timeoutJob.ID || js.ID != staleJob.ID || jc.ID != cancelJob.ID || ja.ID != aliveJob.ID {
		t.Fatalf("unexpected hand-out order")
	}
	e.admin("POST", fmt.Sprintf("/api/v1/jobs/%d/cancel", jc.ID), nil)

	// Keep the timeout job and the alive job talking; let the others go silent.
	for range 10 {
		fc.Advance(4 * time.Minute)
		for _, j := range []*api.JobResponse{jt, ja} {
			if resp, _ := e.put(j.ID, j.Token, api.UpdateJobRequest{State: "running"}); resp.StatusCode != 200 && j == ja {
				t.Fatalf("keep-alive of %d = %d", j.ID, resp.StatusCode)
			}
		}
		e.c.reapOnce(t.Context())
	}
	// 40 minutes: past 1800 s + 5 min grace, and past the stale timeout.
	for _, tc := range []struct {
		id             int64
		status, reason string
		traceHas       string
	}{
		{jt.ID, "failed", "job_execution_timeout", "execution took longer"},
		{js.ID, "failed", "runner_system_failure", "no word from the runner"},
		{jc.ID, "canceled", "", "stopped answering"},
		{ja.ID, "running", "", ""},
	} {
		g := e.job(tc.id)
		if g.Status != tc.status || g.FailureReason != tc.reason {
			t.Errorf("job %d = %s/%s, want %s/%s", tc.id, g.Status, g.FailureReason, tc.status, tc.reason)
		}
		if tr := e.trace(tc.id); !strings.Contains(tr, tc.traceHas) || (tc.traceHas == "" && tr != "") {
			t.Errorf("trace of %d = %q, want it to mention %q", tc.id, tr, tc.traceHas)
		}
	}
	resp, _ := e.put(jt.ID, jt.Token, api.UpdateJobRequest{State: "running"})
	if resp.StatusCode != 403 || resp.Header.Get(hdrJobStatus) != "failed" {
		t.Errorf("keep-alive after reaping = %d %q, want 403 failed", resp.StatusCode, resp.Header.Get(hdrJobStatus))
	}
}

func TestRunReaps(t *testing.T) {
	fc := clock.NewFake(fakeStart)
	e := newEnv(t, func(c *Config) { c.Clock = fc; c.ReapInterval = time.Second; c.StaleTimeout = time.Minute })
	_, tok := e.runner(nil)
	e.submit(nil)
	jr := e.take(tok)
	ctx, cancel := contextWithCancel(t)
	done := make(chan error)
	go func() { done <- e.c.Run(ctx) }()
	waitFor(t, func() bool { return fc.Pending() > 0 })
	fc.Advance(2 * time.Minute)
	waitFor(t, func() bool { return e.job(jr.ID).Status == "failed" })
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run = %v", err)
	}
}

func TestMetricsAndHealth(t *testing.T) {
	e := newEnv(t, nil)
	_, tok := e.runner(nil)
	e.submit(nil)
	jr := e.take(tok)
	e.put(jr.ID, jr.Token, api.UpdateJobRequest{State: "success"})
	e.submit(nil)
	for _, p := range []string{"/health/live", "/health/ready"} {
		if resp, _ := e.do("GET", p, nil, nil); resp.StatusCode != 200 {
			t.Errorf("GET %s = %d", p, resp.StatusCode)
		}
	}
	resp, b := e.do("GET", "/metrics", nil, nil)
	if resp.StatusCode != 200 {
		t.Fatalf("GET /metrics = %d", resp.StatusCode)
	}
	for _, want := range []string{
		`drover_coordinator_jobs{status="pending"} 1`,
		`drover_coordinator_jobs{status="success"} 1`,
		`drover_coordinator_jobs_submitted_total 2`,
		`drover_coordinator_jobs_finished_total{status="success"} 1`,
		`drover_coordinator_job_queue_wait_seconds_count 1`,
		`drover_coordinator_long_poll_waiters 0`,
		`drover_coordinator_api_requests_total{code="201",endpoint="POST /api/v4/jobs/request"} 1`,
	} {
		if !strings.Contains(string(b), want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

func TestExternalRegisterer(t *testing.T) {
	reg := prometheus.NewRegistry()
	e := newEnv(t, func(c *Config) { c.Registerer = reg })
	e.submit(nil)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, mf := range mfs {
		if mf.GetName() == "drover_coordinator_jobs_submitted_total" {
			found = true
		}
	}
	if !found {
		t.Errorf("submitted counter not in the given registry")
	}
	resp, err := http.Get(e.srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("/metrics with a Registry = %d", resp.StatusCode)
	}
}

// TestSubmitResolvesRef: a job given a repository and a ref but no sha
// carries the ref's commit (GitLab Runner fails a job whose sha is 40
// zeros); a ref that cannot be resolved refuses the job.
func TestSubmitResolvesRef(t *testing.T) {
	e := newEnv(t, nil)
	repo := gitRepo(t, map[string]string{"a.txt": "a"})
	out, err := exec.Command("git", "-C", repo, "rev-parse", "HEAD").Output()
	if err != nil {
		t.Fatal(err)
	}
	head := strings.TrimSpace(string(out))
	for _, tc := range []struct {
		name string
		git  map[string]any
		code int
		want string // the stored sha, or the error's field
	}{
		{"branch", map[string]any{"repo_url": repo, "ref": "dev"}, 201, head},
		{"tag", map[string]any{"repo_url": "file://" + repo, "ref": "v1"}, 201, head},
		{"the remote's HEAD", map[string]any{"repo_url": repo}, 201, head},
		{"sha given: kept", map[string]any{"repo_url": repo, "ref": "dev", "sha": strings.Repeat("b", 40)}, 201, strings.Repeat("b", 40)},
		{"no such ref", map[string]any{"repo_url": repo, "ref": "nope"}, 400, "git.ref"},
		{"no such repository", map[string]any{"repo_url": filepath.Join(t.TempDir(), "none"), "ref": "main"}, 400, "git.ref"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, b := e.admin("POST", "/api/v1/jobs", map[string]any{"name": "j", "script": []string{"x"}, "git": tc.git})
			if resp.StatusCode != tc.code {
				t.Fatalf("POST /api/v1/jobs = %d %s, want %d", resp.StatusCode, b, tc.code)
			}
			if tc.code != 201 {
				var ae struct{ Field string }
				e.decode(b, &ae)
				if ae.Field != tc.want {
					t.Errorf("error field %q (%s), want %q", ae.Field, b, tc.want)
				}
				return
			}
			var v jobView
			e.decode(b, &v)
			j, err := e.c.st.GetJob(t.Context(), v.ID)
			if err != nil {
				t.Fatal(err)
			}
			if j.Spec.Git.Sha != tc.want {
				t.Errorf("stored sha %q, want %q", j.Spec.Git.Sha, tc.want)
			}
		})
	}
}
