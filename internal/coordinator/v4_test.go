package coordinator

import (
	"fmt"
	"hash/crc32"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/runnerapi"
	"github.com/google/go-cmp/cmp"
)

func TestRunnerEndpoints(t *testing.T) {
	e := newEnv(t, nil)
	rid, tok := e.runner(map[string]any{"description": "r", "tag_list": "a, b"})
	_, other := e.runner(map[string]any{})

	hdr := func(tok string) map[string]string { return map[string]string{hdrRunnerToken: tok} }
	for _, tc := range []struct {
		name, method, path string
		hdr                map[string]string
		body               any
		want               int
	}{
		{"verify ok (body token)", "POST", "/api/v4/runners/verify", nil, api.VerifyRequest{Token: tok, SystemID: "s_1"}, 200},
		{"verify ok (header token)", "POST", "/api/v4/runners/verify", hdr(tok), map[string]any{"system_id": "s_2"}, 200},
		{"verify bad token", "POST", "/api/v4/runners/verify", nil, api.VerifyRequest{Token: "glrt-nope"}, 403},
		{"verify no token", "POST", "/api/v4/runners/verify", nil, map[string]any{}, 403},
		{"verify malformed", "POST", "/api/v4/runners/verify", nil, `{"token": `, 400},
		{"verify wrong type", "POST", "/api/v4/runners/verify", nil, `{"token": 5}`, 400},
		{"register ok", "POST", "/api/v4/runners", nil, api.RegisterRequest{Token: e.c.RegistrationToken(), TagList: "x,y"}, 201},
		{"register bad token", "POST", "/api/v4/runners", nil, api.RegisterRequest{Token: "GR1348941nope"}, 403},
		{"register unknown fields ignored", "POST", "/api/v4/runners", nil, `{"token":"` + e.c.RegistrationToken() + `","whatever":1}`, 201},
		{"unregister manager no system id", "DELETE", "/api/v4/runners/managers", nil, api.UnregisterRequest{Token: tok}, 400},
		{"unregister manager", "DELETE", "/api/v4/runners/managers", nil, api.UnregisterRequest{Token: tok, SystemID: "s_1"}, 204},
		{"unregister manager again", "DELETE", "/api/v4/runners/managers", nil, api.UnregisterRequest{Token: tok, SystemID: "s_1"}, 204},
		{"unregister manager bad token", "DELETE", "/api/v4/runners/managers", nil, api.UnregisterRequest{Token: "x", SystemID: "s_1"}, 403},
		{"unregister bad token", "DELETE", "/api/v4/runners", nil, api.UnregisterRequest{Token: "x"}, 403},
		{"unregister", "DELETE", "/api/v4/runners", nil, api.UnregisterRequest{Token: other}, 204},
		{"unregister again", "DELETE", "/api/v4/runners", nil, api.UnregisterRequest{Token: other}, 403},
		{"reset bad token", "POST", "/api/v4/runners/reset_authentication_token", nil, map[string]string{"token": "x"}, 403},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, b := e.do(tc.method, tc.path, tc.hdr, tc.body)
			if resp.StatusCode != tc.want {
				t.Fatalf("%s %s = %d %s, want %d", tc.method, tc.path, resp.StatusCode, b, tc.want)
			}
			if tc.want == 200 || tc.want == 201 {
				var v api.VerifyResponse
				e.decode(b, &v)
				if v.ID == 0 || !strings.HasPrefix(v.Token, "glrt-") || len(v.Token) < 25 {
					t.Errorf("answer %+v: want id and a glrt- token", v)
				}
				if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
					t.Errorf("Content-Type = %q", ct)
				}
			}
		})
	}

	// verify recorded the managers.
	resp, b := e.admin("GET", fmt.Sprintf("/api/v1/runners/%d", rid), nil)
	if resp.StatusCode != 200 {
		t.Fatalf("get runner = %d", resp.StatusCode)
	}
	var rv runnerapi.RunnerView
	e.decode(b, &rv)
	if len(rv.Managers) != 1 || rv.Managers[0].SystemID != "s_2" || rv.ContactedAt == nil {
		t.Errorf("runner after verify: %+v", rv)
	}
	if d := cmp.Diff([]string{"a", "b"}, rv.TagList); d != "" {
		t.Errorf("tags (-want +got):\n%s", d)
	}

	// Token reset: the new token works, the old does not.
	resp, b = e.do("POST", "/api/v4/runners/reset_authentication_token", nil, map[string]string{"token": tok})
	if resp.StatusCode != 201 {
		t.Fatalf("reset = %d %s", resp.StatusCode, b)
	}
	var nt struct{ Token string }
	e.decode(b, &nt)
	if r, _ := e.do("POST", "/api/v4/runners/verify", nil, api.VerifyRequest{Token: tok}); r.StatusCode != 403 {
		t.Errorf("old token after reset: %d, want 403", r.StatusCode)
	}
	if r, _ := e.do("POST", "/api/v4/runners/verify", nil, api.VerifyRequest{Token: nt.Token}); r.StatusCode != 200 {
		t.Errorf("new token after reset: %d, want 200", r.StatusCode)
	}
}

