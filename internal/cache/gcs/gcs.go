// Package gcs keeps cache archives in a Google Cloud Storage bucket
// ([runners.cache] Type = "gcs") through signed URLs.
//
// A [Signer] holds a service account's key and signs GET and PUT URLs of
// the XML API (https://storage.googleapis.com/<bucket>/<object>) for one
// object at a time, without any request to Google; a job's helper moves
// the archive with a cache.Transfer and never sees the key.
//
// # Signing
//
// The URLs are signed with Google's V4 scheme (GOOG4-RSA-SHA256: the
// request's canonical form hashed with SHA-256 and signed with the
// account's RSA key), documented at
// https://cloud.google.com/storage/docs/access-control/signing-urls-manually.
// GitLab Runner signs the same requests with the older V2 scheme (its
// storage library's default): both are accepted by Google for the same
// object names, and V4 is the one Google recommends and the one GCS
// emulators take. V4 URLs live 7 days at most; a longer expiry is cut to
// that.
//
// A PUT signs Content-Type: application/octet-stream and, when
// MaxUploadedArchiveSize is set, X-Goog-Content-Length-Range: 0,<max>,
// which makes Google refuse a larger body; both are among the headers
// PutURL returns, as GitLab Runner sends them.
package gcs

import (
	"cmp"
	"context"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/drover-ci/drover/internal/cache"
)

// MaxExpiry is the longest validity of a V4 signed URL.
const MaxExpiry = 7 * 24 * time.Hour

// Signer signs URLs for the objects of one bucket.
type Signer struct {
	accessID string
	key      *rsa.PrivateKey
	bucket   string
	base     *url.URL // scheme://host of the XML API
	maxSize  int64
	now      func() time.Time
}

var _ cache.URLSigner = (*Signer)(nil)

// credentialsFile is the part of a service account's JSON key file that
// signing needs.
type credentialsFile struct {
	Type        string `json:"type"`
	ClientEmail string `json:"client_email"`
	PrivateKey  string `json:"private_key"`
}

// New returns a Signer for the validated configuration cfg; maxSize is
// [runners.cache] MaxUploadedArchiveSize (0: no cap). It reads
// CredentialsFile when set.
func New(cfg *cache.GCSConfig, maxSize int64) (*Signer, error) {
	if cfg == nil {
		return nil, errors.New("gcs cache: missing [runners.cache.gcs]")
	}
	accessID, pemKey := cfg.AccessID, cfg.PrivateKey
	if cfg.CredentialsFile != "" {
		data, err := os.ReadFile(cfg.CredentialsFile)
		if err != nil {
			return nil, fmt.Errorf("gcs cache: CredentialsFile: %w", err)
		}
		var f credentialsFile
		if err := json.Unmarshal(data, &f); err != nil {
			return nil, fmt.Errorf("gcs cache: CredentialsFile %s: %w", cfg.CredentialsFile, err)
		}
		if f.Type != "service_account" {
			return nil, fmt.Errorf("gcs cache: CredentialsFile %s: type %q, want a service_account key", cfg.CredentialsFile, f.Type)
		}
		accessID, pemKey = f.ClientEmail, f.PrivateKey
	}
	if accessID == "" || pemKey == "" {
		return nil, errors.New("gcs cache: needs CredentialsFile, or AccessID and PrivateKey")
	}
	key, err := parseKey([]byte(pemKey))
	if err != nil {
		return nil, fmt.Errorf("gcs cache: private key: %w", err)
	}
	base := &url.URL{Scheme: "https", Host: "storage." + cmp.Or(cfg.UniverseDomain, "googleapis.com")}
	if cfg.DroverTestEndpoint != "" {
		if base, err = url.Parse(cfg.DroverTestEndpoint); err != nil {
			return nil, fmt.Errorf("gcs cache: DroverTestEndpoint: %w", err)
		}
	}
	return &Signer{accessID: accessID, key: key, bucket: cfg.BucketName, base: base, maxSize: maxSize, now: time.Now}, nil
}

