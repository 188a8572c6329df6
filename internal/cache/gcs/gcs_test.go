package gcs

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/storage"

	"github.com/drover-ci/drover/internal/cache"
	"github.com/drover-ci/drover/internal/cache/cachetest"
	"github.com/drover-ci/drover/internal/cache/gcstest"
)

func newStore(t *testing.T, cfg *cache.GCSConfig, maxSize int64) *cache.SignedStore {
	t.Helper()
	s, err := New(cfg, maxSize)
	if err != nil {
		t.Fatalf("gcs.New = %v", err)
	}
	return &cache.SignedStore{Signer: s, Transfer: &cache.Transfer{Attempts: 2, Backoff: time.Millisecond}}
}

// TestSignaturesMatchGoogleLibrary signs the same requests as Google's
// own storage library does with the V4 scheme, at the same instant, and
// wants the very same URLs.
func TestSignaturesMatchGoogleLibrary(t *testing.T) {
	t.Parallel()
	srv := gcstest.Start(t) // for a key
	cfg := &cache.GCSConfig{AccessID: srv.AccessID, PrivateKey: srv.PrivateKey, BucketName: "bucket"}
	s, err := New(cfg, 1000)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		method, name string
		opts         storage.SignedURLOptions
	}{
		{http.MethodGet, "ci/runner/abc/project/42/main deps+x", storage.SignedURLOptions{}},
		{http.MethodPut, "ci/project/42/k", storage.SignedURLOptions{ContentType: "application/octet-stream", Headers: []string{"x-goog-content-length-range:0,1000"}}},
	} {
		opts := tc.opts
		opts.Method, opts.GoogleAccessID, opts.PrivateKey = tc.method, srv.AccessID, []byte(srv.PrivateKey)
		opts.Scheme, opts.Expires = storage.SigningSchemeV4, time.Now().Add(time.Hour)
		want, err := storage.SignedURL("bucket", tc.name, &opts)
		if err != nil {
			t.Fatal(err)
		}
		wu, _ := url.Parse(want)
		at, _ := time.Parse("20060102T150405Z", wu.Query().Get("X-Goog-Date"))
		secs, _ := strconv.Atoi(wu.Query().Get("X-Goog-Expires"))
		s.now = func() time.Time { return at }
		var got *url.URL
		if tc.method == http.MethodGet {
			got, err = s.GetURL(t.Context(), tc.name, time.Duration(secs)*time.Second)
		} else {
			got, _, err = s.PutURL(t.Context(), tc.name, time.Duration(secs)*time.Second)
		}
		if err != nil {
			t.Fatal(err)
		}
		if got.String() != want {
			t.Errorf("%s %s:\n got %s\nwant %s", tc.method, tc.name, got, want)
		}
	}
}

func TestConformance(t *testing.T) {
	t.Parallel()
	srv := gcstest.Start(t)
	cachetest.Run(t, cachetest.Harness{
		NewStore: func(t *testing.T, cfg cache.Config) cache.Store {
			return newStore(t, srv.Config(), cfg.MaxUploadedArchiveSize)
		},
		Keys: func(t *testing.T) []string {
			keys, err := srv.Keys()
			if err != nil {
				t.Fatal(err)
			}
			return keys
		},
	})
}

// TestCredentialsFile signs with the key of a service account's JSON key
// file.
func TestCredentialsFile(t *testing.T) {
	t.Parallel()
	srv := gcstest.Start(t)
	cfg := srv.Config()
	cfg.AccessID, cfg.PrivateKey, cfg.CredentialsFile = "", "", srv.CredentialsFile
	st := newStore(t, cfg, 0)
	if err := st.Upload(t.Context(), "k", strings.NewReader("data"), 4); err != nil {
		t.Fatalf("Upload = %v", err)
	}
	var got bytes.Buffer
	if _, err := st.Download(t.Context(), "k", &got); err != nil || got.String() != "data" {
		t.Errorf("Download = %v, %q; want \"data\"", err, got.String())
	}
}

// TestWrongKeyRefused: URLs signed with another key, or for another
// account, or tampered with, are refused as authentication failures.
func TestWrongKeyRefused(t *testing.T) {
	t.Parallel()
	srv := gcstest.Start(t)
	other := gcstest.Start(t)
	for name, cfg := range map[string]*cache.GCSConfig{
		"other key":     {AccessID: srv.AccessID, PrivateKey: other.PrivateKey, BucketName: srv.Bucket, DroverTestEndpoint: srv.Endpoint},
		"other account": {AccessID: other.AccessID, PrivateKey: srv.PrivateKey, BucketName: srv.Bucket, DroverTestEndpoint: srv.Endpoint},
	} {
		st := newStore(t, cfg, 0)
		if err := st.Upload(t.Context(), "x", strings.NewReader("data"), 4); !errors.Is(err, cache.ErrAuth) {
			t.Errorf("%s: Upload = %v, want ErrAuth", name, err)
		}
		if _, err := st.Download(t.Context(), "x", io.Discard); !errors.Is(err, cache.ErrAuth) {
			t.Errorf("%s: Download = %v, want ErrAuth", name, err)
		}
	}
	s, _ := New(srv.Config(), 0)
	u, err := s.GetURL(t.Context(), "x", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("X-Goog-Expires", "120") // not what was signed
	u.RawQuery = q.Encode()
	_, err = (&cache.Transfer{Attempts: 1}).Download(t.Context(), u.String(), io.Discard)
	if !errors.Is(err, cache.ErrAuth) || strings.Contains(err.Error(), "X-Goog-Signature") {
		t.Errorf("Download of a tampered URL = %v, want ErrAuth without the URL's signature", err)
	}
	if keys, _ := srv.Keys(); len(keys) != 0 {
		t.Errorf("bucket holds %q after refused uploads, want nothing", keys)
	}
}

// TestUploadOverMaxSizeRefusedByServer: the size cap is signed into the
// URL, so the server refuses a larger body even from a client that does
// not check it.
func TestUploadOverMaxSizeRefusedByServer(t *testing.T) {
	t.Parallel()
	srv := gcstest.Start(t)
	s, _ := New(srv.Config(), 10)
	u, h, err := s.PutURL(t.Context(), "big", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if got := h.Get("X-Goog-Content-Length-Range"); got != "0,10" {
		t.Errorf("PUT header X-Goog-Content-Length-Range = %q, want 0,10", got)
	}
	err = (&cache.Transfer{Attempts: 1}).Upload(t.Context(), u.String(), h, strings.NewReader("eleven byte"), 11)
	if err == nil || !strings.Contains(err.Error(), "EntityTooLarge") {
		t.Errorf("Upload(11 bytes, cap 10) = %v, want EntityTooLarge", err)
	}
}

func TestExpiryCappedAtSevenDays(t *testing.T) {
	t.Parallel()
	srv := gcstest.Start(t)
	s, _ := New(srv.Config(), 0)
	u, err := s.GetURL(t.Context(), "x", 30*24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if got := u.Query().Get("X-Goog-Expires"); got != "604800" {
		t.Errorf("X-Goog-Expires = %s, want 604800 (7 days)", got)
	}
}

func TestNewRefusesBadCredentials(t *testing.T) {
	t.Parallel()
	for _, cfg := range []*cache.GCSConfig{
		{AccessID: "a", PrivateKey: "not a key", BucketName: "b"},
		{CredentialsFile: "/nonexistent/key.json", BucketName: "b"},
		{BucketName: "b"},
	} {
		if _, err := New(cfg, 0); err == nil {
			t.Errorf("New(%+v) = nil error, want one", cfg)
		}
	}
}
