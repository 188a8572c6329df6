// Package secretbox seals small secrets for storage at rest with
// AES-256-GCM, and opens them again: it is what keeps job variables out of
// a copied coordinator database. (It is not NaCl's secretbox; the name says
// what it is for.)
//
// # Format
//
// A sealed value is text:
//
//	sealed:v1:<key id>:<base64url of nonce ‖ ciphertext ‖ tag>
//
// v1 is the format. The key id names the key that sealed the value: 16 hex
// digits, the first 8 bytes of the SHA-256 of the key's 32 bytes (so
// `base64 -d | sha256sum | cut -c1-16` on the key's text tells an operator
// which key a database wants). A [Box] holds the key that seals and the
// keys it replaced, and opens a value sealed with any of them: that is key
// rotation. The nonce is 12 random bytes per value (a key must not seal
// more than 2^32 values; rotating keys resets the count). The header and
// the caller's purpose are authenticated with the value (GCM's additional
// data), so a value sealed for one purpose does not open for another, and
// one whose key id was changed does not open at all.
//
// # Keys
//
// A key is 32 random bytes. As text it is base64 (standard or URL
// alphabet, padded or not) or hex: [ParseKey]. A key file holds that text;
// [LoadOrCreateKeyFile] creates one (mode 0600) with a new random key, and
// refuses a key file that group or others may read.
package secretbox

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
)

// KeySize is the size of a key in bytes (AES-256).
const KeySize = 32

// prefix starts every sealed value: the format and its version.
const prefix = "sealed:v1:"

// Errors callers branch on.
var (
	// ErrNotSealed is returned by Open and KeyID for a value that is not
	// in the sealed format.
	ErrNotSealed = errors.New("secretbox: not a sealed value")
	// ErrCorrupt is returned by Open for a sealed value that does not
	// authenticate under its key: changed, cut short, or sealed for
	// another purpose.
	ErrCorrupt = errors.New("secretbox: sealed value is corrupt or was sealed for another purpose")
)

// UnknownKeyError is returned by Open for a value sealed with a key the
// Box does not hold.
type UnknownKeyError struct {
	ID string // the key id the value names
}

func (e *UnknownKeyError) Error() string {
	return fmt.Sprintf("secretbox: value sealed with key %s, which is not among the keys given", e.ID)
}

// Key is an AES-256-GCM key and its id. It is safe for concurrent use.
type Key struct {
	id   string
	aead cipher.AEAD
}

// NewKey returns the key of raw, which must be KeySize bytes.
func NewKey(raw []byte) (*Key, error) {
	if len(raw) != KeySize {
		return nil, fmt.Errorf("secretbox: a key is %d bytes, got %d", KeySize, len(raw))
	}
	block, err := aes.NewCipher(raw)
	if err != nil {
		return nil, fmt.Errorf("secretbox: %w", err)
	}
	aead, err := cipher.NewGCMWithRandomNonce(block)
	if err != nil {
		return nil, fmt.Errorf("secretbox: %w", err)
	}
	sum := sha256.Sum256(raw)
	return &Key{id: hex.EncodeToString(sum[:8]), aead: aead}, nil
}

// ParseKey returns the key written as text: base64 (standard or URL
// alphabet, padded or not) or hex of KeySize bytes, surrounding white space
// ignored. Its errors never quote the text.
func ParseKey(text string) (*Key, error) {
	text = strings.TrimSpace(text)
	if len(text) == 2*KeySize {
		if raw, err := hex.DecodeString(text); err == nil {
			return NewKey(raw)
		}
	}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if raw, err := enc.DecodeString(text); err == nil && len(raw) == KeySize {
			return NewKey(raw)
		}
	}
	return nil, fmt.Errorf("secretbox: a key is %d bytes written as base64 (43 or 44 characters) or hex (64 characters); this text has %d characters and is neither", KeySize, len(text))
}

// NewRandomKey returns a new random key and its text (standard base64), the
// form ParseKey reads and key files hold.
func NewRandomKey() (*Key, string) {
	raw := make([]byte, KeySize)
	rand.Read(raw) // never fails (crypto/rand since Go 1.24)
	k, err := NewKey(raw)
	if err != nil {
		panic(err) // a KeySize key always makes a cipher
	}
	return k, base64.StdEncoding.EncodeToString(raw)
}

// ID returns the key id: 16 hex digits, the first 8 bytes of the SHA-256
// of the key.
func (k *Key) ID() string { return k.id }

// Box seals with one key and opens values sealed with it or with any of the
// older keys it was given. It is safe for concurrent use.
type Box struct {
	current *Key
	keys    map[string]*Key
}

// NewBox returns a Box sealing with current and opening with current and
// older (keys current replaced, kept to read what they sealed).
func NewBox(current *Key, older ...*Key) *Box {
	b := &Box{current: current, keys: map[string]*Key{}}
	for _, k := range older {
		b.keys[k.id] = k
	}
	b.keys[current.id] = current
	return b
}

// KeyID returns the id of the key that seals.
func (b *Box) KeyID() string { return b.current.id }

// Opens reports whether b holds the key with id id.
func (b *Box) Opens(id string) bool {
	_, ok := b.keys[id]
	return ok
}

// header is the start of a value sealed with the key id: also its
// additional data, with the purpose.
func header(id string) string { return prefix + id + ":" }

// Seal seals plaintext for purpose (any text naming what the value is, the
// same for Open) with the current key.
func (b *Box) Seal(plaintext []byte, purpose string) string {
	h := header(b.current.id)
	ct := b.current.aead.Seal(nil, nil, plaintext, []byte(h+purpose))
	return h + base64.RawURLEncoding.EncodeToString(ct)
}

// Open opens a value Seal made for purpose. Errors: ErrNotSealed,
// *UnknownKeyError, ErrCorrupt (all wrapped); none quotes the value.
func (b *Box) Open(sealed, purpose string) ([]byte, error) {
	id, data, err := split(sealed)
	if err != nil {
		return nil, err
	}
	k, ok := b.keys[id]
	if !ok {
		return nil, &UnknownKeyError{ID: id}
	}
	ct, err := base64.RawURLEncoding.DecodeString(data)
	if err != nil {
		return nil, fmt.Errorf("%w (not base64)", ErrCorrupt)
	}
	if len(ct) < k.aead.Overhead() {
		return nil, fmt.Errorf("%w (%d bytes, shorter than a nonce and a tag)", ErrCorrupt, len(ct))
	}
	pt, err := k.aead.Open(nil, nil, ct, []byte(header(id)+purpose))
	if err != nil {
		return nil, ErrCorrupt
	}
	return pt, nil
}

// KeyID returns the id of the key that sealed the value sealed.
func KeyID(sealed string) (string, error) {
	id, _, err := split(sealed)
	return id, err
}

// split returns the key id and the base64 data of a sealed value.
func split(sealed string) (id, data string, err error) {
	rest, ok := strings.CutPrefix(sealed, prefix)
	if !ok {
		return "", "", ErrNotSealed
	}
	id, data, ok = strings.Cut(rest, ":")
	if !ok || len(id) != 16 {
		return "", "", fmt.Errorf("%w (no key id)", ErrNotSealed)
	}
	if _, err := hex.DecodeString(id); err != nil {
		return "", "", fmt.Errorf("%w (bad key id)", ErrNotSealed)
	}
	return id, data, nil
}
