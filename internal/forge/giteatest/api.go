package giteatest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// APIError is a non-2xx answer of Gitea's API.
type APIError struct {
	Method, Path string
	StatusCode   int
	Body         string
}

func (e *APIError) Error() string {
	return fmt.Sprintf("gitea API %s %s: %d %s", e.Method, e.Path, e.StatusCode, strings.TrimSpace(e.Body))
}

// API calls Gitea's REST API as the admin (token auth): method on
// /api/v1/path, in (if not nil) sent as JSON, the answer decoded into out
// (if not nil). A non-2xx answer is an *APIError.
func (g *Gitea) API(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("gitea API %s %s: encoding the request: %w", method, path, err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, g.URL+"api/v1/"+strings.TrimPrefix(path, "/"), body)
	if err != nil {
		return err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	if g.Token != "" {
		req.Header.Set("Authorization", "token "+g.Token)
	}
	resp, err := g.client.Do(req)
	if err != nil {
		return fmt.Errorf("gitea API %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("gitea API %s %s: reading the answer: %w", method, path, err)
	}
	if resp.StatusCode/100 != 2 {
		return &APIError{Method: method, Path: path, StatusCode: resp.StatusCode, Body: string(b)}
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return fmt.Errorf("gitea API %s %s: decoding %q: %w", method, path, b, err)
		}
	}
	return nil
}

// Repo is a repository of the admin.
type Repo struct {
	ID       int64  `json:"id"`
	Owner    string `json:"-"`
	Name     string `json:"name"`
	FullName string `json:"full_name"`
	CloneURL string `json:"clone_url"`
	HTMLURL  string `json:"html_url"`
}

// CreateRepo creates an empty public repository name owned by the admin
// (no initial commit: the test pushes the first one), default branch main.
func (g *Gitea) CreateRepo(ctx context.Context, name string) (Repo, error) {
	var r Repo
	err := g.API(ctx, http.MethodPost, "user/repos", map[string]any{
		"name":           name,
		"auto_init":      false,
		"private":        false,
		"default_branch": "main",
	}, &r)
	r.Owner = g.AdminUser
	return r, err
}

// PushURL is the HTTP clone and push URL of the admin's repository repo,
// with the admin's name and token in it, for the real git binary.
func (g *Gitea) PushURL(repo string) string {
	u, _ := url.Parse(g.URL)
	u.User = url.UserPassword(g.AdminUser, g.Token)
	u.Path = "/" + g.AdminUser + "/" + repo + ".git"
	return u.String()
}

// Hook is a repository webhook.
type Hook struct {
	ID     int64             `json:"id"`
	Type   string            `json:"type"`
	Active bool              `json:"active"`
	Events []string          `json:"events"`
	Config map[string]string `json:"config"`
}

// AddWebhook adds to the admin's repository repo an active webhook of
// Gitea's own type that posts JSON to target, signed with secret (the
// X-Gitea-Signature header: hex HMAC-SHA256 of the body), for events
// (["push"] when none are given) on every branch.
func (g *Gitea) AddWebhook(ctx context.Context, repo, target, secret string, events ...string) (Hook, error) {
	if len(events) == 0 {
		events = []string{"push"}
	}
	var h Hook
	err := g.API(ctx, http.MethodPost, "repos/"+g.AdminUser+"/"+repo+"/hooks", map[string]any{
		"type": "gitea",
		"config": map[string]string{
			"url":          target,
			"content_type": "json",
			"secret":       secret,
		},
		"events":        events,
		"branch_filter": "*",
		"active":        true,
	}, &h)
	return h, err
}

// Status is a commit status as Gitea reports it.
type Status struct {
	ID          int64     `json:"id"`
	State       string    `json:"status"` // pending, success, error, failure, warning
	TargetURL   string    `json:"target_url"`
	Description string    `json:"description"`
	Context     string    `json:"context"`
	Created     time.Time `json:"created_at"`
	Creator     struct {
		Login string `json:"login"`
	} `json:"creator"`
}

// CreateStatus posts a commit status on sha of the admin's repository repo
// (what a CI system does; drover's own code does it with its own client).
// state is pending, success, error, failure or warning.
func (g *Gitea) CreateStatus(ctx context.Context, repo, sha, state, statusContext, description, targetURL string) (Status, error) {
	var s Status
	err := g.API(ctx, http.MethodPost, "repos/"+g.AdminUser+"/"+repo+"/statuses/"+sha, map[string]string{
		"state":       state,
		"context":     statusContext,
		"description": description,
		"target_url":  targetURL,
	}, &s)
	return s, err
}

// CommitStatuses lists the commit statuses of sha (a full commit ID) of the
// admin's repository repo, newest first: every status posted, not only the
// latest of each context. (Gitea's "leastindex" sort is by index descending.)
func (g *Gitea) CommitStatuses(ctx context.Context, repo, sha string) ([]Status, error) {
	var all []Status
	for page := 1; ; page++ {
		var ss []Status
		path := fmt.Sprintf("repos/%s/%s/statuses/%s?sort=leastindex&limit=50&page=%d", g.AdminUser, repo, sha, page)
		if err := g.API(ctx, http.MethodGet, path, nil, &ss); err != nil {
			return nil, err
		}
		all = append(all, ss...)
		if len(ss) < 50 {
			return all, nil
		}
	}
}
