package forge

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// Forge names a forge's webhook and status dialect.
type Forge string

// The forges this package speaks to.
const (
	// Gitea is Gitea and Forgejo: Forgejo kept Gitea's payloads and API.
	Gitea Forge = "gitea"
	// GitHub is github.com and GitHub Enterprise Server.
	GitHub Forge = "github"
	// GitLab is gitlab.com and self-managed GitLab.
	GitLab Forge = "gitlab"
	// Generic is drover's own webhook format (see GenericPush), for
	// scripts and forges without a dialect of their own here.
	Generic Forge = "generic"
)

// ParseForge returns the Forge named s; "forgejo" is Gitea.
func ParseForge(s string) (Forge, error) {
	switch f := Forge(strings.ToLower(strings.TrimSpace(s))); f {
	case Gitea, GitHub, GitLab, Generic:
		return f, nil
	case "forgejo":
		return Gitea, nil
	}
	return "", fmt.Errorf("forge: unknown forge %q (want gitea, forgejo, github, gitlab or generic)", s)
}

// Push is one push of a branch or a tag, the same for every forge.
type Push struct {
	Forge Forge
	// Ref is the full ref: refs/heads/<branch> or refs/tags/<tag>.
	Ref string
	// Name is the branch or tag name (Ref without its prefix); Tag says
	// which.
	Name string
	Tag  bool
	// Before is the commit the ref pointed at before the push, "" when
	// the push created the ref (the forge sent all zeros).
	Before string
	// After is the commit the ref points at now, lower-case hex. For an
	// annotated tag it is the tagged commit when the forge reports it
	// (GitHub's and Gitea's head_commit, GitLab's checkout_sha), not the
	// tag object.
	After string
	// Deleted is true when the push deleted the ref. Parse reports such
	// pushes as an IgnoredError carrying the Push, never as a *Push.
	Deleted bool
	// Message is the head commit's full message and Title its first
	// line; AuthorName and AuthorEmail are the head commit's author. All
	// are "" when the payload does not carry the head commit (GitLab's tag
	// pushes, for example).
	Message     string
	Title       string
	AuthorName  string
	AuthorEmail string
	// Pusher is the forge user who pushed (login or username).
	Pusher string
	// Repo is the repository's path on the forge: owner/name, or GitLab's
	// path_with_namespace. "" for Generic.
	Repo string
	// RepoURL is the repository's HTTP(S) clone URL.
	RepoURL string
	// DeliveryID identifies the delivery, for deduplicating redeliveries
	// and for logs. It may be "".
	DeliveryID string
}

// SkipCI reports whether the head commit's message asks not to run CI.
func (p *Push) SkipCI() bool { return SkipCI(p.Message) }

// skipPattern is GitLab's own test (Gitlab::Ci::Pipeline::Chain::Skip):
// "[ci skip]" or "[skip ci]" anywhere in the message, in any case, with a
// space, '_' or '-' between the words.
var skipPattern = regexp.MustCompile(`(?i)\[(ci[ _-]skip|skip[ _-]ci)\]`)

// SkipCI reports whether a commit message asks not to run a pipeline, as
// GitLab decides it: it contains "[ci skip]" or "[skip ci]" in any case,
// the words joined by a space, '_' or '-'.
func SkipCI(message string) bool { return skipPattern.MatchString(message) }

// Title returns the first line of a commit message, trimmed.
func Title(message string) string {
	message = strings.TrimLeft(message, "\r\n")
	if i := strings.IndexAny(message, "\r\n"); i >= 0 {
		message = message[:i]
	}
	return strings.TrimSpace(message)
}

// ErrSignature means the delivery is not authenticated: the signature or
// token is missing or does not match the secret, or no secret is
// configured. Answer 401. Every such error wraps ErrSignature; the ones
// for a missing signature wrap ErrNoSignature too.
var ErrSignature = errors.New("webhook signature or token does not match the secret")

// ErrNoSignature means the delivery carries no signature or token at all,
// usually a webhook configured without its secret. It is an ErrSignature.
var ErrNoSignature error = noSignature{}

type noSignature struct{}

func (noSignature) Error() string        { return "webhook carries no signature or token" }
func (noSignature) Is(target error) bool { return target == ErrSignature }

// ErrPayload means the delivery is malformed: not JSON, a required field
// missing or of the wrong shape, or a required header missing. Answer
// 400. Every such error is a *PayloadError.
var ErrPayload = errors.New("malformed webhook payload")

// PayloadError says which field of a delivery is malformed.
type PayloadError struct {
	Forge Forge
	// Field is the JSON field ("after", "head_commit.id") or the header
	// ("X-Gitea-Event header").
	Field  string
	Reason string
}

