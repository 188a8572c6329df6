package secretbox_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/drover-ci/drover/internal/secretbox"
)

func mustKey(t testing.TB) (*secretbox.Key, string) {
	t.Helper()
	k, text := secretbox.NewRandomKey()
	if len(k.ID()) != 16 {
		t.Fatalf("key id %q, want 16 hex digits", k.ID())
	}
	return k, text
}

func TestSealOpen(t *testing.T) {
	a, _ := mustKey(t)
	box := secretbox.NewBox(a)
	secret := []byte(`[{"key":"TOKEN","value":"hunter2-hunter2"}]`)
	s1 := box.Seal(secret, "job variables")
	s2 := box.Seal(secret, "job variables")
	if s1 == s2 {
		t.Errorf("two seals of one value are equal: the nonce is not random")
	}
	for _, s := range []string{s1, s2} {
		if strings.Contains(s, "hunter2") || !strings.HasPrefix(s, "sealed:v1:"+a.ID()+":") {
			t.Errorf("Seal = %q, want sealed:v1:%s:… without the plaintext", s, a.ID())
		}
		got, err := box.Open(s, "job variables")
		if err != nil || !bytes.Equal(got, secret) {
			t.Errorf("Open(Seal(x)) = %q, %v; want %q", got, err, secret)
		}
		if id, err := secretbox.KeyID(s); id != a.ID() || err != nil {
			t.Errorf("KeyID = %q, %v; want %q", id, err, a.ID())
		}
	}
	if got, err := box.Open(box.Seal(nil, "p"), "p"); err != nil || len(got) != 0 {
		t.Errorf("Open(Seal(empty)) = %q, %v", got, err)
	}
}

func TestOpenRefuses(t *testing.T) {
	a, _ := mustKey(t)
	b, _ := mustKey(t)
	box := secretbox.NewBox(a)
	good := box.Seal([]byte("value"), "p")
	_, data, _ := strings.Cut(strings.TrimPrefix(good, "sealed:v1:"), ":")
	ct, _ := base64.RawURLEncoding.DecodeString(data)
	flipped := append([]byte(nil), ct...)
	flipped[len(flipped)-1] ^= 1
	tests := []struct {
		name   string
		sealed string
		purp   string
		want   error
	}{
		{"plaintext", "value", "p", secretbox.ErrNotSealed},
		{"no key id", "sealed:v1:", "p", secretbox.ErrNotSealed},
		{"bad key id", "sealed:v1:zzzzzzzzzzzzzzzz:AAAA", "p", secretbox.ErrNotSealed},
		{"other purpose", good, "q", secretbox.ErrCorrupt},
		{"flipped bit", "sealed:v1:" + a.ID() + ":" + base64.RawURLEncoding.EncodeToString(flipped), "p", secretbox.ErrCorrupt},
		{"cut short", "sealed:v1:" + a.ID() + ":" + base64.RawURLEncoding.EncodeToString(ct[:20]), "p", secretbox.ErrCorrupt},
		{"not base64", "sealed:v1:" + a.ID() + ":!!", "p", secretbox.ErrCorrupt},
		// The key id is authenticated: relabelling a value as another
		// key's does not open it with that key.
		{"relabelled", strings.Replace(secretbox.NewBox(b, a).Seal([]byte("v"), "p"), b.ID(), a.ID(), 1), "p", secretbox.ErrCorrupt},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := secretbox.NewBox(a, b).Open(tt.sealed, tt.purp)
			if !errors.Is(err, tt.want) || got != nil {
				t.Errorf("Open = %q, %v; want %v", got, err, tt.want)
			}
		})
	}
	_, err := secretbox.NewBox(b).Open(good, "p")
	var uk *secretbox.UnknownKeyError
	if !errors.As(err, &uk) || uk.ID != a.ID() {
		t.Errorf("Open with another key = %v, want UnknownKeyError{%s}", err, a.ID())
	}
}

// TestRotation: a Box with a new key and the old one opens what either
// sealed, and seals with the new one.
func TestRotation(t *testing.T) {
	oldKey, _ := mustKey(t)
	newKey, _ := mustKey(t)
	before := secretbox.NewBox(oldKey).Seal([]byte("old"), "p")
	rotated := secretbox.NewBox(newKey, oldKey)
	if rotated.KeyID() != newKey.ID() || !rotated.Opens(oldKey.ID()) || !rotated.Opens(newKey.ID()) {
		t.Fatalf("rotated box: key %s, opens old %v, new %v", rotated.KeyID(), rotated.Opens(oldKey.ID()), rotated.Opens(newKey.ID()))
	}
	if got, err := rotated.Open(before, "p"); err != nil || string(got) != "old" {
		t.Errorf("Open(old value) = %q, %v", got, err)
	}
	after := rotated.Seal([]byte("new"), "p")
	if id, _ := secretbox.KeyID(after); id != newKey.ID() {
		t.Errorf("new value sealed with %s, want the new key %s", id, newKey.ID())
	}
}

