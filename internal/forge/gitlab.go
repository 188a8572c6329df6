package forge

import (
	"fmt"
	"net/http"
	"strings"
)

// gitlabPush is the part of GitLab's push and tag push payloads drover
// reads.
type gitlabPush struct {
	ObjectKind   string   `json:"object_kind"`
	Ref          string   `json:"ref"`
	Before       string   `json:"before"`
	After        string   `json:"after"`
	CheckoutSHA  *string  `json:"checkout_sha"`
	UserName     string   `json:"user_name"`
	UserUsername string   `json:"user_username"`
	Commits      []commit `json:"commits"`
	Project      struct {
		PathWithNamespace string `json:"path_with_namespace"`
		GitHTTPURL        string `json:"git_http_url"`
		WebURL            string `json:"web_url"`
	} `json:"project"`
	Repository struct {
		GitHTTPURL string `json:"git_http_url"`
	} `json:"repository"`
}

func parseGitLab(secret string, h http.Header, body []byte) (*Push, error) {
	if err := checkToken(GitLab, secret, "X-Gitlab-Token header", strings.TrimSpace(h.Get("X-Gitlab-Token"))); err != nil {
		return nil, err
	}
	// Idempotency-Key stays the same when GitLab retries a delivery, so
	// it is the better key for deduplicating; older GitLabs send only
	// the event UUID.
	_, delivery := firstHeader(h, "Idempotency-Key", "X-Gitlab-Event-UUID")
	event := strings.TrimSpace(h.Get("X-Gitlab-Event"))
	switch event {
	case "Push Hook", "Tag Push Hook":
	case "":
		return nil, &PayloadError{Forge: GitLab, Field: "X-Gitlab-Event header", Reason: "missing"}
	default:
		return nil, &IgnoredError{Forge: GitLab, Event: event, DeliveryID: delivery,
			Reason: fmt.Sprintf("event %q is not a push", clip(event))}
	}
	var p gitlabPush
	if err := decode(GitLab, body, &p); err != nil {
		return nil, err
	}
	checkout := ""
	if p.CheckoutSHA != nil {
		checkout = *p.CheckoutSHA
	}
	r := rawPush{
		event: event, ref: p.Ref, before: p.Before, after: p.After,
		pusher: p.UserUsername, repo: p.Project.PathWithNamespace,
		repoURL: p.Project.GitHTTPURL, deliveryID: delivery,
	}
	if r.pusher == "" {
		r.pusher = p.UserName
	}
	if r.repoURL == "" {
		r.repoURL = p.Repository.GitHTTPURL
	}
	if r.repoURL == "" {
		r.repoURL = p.Project.WebURL
	}
	// GitLab sends up to 20 commits, newest first or last depending on
	// the version: find the head by its id. checkout_sha is the commit an
	// annotated tag points at.
	head := checkout
	if head == "" {
		head = p.After
	}
	r.setHead(headCommit(nil, p.Commits, head))
	r.headID = checkout
	return r.normalize(GitLab)
}
