package forge

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
)

// Parse authenticates one webhook delivery of forge f and returns the push
// it reports. h is the request's header and body its raw body, read
// whole; bounding its size (http.MaxBytesReader) is the caller's job.
// secret is the webhook's shared secret; an empty secret authenticates
// nothing.
//
// The signature or token is checked before the body is parsed. Errors:
// ErrSignature (answer 401), *PayloadError / ErrPayload (400),
// *IgnoredError / ErrIgnored (200 or 202, start nothing). Any other
// error means f is unknown.
func Parse(f Forge, secret string, h http.Header, body []byte) (*Push, error) {
	switch f {
	case Gitea:
		return parseGitea(secret, h, body)
	case GitHub:
		return parseGitHub(secret, h, body)
	case GitLab:
		return parseGitLab(secret, h, body)
	case Generic:
		return parseGeneric(secret, h, body)
	}
	return nil, fmt.Errorf("forge: unknown forge %q", f)
}

// Detect guesses which forge sent a delivery from its headers, for an
// endpoint shared by several forges; "" when none fits. Gitea and Forgejo
// also send X-GitHub-Event, so their own headers are looked at first.
// Detect authenticates nothing: pass its answer to Parse with the secret
// configured for that forge.
func Detect(h http.Header) Forge {
	switch {
	case h.Get("X-Forgejo-Event") != "" || h.Get("X-Gitea-Event") != "":
		return Gitea
	case h.Get("X-Gitlab-Event") != "":
		return GitLab
	case h.Get("X-GitHub-Event") != "":
		return GitHub
	case h.Get("X-Drover-Delivery") != "" || strings.HasPrefix(h.Get("Authorization"), "Bearer "):
		return Generic
	}
	return ""
}

// firstHeader returns the first of names that h has a non-empty value for.
func firstHeader(h http.Header, names ...string) (name, value string) {
	for _, n := range names {
		if v := strings.TrimSpace(h.Get(n)); v != "" {
			return n, v
		}
	}
	return "", ""
}

// requireSig fails when no secret is configured or nothing was sent in
// header.
func requireSig(f Forge, secret, header, sent string) error {
	if secret == "" {
		return fmt.Errorf("%s: %w: no webhook secret is configured", f, ErrSignature)
	}
	if sent == "" {
		return fmt.Errorf("%s: %w (no %s)", f, ErrNoSignature, header)
	}
	return nil
}

// checkHMAC verifies that sigHex is the hex HMAC-SHA256 of body keyed with
// secret, in constant time.
func checkHMAC(f Forge, secret, header, sigHex string, body []byte) error {
	if err := requireSig(f, secret, header, sigHex); err != nil {
		return err
	}
	got, err := hex.DecodeString(sigHex)
	if err != nil || len(got) != sha256.Size {
		return fmt.Errorf("%s: %w: %s is not a hex HMAC-SHA256", f, ErrSignature, header)
	}
	m := hmac.New(sha256.New, []byte(secret))
	m.Write(body)
	if !hmac.Equal(got, m.Sum(nil)) {
		return fmt.Errorf("%s: %w: %s is not the HMAC-SHA256 of the body with the secret", f, ErrSignature, header)
	}
	return nil
}

// checkToken compares a token sent in a header with the secret in
// constant time (for lengths up to the longer one).
func checkToken(f Forge, secret, header, token string) error {
	if err := requireSig(f, secret, header, token); err != nil {
		return err
	}
	if subtle.ConstantTimeCompare([]byte(token), []byte(secret)) != 1 {
		return fmt.Errorf("%s: %w: %s differs from the secret", f, ErrSignature, header)
	}
	return nil
}

// decode unmarshals a JSON object into v, turning decoder errors into a
// *PayloadError that names the field.
func decode(f Forge, body []byte, v any) error {
	body = bytes.TrimSpace(body)
	if len(body) == 0 {
		return &PayloadError{Forge: f, Reason: "empty body"}
	}
	if body[0] != '{' {
		return &PayloadError{Forge: f, Reason: "body is not a JSON object"}
	}
	err := json.Unmarshal(body, v)
	if err == nil {
		return nil
	}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		field := te.Field
		if field == "" {
			field = "(top level)"
		}
		return &PayloadError{Forge: f, Field: field, Reason: fmt.Sprintf("JSON %s where %s is expected", te.Value, te.Type)}
	}
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return &PayloadError{Forge: f, Reason: fmt.Sprintf("body is not valid JSON at byte %d: %v", se.Offset, err)}
	}
	return &PayloadError{Forge: f, Reason: "body is not valid JSON: " + err.Error()}
}

// commit is a commit as GitHub and Gitea describe it in push payloads
// (GitLab's differs only in having no username).
type commit struct {
	ID      string `json:"id"`
	Message string `json:"message"`
	Author  struct {
		Name  string `json:"name"`
		Email string `json:"email"`
	} `json:"author"`
}

// headCommit returns head when the forge sent one, else the commit of
// commits whose id is after (forges differ in their order), else nil.
func headCommit(head *commit, commits []commit, after string) *commit {
	if head != nil && head.ID != "" && !isZeroSHA(head.ID) {
		return head
	}
	for i := range commits {
		if after != "" && !isZeroSHA(after) && strings.EqualFold(commits[i].ID, after) {
			return &commits[i]
		}
	}
	return nil
}

func (r *rawPush) setHead(c *commit) {
	if c == nil {
		return
	}
	r.headID, r.message, r.authorName, r.authorMail = c.ID, c.Message, c.Author.Name, c.Author.Email
}