func TestJobRequestMatching(t *testing.T) {
	img := api.FeaturesInfo{Image: true, Services: true}
	for _, tc := range []struct {
		name   string
		runner map[string]any
		f      api.FeaturesInfo
		job    map[string]any
		want   int
	}{
		{"untagged job, run_untagged runner", map[string]any{}, api.FeaturesInfo{}, map[string]any{}, 201},
		{"untagged job, tagged-only runner", map[string]any{"tag_list": []string{"a"}, "run_untagged": false}, api.FeaturesInfo{}, map[string]any{}, 204},
		{"tags subset", map[string]any{"tag_list": []string{"a", "b", "c"}}, api.FeaturesInfo{}, map[string]any{"tags": []string{"a", "c"}}, 201},
		{"tags equal", map[string]any{"tag_list": "a,b"}, api.FeaturesInfo{}, map[string]any{"tags": []string{"b", "a"}}, 201},
		{"tags not subset", map[string]any{"tag_list": []string{"a"}}, api.FeaturesInfo{}, map[string]any{"tags": []string{"a", "b"}}, 204},
		{"tagged job, untagged runner", map[string]any{}, api.FeaturesInfo{}, map[string]any{"tags": []string{"a"}}, 204},
		{"paused runner", map[string]any{"paused": true}, api.FeaturesInfo{}, map[string]any{}, 204},
		{"image job, no image feature", map[string]any{}, api.FeaturesInfo{}, map[string]any{"image": "alpine"}, 204},
		{"image job, image feature", map[string]any{}, img, map[string]any{"image": "alpine"}, 201},
		{"services job, no services feature", map[string]any{}, api.FeaturesInfo{Image: true}, map[string]any{"services": []string{"redis"}}, 204},
		{"services job, services feature", map[string]any{}, img, map[string]any{"services": []string{"redis"}}, 201},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, nil)
			_, tok := e.runner(tc.runner)
			e.submit(tc.job)
			resp, _ := e.request(tok, "", tc.f)
			if resp.StatusCode != tc.want {
				t.Errorf("jobs/request = %d, want %d", resp.StatusCode, tc.want)
			}
			if resp.Header.Get(hdrLastUpdate) == "" {
				t.Errorf("no %s header", hdrLastUpdate)
			}
		})
	}
}

func TestJobRequestForbidden(t *testing.T) {
	e := newEnv(t, nil)
	e.submit(nil)
	resp, _ := e.request("glrt-unknown", "", api.FeaturesInfo{})
	if resp.StatusCode != 403 {
		t.Errorf("jobs/request with a bad token = %d, want 403", resp.StatusCode)
	}
	resp, _ = e.do("POST", "/api/v4/jobs/request", nil, `{"token": [1]}`)
	if resp.StatusCode != 400 {
		t.Errorf("jobs/request with a malformed body = %d, want 400", resp.StatusCode)
	}
}

