package forge

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const (
	secret = "s3cret"
	sha1   = "bffeb74224043ba2feb48d137756c8a9331c449a"
	sha0   = "28e1879d029cb852e4844d9c718537df08844e03"
	sha2   = "82b3d5ae55f7080f1e6022629cdb57bfae7cccc7"
	zeros  = "0000000000000000000000000000000000000000"
)

func sign(body []byte, key string) string {
	m := hmac.New(sha256.New, []byte(key))
	m.Write(body)
	return hex.EncodeToString(m.Sum(nil))
}

func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The payload builders below follow the forges' documented push payloads,
// trimmed to a realistic subset (the parsers must ignore the rest).

func giteaBody(ref, before, after, msg string) map[string]any {
	c := map[string]any{
		"id": after, "message": msg, "url": "https://gitea.example.com/o/r/commit/" + after,
		"author":    map[string]any{"name": "Ada Lovelace", "email": "ada@example.com", "username": "ada"},
		"committer": map[string]any{"name": "Ada Lovelace", "email": "ada@example.com", "username": "ada"},
		"timestamp": "2024-03-13T13:52:11-04:00",
	}
	return map[string]any{
		"ref": ref, "before": before, "after": after,
		"compare_url": "https://gitea.example.com/o/r/compare/" + before + "..." + after,
		"commits":     []any{c}, "head_commit": c, "total_commits": 1,
		"repository": map[string]any{
			"id": 140, "name": "r", "full_name": "o/r", "private": false,
			"html_url": "https://gitea.example.com/o/r", "clone_url": "https://gitea.example.com/o/r.git",
			"ssh_url": "git@gitea.example.com:o/r.git", "default_branch": "main",
			"owner": map[string]any{"id": 1, "login": "o", "full_name": "", "email": "o@example.com"},
		},
		"pusher": map[string]any{"id": 2, "login": "ada", "full_name": "Ada Lovelace", "email": "ada@example.com", "username": "ada"},
		"sender": map[string]any{"id": 2, "login": "ada", "username": "ada"},
	}
}

func githubBody(ref, before, after, msg string) map[string]any {
	c := map[string]any{
		"id": after, "tree_id": sha0, "distinct": true, "message": msg,
		"timestamp": "2024-02-13T14:57:33-08:00", "url": "https://github.com/o/r/commit/" + after,
		"author":    map[string]any{"name": "Ada Lovelace", "email": "ada@example.com", "username": "ada"},
		"committer": map[string]any{"name": "GitHub", "email": "noreply@github.com", "username": "web-flow"},
		"added":     []any{}, "removed": []any{}, "modified": []any{"README.md"},
	}
	return map[string]any{
		"ref": ref, "before": before, "after": after,
		"created": before == zeros, "deleted": after == zeros, "forced": false, "base_ref": nil,
		"compare": "https://github.com/o/r/compare/x...y", "commits": []any{c}, "head_commit": c,
		"repository": map[string]any{
			"id": 1296269, "name": "r", "full_name": "o/r", "private": false,
			"html_url": "https://github.com/o/r", "clone_url": "https://github.com/o/r.git",
			"git_url": "git://github.com/o/r.git", "ssh_url": "git@github.com:o/r.git",
		},
		"pusher": map[string]any{"name": "ada", "email": "ada@example.com"},
		"sender": map[string]any{"login": "ada", "id": 1},
	}
}

