package forge

import (
	"fmt"
	"net/http"
	"strings"
)

// githubPush is the part of GitHub's push payload drover reads.
type githubPush struct {
	Ref        string   `json:"ref"`
	Before     string   `json:"before"`
	After      string   `json:"after"`
	Deleted    bool     `json:"deleted"`
	HeadCommit *commit  `json:"head_commit"`
	Commits    []commit `json:"commits"`
	Repository struct {
		FullName string `json:"full_name"`
		CloneURL string `json:"clone_url"`
		HTMLURL  string `json:"html_url"`
	} `json:"repository"`
	Pusher struct {
		Name string `json:"name"`
	} `json:"pusher"`
}

func parseGitHub(secret string, h http.Header, body []byte) (*Push, error) {
	sig := strings.TrimSpace(h.Get("X-Hub-Signature-256"))
	if err := requireSig(GitHub, secret, "X-Hub-Signature-256 header", sig); err != nil {
		return nil, err
	}
	hexSig, ok := strings.CutPrefix(sig, "sha256=")
	if !ok {
		return nil, fmt.Errorf("%s: %w: X-Hub-Signature-256 does not start with \"sha256=\"", GitHub, ErrSignature)
	}
	if err := checkHMAC(GitHub, secret, "X-Hub-Signature-256", hexSig, body); err != nil {
		return nil, err
	}
	delivery := strings.TrimSpace(h.Get("X-GitHub-Delivery"))
	event := strings.TrimSpace(h.Get("X-GitHub-Event"))
	switch event {
	case "push":
	case "":
		return nil, &PayloadError{Forge: GitHub, Field: "X-GitHub-Event header", Reason: "missing"}
	case "ping":
		return nil, &IgnoredError{Forge: GitHub, Event: event, DeliveryID: delivery, Reason: "ping: the webhook works"}
	default:
		return nil, &IgnoredError{Forge: GitHub, Event: event, DeliveryID: delivery,
			Reason: fmt.Sprintf("event %q is not a push", clip(event))}
	}
	var p githubPush
	if err := decode(GitHub, body, &p); err != nil {
		return nil, err
	}
	r := rawPush{
		event: event, ref: p.Ref, before: p.Before, after: p.After, deleted: p.Deleted,
		pusher: p.Pusher.Name, repo: p.Repository.FullName,
		repoURL: p.Repository.CloneURL, deliveryID: delivery,
	}
	if r.repoURL == "" {
		r.repoURL = p.Repository.HTMLURL
	}
	r.setHead(headCommit(p.HeadCommit, p.Commits, p.After))
	return r.normalize(GitHub)
}