func TestJobPayload(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.PublicURL = "https://ci.example.com:8443/" })
	rid, tok := e.runner(map[string]any{"description": "big box", "tag_list": []string{"linux", "docker"}, "maximum_timeout": 600})
	j := e.submit(map[string]any{
		"name": "build", "project": "grp/sub/proj", "stage": "build",
		"script": []string{"make", "make test"}, "after_script": []string{"echo done"},
		"variables": []map[string]any{{"key": "SECRET", "value": "12345678", "masked": true}, {"key": "CI_JOB_NAME", "value": "override"}},
		"tags":      []string{"linux"}, "timeout": 1200, "image": "golang:1.26", "services": []string{"postgres:17"},
		"git": map[string]any{"repo_url": "https://git.example.com/grp/proj.git", "ref": "dev", "sha": "0123456789abcdef0123456789abcdef01234567", "depth": 20},
	})
	jr := e.take(tok)
	if jr.ID != j.ID || !strings.HasPrefix(jr.Token, "glcbt-") {
		t.Fatalf("payload id/token = %d %q", jr.ID, jr.Token)
	}
	if jr.RunnerInfo.Timeout != 600 {
		t.Errorf("runner_info.timeout = %d, want min(1200, 600)", jr.RunnerInfo.Timeout)
	}
	want := []api.Step{
		{Name: "script", Script: []string{"make", "make test"}, Timeout: 600, When: "on_success"},
		{Name: "after_script", Script: []string{"echo done"}, Timeout: 300, When: "always"},
	}
	if d := cmp.Diff(want, jr.Steps); d != "" {
		t.Errorf("steps (-want +got):\n%s", d)
	}
	if jr.Image.Name != "golang:1.26" || len(jr.Services) != 1 || jr.Services[0].Name != "postgres:17" {
		t.Errorf("image/services = %+v %+v", jr.Image, jr.Services)
	}
	if jr.GitInfo.RepoURL != "https://git.example.com/grp/proj.git" || jr.GitInfo.Ref != "dev" || jr.GitInfo.Depth != 20 || !jr.AllowGitFetch {
		t.Errorf("git_info = %+v", jr.GitInfo)
	}
	if jr.JobInfo.Name != "build" || jr.JobInfo.Stage != "build" || jr.JobInfo.ProjectFullPath != "grp/sub/proj" || jr.JobInfo.ProjectName != "proj" {
		t.Errorf("job_info = %+v", jr.JobInfo)
	}
	if !jr.Features.TraceSections || len(jr.Features.FailureReasons) != len(api.AllFailureReasons) ||
		!cmp.Equal(jr.Features.TokenMaskPrefixes, []string{"glpat-", "glcbt-", "glrt-"}) {
		t.Errorf("features = %+v", jr.Features)
	}
	for k, want := range map[string]string{
		"CI": "true", "GITLAB_CI": "true", "CI_SERVER_URL": "https://ci.example.com:8443", "CI_SERVER_HOST": "ci.example.com",
		"CI_SERVER_PORT": "8443", "CI_SERVER_PROTOCOL": "https", "CI_SERVER_NAME": "drover",
		"CI_JOB_ID": fmt.Sprint(j.ID), "CI_JOB_NAME": "override", "CI_JOB_STAGE": "build", "CI_JOB_TOKEN": jr.Token,
		"CI_JOB_URL":      fmt.Sprintf("https://ci.example.com:8443/grp/sub/proj/-/jobs/%d", j.ID),
		"CI_JOB_TIMEOUT":  "600",
		"CI_PROJECT_PATH": "grp/sub/proj", "CI_PROJECT_NAME": "proj", "CI_PROJECT_NAMESPACE": "grp/sub",
		"CI_PROJECT_URL":    "https://ci.example.com:8443/grp/sub/proj",
		"CI_REPOSITORY_URL": "https://git.example.com/grp/proj.git",
		"CI_COMMIT_SHA":     "0123456789abcdef0123456789abcdef01234567", "CI_COMMIT_SHORT_SHA": "01234567",
		"CI_COMMIT_REF_NAME": "dev", "CI_COMMIT_BRANCH": "dev", "CI_RUNNER_ID": fmt.Sprint(rid),
		"CI_RUNNER_DESCRIPTION": "big box", "CI_RUNNER_TAGS": "linux, docker", "SECRET": "12345678",
		"GIT_STRATEGY": "",
	} {
		if got := jr.Variables.Get(k); got != want {
			t.Errorf("variable %s = %q, want %q", k, got, want)
		}
	}
	for _, k := range []string{"CI_PIPELINE_ID", "CI_PIPELINE_IID", "CI_PROJECT_ID", "CI_COMMIT_BEFORE_SHA", "CI_DEFAULT_BRANCH"} {
		if jr.Variables.Get(k) == "" {
			t.Errorf("variable %s missing", k)
		}
	}
	masked := jr.Variables.Masked()
	if !cmp.Equal(masked, []string{jr.Token, "12345678"}) {
		t.Errorf("masked values = %q", masked)
	}

	got := e.job(j.ID)
	if got.Status != "running" || got.RunnerID != rid || got.RunnerSystemID != "s_test" || got.StartedAt == nil {
		t.Errorf("job after claim = %+v", got)
	}
}

func TestJobPayloadNoGit(t *testing.T) {
	e := newEnv(t, nil)
	_, tok := e.runner(nil)
	e.submit(nil)
	jr := e.take(tok)
	if jr.GitInfo.RepoURL != "" || jr.AllowGitFetch {
		t.Errorf("git_info = %+v", jr.GitInfo)
	}
	if v := jr.Variables.Get("GIT_STRATEGY"); v != "none" {
		t.Errorf("GIT_STRATEGY = %q, want none", v)
	}
	if jr.RunnerInfo.Timeout != 3600 || len(jr.Steps) != 1 {
		t.Errorf("timeout %d steps %+v", jr.RunnerInfo.Timeout, jr.Steps)
	}
	if u := jr.Variables.Get("CI_SERVER_URL"); u != e.srv.URL {
		t.Errorf("CI_SERVER_URL = %q, want derived %q", u, e.srv.URL)
	}
}

