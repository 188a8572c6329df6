package web

import (
	"context"
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
//
// A project token (Config.ProjectTokens) signs in too: its session is
// limited to the token's project (another project's pages are 404, the
// lists show the project's only), with the actions on its pipelines and
// jobs for a maintainer's token. Its cookie names the token's id: each
// request checks that the token still exists and has not expired, so that
// revoking the token ends its sessions.

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
	tokens ProjectTokens // nil = no project tokens
}

// Roles, as a session cookie records them.
const (
	roleAdmin  = "a"
	roleViewer = "v"
	// roleToken is followed by a project token's id: "t12".
	roleToken = "t"
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

// role returns the role tok signs in as: roleAdmin, roleViewer, a
// project token's roleToken+id, or "".
func (a *auth) role(ctx context.Context, tok string) string {
	switch {
	case a.tokenOK(tok):
		return roleAdmin
	case tok != "" && a.viewer != "" && subtle.ConstantTimeCompare([]byte(tok), []byte(a.viewer)) == 1:
		return roleViewer
	case a.tokens != nil && strings.HasPrefix(tok, ProjectTokenPrefix):
		if m, err := a.tokens.ProjectToken(ctx, tok); err == nil {
			return roleToken + strconv.FormatInt(m.TokenID, 10)
		}
	}
	return ""
}

// credentials returns the credentials of role (as role or session
// returned it); ok is false for a project token that is no more.
func (a *auth) credentials(ctx context.Context, role string) (credentials, bool) {
	switch role {
	case roleAdmin:
		return credentials{ok: true, admin: true, who: "admin"}, true
	case roleViewer:
		return credentials{ok: true, who: "viewer"}, true
	}
	idText, found := strings.CutPrefix(role, roleToken)
	id, err := strconv.ParseInt(idText, 10, 64)
	if !found || err != nil || a.tokens == nil {
		return credentials{}, false
	}
	m, err := a.tokens.ProjectTokenByID(ctx, id)
	if err != nil {
		return credentials{}, false
	}
	return credentials{ok: true, project: m.Project, maintainer: m.Maintainer, who: m.Name}, true
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
	if role == roleAdmin || role == roleViewer && a.viewer != "" || strings.HasPrefix(role, roleToken) && a.tokens != nil {
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
	// project, when set, is the one project a project token's requests
	// see; maintainer is set for a maintainer's token, which acts on it.
	project    string
	maintainer bool
	// who is "admin", "viewer" or the project token's name.
	who string
	// bad is set when the request carried a bearer token that is wrong.
	bad bool
	// session is the session cookie's value; "" when the request came
	// with the bearer token (it needs no CSRF token).
	session string
}

// sees reports whether cr may see the pipelines and jobs of project.
func (cr credentials) sees(project string) bool {
	return cr.ok && (cr.project == "" || cr.project == project)
}

// canAct reports whether cr may act on project's pipelines and jobs.
func (cr credentials) canAct(project string) bool {
	return cr.admin || cr.maintainer && cr.project == project
}

func (a *auth) check(r *http.Request) credentials {
	if h := r.Header.Get("Authorization"); h != "" {
		tok, found := strings.CutPrefix(h, "Bearer ")
		if role := a.role(r.Context(), tok); found && role != "" {
			if cr, ok := a.credentials(r.Context(), role); ok {
				return cr
			}
		}
		return credentials{bad: true}
	}
	if c, err := r.Cookie(sessionCookie); err == nil {
		if role := a.session(c.Value); role != "" {
			if cr, ok := a.credentials(r.Context(), role); ok {
				cr.session = c.Value
				return cr
			}
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

// setCookie sets an HttpOnly, SameSite=Strict cookie for the whole site
// (siteCookie).
func setCookie(w http.ResponseWriter, r *http.Request, name, value string, maxAge time.Duration) {
	siteCookie(w, r, http.SameSiteStrictMode, name, value, maxAge)
}

// siteCookie sets an HttpOnly cookie for the whole site, SameSite as
// sameSite says, Secure when the browser reached the site over HTTPS: the
// request came over TLS, or from a trusted proxy that says so
// (httpserver.IsHTTPS; the daemon names its proxies); maxAge < 0 deletes
// it.
func siteCookie(w http.ResponseWriter, r *http.Request, sameSite http.SameSite, name, value string, maxAge time.Duration) {
	c := &http.Cookie{
		Name: name, Value: value, Path: "/", HttpOnly: true, SameSite: sameSite,
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

// ProjectTokenPrefix starts every project token.
const ProjectTokenPrefix = "drp_"

// ProjectTokens finds project tokens, for sign-in with one.
type ProjectTokens interface {
	// ProjectToken returns the member token tok is; ErrNotFound when
	// it is none (unknown, revoked or expired).
	ProjectToken(ctx context.Context, tok string) (ProjectMember, error)
	// ProjectTokenByID is ProjectToken of a session's token id.
	ProjectTokenByID(ctx context.Context, id int64) (ProjectMember, error)
}

// ProjectMember is who a project token signs in as.
type ProjectMember struct {
	TokenID int64
	Project string
	// Name is the token's, shown as who triggered what it runs.
	Name string
	// Maintainer is set for a maintainer's token, which acts on the
	// project's pipelines and jobs; a viewer's reads them.
	Maintainer bool
}
