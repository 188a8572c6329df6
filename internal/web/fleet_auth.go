package web

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/drover-ci/drover/internal/fleetticket"
)

// Sign-in on the fleet page.
//
// The fleet page lives on the runner manager (drover run's
// listen_address), away from the coordinator, and has two ways in:
//
//   - its own token (FleetSignIn.Token): sent as Authorization: Bearer
//     by scripts, or typed into the form at /fleet/login;
//   - the coordinator's sign-in: the runners page links each manager's
//     fleet page through GET /runners/{id}/fleet, which redirects the
//     signed-in browser to /fleet/signin?ticket= on the manager with a
//     ticket (fleetticket) that the manager checks with its runners'
//     tokens. A ticket lasts fleetticket.TTL and is taken once.
//
// Either gives a session cookie (drover_fleet_session): an expiry and a
// nonce signed with a key the page draws at start, so a restart of the
// manager ends its sessions. Sign-out (POST /fleet/logout, with the
// CSRF token of the session in the form) drops the cookie and records
// the session's nonce as revoked until the session would have expired,
// so a copy of the cookie is no longer taken either. It is HttpOnly, Secure when the browser
// came over HTTPS, and SameSite=Lax, not Strict as the coordinator's:
// the ticket's sign-in is a redirect chain that starts on the
// coordinator's site, and a Strict cookie set there would not be sent on
// its last step to /fleet. Its name is not the coordinator's
// drover_session: cookies are not kept apart by port, and a coordinator
// and a manager on one host would overwrite each other's.
//
// With neither way in configured, FleetSignIn.Open decides: the pages
// are served to everyone (a listener on loopback) or refused with 403.

const (
	fleetSessionCookie = "drover_fleet_session"
	fleetLoginCookie   = "drover_fleet_login"
	fleetSessionTTL    = 12 * time.Hour
)

// FleetSignIn is who may see the fleet page (FleetConfig.SignIn).
type FleetSignIn struct {
	// Token, if set, signs in: as Authorization: Bearer, or typed into
	// the form at /fleet/login.
	Token string
	// SystemID and TicketKeys, when both are set, take the
	// coordinator's tickets at /fleet/signin: minted for this system_id
	// with the token hash (fleetticket.HashToken) of one of the
	// manager's runners, which TicketKeys returns at each sign-in (a
	// config reload changes them).
	SystemID   string
	TicketKeys func() []string
	// Open is asked when there is neither Token nor tickets: true serves
	// the pages to everyone, false (or nil) refuses them with 403.
	Open func() bool
}

func (s *FleetSignIn) tickets() bool { return s.SystemID != "" && s.TicketKeys != nil }

// configured reports whether there is a way to sign in.
func (s *FleetSignIn) configured() bool { return s.Token != "" || s.tickets() }

// fleetAuth is the fleet page's sessions and the tickets it took.
type fleetAuth struct {
	FleetSignIn
	key []byte // signs sessions
	mu  sync.Mutex
	// used holds the nonces of the tickets taken, until they expire.
	used map[string]time.Time
	// revoked holds the nonces of the sessions signed out, until they
	// expire.
	revoked map[string]time.Time
}

func newFleetAuth(s FleetSignIn) *fleetAuth {
	key := make([]byte, 32)
	rand.Read(key) // never fails (crypto/rand)
	return &fleetAuth{FleetSignIn: s, key: key, used: map[string]time.Time{}, revoked: map[string]time.Time{}}
}