func TestLongPoll(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.LongPollTimeout = 500 * time.Millisecond })
	_, tok := e.runner(map[string]any{"tag_list": []string{"a"}, "run_untagged": false})

	// An empty last_update is answered at once.
	start := time.Now()
	resp, _ := e.request(tok, "", api.FeaturesInfo{})
	if resp.StatusCode != 204 || time.Since(start) > 300*time.Millisecond {
		t.Fatalf("first request = %d after %v, want an immediate 204", resp.StatusCode, time.Since(start))
	}
	lu := resp.Header.Get(hdrLastUpdate)

	// A stale last_update is answered at once too.
	start = time.Now()
	if resp, _ := e.request(tok, "stale", api.FeaturesInfo{}); resp.StatusCode != 204 || time.Since(start) > 300*time.Millisecond {
		t.Fatalf("stale request = %d after %v, want an immediate 204", resp.StatusCode, time.Since(start))
	}

	// The current one is held to the timeout, then 204 with a new value.
	start = time.Now()
	resp, _ = e.request(tok, lu, api.FeaturesInfo{})
	held := time.Since(start)
	if resp.StatusCode != 204 || held < 450*time.Millisecond {
		t.Fatalf("held request = %d after %v, want 204 after ~500ms", resp.StatusCode, held)
	}
	lu2 := resp.Header.Get(hdrLastUpdate)
	if lu2 == "" || lu2 == lu {
		t.Errorf("last update after timeout = %q, want a new value (was %q)", lu2, lu)
	}

	// Held, not woken by a job it cannot take, woken at once by one it can.
	type result struct {
		resp *http.Response
		jr   *api.JobResponse
		at   time.Time
	}
	done := make(chan result, 1)
	go func() {
		resp, jr := e.request(tok, lu2, api.FeaturesInfo{})
		done <- result{resp, jr, time.Now()}
	}()
	waitFor(t, func() bool { return waiters(e) == 1 })
	e.submit(map[string]any{"tags": []string{"b"}})
	select {
	case r := <-done:
		t.Fatalf("woken by a non-matching job: %d", r.resp.StatusCode)
	case <-time.After(100 * time.Millisecond):
	}
	j := e.submit(map[string]any{"tags": []string{"a"}})
	enq := time.Now()
	r := <-done
	if r.resp.StatusCode != 201 || r.jr.ID != j.ID {
		t.Fatalf("woken request = %d, want 201 with job %d", r.resp.StatusCode, j.ID)
	}
	if d := r.at.Sub(enq); d > 100*time.Millisecond {
		t.Errorf("woken after %v, want milliseconds", d)
	}
}

func waiters(e *env) int {
	e.c.poll.mu.Lock()
	defer e.c.poll.mu.Unlock()
	return e.c.poll.waiters.n
}

// waitFor polls cond until it holds. The deadline is only a backstop
// against a hang, far beyond what a loaded machine needs.
func waitFor(t testing.TB, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 2 minutes")
		}
		time.Sleep(time.Millisecond)
	}
}