func (e *PayloadError) Error() string {
	if e.Field == "" {
		return fmt.Sprintf("%s: %v: %s", e.Forge, ErrPayload, e.Reason)
	}
	return fmt.Sprintf("%s: %v: %s: %s", e.Forge, ErrPayload, e.Field, e.Reason)
}

// Is makes errors.Is(err, ErrPayload) true.
func (e *PayloadError) Is(target error) bool { return target == ErrPayload }

// ErrIgnored means the delivery is authentic and well formed but starts
// nothing: a ping, an event other than a push, a push of a ref that is
// neither a branch nor a tag, or a deletion. Answer 200 or 202. Every
// such error is an *IgnoredError.
var ErrIgnored = errors.New("webhook event ignored")

// IgnoredError is an authentic delivery that starts nothing, and why.
type IgnoredError struct {
	Forge Forge
	// Event is the forge's event name (X-GitHub-Event and so on).
	Event      string
	Reason     string
	DeliveryID string
	// Push is the deletion, for a push that deleted a branch or tag (so
	// the caller may cancel that ref's pipelines); nil otherwise.
	Push *Push
}

func (e *IgnoredError) Error() string {
	return fmt.Sprintf("%s: %v: %s", e.Forge, ErrIgnored, e.Reason)
}

// Is makes errors.Is(err, ErrIgnored) true.
func (e *IgnoredError) Is(target error) bool { return target == ErrIgnored }

// rawPush is what a dialect's parser extracts, before the checks and
// normalisation every forge shares.
type rawPush struct {
	event      string
	ref        string
	before     string
	after      string
	deleted    bool
	headID     string // the head commit as the forge reports it, may be ""
	message    string
	authorName string
	authorMail string
	pusher     string
	repo       string
	repoURL    string
	deliveryID string
}

func (r *rawPush) normalize(f Forge) (*Push, error) {
	bad := func(field, reason string) error { return &PayloadError{Forge: f, Field: field, Reason: reason} }
	if r.ref == "" {
		return nil, bad("ref", "missing")
	}
	if r.after == "" {
		return nil, bad("after", "missing")
	}
	if !isSHA(r.after) {
		return nil, bad("after", fmt.Sprintf("%q is not a hex commit SHA", clip(r.after)))
	}
	if r.before != "" && !isSHA(r.before) {
		return nil, bad("before", fmt.Sprintf("%q is not a hex commit SHA", clip(r.before)))
	}
	p := &Push{
		Forge:       f,
		Ref:         r.ref,
		Before:      strings.ToLower(r.before),
		After:       strings.ToLower(r.after),
		Deleted:     r.deleted || isZeroSHA(r.after),
		Message:     r.message,
		Title:       Title(r.message),
		AuthorName:  r.authorName,
		AuthorEmail: r.authorMail,
		Pusher:      r.pusher,
		Repo:        r.repo,
		RepoURL:     r.repoURL,
		DeliveryID:  r.deliveryID,
	}
	if isZeroSHA(p.Before) {
		p.Before = ""
	}
	ignored := func(reason string, push *Push) error {
		return &IgnoredError{Forge: f, Event: r.event, Reason: reason, DeliveryID: r.deliveryID, Push: push}
	}
	switch {
	case strings.HasPrefix(r.ref, "refs/heads/"):
		p.Name = strings.TrimPrefix(r.ref, "refs/heads/")
	case strings.HasPrefix(r.ref, "refs/tags/"):
		p.Name, p.Tag = strings.TrimPrefix(r.ref, "refs/tags/"), true
	default:
		return nil, ignored(fmt.Sprintf("ref %q is neither a branch nor a tag", clip(r.ref)), nil)
	}
	if p.Name == "" {
		return nil, bad("ref", fmt.Sprintf("%q names no branch or tag", r.ref))
	}
	if p.Deleted {
		p.After = ""
		what := "branch"
		if p.Tag {
			what = "tag"
		}
		return nil, ignored(fmt.Sprintf("push deleted %s %q", what, p.Name), p)
	}
	if p.Tag && r.headID != "" && isSHA(r.headID) && !isZeroSHA(r.headID) {
		p.After = strings.ToLower(r.headID)
	}
	return p, nil
}

// isSHA reports whether s is a SHA-1 or SHA-256 object name in hex.
func isSHA(s string) bool {
	if len(s) != 40 && len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}

// isZeroSHA reports whether s is the all-zeros name forges send for "no
// commit" (a created ref's before, a deleted ref's after).
func isZeroSHA(s string) bool {
	return s != "" && strings.Trim(s, "0") == ""
}

// clip shortens outside input quoted in an error.
func clip(s string) string {
	const max = 80
	if len(s) <= max {
		return s
	}
	return s[:max] + "…"
}