func gitlabBody(kind, ref, before, after, msg string) map[string]any {
	var checkout any = after
	if after == zeros {
		checkout = nil
	}
	commits := []any{
		// GitLab's order of commits varies; the head is found by its id.
		map[string]any{"id": after, "message": msg, "title": Title(msg), "timestamp": "2024-04-14T00:19:23+02:00",
			"url":    "https://gitlab.example.com/g/sub/r/-/commit/" + after,
			"author": map[string]any{"name": "Ada Lovelace", "email": "ada@example.com"}},
		map[string]any{"id": sha2, "message": "older [skip ci]\n", "title": "older [skip ci]",
			"author": map[string]any{"name": "Bob", "email": "bob@example.com"}},
	}
	if after == zeros {
		commits = []any{}
	}
	return map[string]any{
		"object_kind": kind, "event_name": kind, "before": before, "after": after, "ref": ref,
		"ref_protected": true, "checkout_sha": checkout, "message": nil,
		"user_id": 4, "user_name": "Ada Lovelace", "user_username": "ada", "user_email": "",
		"project_id": 15, "project": map[string]any{
			"id": 15, "name": "r", "web_url": "https://gitlab.example.com/g/sub/r",
			"git_ssh_url": "git@gitlab.example.com:g/sub/r.git", "git_http_url": "https://gitlab.example.com/g/sub/r.git",
			"namespace": "sub", "path_with_namespace": "g/sub/r", "default_branch": "main",
		},
		"commits": commits, "total_commits_count": len(commits),
		"repository": map[string]any{"name": "r", "git_http_url": "https://gitlab.example.com/g/sub/r.git"},
	}
}

type hookCase struct {
	name    string
	header  http.Header
	body    []byte
	secret  string // "" means the const secret; "-" means none configured
	want    *Push
	wantErr error
	// ignoredPush, for a deletion, is the Push the IgnoredError carries.
	ignoredPush *Push
	field       string // PayloadError.Field wanted
}

func runHookCases(t *testing.T, f Forge, cases []hookCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			key := secret
			switch tc.secret {
			case "-":
				key = ""
			case "":
			default:
				key = tc.secret
			}
			got, err := Parse(f, key, tc.header, tc.body)
			if tc.wantErr == nil {
				if err != nil {
					t.Fatalf("Parse = %v, want nil", err)
				}
				if d := cmp.Diff(tc.want, got); d != "" {
					t.Errorf("Parse push (-want +got):\n%s", d)
				}
				return
			}
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("Parse = %v, %v; want error %v", got, err, tc.wantErr)
			}
			if got != nil {
				t.Errorf("Parse returned a push with error %v", err)
			}
			if !strings.Contains(err.Error(), string(f)) {
				t.Errorf("error %q does not name the forge %s", err, f)
			}
			// The three outcomes must stay apart: a caller answers each
			// with another HTTP status.
			for _, other := range []error{ErrSignature, ErrPayload, ErrIgnored} {
				if other != tc.wantErr && errors.Is(err, other) && !(tc.wantErr == ErrNoSignature && other == ErrSignature) {
					t.Errorf("error %v is also %v", err, other)
				}
			}
			if tc.field != "" {
				var pe *PayloadError
				if !errors.As(err, &pe) || pe.Field != tc.field {
					t.Errorf("error %v: want a PayloadError naming field %q", err, tc.field)
				} else if !strings.Contains(err.Error(), tc.field) {
					t.Errorf("error %q does not name field %q", err, tc.field)
				}
			}
			if tc.ignoredPush != nil {
				var ie *IgnoredError
				if !errors.As(err, &ie) {
					t.Fatalf("error %v is not an *IgnoredError", err)
				}
				if d := cmp.Diff(tc.ignoredPush, ie.Push); d != "" {
					t.Errorf("IgnoredError.Push (-want +got):\n%s", d)
				}
			}
		})
	}
}

func hdr(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Set(kv[i], kv[i+1])
	}
	return h
}