func (a *fleetAuth) mac(parts ...string) string {
	m := hmac.New(sha256.New, a.key)
	m.Write([]byte("drover fleet session"))
	for _, p := range parts {
		m.Write([]byte{0})
		m.Write([]byte(p))
	}
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

func (a *fleetAuth) newSession(now time.Time) string {
	exp := strconv.FormatInt(now.Add(fleetSessionTTL).Unix(), 10)
	nonce := randomString()
	return exp + "." + nonce + "." + a.mac(exp, nonce)
}

// session checks session cookie value v at now: its nonce and expiry,
// ok when it is signed by this page, not expired and not signed out.
func (a *fleetAuth) session(v string, now time.Time) (nonce string, exp time.Time, ok bool) {
	parts := strings.Split(v, ".")
	if len(parts) != 3 {
		return "", time.Time{}, false
	}
	if subtle.ConstantTimeCompare([]byte(parts[2]), []byte(a.mac(parts[0], parts[1]))) != 1 {
		return "", time.Time{}, false
	}
	n, err := strconv.ParseInt(parts[0], 10, 64)
	if err != nil || now.Unix() >= n {
		return "", time.Time{}, false
	}
	a.mu.Lock()
	_, out := a.revoked[parts[1]]
	a.mu.Unlock()
	return parts[1], time.Unix(n, 0), !out
}

func (a *fleetAuth) sessionOK(v string, now time.Time) bool {
	_, _, ok := a.session(v, now)
	return ok
}

// csrf is the CSRF token of session cookie value v: the sign-out form
// carries it, and a cross-site form cannot, not knowing the cookie.
func (a *fleetAuth) csrf(v string) string { return a.mac("csrf", v) }

// signOutCSRF is the CSRF token of r's session for the sign-out form,
// "" when r is not signed in with a session (a bearer token, an open
// page): no sign-out is shown then.
func (a *fleetAuth) signOutCSRF(r *http.Request, now time.Time) string {
	if r.Header.Get("Authorization") != "" {
		return ""
	}
	c, err := r.Cookie(fleetSessionCookie)
	if err != nil || !a.sessionOK(c.Value, now) {
		return ""
	}
	return a.csrf(c.Value)
}

// spend records nonce in m until exp, dropping the nonces expired at
// now; false when nonce was there already. The caller holds a.mu.
func spend(m map[string]time.Time, nonce string, exp, now time.Time) bool {
	for n, e := range m {
		if !now.Before(e) {
			delete(m, n)
		}
	}
	if _, seen := m[nonce]; seen {
		return false
	}
	m[nonce] = exp
	return true
}

func (a *fleetAuth) tokenOK(tok string) bool {
	return a.Token != "" && tok != "" && subtle.ConstantTimeCompare([]byte(tok), []byte(a.Token)) == 1
}

// fleetAccess is what a request to a guarded page may do.
type fleetAccess int

const (
	fleetIn      fleetAccess = iota // serve it
	fleetOut                        // not signed in: to the form, or 401
	fleetBad                        // a wrong bearer token: 403
	fleetRefused                    // no way in configured and not open: 403
)

func (a *fleetAuth) check(r *http.Request, now time.Time) fleetAccess {
	if !a.configured() {
		if a.Open != nil && a.Open() {
			return fleetIn
		}
		return fleetRefused
	}
	if h := r.Header.Get("Authorization"); h != "" {
		if tok, ok := strings.CutPrefix(h, "Bearer "); ok && a.tokenOK(tok) {
			return fleetIn
		}
		return fleetBad
	}
	if c, err := r.Cookie(fleetSessionCookie); err == nil && a.sessionOK(c.Value, now) {
		return fleetIn
	}
	return fleetOut
}

// takeTicket checks ticket and takes its nonce: ok once per ticket.
func (a *fleetAuth) takeTicket(ticket string, now time.Time) error {
	nonce, exp, err := fleetticket.Verify(ticket, a.SystemID, a.TicketKeys(), now)
	if err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if !spend(a.used, nonce, exp, now) {
		return errTicketUsed
	}
	return nil
}

var errTicketUsed = errors.New("fleet ticket: already used")

const fleetRefusedMsg = "The fleet page is not served here without sign-in: listen_address is not a loopback address and drover run has " +
	"neither --listen-token-file nor --listen-url. Set one (or bind listen_address to localhost).\n"

// guard serves h to signed-in requests. A page (page set) sends others
// to the sign-in form; an event stream or a script's request gets 401.
func (f *FleetPage) guard(page bool, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		switch f.auth.check(r, f.cfg.Clock.Now()) {
		case fleetIn:
			h(w, r)
		case fleetRefused:
			http.Error(w, fleetRefusedMsg, http.StatusForbidden)
		case fleetBad:
			http.Error(w, "invalid token", http.StatusForbidden)
		default:
			if page {
				http.Redirect(w, r, "/fleet/login?"+url.Values{"next": {r.URL.RequestURI()}}.Encode(), http.StatusSeeOther)
				return
			}
			http.Error(w, "sign in first", http.StatusUnauthorized)
		}
	}
}

// Guard is h behind the fleet page's sign-in, answering 401 to requests
// not signed in: for the manager's other pages on listen_address (its
// /debug/ endpoints).
func (f *FleetPage) Guard(h http.Handler) http.Handler {
	return f.guard(false, h.ServeHTTP)
}

// fleetNext is where a sign-in goes on to: next when it is a path on
// this site, else /fleet.
func fleetNext(next string) string {
	if next == "" {
		return "/fleet"
	}
	if to, ok := safeNext(next); ok {
		return to
	}
	return "/fleet"
}

// setFleetCookie sets an HttpOnly, SameSite=Lax cookie for the whole
// site (siteCookie).
func setFleetCookie(w http.ResponseWriter, r *http.Request, name, value string, maxAge time.Duration) {
	siteCookie(w, r, http.SameSiteLaxMode, name, value, maxAge)
}

type fleetLoginPage struct {
	base
	Error     string
	Next      string
	LoginCSRF string
	Token     bool // the form is shown
	Tickets   bool // the coordinator's link signs in
}

