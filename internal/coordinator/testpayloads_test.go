package coordinator

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/drover-ci/drover/internal/api"
)

// TestTestPayloads: with TestPayloads on, a payload given to POST
// /api/v1/test/payloads reaches the runner as written, but for the
// placeholders, the id, the token and two_phase_job_commit; its
// dependencies authorize the job's artifact downloads; the job's state
// updates and trace work as any job's. Off, the path does not exist.
func TestTestPayloads(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.TestPayloads = true })
	_, tok := e.runner(map[string]any{"description": "r"})
	dep := e.submit(nil)

	payload := fmt.Sprintf(`{
		"id": 0, "token": "x", "unknown_to_drover": {"kept": [1, 2]},
		"job_info": {"name": "raw job", "stage": "build", "project_full_path": "g/p"},
		"runner_info": {"timeout": 123},
		"variables": [{"key": "CI_JOB_ID", "value": "@@JOB_ID@@"}, {"key": "CI_JOB_TOKEN", "value": "@@JOB_TOKEN@@", "masked": true},
			{"key": "CI_JOB_URL", "value": "@@SERVER_URL@@/g/p/-/jobs/@@JOB_ID@@"}],
		"dependencies": [{"id": %d, "name": "job", "token": "@@JOB_TOKEN@@"}],
		"features": {"trace_sections": true}
	}`, dep.ID)
	resp, b := e.admin("POST", "/api/v1/test/payloads", payload)
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("POST /api/v1/test/payloads = %d %s", resp.StatusCode, b)
	}
	var queued jobView
	e.decode(b, &queued)
	if queued.Name != "raw job" || queued.Stage != "build" || queued.Project != "g/p" {
		t.Errorf("queued job %+v, want the payload's name, stage and project", queued)
	}

	// The first job in the queue is dep: take it, then the raw one.
	if first := e.take(tok); first.ID != dep.ID {
		t.Fatalf("first job = %d, want %d", first.ID, dep.ID)
	}
	req := api.JobRequest{Token: tok, SystemID: "s_test", Info: api.VersionInfo{Features: api.FeaturesInfo{TwoPhaseJobCommit: true}}}
	r, body := e.do("POST", "/api/v4/jobs/request", map[string]string{hdrRunnerToken: tok}, req)
	if r.StatusCode != http.StatusCreated {
		t.Fatalf("jobs/request = %d %s", r.StatusCode, body)
	}
	var got map[string]any
	e.decode(body, &got)
	id, token := int64(got["id"].(float64)), got["token"].(string)
	if id != queued.ID || !strings.HasPrefix(token, api.JobTokenPrefix) {
		t.Fatalf("id %d token %q, want %d and a job token", id, token, queued.ID)
	}
	want := fmt.Sprintf(`[{"key":"CI_JOB_ID","value":"%d"},{"key":"CI_JOB_TOKEN","masked":true,"value":%q},{"key":"CI_JOB_URL","value":"%s/g/p/-/jobs/%d"}]`,
		id, token, e.srv.URL, id)
	if vars, _ := json.Marshal(got["variables"]); string(vars) != want {
		t.Errorf("variables = %s\nwant %s", vars, want)
	}
	if kept, _ := json.Marshal(got["unknown_to_drover"]); string(kept) != `{"kept":[1,2]}` {
		t.Errorf("a key drover does not know = %s, want it as given", kept)
	}
	if f := got["features"].(map[string]any); f["two_phase_job_commit"] != true || f["trace_sections"] != true {
		t.Errorf("features = %v, want two_phase_job_commit added and trace_sections kept", f)
	}
	if deps := got["dependencies"].([]any); deps[0].(map[string]any)["token"] != token {
		t.Errorf("dependencies = %v, want the job's token", deps)
	}

	// The job's token works: it accepts the job, may download its
	// dependency's artifacts (none here: 404, not 403) and update the job.
	if r, b := e.put(id, token, api.UpdateJobRequest{Token: token, State: api.StateRunning}); r.StatusCode != http.StatusOK {
		t.Fatalf("PUT running = %d %s", r.StatusCode, b)
	}
	r, b = e.do("GET", fmt.Sprintf("/api/v4/jobs/%d/artifacts", dep.ID), map[string]string{hdrJobToken: token}, nil)
	if r.StatusCode != http.StatusNotFound {
		t.Errorf("download the dependency's artifacts = %d %s, want 404 (allowed, none uploaded)", r.StatusCode, b)
	}
	e.patch(id, token, "0-5", []byte("hello\n"))
	if r, b := e.put(id, token, api.UpdateJobRequest{Token: token, State: api.StateSuccess}); r.StatusCode != http.StatusOK {
		t.Fatalf("PUT = %d %s", r.StatusCode, b)
	}
	if j := e.job(id); j.Status != "success" || e.trace(id) != "hello\n" {
		t.Errorf("job %+v trace %q, want success with the trace", j, e.trace(id))
	}

	for _, bad := range []string{`[]`, `{"job_info": {}}`, `not json`} {
		if r, b := e.admin("POST", "/api/v1/test/payloads", bad); r.StatusCode != http.StatusBadRequest {
			t.Errorf("payload %s = %d %s, want 400", bad, r.StatusCode, b)
		}
	}

	off := newEnv(t, nil)
	if r, _ := off.admin("POST", "/api/v1/test/payloads", payload); r.StatusCode != http.StatusNotFound && r.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("without TestPayloads: %d, want 404 or 405", r.StatusCode)
	}
}