func TestUpdateJob(t *testing.T) {
	e := newEnv(t, nil)
	_, tok := e.runner(nil)
	j := e.submit(nil)
	jr := e.take(tok)
	pending := e.submit(nil)

	check := func(name string, resp *http.Response, b []byte, code int, status string) {
		t.Helper()
		if resp.StatusCode != code {
			t.Errorf("%s = %d %s, want %d", name, resp.StatusCode, b, code)
		}
		if got := resp.Header.Get(hdrJobStatus); got != status {
			t.Errorf("%s: Job-Status = %q, want %q", name, got, status)
		}
		if code != 404 && resp.StatusCode != 403 || status != "" {
			if got := resp.Header.Get(hdrUpdateInterval); got != "3" {
				t.Errorf("%s: %s = %q, want 3", name, hdrUpdateInterval, got)
			}
		}
	}
	resp, b := e.put(j.ID, jr.Token, api.UpdateJobRequest{Token: jr.Token, State: "running"})
	check("keep-alive", resp, b, 200, "running")
	resp, b = e.do("PUT", fmt.Sprintf("/api/v4/jobs/%d", j.ID), nil, api.UpdateJobRequest{Token: jr.Token, State: "running"})
	check("keep-alive with body token only", resp, b, 200, "running")
	resp, b = e.put(j.ID, "glcbt-wrong", api.UpdateJobRequest{State: "running"})
	check("wrong token", resp, b, 403, "")
	resp, b = e.put(pending.ID, jr.Token, api.UpdateJobRequest{State: "running"})
	check("other job's token", resp, b, 403, "")
	resp, b = e.put(99999, jr.Token, api.UpdateJobRequest{State: "running"})
	check("unknown job", resp, b, 404, "")
	resp, b = e.put(j.ID, jr.Token, api.UpdateJobRequest{State: "bogus"})
	check("unknown state", resp, b, 400, "running")

	// Trace, then a final update with a wrong checksum: 412 and reset.
	log := []byte("hello\n")
	if r := e.patch(j.ID, jr.Token, "0-5", log); r.StatusCode != 202 {
		t.Fatalf("patch = %d", r.StatusCode)
	}
	resp, b = e.put(j.ID, jr.Token, api.UpdateJobRequest{State: "success", Output: api.JobOutput{Checksum: "crc32:deadbeef", Bytesize: 6}})
	check("bad checksum", resp, b, 412, "running")
	if tr := e.trace(j.ID); tr != "" {
		t.Errorf("trace after 412 = %q, want reset", tr)
	}
	if r := e.patch(j.ID, jr.Token, "0-5", log); r.StatusCode != 202 {
		t.Fatalf("patch after reset = %d", r.StatusCode)
	}
	sum := fmt.Sprintf("crc32:%08x", crc32.ChecksumIEEE(log))
	final := api.UpdateJobRequest{State: "success", Checksum: sum, Output: api.JobOutput{Checksum: sum, Bytesize: 6}}
	resp, b = e.put(j.ID, jr.Token, final)
	check("success", resp, b, 200, "success")
	resp, b = e.put(j.ID, jr.Token, final)
	check("repeated success", resp, b, 200, "success")
	resp, b = e.put(j.ID, jr.Token, api.UpdateJobRequest{State: "failed"})
	check("failed after success", resp, b, 403, "success")
	resp, b = e.put(j.ID, jr.Token, api.UpdateJobRequest{State: "running"})
	check("keep-alive after success", resp, b, 403, "success")
	got := e.job(j.ID)
	if got.Status != "success" || got.ExitCode == nil || *got.ExitCode != 0 || got.FinishedAt == nil || got.TraceSize != 6 {
		t.Errorf("job = %+v", got)
	}

	// Failure with reason and exit code.
	jr2 := e.take(tok)
	resp, b = e.put(jr2.ID, jr2.Token, api.UpdateJobRequest{State: "failed", FailureReason: "script_failure", ExitCode: ptr(3)})
	check("failed", resp, b, 200, "failed")
	if g := e.job(jr2.ID); g.Status != "failed" || g.FailureReason != "script_failure" || g.ExitCode == nil || *g.ExitCode != 3 {
		t.Errorf("failed job = %+v", g)
	}
	resp, b = e.put(jr2.ID, jr2.Token, api.UpdateJobRequest{State: "failed", FailureReason: "script_failure", ExitCode: ptr(3)})
	check("repeated failed", resp, b, 200, "failed")
}

func TestUpdateJobFailureReasons(t *testing.T) {
	e := newEnv(t, nil)
	_, tok := e.runner(nil)
	for _, tc := range []struct{ sent, want string }{
		{"", "script_failure"},
		{"runner_system_failure", "runner_system_failure"},
		{"made_up", "unknown_failure"},
	} {
		e.submit(nil)
		jr := e.take(tok)
		resp, _ := e.put(jr.ID, jr.Token, api.UpdateJobRequest{State: "failed", FailureReason: api.FailureReason(tc.sent)})
		if resp.StatusCode != 200 {
			t.Fatalf("put = %d", resp.StatusCode)
		}
		if g := e.job(jr.ID); g.FailureReason != tc.want {
			t.Errorf("failure_reason %q stored as %q, want %q", tc.sent, g.FailureReason, tc.want)
		}
	}
}

func TestPatchTrace(t *testing.T) {
	e := newEnv(t, nil)
	_, tok := e.runner(nil)
	e.submit(nil)
	jr := e.take(tok)
	id := jr.ID
	for _, tc := range []struct {
		name, token, rng string
		body             []byte
		code             int
		wantRange        string
	}{
		{"first", jr.Token, "0-4", []byte("hello"), 202, "0-5"},
		{"bytes unit tolerated", jr.Token, "bytes 5-7", []byte(" wo"), 202, "0-8"},
		{"gap", jr.Token, "10-12", []byte("abc"), 416, "0-8"},
		{"overlap", jr.Token, "0-2", []byte("abc"), 416, "0-8"},
		{"length mismatch", jr.Token, "8-10", []byte("ab"), 400, ""},
		{"no range", jr.Token, "", []byte("ab"), 400, ""},
		{"bad range", jr.Token, "x-y", []byte("ab"), 400, ""},
		{"too large", jr.Token, fmt.Sprintf("8-%d", 8+maxTracePart), make([]byte, maxTracePart+1), 413, ""},
		{"wrong token", "glcbt-x", "8-9", []byte("ab"), 403, ""},
		{"next", jr.Token, "8-10", []byte("rld"), 202, "0-11"},
	} {
		resp := e.patch(id, tc.token, tc.rng, tc.body)
		if resp.StatusCode != tc.code {
			t.Errorf("%s: PATCH = %d, want %d", tc.name, resp.StatusCode, tc.code)
		}
		if got := resp.Header.Get("Range"); got != tc.wantRange {
			t.Errorf("%s: Range = %q, want %q", tc.name, got, tc.wantRange)
		}
		if tc.code == 202 {
			if resp.Header.Get(hdrJobStatus) != "running" || resp.Header.Get(hdrUpdateInterval) != "3" {
				t.Errorf("%s: headers %v", tc.name, resp.Header)
			}
		}
	}
	if r := e.patch(99999, jr.Token, "0-1", []byte("ab")); r.StatusCode != 404 {
		t.Errorf("unknown job PATCH = %d, want 404", r.StatusCode)
	}
	if tr := e.trace(id); tr != "hello world" {
		t.Errorf("trace = %q", tr)
	}
	resp, b := e.admin("GET", fmt.Sprintf("/api/v1/jobs/%d/trace?offset=6", id), nil)
	if string(b) != "world" || resp.Header.Get("X-Trace-Size") != "11" || resp.Header.Get("X-Job-Status") != "running" {
		t.Errorf("trace from 6 = %q %v", b, resp.Header)
	}
	if resp, b := e.admin("GET", fmt.Sprintf("/api/v1/jobs/%d/trace?offset=100", id), nil); resp.StatusCode != 200 || len(b) != 0 {
		t.Errorf("trace past the end = %d %q", resp.StatusCode, b)
	}
	e.put(id, jr.Token, api.UpdateJobRequest{State: "success"})
	resp = e.patch(id, jr.Token, "11-12", []byte("ab"))
	if resp.StatusCode != 403 || resp.Header.Get(hdrJobStatus) != "success" {
		t.Errorf("PATCH after finish = %d %q, want 403 success", resp.StatusCode, resp.Header.Get(hdrJobStatus))
	}
}