func TestParseGitea(t *testing.T) {
	t.Parallel()
	body := func(ref, before, after, msg string) []byte { return mustJSON(t, giteaBody(ref, before, after, msg)) }
	signed := func(event string, b []byte) http.Header {
		return hdr("X-Gitea-Event", event, "X-Gitea-Signature", sign(b, secret), "X-Gitea-Delivery", "d-1", "Content-Type", "application/json")
	}
	push := body("refs/heads/main", sha0, sha1, "Fix the frobnicator\n\nIt was broken.\n")
	want := &Push{
		Forge: Gitea, Ref: "refs/heads/main", Name: "main", Before: sha0, After: sha1,
		Message: "Fix the frobnicator\n\nIt was broken.\n", Title: "Fix the frobnicator",
		AuthorName: "Ada Lovelace", AuthorEmail: "ada@example.com", Pusher: "ada",
		Repo: "o/r", RepoURL: "https://gitea.example.com/o/r.git", DeliveryID: "d-1",
	}
	with := func(f func(*Push)) *Push { p := *want; f(&p); return &p }
	newBranch := body("refs/heads/feat", zeros, sha1, "Fix the frobnicator\n\nIt was broken.\n")
	tag := body("refs/tags/v1.2.0", zeros, sha1, "Fix the frobnicator\n\nIt was broken.\n")
	del := body("refs/heads/old", sha0, zeros, "")
	skip := body("refs/heads/main", sha0, sha1, "docs: typo [Skip CI]")
	forgejo := hdr("X-Forgejo-Event", "push", "X-Forgejo-Signature", sign(push, secret), "X-Forgejo-Delivery", "fj-1")

	runHookCases(t, Gitea, []hookCase{
		{name: "push", header: signed("push", push), body: push, want: want},
		{name: "forgejo headers", header: forgejo, body: push, want: with(func(p *Push) { p.DeliveryID = "fj-1" })},
		{name: "new branch", header: signed("push", newBranch), body: newBranch,
			want: with(func(p *Push) { p.Ref, p.Name, p.Before = "refs/heads/feat", "feat", "" })},
		{name: "tag push", header: signed("push", tag), body: tag,
			want: with(func(p *Push) { p.Ref, p.Name, p.Tag, p.Before = "refs/tags/v1.2.0", "v1.2.0", true, "" })},
		{name: "skip ci", header: signed("push", skip), body: skip,
			want: with(func(p *Push) { p.Message, p.Title = "docs: typo [Skip CI]", "docs: typo [Skip CI]" })},
		{name: "deleted branch", header: signed("push", del), body: del, wantErr: ErrIgnored,
			ignoredPush: &Push{Forge: Gitea, Ref: "refs/heads/old", Name: "old", Before: sha0, Deleted: true,
				Pusher: "ada", Repo: "o/r", RepoURL: "https://gitea.example.com/o/r.git", DeliveryID: "d-1"}},
		{name: "create event", header: signed("create", push), body: push, wantErr: ErrIgnored},
		{name: "delete event", header: signed("delete", push), body: push, wantErr: ErrIgnored},
		{name: "unknown event", header: signed("issues", push), body: push, wantErr: ErrIgnored},
		{name: "no event header", header: hdr("X-Gitea-Signature", sign(push, secret)), body: push, wantErr: ErrPayload, field: "X-Gitea-Event header"},
		{name: "wrong signature", header: hdr("X-Gitea-Event", "push", "X-Gitea-Signature", sign(push, "other")), body: push, wantErr: ErrSignature},
		{name: "signature not hex", header: hdr("X-Gitea-Event", "push", "X-Gitea-Signature", "zz"), body: push, wantErr: ErrSignature},
		{name: "sha256= prefix is not Gitea's", header: hdr("X-Gitea-Event", "push", "X-Gitea-Signature", "sha256="+sign(push, secret)), body: push, wantErr: ErrSignature},
		{name: "tampered body", header: signed("push", push), body: append([]byte(" "), push...), wantErr: ErrSignature},
		{name: "missing signature", header: hdr("X-Gitea-Event", "push"), body: push, wantErr: ErrNoSignature},
		{name: "no secret configured", header: signed("push", push), body: push, secret: "-", wantErr: ErrSignature},
		{name: "signature checked before JSON", header: hdr("X-Gitea-Event", "push", "X-Gitea-Signature", sign([]byte("{"), "x")), body: []byte("{"), wantErr: ErrSignature},
		{name: "not JSON", header: signed("push", []byte("{nope")), body: []byte("{nope"), wantErr: ErrPayload},
		{name: "after missing", header: signed("push", []byte(`{"ref":"refs/heads/main"}`)), body: []byte(`{"ref":"refs/heads/main"}`), wantErr: ErrPayload, field: "after"},
		{name: "after wrong type", header: signed("push", []byte(`{"ref":"refs/heads/main","after":7}`)), body: []byte(`{"ref":"refs/heads/main","after":7}`), wantErr: ErrPayload, field: "after"},
		{name: "after not a sha", header: signed("push", []byte(`{"ref":"refs/heads/main","after":"HEAD"}`)), body: []byte(`{"ref":"refs/heads/main","after":"HEAD"}`), wantErr: ErrPayload, field: "after"},
		{name: "head_commit wrong type", header: signed("push", []byte(`{"ref":"refs/heads/main","after":"`+sha1+`","head_commit":[]}`)),
			body: []byte(`{"ref":"refs/heads/main","after":"` + sha1 + `","head_commit":[]}`), wantErr: ErrPayload, field: "head_commit"},
		{name: "ref missing", header: signed("push", []byte(`{"after":"`+sha1+`"}`)), body: []byte(`{"after":"` + sha1 + `"}`), wantErr: ErrPayload, field: "ref"},
		{name: "notes ref", header: signed("push", body("refs/notes/commits", sha0, sha1, "")), body: body("refs/notes/commits", sha0, sha1, ""), wantErr: ErrIgnored},
	})
}