// handleLogin is GET /fleet/login (the form, or how to sign in) and
// POST /fleet/login (the form: its own token).
func (f *FleetPage) handleLogin(w http.ResponseWriter, r *http.Request) {
	now := f.cfg.Clock.Now()
	if r.Method == http.MethodGet {
		next := fleetNext(r.URL.Query().Get("next"))
		if f.auth.check(r, now) == fleetIn {
			http.Redirect(w, r, next, http.StatusSeeOther)
			return
		}
		f.loginForm(w, r, http.StatusOK, "", next)
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	next := fleetNext(r.PostFormValue("next"))
	if f.auth.Token == "" {
		f.loginForm(w, r, http.StatusForbidden, "This fleet page has no token of its own.", next)
		return
	}
	// Double submit: a cross-site form cannot read the cookie to copy it.
	c, err := r.Cookie(fleetLoginCookie)
	if err != nil || c.Value == "" || subtle.ConstantTimeCompare([]byte(r.PostFormValue(csrfField)), []byte(c.Value)) != 1 {
		f.loginForm(w, r, http.StatusForbidden, "The form expired: try again.", next)
		return
	}
	if !f.auth.tokenOK(r.PostFormValue("token")) {
		f.log.Warn("fleet page: sign-in with a wrong token", "remote", r.RemoteAddr)
		f.loginForm(w, r, http.StatusForbidden, "That is not the fleet page's token.", next)
		return
	}
	setFleetCookie(w, r, fleetSessionCookie, f.auth.newSession(now), fleetSessionTTL)
	setFleetCookie(w, r, fleetLoginCookie, "", -1)
	http.Redirect(w, r, next, http.StatusSeeOther)
}

func (f *FleetPage) loginForm(w http.ResponseWriter, r *http.Request, code int, msg, next string) {
	p := fleetLoginPage{
		base: base{Title: "Sign in", Home: "/fleet"}, Error: msg, Next: next,
		Token: f.auth.Token != "", Tickets: f.auth.tickets(),
	}
	if !f.auth.configured() {
		// Nothing to sign in with: the pages are open, or refused.
		if f.auth.Open != nil && f.auth.Open() {
			http.Redirect(w, r, next, http.StatusSeeOther)
			return
		}
		http.Error(w, fleetRefusedMsg, http.StatusForbidden)
		return
	}
	if p.Token {
		p.LoginCSRF = randomString()
		setFleetCookie(w, r, fleetLoginCookie, p.LoginCSRF, time.Hour)
	}
	html, err := f.render("fleet-login", p)
	if err != nil {
		f.log.Error("web: fleet sign-in page", "err", err)
		http.Error(w, "render the sign-in page: internal error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(code)
	w.Write([]byte(html))
}

// handleSignIn is GET /fleet/signin?ticket=: the coordinator's ticket
// for a session, then on to /fleet (the ticket leaves the address bar).
func (f *FleetPage) handleSignIn(w http.ResponseWriter, r *http.Request) {
	if !f.auth.tickets() {
		f.loginForm(w, r, http.StatusForbidden, "This fleet page takes no sign-in from the coordinator (drover run has no --listen-url).", "/fleet")
		return
	}
	now := f.cfg.Clock.Now()
	if err := f.auth.takeTicket(r.URL.Query().Get("ticket"), now); err != nil {
		f.log.Warn("fleet page: coordinator sign-in refused", "remote", r.RemoteAddr, "err", err)
		msg := "This sign-in link is not valid: it expired, was used already, or was not made for this manager. Follow the link on the coordinator's runners page again."
		f.loginForm(w, r, http.StatusForbidden, msg, "/fleet")
		return
	}
	f.log.Info("fleet page: signed in from the coordinator", "remote", r.RemoteAddr)
	setFleetCookie(w, r, fleetSessionCookie, f.auth.newSession(now), fleetSessionTTL)
	http.Redirect(w, r, "/fleet", http.StatusSeeOther)
}

// handleLogout is POST /fleet/logout: the session is revoked (its nonce
// recorded until it expires) and its cookie dropped, then on to the
// sign-in page. The form must carry the session's CSRF token; without a
// valid session there is nothing to revoke, and the cookie is dropped
// all the same.
func (f *FleetPage) handleLogout(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	now := f.cfg.Clock.Now()
	if c, err := r.Cookie(fleetSessionCookie); err == nil {
		if nonce, exp, ok := f.auth.session(c.Value, now); ok {
			got := r.PostFormValue(csrfField)
			if got == "" || subtle.ConstantTimeCompare([]byte(got), []byte(f.auth.csrf(c.Value))) != 1 {
				http.Error(w, "missing or wrong CSRF token: reload the page and try again", http.StatusForbidden)
				return
			}
			f.auth.mu.Lock()
			spend(f.auth.revoked, nonce, exp, now)
			f.auth.mu.Unlock()
			f.log.Info("fleet page: signed out", "remote", r.RemoteAddr)
		}
	}
	setFleetCookie(w, r, fleetSessionCookie, "", -1)
	http.Redirect(w, r, "/fleet/login", http.StatusSeeOther)
}
