// Package client is the Go client of drover's own admin API v1 (job
// submission and inspection, runner tokens), used by the CLI commands
// submit, jobs, logs, cancel and by `drover local`.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/drover-ci/drover/internal/api"
)

// Client talks to a drover coordinator's /api/v1.
type Client struct {
	base  string
	token string
	http  *http.Client
}

// New returns a client for the coordinator at baseURL with an admin token.
func New(baseURL, adminToken string, hc *http.Client) *Client {
	if hc == nil {
		hc = &http.Client{Timeout: 5 * time.Minute}
	}
	return &Client{base: strings.TrimSuffix(baseURL, "/"), token: adminToken, http: hc}
}

// Variable is a job variable in a submission.
type Variable struct {
	Key    string `json:"key"`
	Value  string `json:"value"`
	Masked bool   `json:"masked,omitempty"`
	File   bool   `json:"file,omitempty"`
	Public bool   `json:"public,omitempty"`
	Raw    bool   `json:"raw,omitempty"`
}

// Git is the repository a job checks out.
type Git struct {
	RepoURL string `json:"repo_url"`
	Ref     string `json:"ref,omitempty"`
	Sha     string `json:"sha,omitempty"`
	Depth   int    `json:"depth,omitempty"`
}

// JobSpec is the body of POST /api/v1/jobs.
type JobSpec struct {
	Name        string     `json:"name"`
	Project     string     `json:"project,omitempty"`
	Stage       string     `json:"stage,omitempty"`
	Script      []string   `json:"script"`
	AfterScript []string   `json:"after_script,omitempty"`
	Variables   []Variable `json:"variables,omitempty"`
	Tags        []string   `json:"tags,omitempty"`
	Timeout     int        `json:"timeout,omitempty"`
	Image       *Image     `json:"image,omitempty"`
	Services    []Service  `json:"services,omitempty"`
	Git         *Git       `json:"git,omitempty"`
	// Cache is the job's cache entries, as GitLab's cache: (JSON objects).
	Cache        []json.RawMessage `json:"cache,omitempty"`
	Artifacts    *Artifacts        `json:"artifacts,omitempty"`
	Dependencies []Dependency      `json:"dependencies,omitempty"`
}

// Artifacts is what a job keeps as artifacts (GitLab's artifacts:).
type Artifacts struct {
	Name      string              `json:"name,omitempty"`
	Paths     []string            `json:"paths,omitempty"`
	Exclude   []string            `json:"exclude,omitempty"`
	Untracked bool                `json:"untracked,omitempty"`
	When      string              `json:"when,omitempty"`
	ExpireIn  string              `json:"expire_in,omitempty"`
	Reports   map[string][]string `json:"reports,omitempty"`
}

// Dependency is an earlier job of the same project whose artifacts a job
// downloads: by ID, or by Name (the newest job of that name).
type Dependency struct {
	ID   int64
	Name string
}

// MarshalJSON sends the id as a number, else the name as a string.
func (d Dependency) MarshalJSON() ([]byte, error) {
	if d.ID != 0 {
		return json.Marshal(d.ID)
	}
	return json.Marshal(d.Name)
}

// PullPolicies are an image's pull policies (always, if-not-present,
// never). They decode from a string or an array of strings.
type PullPolicies []string

// UnmarshalJSON decodes a string or an array of strings.
func (p *PullPolicies) UnmarshalJSON(b []byte) error {
	ss, ok := api.StringOrList(b, func(s string) []string { return []string{s} })
	if !ok {
		return errors.New("pull_policy: want a string or an array of strings")
	}
	*p = ss
	return nil
}

// Image is a job's image. It is sent as a plain string, the name, when
// nothing else is set, else as an object:
//
//	{"name", "entrypoint": [..], "pull_policy": [..], "docker": {"user"}}
//
// It decodes from either form; an object with keys it does not know is an
// error.
type Image struct {
	Name       string       `json:"name"`
	Entrypoint []string     `json:"entrypoint,omitempty"`
	PullPolicy PullPolicies `json:"pull_policy,omitempty"`
	Docker     *ImageDocker `json:"docker,omitempty"`
}

// ImageDocker are an image's settings for the docker executor.
type ImageDocker struct {
	// User runs the job's container as this user (name or uid,
	// optionally :group).
	User string `json:"user,omitempty"`
}

// MarshalJSON sends the name alone when only it is set.
func (i Image) MarshalJSON() ([]byte, error) {
	type plain Image // without this method
	if len(i.Entrypoint) == 0 && len(i.PullPolicy) == 0 && i.Docker == nil {
		return json.Marshal(i.Name)
	}
	return json.Marshal(plain(i))
}