func TestParseGitHub(t *testing.T) {
	t.Parallel()
	body := func(ref, before, after, msg string) []byte { return mustJSON(t, githubBody(ref, before, after, msg)) }
	signed := func(event string, b []byte) http.Header {
		return hdr("X-GitHub-Event", event, "X-Hub-Signature-256", "sha256="+sign(b, secret),
			"X-Hub-Signature", "sha1=ignored", "X-GitHub-Delivery", "72d3162e-cc78-11e3-81ab-4c9367dc0958")
	}
	push := body("refs/heads/release/1.x", sha0, strings.ToUpper(sha1), "Bump version")
	want := &Push{
		Forge: GitHub, Ref: "refs/heads/release/1.x", Name: "release/1.x", Before: sha0, After: sha1,
		Message: "Bump version", Title: "Bump version", AuthorName: "Ada Lovelace", AuthorEmail: "ada@example.com",
		Pusher: "ada", Repo: "o/r", RepoURL: "https://github.com/o/r.git", DeliveryID: "72d3162e-cc78-11e3-81ab-4c9367dc0958",
	}
	with := func(f func(*Push)) *Push { p := *want; f(&p); return &p }
	// An annotated tag: after is the tag object, head_commit the commit.
	tagBody := githubBody("refs/tags/v2", zeros, sha2, "Bump version")
	tagBody["head_commit"].(map[string]any)["id"] = sha1
	tag := mustJSON(t, tagBody)
	newBranch := body("refs/heads/feat", zeros, sha1, "Bump version")
	delBody := githubBody("refs/heads/gone", sha0, zeros, "")
	delBody["head_commit"] = nil
	delBody["commits"] = []any{}
	del := mustJSON(t, delBody)
	skip := body("refs/heads/main", sha0, sha1, "Update README\n\n[ci-skip]")
	noskip := body("refs/heads/main", sha0, sha1, "ci skip, not in brackets")
	ping := []byte(`{"zen":"Encourage flow.","hook_id":2472869,"hook":{"type":"Repository","events":["push"]}}`)

	runHookCases(t, GitHub, []hookCase{
		{name: "push", header: signed("push", push), body: push, want: want},
		{name: "annotated tag builds the commit", header: signed("push", tag), body: tag,
			want: with(func(p *Push) { p.Ref, p.Name, p.Tag, p.Before = "refs/tags/v2", "v2", true, "" })},
		{name: "new branch", header: signed("push", newBranch), body: newBranch,
			want: with(func(p *Push) { p.Ref, p.Name, p.Before = "refs/heads/feat", "feat", "" })},
		{name: "skip ci", header: signed("push", skip), body: skip,
			want: with(func(p *Push) {
				p.Ref, p.Name, p.Message, p.Title = "refs/heads/main", "main", "Update README\n\n[ci-skip]", "Update README"
			})},
		{name: "no skip without brackets", header: signed("push", noskip), body: noskip,
			want: with(func(p *Push) {
				p.Ref, p.Name, p.Message, p.Title = "refs/heads/main", "main", "ci skip, not in brackets", "ci skip, not in brackets"
			})},
		{name: "deleted branch", header: signed("push", del), body: del, wantErr: ErrIgnored,
			ignoredPush: &Push{Forge: GitHub, Ref: "refs/heads/gone", Name: "gone", Before: sha0, Deleted: true,
				Pusher: "ada", Repo: "o/r", RepoURL: "https://github.com/o/r.git", DeliveryID: "72d3162e-cc78-11e3-81ab-4c9367dc0958"}},
		{name: "ping", header: signed("ping", ping), body: ping, wantErr: ErrIgnored},
		{name: "unknown event", header: signed("pull_request", push), body: push, wantErr: ErrIgnored},
		{name: "wrong signature", header: hdr("X-GitHub-Event", "push", "X-Hub-Signature-256", "sha256="+sign(push, "nope")), body: push, wantErr: ErrSignature},
		{name: "signature without prefix", header: hdr("X-GitHub-Event", "push", "X-Hub-Signature-256", sign(push, secret)), body: push, wantErr: ErrSignature},
		{name: "only sha1 signature", header: hdr("X-GitHub-Event", "push", "X-Hub-Signature", "sha1=abc"), body: push, wantErr: ErrNoSignature},
		{name: "missing signature", header: hdr("X-GitHub-Event", "push"), body: push, wantErr: ErrNoSignature},
		{name: "ping with wrong signature", header: hdr("X-GitHub-Event", "ping", "X-Hub-Signature-256", "sha256="+sign(ping, "nope")), body: ping, wantErr: ErrSignature},
		{name: "no secret configured", header: signed("push", push), body: push, secret: "-", wantErr: ErrSignature},
		{name: "array body", header: signed("push", []byte(`[]`)), body: []byte(`[]`), wantErr: ErrPayload},
		{name: "deleted wrong type", header: signed("push", []byte(`{"deleted":"yes"}`)), body: []byte(`{"deleted":"yes"}`), wantErr: ErrPayload, field: "deleted"},
	})
}