func TestCancel(t *testing.T) {
	e := newEnv(t, nil)
	_, tok := e.runner(nil)

	pending := e.submit(nil)
	resp, b := e.admin("POST", fmt.Sprintf("/api/v1/jobs/%d/cancel", pending.ID), nil)
	var v jobView
	e.decode(b, &v)
	if resp.StatusCode != 200 || v.Status != "canceled" || v.FinishedAt == nil {
		t.Fatalf("cancel pending = %d %+v", resp.StatusCode, v)
	}
	if resp, _ := e.request(tok, "", api.FeaturesInfo{}); resp.StatusCode != 204 {
		t.Errorf("canceled job handed out: %d", resp.StatusCode)
	}
	if resp, _ := e.admin("POST", fmt.Sprintf("/api/v1/jobs/%d/cancel", pending.ID), nil); resp.StatusCode != 409 {
		t.Errorf("cancel canceled = %d, want 409", resp.StatusCode)
	}
	if resp, _ := e.admin("POST", "/api/v1/jobs/9999/cancel", nil); resp.StatusCode != 404 {
		t.Errorf("cancel unknown = %d, want 404", resp.StatusCode)
	}

	e.submit(nil)
	jr := e.take(tok)
	resp, b = e.admin("POST", fmt.Sprintf("/api/v1/jobs/%d/cancel", jr.ID), nil)
	e.decode(b, &v)
	if resp.StatusCode != 200 || v.Status != "canceling" {
		t.Fatalf("cancel running = %d %+v", resp.StatusCode, v)
	}
	if r := e.patch(jr.ID, jr.Token, "0-2", []byte("abc")); r.StatusCode != 202 || r.Header.Get(hdrJobStatus) != "canceling" {
		t.Errorf("PATCH while canceling = %d %q", r.StatusCode, r.Header.Get(hdrJobStatus))
	}
	resp, _ = e.put(jr.ID, jr.Token, api.UpdateJobRequest{State: "running"})
	if resp.StatusCode != 200 || resp.Header.Get(hdrJobStatus) != "canceling" {
		t.Errorf("keep-alive while canceling = %d %q", resp.StatusCode, resp.Header.Get(hdrJobStatus))
	}
	resp, _ = e.put(jr.ID, jr.Token, api.UpdateJobRequest{State: "failed", FailureReason: "script_failure", ExitCode: ptr(143)})
	if resp.StatusCode != 200 || resp.Header.Get(hdrJobStatus) != "canceled" {
		t.Errorf("failed while canceling = %d %q, want 200 canceled", resp.StatusCode, resp.Header.Get(hdrJobStatus))
	}
	if g := e.job(jr.ID); g.Status != "canceled" {
		t.Errorf("job = %+v", g)
	}
	resp, _ = e.put(jr.ID, jr.Token, api.UpdateJobRequest{State: "failed"})
	if resp.StatusCode != 200 || resp.Header.Get(hdrJobStatus) != "canceled" {
		t.Errorf("repeated failed after cancel = %d %q", resp.StatusCode, resp.Header.Get(hdrJobStatus))
	}
	if resp, _ := e.admin("POST", fmt.Sprintf("/api/v1/jobs/%d/cancel", jr.ID), nil); resp.StatusCode != 409 {
		t.Errorf("cancel finished = %d, want 409", resp.StatusCode)
	}
}