// UnmarshalJSON decodes a string (the name) or an object.
func (i *Image) UnmarshalJSON(b []byte) error {
	type plain Image
	*i = Image{}
	return stringOrObject(b, &i.Name, (*plain)(i))
}

// Service is one of a job's services. It is sent as a plain string, the
// name, when nothing else is set, else as an object:
//
//	{"name", "alias", "command": [..], "entrypoint": [..],
//	 "variables": [{"key", "value"}], "pull_policy": [..]}
//
// Alias holds one or more names separated by spaces or commas. It decodes
// from either form; an object with keys it does not know is an error.
type Service struct {
	Name       string            `json:"name"`
	Alias      string            `json:"alias,omitempty"`
	Command    []string          `json:"command,omitempty"`
	Entrypoint []string          `json:"entrypoint,omitempty"`
	Variables  []ServiceVariable `json:"variables,omitempty"`
	PullPolicy PullPolicies      `json:"pull_policy,omitempty"`
}

// ServiceVariable is a variable of a service's container.
type ServiceVariable struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// MarshalJSON sends the name alone when only it is set.
func (s Service) MarshalJSON() ([]byte, error) {
	type plain Service // without this method
	if s.Alias == "" && len(s.Command) == 0 && len(s.Entrypoint) == 0 && len(s.Variables) == 0 && len(s.PullPolicy) == 0 {
		return json.Marshal(s.Name)
	}
	return json.Marshal(plain(s))
}

// UnmarshalJSON decodes a string (the name) or an object.
func (s *Service) UnmarshalJSON(b []byte) error {
	type plain Service
	*s = Service{}
	return stringOrObject(b, &s.Name, (*plain)(s))
}

// stringOrObject decodes b, a JSON string into name or an object into
// obj, rejecting unknown keys.
func stringOrObject(b []byte, name *string, obj any) error {
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '"' {
		return json.Unmarshal(b, name)
	}
	if len(b) == 0 || b[0] != '{' {
		return errors.New("want a string (the image name) or an object")
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	return dec.Decode(obj)
}

// Job is a job as the coordinator reports it.
type Job struct {
	ID            int64  `json:"id"`
	Name          string `json:"name"`
	Project       string `json:"project"`
	Stage         string `json:"stage"`
	Status        string `json:"status"`
	FailureReason string `json:"failure_reason,omitempty"`
	StuckReason   string `json:"stuck_reason,omitempty"` // why no online runner can take it (pending jobs)
	ExitCode      *int   `json:"exit_code,omitempty"`
	Coverage      string `json:"coverage,omitempty"` // the test coverage its log gave (coverage:), a percentage: "78.46"
	RunnerID      *int64 `json:"runner_id,omitempty"`
	// RunnerDescription is the description of runner RunnerID.
	RunnerDescription string     `json:"runner_description,omitempty"`
	RunnerSystemID    string     `json:"runner_system_id,omitempty"`
	Tags              []string   `json:"tags,omitempty"`
	Timeout           int        `json:"timeout"`
	Image             string     `json:"image,omitempty"`
	Services          []string   `json:"services,omitempty"` // their names
	CreatedAt         *time.Time `json:"created_at,omitempty"`
	StartedAt         *time.Time `json:"started_at,omitempty"`
	FinishedAt        *time.Time `json:"finished_at,omitempty"`
	TraceSize         int64      `json:"trace_size"`
	// Seconds spent queued, waiting for the runner's accept (preparing:
	// two-phase start) and running.
	QueuedDuration       float64 `json:"queued_duration"`
	ProvisioningDuration float64 `json:"provisioning_duration"`
	RunningDuration      float64 `json:"running_duration"`
	// Artifacts are the job's artifacts that have not expired: its
	// archive and its reports. ArtifactsExpireAt is when the archive
	// expires (nil: never, or no archive).
	Artifacts         []JobArtifact `json:"artifacts,omitempty"`
	ArtifactsExpireAt *time.Time    `json:"artifacts_expire_at,omitempty"`
}

// JobArtifact is one of a job's artifacts, named with GitLab's fields.
type JobArtifact struct {
	FileType   string     `json:"file_type"` // archive, junit, dotenv, ...
	Size       int64      `json:"size"`
	Filename   string     `json:"filename"`
	FileFormat string     `json:"file_format"` // zip, gzip, raw
	ExpireAt   *time.Time `json:"expire_at"`   // nil: never
}

// Finished reports whether the job reached a final status.
func (j *Job) Finished() bool {
	switch j.Status {
	case "success", "failed", "canceled":
		return true
	}
	return false
}

// RunnerSpec is the body of POST /api/v1/runners.
type RunnerSpec struct {
	Description    string   `json:"description,omitempty"`
	TagList        []string `json:"tag_list,omitempty"`
	RunUntagged    *bool    `json:"run_untagged,omitempty"`
	Locked         bool     `json:"locked,omitempty"`
	Paused         bool     `json:"paused,omitempty"`
	MaximumTimeout int      `json:"maximum_timeout,omitempty"`
}

// CreatedRunner is the answer of POST /api/v1/runners.
type CreatedRunner struct {
	ID    int64  `json:"id"`
	Token string `json:"token"`
}

// APIError is a 4xx/5xx answer.
type APIError struct {
	Status int
	Msg    string `json:"error"`
	Field  string `json:"field"`
	// JobStatus is the job's state on the 409 of a cancel that came after
	// the job finished (success, failed, canceled).
	JobStatus string `json:"status"`
	// Errors are every error of a CI configuration a pipeline was
	// refused for (file:line: ...).
	Errors []string `json:"errors"`
}

func (e *APIError) Error() string {
	if len(e.Errors) > 0 {
		return fmt.Sprintf("coordinator answered %d: %s:\n%s", e.Status, e.Msg, strings.Join(e.Errors, "\n"))
	}
	if e.Field != "" {
		return fmt.Sprintf("coordinator answered %d: %s (field %s)", e.Status, e.Msg, e.Field)
	}
	return fmt.Sprintf("coordinator answered %d: %s", e.Status, e.Msg)
}

// newAPIError is the error of an answer with status and body b: the
// coordinator's {"error", "field"}, or the body's text.
func newAPIError(status int, b []byte) *APIError {
	e := &APIError{Status: status}
	if json.Unmarshal(b, e) != nil || e.Msg == "" {
		e.Msg = strings.TrimSpace(string(b))
	}
	return e
}

// readAPIError is newAPIError of resp, reading at most 64 KiB of its body.
func readAPIError(resp *http.Response) *APIError {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	return newAPIError(resp.StatusCode, b)
}

func (c *Client) do(ctx context.Context, method, path string, in, out any, want int) (*http.Response, error) {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return nil, err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != want {
		return resp, readAPIError(resp)
	}
	if out != nil {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			return resp, fmt.Errorf("%s %s: decode answer: %w", method, path, err)
		}
	}
	return resp, nil
}