func TestParseGitLab(t *testing.T) {
	t.Parallel()
	body := func(kind, ref, before, after, msg string) []byte {
		return mustJSON(t, gitlabBody(kind, ref, before, after, msg))
	}
	h := func(event, token string) http.Header {
		return hdr("X-Gitlab-Event", event, "X-Gitlab-Token", token, "X-Gitlab-Event-UUID", "uuid-1",
			"X-Gitlab-Instance", "https://gitlab.example.com")
	}
	push := body("push", "refs/heads/main", sha0, sha1, "Merge branch 'x'\n\nSee merge request g/sub/r!1")
	want := &Push{
		Forge: GitLab, Ref: "refs/heads/main", Name: "main", Before: sha0, After: sha1,
		Message: "Merge branch 'x'\n\nSee merge request g/sub/r!1", Title: "Merge branch 'x'",
		AuthorName: "Ada Lovelace", AuthorEmail: "ada@example.com", Pusher: "ada",
		Repo: "g/sub/r", RepoURL: "https://gitlab.example.com/g/sub/r.git", DeliveryID: "uuid-1",
	}
	with := func(f func(*Push)) *Push { p := *want; f(&p); return &p }
	idem := h("Push Hook", secret)
	idem.Set("Idempotency-Key", "idem-7")
	// A tag push: after is the tag object, checkout_sha the commit; no
	// commits are listed.
	tagBody := gitlabBody("tag_push", "refs/tags/v3", zeros, sha2, "")
	tagBody["checkout_sha"] = sha1
	tagBody["commits"] = []any{}
	tagBody["message"] = "Release 3"
	tag := mustJSON(t, tagBody)
	newBranch := body("push", "refs/heads/feat", zeros, sha1, "wip [CI SKIP]")
	del := body("push", "refs/heads/old", sha0, zeros, "")

	runHookCases(t, GitLab, []hookCase{
		{name: "push", header: h("Push Hook", secret), body: push, want: want},
		{name: "idempotency key preferred", header: idem, body: push, want: with(func(p *Push) { p.DeliveryID = "idem-7" })},
		{name: "tag push", header: h("Tag Push Hook", secret), body: tag, want: &Push{
			Forge: GitLab, Ref: "refs/tags/v3", Name: "v3", Tag: true, After: sha1, Pusher: "ada",
			Repo: "g/sub/r", RepoURL: "https://gitlab.example.com/g/sub/r.git", DeliveryID: "uuid-1"}},
		{name: "new branch with skip ci", header: h("Push Hook", secret), body: newBranch,
			want: with(func(p *Push) {
				p.Ref, p.Name, p.Before, p.Message, p.Title = "refs/heads/feat", "feat", "", "wip [CI SKIP]", "wip [CI SKIP]"
			})},
		{name: "deleted branch", header: h("Push Hook", secret), body: del, wantErr: ErrIgnored,
			ignoredPush: &Push{Forge: GitLab, Ref: "refs/heads/old", Name: "old", Before: sha0, Deleted: true,
				Pusher: "ada", Repo: "g/sub/r", RepoURL: "https://gitlab.example.com/g/sub/r.git", DeliveryID: "uuid-1"}},
		{name: "unknown event", header: h("Merge Request Hook", secret), body: push, wantErr: ErrIgnored},
		{name: "wrong token", header: h("Push Hook", "s3creT"), body: push, wantErr: ErrSignature},
		{name: "token prefix", header: h("Push Hook", "s3cre"), body: push, wantErr: ErrSignature},
		{name: "missing token", header: hdr("X-Gitlab-Event", "Push Hook"), body: push, wantErr: ErrNoSignature},
		{name: "no secret configured", header: h("Push Hook", ""), body: push, secret: "-", wantErr: ErrSignature},
		{name: "token checked before JSON", header: h("Push Hook", "x"), body: []byte("garbage"), wantErr: ErrSignature},
		{name: "no event header", header: hdr("X-Gitlab-Token", secret), body: push, wantErr: ErrPayload, field: "X-Gitlab-Event header"},
		{name: "commits wrong type", header: h("Push Hook", secret), body: []byte(`{"ref":"refs/heads/a","after":"` + sha1 + `","commits":{}}`), wantErr: ErrPayload, field: "commits"},
	})
}

