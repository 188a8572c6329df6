package coordinator

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"

	"github.com/drover-ci/drover/internal/runnerapi"
	"github.com/drover-ci/drover/internal/store"
)

// Test payloads (Config.TestPayloads): POST /api/v1/test/payloads queues a
// job whose jobs/request answer is the body it was given, a job as GitLab
// sends it, instead of one the coordinator builds. The differential tests
// (internal/difftest) hand the same payload to drover's runner manager and
// to GitLab Runner this way, through the same coordinator, so that what
// each does with it can be compared. It is off unless configured: the
// payload's variables are stored as given, unsealed.
//
// The payload is sent as given but for these placeholders, replaced in
// every string when the job is handed out, and the top-level id and token
// (the coordinator's own, whatever the payload says):
//
//	@@JOB_ID@@      the job's id
//	@@JOB_TOKEN@@   the job's token (CI_JOB_TOKEN, dependencies' tokens, URLs)
//	@@SERVER_URL@@  the coordinator's base URL (CI_SERVER_URL, CI_JOB_URL)
//
// and features.two_phase_job_commit, which says whether the runner that
// took it must accept it (as for any job).
const (
	payloadJobID     = "@@JOB_ID@@"
	payloadJobToken  = "@@JOB_TOKEN@@"
	payloadServerURL = "@@SERVER_URL@@"
)

// testPayload is what the coordinator reads of a test payload to queue
// it: the rest is only sent.
type testPayload struct {
	JobInfo struct {
		Name            string `json:"name"`
		Stage           string `json:"stage"`
		ProjectFullPath string `json:"project_full_path"`
	} `json:"job_info"`
	GitInfo struct {
		RepoURL string `json:"repo_url"`
		Ref     string `json:"ref"`
		Sha     string `json:"sha"`
	} `json:"git_info"`
	RunnerInfo struct {
		Timeout int `json:"timeout"`
	} `json:"runner_info"`
	Image struct {
		Name string `json:"name"`
	} `json:"image"`
	Dependencies []struct {
		ID   int64  `json:"id"`
		Name string `json:"name"`
	} `json:"dependencies"`
}

// handleTestPayload is POST /api/v1/test/payloads?tags=a,b (admin): it
// queues the body, a jobs/request answer in GitLab's JSON, as a job (see
// above), and answers 201 with the job's view.
func (c *Coordinator) handleTestPayload(w http.ResponseWriter, r *http.Request) {
	var raw json.RawMessage
	if e := runnerapi.DecodeJSON(w, r, &raw, maxV1Body, false); e != nil {
		runnerapi.WriteBad(w, e)
		return
	}
	var p testPayload
	if err := json.Unmarshal(raw, &p); err != nil {
		runnerapi.WriteError(w, http.StatusBadRequest, "the payload is not a job: "+err.Error(), "")
		return
	}
	if p.JobInfo.Name == "" {
		runnerapi.WriteError(w, http.StatusBadRequest, "job_info.name is missing", "job_info.name")
		return
	}
	project := p.JobInfo.ProjectFullPath
	if project == "" {
		project = "test/payloads"
	}
	stage := p.JobInfo.Stage
	if stage == "" {
		stage = "test"
	}
	now := c.clock.Now()
	j := store.Job{
		Name: p.JobInfo.Name, Project: project, Stage: stage, Image: p.Image.Name,
		Timeout: p.RunnerInfo.Timeout, Tags: splitTags(r.URL.Query().Get("tags")),
		Status: store.StatusPending, CreatedAt: now, QueuedAt: now, UpdatedAt: now,
		Spec: store.JobSpec{
			Git:        store.GitSpec{RepoURL: p.GitInfo.RepoURL, Ref: p.GitInfo.Ref, Sha: p.GitInfo.Sha},
			RawPayload: raw,
		},
	}
	for _, d := range p.Dependencies {
		j.Spec.Dependencies = append(j.Spec.Dependencies, store.DependencySpec{ID: d.ID, Name: d.Name})
	}
	j, err := c.createJob(r.Context(), j)
	if err != nil {
		c.internalError(r.Context(), w, "queue test payload", err)
		return
	}
	c.log.Info("test payload queued", "job_id", j.ID, "name", j.Name, "bytes", len(raw))
	c.poll.wake(&j)
	runnerapi.WriteJSON(w, http.StatusCreated, c.jobView(r.Context(), &j))
}

// splitTags splits a comma-separated list, dropping empty names.
func splitTags(s string) []string {
	var tags []string
	for t := range bytes.SplitSeq([]byte(s), []byte(",")) {
		if t = bytes.TrimSpace(t); len(t) > 0 {
			tags = append(tags, string(t))
		}
	}
	return tags
}

// rawPayload is the answer for a test payload handed out as job id with
// token: the placeholders replaced, the top-level id and token the job's,
// and features.two_phase_job_commit set as the runner gets it.
func rawPayload(raw json.RawMessage, id int64, token, baseURL string, twoPhase bool) (json.RawMessage, error) {
	str := func(s string) []byte { // s as the inside of a JSON string
		b, _ := json.Marshal(s)
		return b[1 : len(b)-1]
	}
	b := bytes.ReplaceAll(raw, []byte(payloadJobID), []byte(strconv.FormatInt(id, 10)))
	b = bytes.ReplaceAll(b, []byte(payloadJobToken), str(token))
	b = bytes.ReplaceAll(b, []byte(payloadServerURL), str(baseURL))
	var top map[string]json.RawMessage
	if err := json.Unmarshal(b, &top); err != nil {
		return nil, fmt.Errorf("test payload of job %d: %w", id, err)
	}
	features := map[string]json.RawMessage{}
	if f, ok := top["features"]; ok && string(f) != "null" {
		if err := json.Unmarshal(f, &features); err != nil {
			return nil, fmt.Errorf("test payload of job %d: features: %w", id, err)
		}
	}
	features["two_phase_job_commit"], _ = json.Marshal(twoPhase)
	top["features"], _ = json.Marshal(features)
	top["id"], _ = json.Marshal(id)
	top["token"], _ = json.Marshal(token)
	return json.Marshal(top)
}