func TestConcurrentClaims(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.LongPollTimeout = 300 * time.Millisecond })
	_, tok := e.runner(nil)
	const workers, jobs = 50, 20
	var mu sync.Mutex
	got := map[int64]int{}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lu := ""
			for {
				select {
				case <-stop:
					return
				default:
				}
				resp, jr := e.request(tok, lu, api.FeaturesInfo{})
				lu = resp.Header.Get(hdrLastUpdate)
				if jr != nil {
					mu.Lock()
					got[jr.ID]++
					mu.Unlock()
				}
			}
		}()
	}
	var ids []int64
	for range jobs {
		ids = append(ids, e.submit(nil).ID)
	}
	waitFor(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) == jobs
	})
	close(stop)
	wg.Wait()
	for _, id := range ids {
		if got[id] != 1 {
			t.Errorf("job %d handed out %d times", id, got[id])
		}
	}
	if len(got) != jobs {
		t.Errorf("%d distinct jobs handed out, want %d", len(got), jobs)
	}
}

func TestRestartDurability(t *testing.T) {
	dir := t.TempDir()
	e := openEnv(t, dir, nil)
	_, tok := e.runner(map[string]any{"tag_list": []string{"x"}})
	admin := e.c.AdminToken()
	reg := e.c.RegistrationToken()
	if e.c.AdminTokenPath() == "" {
		t.Errorf("AdminTokenPath empty for a generated token")
	}
	var ids []int64
	for range 5 {
		ids = append(ids, e.submit(map[string]any{"tags": []string{"x"}}).ID)
	}
	jr := e.take(tok)
	e.patch(jr.ID, jr.Token, "0-3", []byte("abcd"))
	e.close()

	e2 := openEnv(t, dir, nil)
	if e2.c.AdminToken() != admin || e2.c.RegistrationToken() != reg {
		t.Errorf("tokens changed across restart")
	}
	resp, b := e2.admin("GET", "/api/v1/jobs", nil)
	var list []jobView
	e2.decode(b, &list)
	if resp.StatusCode != 200 || len(list) != 5 {
		t.Fatalf("jobs after restart = %d, %d jobs", resp.StatusCode, len(list))
	}
	if list[0].Status != "running" || list[0].TraceSize != 4 {
		t.Errorf("running job after restart = %+v", list[0])
	}
	// The runner and job tokens still work.
	if r := e2.patch(jr.ID, jr.Token, "4-5", []byte("ef")); r.StatusCode != 202 || r.Header.Get("Range") != "0-6" {
		t.Errorf("PATCH after restart = %d %q", r.StatusCode, r.Header.Get("Range"))
	}
	seen := map[int64]bool{jr.ID: true}
	for range 4 {
		seen[e2.take(tok).ID] = true
	}
	for _, id := range ids {
		if !seen[id] {
			t.Errorf("job %d lost across restart", id)
		}
	}
}

func TestConfigAdminToken(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.AdminToken = "s3cret" })
	if e.c.AdminToken() != "s3cret" || e.c.AdminTokenPath() != "" {
		t.Errorf("AdminToken %q path %q", e.c.AdminToken(), e.c.AdminTokenPath())
	}
}

// TestCancelThenSuccess: a job canceled while its script was finishing
// ends canceled even when the runner reports success, as in GitLab; a
// retried success is answered 200.
func TestCancelThenSuccess(t *testing.T) {
	e := newEnv(t, nil)
	_, tok := e.runner(nil)
	e.submit(nil)
	jr := e.take(tok)
	if resp, b := e.admin("POST", fmt.Sprintf("/api/v1/jobs/%d/cancel", jr.ID), nil); resp.StatusCode != 200 {
		t.Fatalf("cancel = %d %s", resp.StatusCode, b)
	}
	for i := range 2 {
		resp, b := e.put(jr.ID, jr.Token, api.UpdateJobRequest{State: api.StateSuccess})
		if resp.StatusCode != 200 || resp.Header.Get(hdrJobStatus) != "canceled" {
			t.Fatalf("PUT success #%d while canceling = %d %q %s, want 200 canceled", i+1, resp.StatusCode, resp.Header.Get(hdrJobStatus), b)
		}
	}
	if g := e.job(jr.ID); g.Status != "canceled" || g.ExitCode != nil {
		t.Fatalf("job = %s, exit code %v; want canceled with none", g.Status, g.ExitCode)
	}
}

