package forge

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// PipelineStatus is a drover pipeline's status, GitLab's set (the same
// strings as the coordinator's store.PipelineStatus; convert with
// forge.PipelineStatus(p.Status)).
type PipelineStatus string

// Pipeline statuses.
const (
	StatusCreated   PipelineStatus = "created"
	StatusPending   PipelineStatus = "pending"
	StatusRunning   PipelineStatus = "running"
	StatusSuccess   PipelineStatus = "success"
	StatusFailed    PipelineStatus = "failed"
	StatusCanceled  PipelineStatus = "canceled"
	StatusSkipped   PipelineStatus = "skipped"
	StatusManual    PipelineStatus = "manual"
	StatusScheduled PipelineStatus = "scheduled"
)

// State returns the commit status state forge f shows for a pipeline in
// status s, and false for a status drover does not have. The mapping:
//
//	drover     Gitea/Forgejo  GitHub   GitLab
//	created    pending        pending  pending
//	pending    pending        pending  pending
//	scheduled  pending        pending  pending
//	manual     pending        pending  pending   (waits for a person)
//	running    pending        pending  running
//	success    success        success  success
//	failed     failure        failure  failed
//	canceled   error          error    canceled
//	skipped    warning        success  skipped
//
// Only GitLab has running, canceled and skipped states. A canceled
// pipeline did not finish, which Gitea and GitHub call error (failure is
// for a pipeline that ran and failed). A skipped pipeline ran nothing:
// GitHub has no neutral state and success keeps a required check from
// blocking on a push that asked not to be built; Gitea shows warning.
// Generic has no statuses.
func (s PipelineStatus) State(f Forge) (string, bool) {
	var i int
	switch f {
	case Gitea:
		i = 0
	case GitHub:
		i = 1
	case GitLab:
		i = 2
	default:
		return "", false
	}
	row, ok := stateTable[s]
	if !ok {
		return "", false
	}
	return row[i], true
}

var stateTable = map[PipelineStatus][3]string{
	StatusCreated:   {"pending", "pending", "pending"},
	StatusPending:   {"pending", "pending", "pending"},
	StatusScheduled: {"pending", "pending", "pending"},
	StatusManual:    {"pending", "pending", "pending"},
	StatusRunning:   {"pending", "pending", "running"},
	StatusSuccess:   {"success", "success", "success"},
	StatusFailed:    {"failure", "failure", "failed"},
	StatusCanceled:  {"error", "error", "canceled"},
	StatusSkipped:   {"warning", "success", "skipped"},
}

// Repo is a repository on a forge's API and the token to post statuses
// to it with.
type Repo struct {
	Forge Forge
	// APIURL is the forge's base URL, without the API path drover adds:
	// https://gitea.example.com (drover adds /api/v1),
	// https://gitlab.example.com (drover adds /api/v4); for GitHub the API
	// root itself, "" meaning https://api.github.com and
	// https://ghe.example.com/api/v3 for GitHub Enterprise Server.
	APIURL string
	// Path is owner/name for Gitea and GitHub; for GitLab the project's
	// numeric ID or its full path (group/subgroup/project).
	Path string
	// Token is a Gitea access token, a GitHub token (personal, app
	// installation) or a GitLab token with the api scope.
	Token string
}

// Status is one commit status to post.
type Status struct {
	Repo Repo
	// SHA is the commit.
	SHA   string
	State PipelineStatus
	// Context tells this status apart from other systems' on the same
	// commit: GitHub's and Gitea's context, GitLab's name. "" means
	// "drover".
	Context string
	// TargetURL links to the pipeline's page; Description is a short
	// text ("Pipeline #12 passed"), cut to what the forge accepts.
	TargetURL   string
	Description string
	// Ref is the branch or tag name; only GitLab uses it.
	Ref string
}

// DefaultContext is the context of a Status whose Context is "".
const DefaultContext = "drover"

// StatusClient posts commit statuses, one request per Post and no
// retries (Notifier retries). The zero value is ready to use.
type StatusClient struct {
	// HTTP is the client to send with; nil means http.DefaultClient.
	// Give it a Timeout: Post has no deadline of its own.
	HTTP *http.Client
	// UserAgent is sent as User-Agent; "" means "drover".
	UserAgent string
}

// StatusError is a failed Post: which forge, which request, what the
// forge answered (Code 0 when no answer came) or the transport error.
type StatusError struct {
	Forge Forge
	// Path is the request's URL path (no host, no token).
	Path string
	// Code is the HTTP status, 0 for a transport error (Err).
	Code int
	// Body is the start of the forge's answer, for the log.
	Body string
	// RetryAfter is the wait the forge asked for in Retry-After, 0 if
	// none.
	RetryAfter time.Duration
	Err        error
}

func (e *StatusError) Error() string {
	if e.Code == 0 {
		return fmt.Sprintf("%s commit status: POST %s: %v", e.Forge, e.Path, e.Err)
	}
	msg := fmt.Sprintf("%s commit status: POST %s: HTTP %d %s", e.Forge, e.Path, e.Code, http.StatusText(e.Code))
	if e.Body != "" {
		msg += ": " + e.Body
	}
	return msg
}

func (e *StatusError) Unwrap() error { return e.Err }