func TestParseKey(t *testing.T) {
	raw := bytes.Repeat([]byte{0xfb, 0xff, 0x01, 0x7e}, 8)
	sum := sha256.Sum256(raw)
	wantID := hex.EncodeToString(sum[:8])
	good := []struct{ name, text string }{
		{"base64", base64.StdEncoding.EncodeToString(raw)},
		{"base64 unpadded", base64.RawStdEncoding.EncodeToString(raw)},
		{"base64url", base64.URLEncoding.EncodeToString(raw)},
		{"base64url unpadded", base64.RawURLEncoding.EncodeToString(raw)},
		{"hex", hex.EncodeToString(raw)},
		{"HEX with newline", strings.ToUpper(hex.EncodeToString(raw)) + "\n"},
	}
	for _, tt := range good {
		t.Run(tt.name, func(t *testing.T) {
			k, err := secretbox.ParseKey(tt.text)
			if err != nil || k.ID() != wantID {
				t.Errorf("ParseKey(%q) = %v, %v; want key %s", tt.text, k, err, wantID)
			}
		})
	}
	bad := []struct{ name, text string }{
		{"empty", ""},
		{"short base64", base64.StdEncoding.EncodeToString(raw[:16])},
		{"long hex", hex.EncodeToString(append(raw, 0))},
		{"passphrase", "correct horse battery staple, quite long indeed"},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			_, err := secretbox.ParseKey(tt.text)
			if err == nil {
				t.Fatalf("ParseKey(%q) = nil error", tt.text)
			}
			if tt.text != "" && strings.Contains(err.Error(), tt.text) {
				t.Errorf("ParseKey error %q quotes the key text", err)
			}
		})
	}
}

func TestKeyFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "secret-key")
	k1, created, err := secretbox.LoadOrCreateKeyFile(p)
	if err != nil || !created {
		t.Fatalf("LoadOrCreateKeyFile (new) = %v, created %v", err, created)
	}
	fi, err := os.Stat(p)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v, mode %v; want 0600", err, fi.Mode().Perm())
	}
	k2, created, err := secretbox.LoadOrCreateKeyFile(p)
	if err != nil || created || k2.ID() != k1.ID() {
		t.Fatalf("LoadOrCreateKeyFile (again) = %v, created %v, key %s; want key %s", err, created, k2.ID(), k1.ID())
	}
	text, _ := os.ReadFile(p)
	if k, err := secretbox.ParseKey(string(text)); err != nil || k.ID() != k1.ID() {
		t.Errorf("the file's text does not parse to its key: %v", err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("directory holds %d entries, want the key file alone", len(ents))
	}

	if err := os.Chmod(p, 0o640); err != nil {
		t.Fatal(err)
	}
	_, _, err = secretbox.LoadOrCreateKeyFile(p)
	if err == nil || !strings.Contains(err.Error(), "chmod 600 "+p) {
		t.Errorf("group-readable key file: %v, want a refusal saying chmod 600 %s", err, p)
	}

	bad := filepath.Join(dir, "bad-key")
	if err := os.WriteFile(bad, []byte("not a key\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := secretbox.ReadKeyFile(bad); err == nil || !strings.Contains(err.Error(), bad) {
		t.Errorf("ReadKeyFile(garbage) = %v, want an error naming the file", err)
	}
	if _, err := secretbox.ReadKeyFile(filepath.Join(dir, "none")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("ReadKeyFile(missing) = %v, want fs.ErrNotExist", err)
	}
}

// TestKeyFileRace: processes creating the key file at once all end up
// with the same key.
func TestKeyFileRace(t *testing.T) {
	p := filepath.Join(t.TempDir(), "secret-key")
	const n = 16
	ids := make([]string, n)
	var created int
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			k, c, err := secretbox.LoadOrCreateKeyFile(p)
			if err != nil {
				t.Error(err)
				return
			}
			ids[i] = k.ID()
			if c {
				mu.Lock()
				created++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	for _, id := range ids {
		if id != ids[0] {
			t.Fatalf("keys differ: %v", ids)
		}
	}
	if created != 1 {
		t.Errorf("%d callers say they created the file, want 1", created)
	}
}

// BenchmarkSealOpen is the cost per job of sealing its variables at
// submit and opening them for its payload: a few typical variables
// (about 300 bytes of JSON).
func BenchmarkSealOpen(b *testing.B) {
	k, _ := secretbox.NewRandomKey()
	box := secretbox.NewBox(k)
	vars := []byte(`{"job":[{"key":"DEPLOY_TOKEN","value":"glpat-0123456789abcdefghij","masked":true},` +
		`{"key":"AWS_SECRET_ACCESS_KEY","value":"wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY","masked":true},` +
		`{"key":"REGION","value":"eu-west-1"},{"key":"DEBUG","value":"1"}],"services":[[{"key":"POSTGRES_PASSWORD","value":"pw"}]]}`)
	b.SetBytes(int64(len(vars)))
	for b.Loop() {
		if _, err := box.Open(box.Seal(vars, "job variables"), "job variables"); err != nil {
			b.Fatal(err)
		}
	}
}