// TestExitCodeOnlyWhenSent: a failure the runner reports without
// exit_code (a timeout, a system failure) keeps none; one with a code
// keeps it, 0 included.
func TestExitCodeOnlyWhenSent(t *testing.T) {
	e := newEnv(t, nil)
	_, tok := e.runner(nil)
	for _, tc := range []struct {
		name   string
		req    api.UpdateJobRequest
		want   *int
		reason string
	}{
		{"timeout", api.UpdateJobRequest{State: api.StateFailed, FailureReason: api.JobExecutionTimeout}, nil, "job_execution_timeout"},
		{"script", api.UpdateJobRequest{State: api.StateFailed, FailureReason: api.ScriptFailure, ExitCode: ptr(2)}, ptr(2), "script_failure"},
		{"explicit zero", api.UpdateJobRequest{State: api.StateFailed, ExitCode: ptr(0)}, ptr(0), "script_failure"},
		{"success", api.UpdateJobRequest{State: api.StateSuccess}, ptr(0), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e.submit(nil)
			jr := e.take(tok)
			if resp, b := e.put(jr.ID, jr.Token, tc.req); resp.StatusCode != 200 {
				t.Fatalf("PUT = %d %s", resp.StatusCode, b)
			}
			g := e.job(jr.ID)
			if (g.ExitCode == nil) != (tc.want == nil) || (g.ExitCode != nil && *g.ExitCode != *tc.want) || g.FailureReason != tc.reason {
				t.Fatalf("job: exit code %v, reason %q; want %v, %q", g.ExitCode, g.FailureReason, tc.want, tc.reason)
			}
		})
	}
}

// TestRegisterRunUntaggedDefault: as GitLab, a runner registered with tags
// and no run_untagged takes tagged jobs only; without tags it takes
// untagged ones; an explicit run_untagged wins.
func TestRegisterRunUntaggedDefault(t *testing.T) {
	e := newEnv(t, nil)
	yes := true
	for _, tc := range []struct {
		name string
		req  api.RegisterRequest
		want bool
	}{
		{"tags", api.RegisterRequest{TagList: "x,y"}, false},
		{"no tags", api.RegisterRequest{}, true},
		{"tags, asked for untagged", api.RegisterRequest{TagList: "x", RunUntagged: &yes}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.req.Token = e.c.RegistrationToken()
			resp, b := e.do("POST", "/api/v4/runners", nil, tc.req)
			if resp.StatusCode != 201 {
				t.Fatalf("register = %d %s", resp.StatusCode, b)
			}
			var out api.VerifyResponse
			e.decode(b, &out)
			rn, err := e.c.st.GetRunner(t.Context(), out.ID)
			if err != nil {
				t.Fatal(err)
			}
			if rn.RunUntagged != tc.want {
				t.Fatalf("run_untagged = %v, want %v", rn.RunUntagged, tc.want)
			}
		})
	}
}

// TestRetry: a finished job is queued again as a new job with the same
// spec, its secret variables included (sealed, opened for the runner);
// a job not finished and an unknown one are refused.
func TestRetry(t *testing.T) {
	e := newEnv(t, nil)
	_, tok := e.runner(nil)
	orig := e.submit(map[string]any{"name": "build", "project": "g/p", "stage": "build", "tags": []string{}, "timeout": 600,
		"script":    []string{"echo again"},
		"variables": []map[string]any{{"key": "SECRET", "value": "s3cr3t-value", "masked": true}}})
	if resp, _ := e.admin("POST", fmt.Sprintf("/api/v1/jobs/%d/retry", orig.ID), nil); resp.StatusCode != 409 {
		t.Errorf("retry of a pending job = %d, want 409", resp.StatusCode)
	}
	jr := e.take(tok)
	if resp, _ := e.put(jr.ID, jr.Token, api.UpdateJobRequest{State: "failed", FailureReason: "script_failure", ExitCode: ptr(1)}); resp.StatusCode != 200 {
		t.Fatalf("finish = %d", resp.StatusCode)
	}
	resp, b := e.admin("POST", fmt.Sprintf("/api/v1/jobs/%d/retry", orig.ID), nil)
	var v jobView
	e.decode(b, &v)
	if resp.StatusCode != 201 || v.ID == orig.ID || v.Status != "pending" || v.Name != "build" || v.Project != "g/p" || v.Stage != "build" || v.Timeout != 600 {
		t.Fatalf("retry = %d %+v", resp.StatusCode, v)
	}
	again := e.take(tok)
	if again.ID != v.ID {
		t.Fatalf("handed out job %d, want the retry %d", again.ID, v.ID)
	}
	var secret string
	for _, vr := range again.Variables {
		if vr.Key == "SECRET" {
			secret = vr.Value
		}
	}
	if secret != "s3cr3t-value" || len(again.Steps) == 0 || again.Steps[0].Script[0] != "echo again" {
		t.Errorf("the retry's payload lost the spec: SECRET=%q steps=%+v", secret, again.Steps)
	}
	if g := e.job(orig.ID); g.Status != "failed" {
		t.Errorf("the original job changed: %+v", g)
	}
	if resp, _ := e.admin("POST", "/api/v1/jobs/9999/retry", nil); resp.StatusCode != 404 {
		t.Errorf("retry unknown = %d, want 404", resp.StatusCode)
	}
}
