package forge

import (
	"net/http"
	"strings"
)

// GenericPush is drover's own webhook body, for senders without a forge
// dialect (a post-receive hook, a script). It is sent as
//
//	POST <endpoint>
//	Authorization: Bearer <secret>
//	X-Drover-Delivery: <id>          (optional; or delivery_id below)
//	Content-Type: application/json
//
//	{"ref": "refs/heads/main", "before": "<sha or 40 zeros>", "after": "<sha>",
//	 "message": "...", "author_name": "...", "author_email": "...",
//	 "delivery_id": "...", "repo_url": "https://git.example.com/o/r.git"}
//
// ref and after are required, the rest optional. after of all zeros (or
// deleted) means the ref was deleted; before of all zeros or "" means it
// was created. Unknown fields are ignored.
type GenericPush struct {
	Ref         string `json:"ref"`
	Before      string `json:"before,omitempty"`
	After       string `json:"after"`
	Deleted     bool   `json:"deleted,omitempty"`
	Message     string `json:"message,omitempty"`
	AuthorName  string `json:"author_name,omitempty"`
	AuthorEmail string `json:"author_email,omitempty"`
	Pusher      string `json:"pusher,omitempty"`
	DeliveryID  string `json:"delivery_id,omitempty"`
	RepoURL     string `json:"repo_url,omitempty"`
}

func parseGeneric(secret string, h http.Header, body []byte) (*Push, error) {
	token := ""
	if scheme, rest, ok := strings.Cut(strings.TrimSpace(h.Get("Authorization")), " "); ok && strings.EqualFold(scheme, "Bearer") {
		token = strings.TrimSpace(rest)
	}
	if err := checkToken(Generic, secret, "Authorization: Bearer header", token); err != nil {
		return nil, err
	}
	var p GenericPush
	if err := decode(Generic, body, &p); err != nil {
		return nil, err
	}
	delivery := strings.TrimSpace(h.Get("X-Drover-Delivery"))
	if delivery == "" {
		delivery = p.DeliveryID
	}
	r := rawPush{
		event: "push", ref: p.Ref, before: p.Before, after: p.After, deleted: p.Deleted,
		message: p.Message, authorName: p.AuthorName, authorMail: p.AuthorEmail,
		pusher: p.Pusher, repoURL: p.RepoURL, deliveryID: delivery,
	}
	return r.normalize(Generic)
}