// parseKey reads an RSA key in PEM, PKCS #8 (service account key files)
// or PKCS #1.
func parseKey(b []byte) (*rsa.PrivateKey, error) {
	block, _ := pem.Decode(b)
	if block == nil {
		return nil, errors.New("no PEM block")
	}
	if k, err := x509.ParsePKCS8PrivateKey(block.Bytes); err == nil {
		rk, ok := k.(*rsa.PrivateKey)
		if !ok {
			return nil, fmt.Errorf("a %T, want an RSA key", k)
		}
		return rk, nil
	}
	k, err := x509.ParsePKCS1PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("neither PKCS #8 nor PKCS #1: %w", err)
	}
	return k, nil
}

// GetURL signs a GET of the object name.
func (s *Signer) GetURL(_ context.Context, name string, expiry time.Duration) (*url.URL, error) {
	u, err := s.sign(http.MethodGet, name, expiry, nil)
	if err != nil {
		return nil, fmt.Errorf("gcs cache: signing GET of %q: %w", name, err)
	}
	return u, nil
}

// PutURL signs a PUT of the object name and returns the headers the
// upload must send.
func (s *Signer) PutURL(_ context.Context, name string, expiry time.Duration) (*url.URL, http.Header, error) {
	h := http.Header{}
	h.Set("Content-Type", "application/octet-stream")
	if s.maxSize > 0 {
		h.Set("X-Goog-Content-Length-Range", "0,"+strconv.FormatInt(s.maxSize, 10))
	}
	u, err := s.sign(http.MethodPut, name, expiry, h)
	if err != nil {
		return nil, nil, fmt.Errorf("gcs cache: signing PUT of %q: %w", name, err)
	}
	return u, h, nil
}

// escapePath escapes each segment of an object path as V4's canonical
// request wants it: everything but unreserved characters, a space as %20.
func escapePath(p string) string {
	segs := strings.Split(p, "/")
	for i, seg := range segs {
		segs[i] = strings.ReplaceAll(url.QueryEscape(seg), "+", "%20")
	}
	return strings.Join(segs, "/")
}

// sign builds the V4 signed URL of method on the object name, signing
// the host and the headers h.
func (s *Signer) sign(method, name string, expiry time.Duration, h http.Header) (*url.URL, error) {
	if name == "" {
		return nil, errors.New("empty object name")
	}
	expiry = min(cache.OrDefaultExpiry(expiry), MaxExpiry)
	now := s.now().UTC()
	path := "/" + escapePath(s.bucket+"/"+name)

	// Canonical headers: lower-case names, sorted, values with runs of
	// blanks made one space; the host without its port, as Google's own
	// libraries sign it.
	headers := map[string]string{"host": s.base.Hostname()}
	for k, vs := range h {
		headers[strings.ToLower(k)] = strings.Join(strings.Fields(strings.Join(vs, ",")), " ")
	}
	names := make([]string, 0, len(headers))
	for k := range headers {
		names = append(names, k)
	}
	sort.Strings(names)
	var canonHeaders strings.Builder
	for _, k := range names {
		canonHeaders.WriteString(k + ":" + headers[k] + "\n")
	}
	signedHeaders := strings.Join(names, ";")

	scope := now.Format("20060102") + "/auto/storage/goog4_request"
	q := url.Values{
		"X-Goog-Algorithm":     {"GOOG4-RSA-SHA256"},
		"X-Goog-Credential":    {s.accessID + "/" + scope},
		"X-Goog-Date":          {now.Format("20060102T150405Z")},
		"X-Goog-Expires":       {strconv.FormatInt(int64(expiry/time.Second), 10)},
		"X-Goog-SignedHeaders": {signedHeaders},
	}
	query := strings.ReplaceAll(q.Encode(), "+", "%20")
	canonical := strings.Join([]string{method, path, query, canonHeaders.String(), signedHeaders, "UNSIGNED-PAYLOAD"}, "\n")
	sum := sha256.Sum256([]byte(canonical))
	toSign := "GOOG4-RSA-SHA256\n" + q.Get("X-Goog-Date") + "\n" + scope + "\n" + hex.EncodeToString(sum[:])
	digest := sha256.Sum256([]byte(toSign))
	sig, err := rsa.SignPKCS1v15(rand.Reader, s.key, crypto.SHA256, digest[:])
	if err != nil {
		return nil, err
	}
	q.Set("X-Goog-Signature", hex.EncodeToString(sig))
	return &url.URL{
		Scheme:   s.base.Scheme,
		Host:     s.base.Host,
		Path:     "/" + s.bucket + "/" + name,
		RawPath:  path,
		RawQuery: q.Encode(),
	}, nil
}
