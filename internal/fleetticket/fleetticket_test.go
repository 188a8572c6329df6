package fleetticket

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
	"time"
)

var now = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

// TestHashTokenIsTheStoredForm: the key is the hex SHA-256 the
// coordinator's store keeps (store.HashToken, not imported here).
func TestHashTokenIsTheStoredForm(t *testing.T) {
	sum := sha256.Sum256([]byte("glrt-abc"))
	if got, want := HashToken("glrt-abc"), hex.EncodeToString(sum[:]); got != want {
		t.Errorf("HashToken = %q, want %q", got, want)
	}
}

// TestVerify: a ticket opens the manager it was minted for, with the key
// of any of its runners, before it expires; others are refused with the
// reason.
func TestVerify(t *testing.T) {
	key, other := HashToken("glrt-one"), HashToken("glrt-two")
	good := Mint(key, "s_manager1", now.Add(TTL))
	for _, tc := range []struct {
		name     string
		ticket   string
		systemID string
		keys     []string
		now      time.Time
		want     error
	}{
		{"valid", good, "s_manager1", []string{key}, now, nil},
		{"valid with several runners", good, "s_manager1", []string{other, key}, now, nil},
		{"valid just before expiry", good, "s_manager1", []string{key}, now.Add(TTL - time.Second), nil},
		{"expired", good, "s_manager1", []string{key}, now.Add(TTL), ErrExpired},
		{"another manager of the runner", good, "s_manager2", []string{key}, now, ErrForged},
		{"another runner's key", good, "s_manager1", []string{other}, now, ErrForged},
		{"no keys", good, "s_manager1", nil, now, ErrForged},
		{"empty key", Mint("", "s_manager1", now.Add(TTL)), "s_manager1", []string{""}, now, ErrForged},
		{"expiry too far out", Mint(key, "s_manager1", now.Add(TTL+MaxSkew+time.Minute)), "s_manager1", []string{key}, now, ErrTooLong},
		{"clock skew within MaxSkew", Mint(key, "s_manager1", now.Add(TTL+MaxSkew)), "s_manager1", []string{key}, now, nil},
		{"expiry changed", strings.Replace(good, "."+strings.Split(good, ".")[1]+".", ".9999999999.", 1), "s_manager1", []string{key}, now, ErrForged},
		{"nonce changed", strings.Replace(good, strings.Split(good, ".")[2], "AAAAAAAAAAAAAAAAAAAAAA", 1), "s_manager1", []string{key}, now, ErrForged},
		{"signature cut", good[:len(good)-2], "s_manager1", []string{key}, now, ErrForged},
		{"empty", "", "s_manager1", []string{key}, now, ErrMalformed},
		{"other version", "v2" + good[2:], "s_manager1", []string{key}, now, ErrMalformed},
		{"expiry not a number", "v1.x.n.s", "s_manager1", []string{key}, now, ErrMalformed},
		{"expiry with a sign", "v1.+1.n.s", "s_manager1", []string{key}, now, ErrMalformed},
		{"too many parts", good + ".x", "s_manager1", []string{key}, now, ErrMalformed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nonce, exp, err := Verify(tc.ticket, tc.systemID, tc.keys, tc.now)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Verify = %v, want %v", err, tc.want)
			}
			if err == nil && (nonce == "" || exp.IsZero()) {
				t.Errorf("Verify = nonce %q, expiry %v: want both", nonce, exp)
			}
		})
	}
	if a, b := Mint(key, "s", now), Mint(key, "s", now); a == b {
		t.Errorf("two tickets are the same: %q", a)
	}
}

// FuzzVerify: no input panics, and none but a minted one verifies.
func FuzzVerify(f *testing.F) {
	key := HashToken("glrt-fuzz")
	f.Add(Mint(key, "s_1", now.Add(TTL)))
	f.Add("v1.1.a.b")
	f.Add("")
	f.Fuzz(func(t *testing.T, ticket string) {
		_, _, err := Verify(ticket, "s_1", []string{key}, now)
		if err == nil {
			// Only a ticket MAC'd with the key verifies: the fuzzer
			// can only find the seed again.
			parts := strings.Split(ticket, ".")
			if len(parts) != 4 || mac(key, "s_1", parts[1], parts[2]) != parts[3] {
				t.Fatalf("Verify(%q) = nil for a ticket not signed with the key", ticket)
			}
		}
	})
}

// TestCheckURL: only absolute http(s) URLs with a host and nothing that
// could carry a credential or a script are taken.
func TestCheckURL(t *testing.T) {
	for _, tc := range []struct {
		url string
		ok  bool
	}{
		{"http://manager1:9252", true},
		{"https://manager1.example.com:9252/", true},
		{"https://[2001:db8::1]:9252", true},
		{"https://proxy.example.com/managers/one", true},
		{"javascript:alert(1)", false},
		{"JavaScript://manager1/%0aalert(1)", false},
		{"data:text/html,<script>alert(1)</script>", false},
		{"//manager1:9252", false},
		{"/fleet", false},
		{"ftp://manager1", false},
		{"http://", false},
		{"http://:9252", false},
		{"http://user:pw@manager1", false},
		{"http://manager1/?x=1", false},
		{"http://manager1/#frag", false},
		{"http://manager1/ x", false},
		{"http://manager1/\x00", false},
		{"http://manager1/\u202e", false},
		{"", false},
		{"http://m/" + strings.Repeat("a", MaxURL), false},
	} {
		if err := CheckURL(tc.url); (err == nil) != tc.ok {
			t.Errorf("CheckURL(%q) = %v, want ok=%v", tc.url, err, tc.ok)
		}
	}
}

// TestSignInURL: the ticket goes to /fleet/signin under the base URL,
// escaped.
func TestSignInURL(t *testing.T) {
	for _, tc := range []struct{ base, want string }{
		{"http://m:9252", "http://m:9252/fleet/signin?ticket=v1.1.a%2Bb.c"},
		{"https://p.example/managers/one/", "https://p.example/managers/one/fleet/signin?ticket=v1.1.a%2Bb.c"},
	} {
		got, err := SignInURL(tc.base, "v1.1.a+b.c")
		if err != nil || got != tc.want {
			t.Errorf("SignInURL(%q) = %q, %v; want %q", tc.base, got, err, tc.want)
		}
	}
	if _, err := SignInURL("javascript:alert(1)", "t"); err == nil {
		t.Error("SignInURL(javascript:) = nil error")
	}
}