// call is do for a request whose answer is a T: it returns the answer.
func call[T any](ctx context.Context, c *Client, method, path string, in any, want int) (*T, error) {
	var out T
	if _, err := c.do(ctx, method, path, in, &out, want); err != nil {
		return nil, err
	}
	return &out, nil
}

// callList is call for an answer that is a list of T.
func callList[T any](ctx context.Context, c *Client, method, path string, in any, want int) ([]T, error) {
	var out []T
	if _, err := c.do(ctx, method, path, in, &out, want); err != nil {
		return nil, err
	}
	return out, nil
}

// Submit creates a job.
func (c *Client) Submit(ctx context.Context, spec JobSpec) (*Job, error) {
	return call[Job](ctx, c, http.MethodPost, "/api/v1/jobs", spec, http.StatusCreated)
}

// SubmitTestPayload queues a GitLab jobs/request payload as written
// (POST /api/v1/test/payloads): a test-only path, answered only by a
// coordinator started with Config.TestPayloads.
func (c *Client) SubmitTestPayload(ctx context.Context, payload json.RawMessage) (*Job, error) {
	return call[Job](ctx, c, http.MethodPost, "/api/v1/test/payloads", payload, http.StatusCreated)
}

// Job returns one job.
func (c *Client) Job(ctx context.Context, id int64) (*Job, error) {
	return call[Job](ctx, c, http.MethodGet, "/api/v1/jobs/"+strconv.FormatInt(id, 10), nil, http.StatusOK)
}

// Jobs lists jobs, oldest first, optionally filtered by status.
func (c *Client) Jobs(ctx context.Context, status string, limit int) ([]Job, error) {
	out, _, err := c.JobList(ctx, JobQuery{Status: status, Limit: limit})
	return out, err
}

// JobQuery selects a page of jobs for JobList.
type JobQuery struct {
	Status   string // statuses, comma-separated; "" = all
	Limit    int    // 0 = the coordinator's default (100)
	Newest   bool   // newest first
	BeforeID int64  // only jobs older than this id (0 = no bound)
	AfterID  int64  // only jobs newer than this id (0 = no bound)
}

