package forge

import (
	"errors"
	"net/http"
	"strings"
	"testing"
)

// checkParse is what every parser must hold to on any input: no panic,
// exactly one of a push or a classified error, and a push that is
// normalised.
func checkParse(t *testing.T, f Forge, h http.Header, body []byte) {
	p, err := Parse(f, secret, h, body)
	if err != nil {
		if p != nil {
			t.Fatalf("Parse returned a push and error %v", err)
		}
		if !errors.Is(err, ErrSignature) && !errors.Is(err, ErrPayload) && !errors.Is(err, ErrIgnored) {
			t.Fatalf("Parse error %v is none of ErrSignature, ErrPayload, ErrIgnored", err)
		}
		var ie *IgnoredError
		if errors.As(err, &ie) && ie.Push != nil && !ie.Push.Deleted {
			t.Fatalf("IgnoredError carries a push that is not a deletion: %+v", ie.Push)
		}
		return
	}
	if p.Forge != f {
		t.Fatalf("Push.Forge = %q, want %q", p.Forge, f)
	}
	prefix := "refs/heads/"
	if p.Tag {
		prefix = "refs/tags/"
	}
	if p.Ref != prefix+p.Name || p.Name == "" {
		t.Fatalf("Ref %q, Name %q, Tag %v do not agree", p.Ref, p.Name, p.Tag)
	}
	if !isSHA(p.After) || isZeroSHA(p.After) || p.After != strings.ToLower(p.After) {
		t.Fatalf("After %q is not a lower-case commit SHA", p.After)
	}
	if p.Before != "" && (!isSHA(p.Before) || isZeroSHA(p.Before)) {
		t.Fatalf("Before %q is neither empty nor a commit SHA", p.Before)
	}
	if p.Deleted {
		t.Fatal("Parse returned a deletion as a push")
	}
	if strings.ContainsAny(p.Title, "\r\n") {
		t.Fatalf("Title %q has a line break", p.Title)
	}
}

// Every fuzz target signs the body it is given (unless sign is false), so
// the fuzzer reaches the JSON parser instead of stopping at the
// signature.

func FuzzParseGitea(f *testing.F) {
	f.Add([]byte(`{"ref":"refs/heads/main","before":"`+sha0+`","after":"`+sha1+`","head_commit":{"id":"`+sha1+`","message":"m\n\nb","author":{"name":"a","email":"e"}},"pusher":{"login":"p"},"repository":{"full_name":"o/r","clone_url":"u"}}`), "push", true)
	f.Add([]byte(`{"ref":"refs/tags/v1","before":"`+zeros+`","after":"`+sha1+`","commits":[{"id":"`+sha1+`","message":"x"}]}`), "push", true)
	f.Add([]byte(`{"ref":"refs/heads/x","after":"`+zeros+`"}`), "push", true)
	f.Add([]byte(`{"ref":"refs/heads/x","after":"`+sha1+`","head_commit":null,"commits":null}`), "push", true)
	f.Add([]byte(`{"ref":"refs/heads/","after":"`+sha1+`"}`), "create", true)
	f.Add([]byte(`{"ref":1}`), "push", true)
	f.Add([]byte(`[`), "push", false)
	f.Add([]byte(``), "", true)
	f.Fuzz(func(t *testing.T, body []byte, event string, signIt bool) {
		h := hdr("X-Gitea-Event", event, "X-Gitea-Delivery", "d")
		if signIt {
			h.Set("X-Gitea-Signature", sign(body, secret))
		}
		checkParse(t, Gitea, h, body)
	})
}

func FuzzParseGitHub(f *testing.F) {
	f.Add([]byte(`{"ref":"refs/heads/main","before":"`+sha0+`","after":"`+sha1+`","deleted":false,"head_commit":{"id":"`+sha1+`","message":"m"},"pusher":{"name":"p"},"repository":{"full_name":"o/r","clone_url":"u"}}`), "push", true)
	f.Add([]byte(`{"ref":"refs/tags/v2","before":"`+zeros+`","after":"`+sha2+`","head_commit":{"id":"`+sha1+`"}}`), "push", true)
	f.Add([]byte(`{"ref":"refs/heads/x","before":"`+sha1+`","after":"`+zeros+`","deleted":true,"head_commit":null}`), "push", true)
	f.Add([]byte(`{"zen":"Keep it logically awesome.","hook_id":1}`), "ping", true)
	f.Add([]byte(`{"deleted":"no"}`), "push", true)
	f.Add([]byte(`{}`), "push", false)
	f.Fuzz(func(t *testing.T, body []byte, event string, signIt bool) {
		h := hdr("X-GitHub-Event", event)
		if signIt {
			h.Set("X-Hub-Signature-256", "sha256="+sign(body, secret))
		}
		checkParse(t, GitHub, h, body)
	})
}

func FuzzParseGitLab(f *testing.F) {
	f.Add([]byte(`{"object_kind":"push","ref":"refs/heads/main","before":"`+sha0+`","after":"`+sha1+`","checkout_sha":"`+sha1+`","user_username":"u","commits":[{"id":"`+sha2+`","message":"old"},{"id":"`+sha1+`","message":"new [skip ci]","author":{"name":"a","email":"e"}}],"project":{"path_with_namespace":"g/r","git_http_url":"u"}}`), "Push Hook", true)
	f.Add([]byte(`{"object_kind":"tag_push","ref":"refs/tags/v1","before":"`+zeros+`","after":"`+sha2+`","checkout_sha":"`+sha1+`","commits":[]}`), "Tag Push Hook", true)
	f.Add([]byte(`{"object_kind":"push","ref":"refs/heads/x","before":"`+sha1+`","after":"`+zeros+`","checkout_sha":null}`), "Push Hook", true)
	f.Add([]byte(`{"checkout_sha":5}`), "Push Hook", true)
	f.Add([]byte(`{}`), "Issue Hook", false)
	f.Fuzz(func(t *testing.T, body []byte, event string, token bool) {
		h := hdr("X-Gitlab-Event", event)
		if token {
			h.Set("X-Gitlab-Token", secret)
		}
		checkParse(t, GitLab, h, body)
	})
}

func FuzzParseGeneric(f *testing.F) {
	f.Add([]byte(`{"ref":"refs/heads/main","before":"`+zeros+`","after":"`+sha1+`","message":"m","author_name":"a","author_email":"e","delivery_id":"d","repo_url":"u"}`), true)
	f.Add([]byte(`{"ref":"refs/tags/v1","after":"`+zeros+`","deleted":true}`), true)
	f.Add([]byte(`{"ref":"refs/pull/1/head","after":"`+sha1+`"}`), true)
	f.Add([]byte(`{"after":null}`), true)
	f.Add([]byte(`not json`), false)
	f.Fuzz(func(t *testing.T, body []byte, auth bool) {
		h := hdr()
		if auth {
			h.Set("Authorization", "Bearer "+secret)
		}
		checkParse(t, Generic, h, body)
	})
}