// Retryable reports whether sending the same status again may succeed: a
// transport error, 408, 429 or a 5xx. Other answers (401, 403, 404, 422)
// will not change by themselves.
func (e *StatusError) Retryable() bool {
	switch {
	case e.Code == 0:
		return !errors.Is(e.Err, context.Canceled)
	case e.Code == http.StatusRequestTimeout, e.Code == http.StatusTooManyRequests, e.Code >= 500:
		return true
	}
	return false
}

// IsRetryable reports whether err is a *StatusError that is Retryable.
func IsRetryable(err error) bool {
	var se *StatusError
	return errors.As(err, &se) && se.Retryable()
}

// Post sends one commit status. It returns a *StatusError when the
// request fails or the forge does not answer 2xx, and a plain error when s
// cannot be posted at all (unknown forge or state, bad path or SHA).
func (c *StatusClient) Post(ctx context.Context, s Status) error {
	req, err := c.request(ctx, s)
	if err != nil {
		return err
	}
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return &StatusError{Forge: s.Repo.Forge, Path: req.URL.EscapedPath(), Err: err}
	}
	defer resp.Body.Close()
	const keep = 512
	b, _ := io.ReadAll(io.LimitReader(resp.Body, keep))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10)) // let the connection be reused
	if resp.StatusCode/100 == 2 {
		return nil
	}
	return &StatusError{
		Forge: s.Repo.Forge, Path: req.URL.EscapedPath(), Code: resp.StatusCode,
		Body:       strings.TrimSpace(strings.ToValidUTF8(string(b), "")),
		RetryAfter: retryAfter(resp.Header.Get("Retry-After")),
	}
}

// retryAfter reads a Retry-After of seconds; the HTTP-date form is rare
// from forges and read as none.
func retryAfter(v string) time.Duration {
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || n <= 0 {
		return 0
	}
	return time.Duration(n) * time.Second
}

func (c *StatusClient) request(ctx context.Context, s Status) (*http.Request, error) {
	f := s.Repo.Forge
	state, ok := s.State.State(f)
	if !ok {
		if f != Gitea && f != GitHub && f != GitLab {
			return nil, fmt.Errorf("forge: %q has no commit statuses", f)
		}
		return nil, fmt.Errorf("%s commit status: unknown pipeline status %q", f, s.State)
	}
	if !isSHA(s.SHA) {
		return nil, fmt.Errorf("%s commit status: %q is not a commit SHA", f, clip(s.SHA))
	}
	name := s.Context
	if name == "" {
		name = DefaultContext
	}
	base := strings.TrimRight(s.Repo.APIURL, "/")
	if base == "" && f == GitHub {
		base = "https://api.github.com"
	}
	if base == "" {
		return nil, fmt.Errorf("%s commit status: no API URL for %s", f, s.Repo.Path)
	}
	var (
		path string
		body any
	)
	switch f {
	case Gitea, GitHub:
		owner, repoName, ok := strings.Cut(s.Repo.Path, "/")
		if !ok || owner == "" || repoName == "" || strings.Contains(repoName, "/") {
			return nil, fmt.Errorf("%s commit status: repository %q is not owner/name", f, s.Repo.Path)
		}
		path = "/repos/" + url.PathEscape(owner) + "/" + url.PathEscape(repoName) + "/statuses/" + url.PathEscape(s.SHA)
		max := 255
		if f == Gitea {
			path = "/api/v1" + path
		} else {
			max = 140 // GitHub refuses longer descriptions
		}
		body = struct {
			State       string `json:"state"`
			TargetURL   string `json:"target_url,omitempty"`
			Description string `json:"description,omitempty"`
			Context     string `json:"context"`
		}{state, s.TargetURL, cut(s.Description, max), name}
	case GitLab:
		if strings.Trim(s.Repo.Path, "/") == "" {
			return nil, fmt.Errorf("%s commit status: no project", f)
		}
		// A full path goes URL-encoded as one segment: group%2Fproject.
		path = "/api/v4/projects/" + url.PathEscape(strings.Trim(s.Repo.Path, "/")) + "/statuses/" + url.PathEscape(s.SHA)
		body = struct {
			State       string `json:"state"`
			Name        string `json:"name"`
			Ref         string `json:"ref,omitempty"`
			TargetURL   string `json:"target_url,omitempty"`
			Description string `json:"description,omitempty"`
		}{state, name, s.Ref, s.TargetURL, cut(s.Description, 255)}
	}
	b, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+path, bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("%s commit status: API URL %q: %w", f, s.Repo.APIURL, err)
	}
	req.Header.Set("Content-Type", "application/json")
	ua := c.UserAgent
	if ua == "" {
		ua = "drover"
	}
	req.Header.Set("User-Agent", ua)
	switch f {
	case Gitea:
		req.Header.Set("Accept", "application/json")
		req.Header.Set("Authorization", "token "+s.Repo.Token)
	case GitHub:
		req.Header.Set("Accept", "application/vnd.github+json")
		req.Header.Set("X-GitHub-Api-Version", "2022-11-28")
		req.Header.Set("Authorization", "Bearer "+s.Repo.Token)
	case GitLab:
		req.Header.Set("Accept", "application/json")
		req.Header.Set("PRIVATE-TOKEN", s.Repo.Token)
	}
	return req, nil
}

// cut shortens s to at most max runes, marking the cut with an ellipsis.
func cut(s string, max int) string {
	if utf8.RuneCountInString(s) <= max {
		return s
	}
	r := []rune(s)
	return string(r[:max-1]) + "…"
}