// JobList returns a page of jobs and how many jobs match q.Status in all,
// paging aside (-1 when the coordinator does not say).
func (c *Client) JobList(ctx context.Context, jq JobQuery) ([]Job, int64, error) {
	q := url.Values{}
	if jq.Status != "" {
		q.Set("status", jq.Status)
	}
	if jq.Limit > 0 {
		q.Set("limit", strconv.Itoa(jq.Limit))
	}
	if jq.Newest {
		q.Set("order", "newest")
	}
	if jq.BeforeID > 0 {
		q.Set("before_id", strconv.FormatInt(jq.BeforeID, 10))
	}
	if jq.AfterID > 0 {
		q.Set("after_id", strconv.FormatInt(jq.AfterID, 10))
	}
	var out []Job
	path := "/api/v1/jobs"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	resp, err := c.do(ctx, http.MethodGet, path, nil, &out, http.StatusOK)
	if err != nil {
		return nil, 0, err
	}
	total := int64(-1)
	if n, err := strconv.ParseInt(resp.Header.Get("X-Total-Count"), 10, 64); err == nil {
		total = n
	}
	return out, total, nil
}

// Cancel cancels a job.
func (c *Client) Cancel(ctx context.Context, id int64) (*Job, error) {
	return call[Job](ctx, c, http.MethodPost, "/api/v1/jobs/"+strconv.FormatInt(id, 10)+"/cancel", nil, http.StatusOK)
}

// Retry queues a new job with finished job id's spec and returns it.
func (c *Client) Retry(ctx context.Context, id int64) (*Job, error) {
	return call[Job](ctx, c, http.MethodPost, "/api/v1/jobs/"+strconv.FormatInt(id, 10)+"/retry", nil, http.StatusCreated)
}

// CreateRunner creates a runner and returns its glrt- token.
func (c *Client) CreateRunner(ctx context.Context, spec RunnerSpec) (*CreatedRunner, error) {
	return call[CreatedRunner](ctx, c, http.MethodPost, "/api/v1/runners", spec, http.StatusCreated)
}

// Trace returns the job log from offset, with the job status the
// coordinator reported alongside.
func (c *Client) Trace(ctx context.Context, id, offset int64) ([]byte, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%s/api/v1/jobs/%d/trace?offset=%d", c.base, id, offset), nil)
	if err != nil {
		return nil, "", err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, "", fmt.Errorf("get trace of job %d: %w", id, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, "", fmt.Errorf("get trace of job %d: %w", id, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, "", newAPIError(resp.StatusCode, b)
	}
	return b, resp.Header.Get("X-Job-Status"), nil
}

// Follow writes the job log to w as it grows until the job finishes (or
// ctx ends) and returns the final job.
func (c *Client) Follow(ctx context.Context, id int64, w io.Writer, poll time.Duration) (*Job, error) {
	var off int64
	for {
		b, _, err := c.Trace(ctx, id, off)
		if err != nil {
			return nil, err
		}
		if len(b) > 0 {
			if _, err := w.Write(b); err != nil {
				return nil, err
			}
			off += int64(len(b))
		}
		j, err := c.Job(ctx, id)
		if err != nil {
			return nil, err
		}
		if j.Finished() && off >= j.TraceSize {
			return j, nil
		}
		if len(b) == 0 {
			select {
			case <-ctx.Done():
				return j, ctx.Err()
			case <-time.After(poll):
			}
		}
	}
}

// Artifact is a job's artifact as Artifacts opens it: Body streams it.
type Artifact struct {
	Body     io.ReadCloser
	Filename string // the name the job's runner gave it ("" when unsaid)
	Size     int64  // -1 when the coordinator did not say
	SHA256   string // hex, "" when the coordinator did not say
}

// Artifacts opens job id's artifact of type typ ("" is the archive; a
// report kind such as "junit" for the others): GET
// /api/v1/jobs/{id}/artifacts. The caller closes Body. The download is
// bounded by ctx only, not by the client's timeout: an artifact may take
// long to arrive.
func (c *Client) Artifacts(ctx context.Context, id int64, typ string) (*Artifact, error) {
	u := c.base + "/api/v1/jobs/" + strconv.FormatInt(id, 10) + "/artifacts"
	if typ != "" {
		u += "?" + url.Values{"artifact_type": {typ}}.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	hc := *c.http
	hc.Timeout = 0
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("get artifacts of job %d: %w", id, err)
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		return nil, readAPIError(resp)
	}
	a := &Artifact{Body: resp.Body, Size: resp.ContentLength, SHA256: resp.Header.Get("X-Drover-Sha256")}
	if _, params, err := mime.ParseMediaType(resp.Header.Get("Content-Disposition")); err == nil {
		a.Filename = params["filename"]
	}
	return a, nil
}
