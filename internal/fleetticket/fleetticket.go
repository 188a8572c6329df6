// Package fleetticket is the short-lived sign-in ticket with which the
// coordinator's runners page opens a runner manager's fleet page, and
// the check of the fleet page's URL that a manager reports.
//
// # Tickets
//
// A ticket is "v1.<expiry>.<nonce>.<mac>": the expiry in Unix seconds, a
// random nonce and an HMAC-SHA256 over the manager's system_id, the
// expiry and the nonce, keyed by the hex SHA-256 of the runner's token.
// The coordinator stores that hash (not the token) and the manager can
// compute it from the token in its config.toml, so the two share a key
// without any new secret: whoever holds the runner token, or reads the
// coordinator's database, can mint tickets for that runner's managers,
// and nobody else can. The system_id is in the MAC, not in the ticket: a
// ticket minted for one manager does not open another that shares the
// runner token.
//
// A ticket is a bearer credential in a URL (the redirect from the
// coordinator), so it lives for TTL and the fleet page takes each nonce
// once (Verify reports the nonce and the expiry for that).
package fleetticket

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

const (
	// TTL is how long a ticket the coordinator mints is valid.
	TTL = 2 * time.Minute
	// MaxSkew is how far in the future, beyond TTL, a ticket's expiry
	// may be: the coordinator's clock may run ahead of the manager's.
	// A ticket further out than TTL+MaxSkew is refused, so a leaked
	// ticket is never good for long whatever it says.
	MaxSkew = 3 * time.Minute
	version = "v1"
)

// Errors of Verify.
var (
	ErrMalformed = errors.New("fleet ticket: malformed")
	ErrExpired   = errors.New("fleet ticket: expired")
	ErrTooLong   = errors.New("fleet ticket: expiry too far in the future")
	ErrForged    = errors.New("fleet ticket: not signed for this manager by any of its runners")
)

// HashToken is the key of a runner token's tickets: its hex SHA-256, the
// form in which the coordinator stores it.
func HashToken(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

func mac(tokenHash, systemID, exp, nonce string) string {
	m := hmac.New(sha256.New, []byte(tokenHash))
	for _, p := range []string{"drover fleet ticket " + version, systemID, exp, nonce} {
		m.Write([]byte(p))
		m.Write([]byte{0})
	}
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// Mint returns a ticket for the manager systemID of the runner whose
// token hashes to tokenHash, valid until exp.
func Mint(tokenHash, systemID string, exp time.Time) string {
	b := make([]byte, 16)
	rand.Read(b) // never fails (crypto/rand)
	nonce := base64.RawURLEncoding.EncodeToString(b)
	e := strconv.FormatInt(exp.Unix(), 10)
	return version + "." + e + "." + nonce + "." + mac(tokenHash, systemID, e, nonce)
}

// Verify checks ticket for the manager systemID, whose runners' tokens
// hash to tokenHashes, at now. It returns the ticket's nonce and expiry
// (for the caller to take each nonce once), or ErrMalformed, ErrExpired,
// ErrTooLong or ErrForged.
func Verify(ticket, systemID string, tokenHashes []string, now time.Time) (nonce string, exp time.Time, err error) {
	parts := strings.Split(ticket, ".")
	if len(parts) != 4 || parts[0] != version || len(ticket) > 200 {
		return "", time.Time{}, ErrMalformed
	}
	e, nonce, sig := parts[1], parts[2], parts[3]
	n, err := strconv.ParseInt(e, 10, 64)
	if err != nil || n <= 0 || strconv.FormatInt(n, 10) != e {
		return "", time.Time{}, ErrMalformed
	}
	exp = time.Unix(n, 0)
	ok := false
	for _, h := range tokenHashes {
		if h != "" && subtle.ConstantTimeCompare([]byte(sig), []byte(mac(h, systemID, e, nonce))) == 1 {
			ok = true
		}
	}
	switch {
	case !ok:
		return "", time.Time{}, ErrForged
	case !now.Before(exp):
		return "", time.Time{}, ErrExpired
	case exp.Sub(now) > TTL+MaxSkew:
		return "", time.Time{}, ErrTooLong
	}
	return nonce, exp, nil
}

// MaxURL is the longest fleet page URL taken, in characters.
const MaxURL = 2048

// CheckURL checks the URL of a fleet page as a manager reports it and
// the coordinator links it: an absolute http or https URL with a host,
// without user, query or fragment, at most MaxURL printable characters.
// Anything else (a javascript: URL, say) is never linked.
func CheckURL(s string) error {
	if utf8.RuneCountInString(s) > MaxURL {
		return fmt.Errorf("longer than %d characters", MaxURL)
	}
	for _, r := range s {
		if r == utf8.RuneError || !unicode.IsPrint(r) || r == ' ' {
			return errors.New("holds a space, a control or an unprintable character")
		}
	}
	u, err := url.Parse(s)
	if err != nil {
		return err
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Errorf("scheme %q: want http or https", u.Scheme)
	case u.Host == "" || u.Hostname() == "":
		return errors.New("no host")
	case u.User != nil:
		return errors.New("holds a user")
	case u.RawQuery != "" || u.ForceQuery || u.Fragment != "" || strings.Contains(s, "#"):
		return errors.New("holds a query or fragment")
	}
	return nil
}

// SignInURL is where the browser takes ticket to: /fleet/signin under
// the fleet page's base URL base (CheckURL must accept it).
func SignInURL(base, ticket string) (string, error) {
	if err := CheckURL(base); err != nil {
		return "", err
	}
	u, err := url.Parse(base)
	if err != nil {
		return "", err
	}
	u = u.JoinPath("fleet", "signin")
	u.RawQuery = url.Values{"ticket": {ticket}}.Encode()
	return u.String(), nil
}
