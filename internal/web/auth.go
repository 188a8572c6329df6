package web

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/drover-ci/drover/internal/clock"
	"github.com/drover-ci/drover/internal/httpserver"
)

// Authentication.
//
// The pages have two kinds of user: whoever holds the admin token, and,
// when the coordinator has one, whoever holds the viewer token, who sees
// every page but can take no action (cancel, retry, pause, delete). A
// request is authenticated by a token itself (Authorization: Bearer, for
// scripts and tests) or by a session cookie that /login gives for it.
//
// Sessions are not stored: the cookie is an expiry time, the role and a
// random nonce, signed with an HMAC keyed by the admin token. Every coordinator
// with the same token accepts it, a coordinator restart keeps it, and a
// new admin token ends every session. A session cannot be revoked before
// it expires other than by changing the token: logout only drops the
// browser's cookie.
//
// Every POST of a session carries a CSRF token, an HMAC of the session
// value, in its form (field csrf); the cookie is SameSite=Strict besides.
// A request with the bearer token needs none: a browser never adds that
// header on its own. The login form is protected the same way by a
// random value in a cookie of its own and in the form (double submit).

const (
	sessionCookie = "drover_session"
	loginCookie   = "drover_login"
	// sessionTTL is how long a session lasts.
	sessionTTL = 12 * time.Hour
	csrfField  = "csrf"
)

type auth struct {
	token  string
	viewer string // "" = no viewer token
	clock  clock.Clock
}

// Roles, as a session cookie records them.
const (
	roleAdmin  = "a"
	roleViewer = "v"
)

func (a *auth) mac(parts ...string) string {
	m := hmac.New(sha256.New, []byte(a.token))
	m.Write([]byte("drover web"))
	for _, p := range parts {
		m.Write([]byte{0})
		m.Write([]byte(p))
	}
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// tokenOK reports whether tok is the admin token (constant time).
func (a *auth) tokenOK(tok string) bool {
	return tok != "" && subtle.ConstantTimeCompare([]byte(tok), []byte(a.token)) == 1
}

// role returns the role tok signs in as: roleAdmin, roleViewer, or "".
func (a *auth) role(tok string) string {
	switch {
	case a.tokenOK(tok):
		return roleAdmin
	case tok != "" && a.viewer != "" && subtle.ConstantTimeCompare([]byte(tok), []byte(a.viewer)) == 1:
		return roleViewer
	}
	return ""
}

// newSession returns the value of a new session cookie for role.
func (a *auth) newSession(role string) string {
	exp := strconv.FormatInt(a.clock.Now().Add(sessionTTL).Unix(), 10)
	nonce := randomString()
	return exp + "." + role + "." + nonce + "." + a.mac("session", exp, role, nonce)
}

// session returns the role of session cookie v, or "" when this token did
// not sign it, it has expired, or its role is one the coordinator no
// longer has (a viewer session once the viewer token is gone).
func (a *auth) session(v string) string {
	parts := strings.Split(v, ".")
	if len(parts) != 4 {
		return ""
	}
	exp, role, nonce, sig := parts[0], parts[1], parts[2], parts[3]
	want := a.mac("session", exp, role, nonce)
	if subtle.ConstantTimeCompare([]byte(sig), []byte(want)) != 1 {
		return ""
	}
	if n, err := strconv.ParseInt(exp, 10, 64); err != nil || a.clock.Now().Unix() >= n {
		return ""
	}
	if role == roleAdmin || role == roleViewer && a.viewer != "" {
		return role
	}
	return ""
}

// csrf is the CSRF token of session value v.
func (a *auth) csrf(session string) string { return a.mac("csrf", session) }

// credentials is how a request authenticated.
type credentials struct {
	ok bool
	// admin is set for the admin token and its sessions; a viewer's
	// requests are ok but not admin.
	admin bool
	// bad is set when the request carried a bearer token that is wrong.
	bad bool
	// session is the session cookie's value; "" when the request came
	// with the bearer token (it needs no CSRF token).
	session string
}

func (a *auth) check(r *http.Request) credentials {
	if h := r.Header.Get("Authorization"); h != "" {
		tok, found := strings.CutPrefix(h, "Bearer ")
		if role := a.role(tok); found && role != "" {
			return credentials{ok: true, admin: role == roleAdmin}
		}
		return credentials{bad: true}
	}
	if c, err := r.Cookie(sessionCookie); err == nil {
		if role := a.session(c.Value); role != "" {
			return credentials{ok: true, admin: role == roleAdmin, session: c.Value}
		}
	}
	return credentials{}
}

// csrfOK reports whether the form of a POST carries the CSRF token of
// cr's session (a bearer request needs none).
func (a *auth) csrfOK(r *http.Request, cr credentials) bool {
	if cr.session == "" {
		return true
	}
	got := r.PostFormValue(csrfField)
	return got != "" && subtle.ConstantTimeCompare([]byte(got), []byte(a.csrf(cr.session))) == 1
}

// setCookie sets an HttpOnly, SameSite=Strict cookie for the whole site,
// Secure when the browser reached the site over HTTPS: the request came
// over TLS, or from a trusted proxy that says so (httpserver.IsHTTPS; the
// daemon names its proxies); maxAge < 0 deletes it.
func setCookie(w http.ResponseWriter, r *http.Request, name, value string, maxAge time.Duration) {
	c := &http.Cookie{
		Name: name, Value: value, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode,
		Secure: httpserver.IsHTTPS(r), MaxAge: int(maxAge.Seconds()),
	}
	if maxAge < 0 {
		c.MaxAge = -1
	}
	http.SetCookie(w, c)
}

// safeNext returns next if it is a path on this site (it starts with one
// slash, has no scheme, host or control character); ok is false
// otherwise. "" is "/jobs".
func safeNext(next string) (string, bool) {
	if next == "" {
		return "/jobs", true
	}
	if !strings.HasPrefix(next, "/") || strings.HasPrefix(next, "//") || strings.HasPrefix(next, `/\`) {
		return "", false
	}
	for _, c := range next {
		if c < 0x20 || c == 0x7f || c == '\\' {
			return "", false
		}
	}
	u, err := url.Parse(next)
	if err != nil || u.Scheme != "" || u.Host != "" || u.User != nil {
		return "", false
	}
	return next, true
}

func randomString() string {
	b := make([]byte, 18)
	rand.Read(b) // never fails (crypto/rand)
	return base64.RawURLEncoding.EncodeToString(b)
}