func TestParseGeneric(t *testing.T) {
	t.Parallel()
	push := mustJSON(t, GenericPush{Ref: "refs/heads/main", Before: zeros, After: sha1,
		Message: "hello\n\nworld", AuthorName: "Ada", AuthorEmail: "ada@example.com",
		DeliveryID: "body-id", RepoURL: "https://git.example.com/o/r.git"})
	want := &Push{Forge: Generic, Ref: "refs/heads/main", Name: "main", After: sha1,
		Message: "hello\n\nworld", Title: "hello", AuthorName: "Ada", AuthorEmail: "ada@example.com",
		RepoURL: "https://git.example.com/o/r.git", DeliveryID: "body-id"}
	with := func(f func(*Push)) *Push { p := *want; f(&p); return &p }
	tag := mustJSON(t, GenericPush{Ref: "refs/tags/v1", After: sha1})
	del := mustJSON(t, GenericPush{Ref: "refs/tags/v1", Before: sha1, After: zeros})
	skip := mustJSON(t, GenericPush{Ref: "refs/heads/x", Before: sha0, After: sha1, Message: "[skip_ci] later"})

	runHookCases(t, Generic, []hookCase{
		{name: "push", header: hdr("Authorization", "Bearer "+secret), body: push, want: want},
		{name: "header delivery id wins", header: hdr("Authorization", "bearer "+secret, "X-Drover-Delivery", "hdr-id"), body: push,
			want: with(func(p *Push) { p.DeliveryID = "hdr-id" })},
		{name: "tag", header: hdr("Authorization", "Bearer "+secret), body: tag,
			want: &Push{Forge: Generic, Ref: "refs/tags/v1", Name: "v1", Tag: true, After: sha1}},
		{name: "skip ci", header: hdr("Authorization", "Bearer "+secret), body: skip,
			want: &Push{Forge: Generic, Ref: "refs/heads/x", Name: "x", Before: sha0, After: sha1, Message: "[skip_ci] later", Title: "[skip_ci] later"}},
		{name: "deleted tag", header: hdr("Authorization", "Bearer "+secret), body: del, wantErr: ErrIgnored,
			ignoredPush: &Push{Forge: Generic, Ref: "refs/tags/v1", Name: "v1", Tag: true, Before: sha1, Deleted: true}},
		{name: "wrong token", header: hdr("Authorization", "Bearer nope"), body: push, wantErr: ErrSignature},
		{name: "basic auth", header: hdr("Authorization", "Basic "+secret), body: push, wantErr: ErrNoSignature},
		{name: "missing token", header: hdr(), body: push, wantErr: ErrNoSignature},
		{name: "no secret configured", header: hdr("Authorization", "Bearer "), body: push, secret: "-", wantErr: ErrSignature},
		{name: "empty body", header: hdr("Authorization", "Bearer "+secret), body: nil, wantErr: ErrPayload},
		{name: "ref not a string", header: hdr("Authorization", "Bearer "+secret), body: []byte(`{"ref":1}`), wantErr: ErrPayload, field: "ref"},
		{name: "bare refs/heads/", header: hdr("Authorization", "Bearer "+secret), body: []byte(`{"ref":"refs/heads/","after":"` + sha1 + `"}`), wantErr: ErrPayload, field: "ref"},
		{name: "before not a sha", header: hdr("Authorization", "Bearer "+secret), body: []byte(`{"ref":"refs/heads/a","before":"x","after":"` + sha1 + `"}`), wantErr: ErrPayload, field: "before"},
	})
}

