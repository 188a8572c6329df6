package coordinator

import (
	"encoding/json"
	"fmt"
	"hash/crc32"
	"net/http"
	"strings"
	"testing"
)

// TestGitLabRunnerWireReplay replays, byte for byte where it matters, the
// exchange a real GitLab Runner 19.4 (shell executor, bash) had with a
// server for one job whose script was `echo hello` (gitlab-runner-facts.md
// §11), and checks every answer is what that runner expects. The real
// binary cannot be fetched on this machine; this test is its stand-in.
func TestGitLabRunnerWireReplay(t *testing.T) {
	e := newEnv(t, nil)
	_, token := e.runner(map[string]any{"description": "gitlab-runner"})
	job := e.submit(map[string]any{"name": "hello", "script": []string{"echo hello"}})

	// The info object as GitLab Runner sends it: every feature key present,
	// two_phase_job_commit true, image/services false for the shell executor.
	features := map[string]bool{}
	for _, k := range strings.Fields(`variables image services artifacts cache fallback_cache_keys shared
		upload_multiple_artifacts upload_raw_artifacts session terminal refspecs masking proxy raw_variables
		artifacts_exclude multi_build_steps trace_reset trace_checksum trace_size vault_secrets cancelable
		return_exit_code service_variables service_multiple_aliases image_executor_opts service_executor_opts
		cancel_gracefully native_steps_integration two_phase_job_commit job_inputs`) {
		features[k] = true
	}
	features["image"], features["services"] = false, false
	info := map[string]any{
		"name": "gitlab-runner", "version": "19.4.0", "revision": "d79f3e7b", "platform": "linux",
		"architecture": "amd64", "executor": "shell", "shell": "bash", "features": features,
		"config": map[string]any{"gpus": ""},
	}

	// 1. POST /api/v4/jobs/request with Runner-Token.
	resp, body := e.do(http.MethodPost, "/api/v4/jobs/request",
		map[string]string{"Runner-Token": token, "Accept": "application/json", "User-Agent": "gitlab-runner 19.4.0 (main; go1.24; linux/amd64)"},
		map[string]any{"info": info, "token": token, "system_id": "s_0123456789ab"})
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("jobs/request = %d %s, want 201", resp.StatusCode, body)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Errorf("Content-Type = %q: the runner only decodes application/json", ct)
	}
	lastUpdate := resp.Header.Get("X-GitLab-Last-Update")
	if lastUpdate == "" {
		t.Error("no X-GitLab-Last-Update on jobs/request")
	}
	var payload struct {
		ID        int64  `json:"id"`
		Token     string `json:"token"`
		Variables []struct {
			Key, Value string
		} `json:"variables"`
		Steps []struct {
			Name   string   `json:"name"`
			Script []string `json:"script"`
			When   string   `json:"when"`
		} `json:"steps"`
		RunnerInfo struct {
			Timeout int `json:"timeout"`
		} `json:"runner_info"`
		GitInfo struct {
			RepoURL string `json:"repo_url"`
		} `json:"git_info"`
	}
	if err := json.Unmarshal(body, &payload); err != nil {
		t.Fatalf("payload: %v", err)
	}
	if payload.ID != job.ID || !strings.HasPrefix(payload.Token, "glcbt-") || payload.RunnerInfo.Timeout <= 0 {
		t.Errorf("payload id %d token %q timeout %d", payload.ID, payload.Token, payload.RunnerInfo.Timeout)
	}
	if len(payload.Steps) == 0 || payload.Steps[0].Name != "script" || payload.Steps[0].Script[0] != "echo hello" || payload.Steps[0].When != "on_success" {
		t.Errorf("steps = %+v", payload.Steps)
	}
	vars := map[string]string{}
	for _, v := range payload.Variables {
		vars[v.Key] = v.Value
	}
	for _, k := range []string{"CI", "GITLAB_CI", "CI_JOB_ID", "CI_JOB_TOKEN", "CI_PROJECT_PATH", "CI_SERVER_URL", "CI_PIPELINE_ID"} {
		if vars[k] == "" {
			t.Errorf("predefined variable %s missing", k)
		}
	}
	if vars["GIT_STRATEGY"] != "none" || payload.GitInfo.RepoURL != "" {
		t.Errorf("a job without a repository must carry GIT_STRATEGY=none, got %q (repo %q)", vars["GIT_STRATEGY"], payload.GitInfo.RepoURL)
	}
	jobPath := fmt.Sprintf("/api/v4/jobs/%d", payload.ID)
	jobHdr := map[string]string{"Job-Token": payload.Token}

	// 2. PUT running at once, with an empty output object.
	resp, body = e.do(http.MethodPut, jobPath, jobHdr, map[string]any{"info": info, "token": payload.Token, "state": "running", "output": map[string]any{}})
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Job-Status") != "running" {
		t.Fatalf("PUT running = %d Job-Status %q (%s)", resp.StatusCode, resp.Header.Get("Job-Status"), body)
	}

	// 3. PATCH the log: Content-Range without unit, text/plain, ?debug_trace=false.
	log := []byte(strings.Repeat("x", 1900) + "hello\nJob ok\n")[:1911]
	resp, body = e.do(http.MethodPatch, jobPath+"/trace?debug_trace=false",
		map[string]string{"Job-Token": payload.Token, "Content-Range": "0-1910", "Content-Type": "text/plain"}, log)
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("PATCH trace = %d %s, want 202", resp.StatusCode, body)
	}
	for h, want := range map[string]string{"Range": "0-1911", "Job-Status": "running", "X-GitLab-Trace-Update-Interval": "3"} {
		if got := resp.Header.Get(h); got != want {
			t.Errorf("PATCH answer %s = %q, want %q", h, got, want)
		}
	}

	// 4. PUT success with the checksum twice and no exit_code.
	sum := fmt.Sprintf("crc32:%08x", crc32.ChecksumIEEE(log))
	resp, body = e.do(http.MethodPut, jobPath, jobHdr, map[string]any{
		"info": info, "token": payload.Token, "state": "success", "checksum": sum,
		"output": map[string]any{"checksum": sum, "bytesize": len(log)},
	})
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("final PUT = %d %s, want 200", resp.StatusCode, body)
	}
	if got := e.job(job.ID); got.Status != "success" {
		t.Errorf("job status = %s, want success", got.Status)
	}
	if got := e.trace(job.ID); got != string(log) {
		t.Errorf("stored log differs from what was sent (%d vs %d bytes)", len(got), len(log))
	}

	// 5. Back to jobs/request echoing last_update: no job, so 204 with a header.
	resp, _ = e.do(http.MethodPost, "/api/v4/jobs/request", map[string]string{"Runner-Token": token},
		map[string]any{"info": info, "token": token, "system_id": "s_0123456789ab", "last_update": lastUpdate})
	if resp.StatusCode != http.StatusNoContent || resp.Header.Get("X-GitLab-Last-Update") == "" {
		t.Errorf("second jobs/request = %d (X-GitLab-Last-Update %q), want 204 with the header", resp.StatusCode, resp.Header.Get("X-GitLab-Last-Update"))
	}
}
