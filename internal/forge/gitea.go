package forge

import (
	"fmt"
	"net/http"
)

// giteaPush is the part of Gitea's and Forgejo's push payload drover reads.
type giteaPush struct {
	Ref        string   `json:"ref"`
	Before     string   `json:"before"`
	After      string   `json:"after"`
	HeadCommit *commit  `json:"head_commit"`
	Commits    []commit `json:"commits"`
	Repository struct {
		FullName string `json:"full_name"`
		CloneURL string `json:"clone_url"`
		HTMLURL  string `json:"html_url"`
	} `json:"repository"`
	Pusher struct {
		Login    string `json:"login"`
		UserName string `json:"username"`
	} `json:"pusher"`
}

func parseGitea(secret string, h http.Header, body []byte) (*Push, error) {
	// Forgejo sends both header families; either name may carry the
	// signature, and both hold the same value when both are present.
	header, sig := firstHeader(h, "X-Forgejo-Signature", "X-Gitea-Signature")
	if err := requireSig(Gitea, secret, "X-Gitea-Signature or X-Forgejo-Signature header", sig); err != nil {
		return nil, err
	}
	if err := checkHMAC(Gitea, secret, header, sig, body); err != nil {
		return nil, err
	}
	_, delivery := firstHeader(h, "X-Gitea-Delivery", "X-Forgejo-Delivery")
	_, event := firstHeader(h, "X-Forgejo-Event", "X-Gitea-Event")
	switch event {
	case "push":
	case "":
		return nil, &PayloadError{Forge: Gitea, Field: "X-Gitea-Event header", Reason: "missing"}
	case "create", "delete":
		// Gitea also sends a push for every ref it creates or deletes.
		return nil, &IgnoredError{Forge: Gitea, Event: event, DeliveryID: delivery,
			Reason: fmt.Sprintf("%q events are ignored: the push event of the same ref is used", event)}
	default:
		return nil, &IgnoredError{Forge: Gitea, Event: event, DeliveryID: delivery,
			Reason: fmt.Sprintf("event %q is not a push", clip(event))}
	}
	var p giteaPush
	if err := decode(Gitea, body, &p); err != nil {
		return nil, err
	}
	r := rawPush{
		event: event, ref: p.Ref, before: p.Before, after: p.After,
		pusher: p.Pusher.Login, repo: p.Repository.FullName,
		repoURL: p.Repository.CloneURL, deliveryID: delivery,
	}
	if r.pusher == "" {
		r.pusher = p.Pusher.UserName
	}
	if r.repoURL == "" {
		r.repoURL = p.Repository.HTMLURL
	}
	r.setHead(headCommit(p.HeadCommit, p.Commits, p.After))
	return r.normalize(Gitea)
}