func TestSkipCI(t *testing.T) {
	t.Parallel()
	for msg, want := range map[string]bool{
		"[skip ci]":                    true,
		"[ci skip]":                    true,
		"fix\n\n[SKIP CI]":             true,
		"[Ci Skip] docs":               true,
		"[skip-ci]":                    true,
		"[ci_skip]":                    true,
		"skip ci":                      false,
		"[skip  ci]":                   false,
		"[skipci]":                     false,
		"(skip ci)":                    false,
		"[ci skip":                     false,
		"":                             false,
		"a long message without marks": false,
	} {
		if got := SkipCI(msg); got != want {
			t.Errorf("SkipCI(%q) = %v, want %v", msg, got, want)
		}
	}
}

func TestTitle(t *testing.T) {
	t.Parallel()
	for msg, want := range map[string]string{
		"one":               "one",
		"  two  \n\nbody":   "two",
		"\r\nthree\r\nbody": "three",
		"":                  "",
	} {
		if got := Title(msg); got != want {
			t.Errorf("Title(%q) = %q, want %q", msg, got, want)
		}
	}
}

func TestDetect(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		h    http.Header
		want Forge
	}{
		// Gitea sends GitHub's headers too: its own must win.
		{hdr("X-Gitea-Event", "push", "X-GitHub-Event", "push", "X-Gogs-Event", "push"), Gitea},
		{hdr("X-Forgejo-Event", "push", "X-GitHub-Event", "push"), Gitea},
		{hdr("X-GitHub-Event", "push"), GitHub},
		{hdr("X-Gitlab-Event", "Push Hook"), GitLab},
		{hdr("Authorization", "Bearer x"), Generic},
		{hdr("Content-Type", "application/json"), ""},
	} {
		if got := Detect(tc.h); got != tc.want {
			t.Errorf("Detect(%v) = %q, want %q", tc.h, got, tc.want)
		}
	}
}

func TestParseForge(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]Forge{"gitea": Gitea, "Forgejo": Gitea, "github": GitHub, " gitlab ": GitLab, "generic": Generic} {
		if got, err := ParseForge(in); err != nil || got != want {
			t.Errorf("ParseForge(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := ParseForge("bitbucket"); err == nil {
		t.Error("ParseForge(bitbucket) = nil error")
	}
	if _, err := Parse("bitbucket", secret, hdr(), []byte("{}")); err == nil || errors.Is(err, ErrPayload) || errors.Is(err, ErrSignature) {
		t.Errorf("Parse(bitbucket) = %v, want a plain error", err)
	}
}
