package azure

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/sas"
	"github.com/google/go-cmp/cmp"

	"github.com/drover-ci/drover/internal/cache"
	"github.com/drover-ci/drover/internal/cache/azuretest"
	"github.com/drover-ci/drover/internal/cache/cachetest"
)

func newSigner(t *testing.T, cfg *cache.AzureConfig) *Signer {
	t.Helper()
	s, err := New(cfg)
	if err != nil {
		t.Fatalf("azure.New = %v", err)
	}
	return s
}

func newStore(s *Signer) *cache.SignedStore {
	return &cache.SignedStore{Signer: s, Transfer: &cache.Transfer{Attempts: 2, Backoff: time.Millisecond}}
}

// TestSASMatchesAzureSDK signs the same tokens as Azure's own SDK does
// (the one GitLab Runner uses) and wants the same signatures and URLs.
func TestSASMatchesAzureSDK(t *testing.T) {
	t.Parallel()
	key := make([]byte, 64)
	_, _ = rand.Read(key)
	cfg := &cache.AzureConfig{AccountName: "acct", AccountKey: b64(key), ContainerName: "cache"}
	s := newSigner(t, cfg)
	at := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	s.now = func() time.Time { return at }
	cred, err := azblob.NewSharedKeyCredential("acct", cfg.AccountKey)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ perm, name string }{{"r", "ci/runner/abc/project/42/main deps"}, {"w", "project/1/k+é"}} {
		v := sas.BlobSignatureValues{
			Protocol: sas.ProtocolHTTPS, StartTime: at.Add(-time.Hour), ExpiryTime: at.Add(2 * time.Hour),
			Permissions: tc.perm, ContainerName: "cache", BlobName: tc.name, Version: SASVersion,
		}
		qp, err := v.SignWithSharedKey(cred)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := url.ParseQuery(qp.Encode())
		var u *url.URL
		if tc.perm == "r" {
			u, _ = s.GetURL(t.Context(), tc.name, 2*time.Hour)
		} else {
			u, _, _ = s.PutURL(t.Context(), tc.name, 2*time.Hour)
		}
		if diff := cmp.Diff(want, u.Query()); diff != "" {
			t.Errorf("%s %s: SAS (-Azure SDK +drover):\n%s", tc.perm, tc.name, diff)
		}
		parts := sas.URLParts{Scheme: "https", Host: "acct.blob.core.windows.net", ContainerName: "cache", BlobName: tc.name}
		if got, want := u.Scheme+"://"+u.Host+u.EscapedPath(), parts.String(); got != want {
			t.Errorf("%s: URL %s, want %s as the SDK builds it", tc.name, got, want)
		}
	}
}

func b64(b []byte) string {
	return base64.StdEncoding.EncodeToString(b)
}

func TestConformance(t *testing.T) {
	t.Parallel()
	srv := azuretest.Start(t)
	cachetest.Run(t, cachetest.Harness{
		NewStore: func(t *testing.T, _ cache.Config) cache.Store { return newStore(newSigner(t, srv.Config())) },
		Keys:     func(*testing.T) []string { return srv.Keys() },
	})
}

// TestMissingContainerIsNotAMiss: a container that does not exist is a
// configuration error to report, not a cache miss to pass over quietly.
func TestMissingContainerIsNotAMiss(t *testing.T) {
	t.Parallel()
	srv := azuretest.Start(t)
	cfg := srv.Config()
	cfg.ContainerName = "no-such-container"
	_, err := newStore(newSigner(t, cfg)).Download(t.Context(), "x", io.Discard)
	if err == nil || errors.Is(err, cache.ErrNotFound) || !strings.Contains(err.Error(), "ContainerNotFound") {
		t.Errorf("Download from a missing container = %v, want ContainerNotFound, not a miss", err)
	}
}

// TestRefusedTokens: the stand-in refuses what Azure refuses, and the
// client reports each as an authentication failure.
func TestRefusedTokens(t *testing.T) {
	t.Parallel()
	srv := azuretest.Start(t)
	other := azuretest.Start(t)
	good := newSigner(t, srv.Config())
	if err := newStore(good).Upload(t.Context(), "x", strings.NewReader("data"), 4); err != nil {
		t.Fatalf("Upload = %v", err)
	}
	wrongKey := srv.Config()
	wrongKey.AccountKey = other.Key
	expired := newSigner(t, srv.Config())
	expired.now = func() time.Time { return time.Now().Add(-3 * time.Hour) }
	httpsOnly := newSigner(t, srv.Config())
	httpsOnly.protocol = "https"

	get := func(s *Signer) string { u, _ := s.GetURL(t.Context(), "x", time.Hour); return u.String() }
	put := func(s *Signer) string { u, _, _ := s.PutURL(t.Context(), "x", time.Hour); return u.String() }
	tampered, _ := url.Parse(get(good))
	q := tampered.Query()
	q.Set("sp", "rw") // more than was signed
	tampered.RawQuery = q.Encode()

	tr := &cache.Transfer{Attempts: 1}
	_, hdr, _ := good.PutURL(t.Context(), "x", time.Hour)
	for _, tc := range []struct {
		name   string
		upload bool
		url    string
		code   string
	}{
		{"wrong key", false, get(newSigner(t, wrongKey)), "AuthenticationFailed"},
		{"expired", false, get(expired), "AuthenticationFailed"},
		{"https only over http", false, get(httpsOnly), "AuthorizationProtocolMismatch"},
		{"tampered permissions", true, tampered.String(), "AuthenticationFailed"},
		{"read token used to write", true, get(good), "AuthorizationPermissionMismatch"},
		{"write token used to read", false, put(good), "AuthorizationPermissionMismatch"},
	} {
		var err error
		if tc.upload {
			err = tr.Upload(t.Context(), tc.url, hdr, strings.NewReader("evil"), 4)
		} else {
			_, err = tr.Download(t.Context(), tc.url, io.Discard)
		}
		if !errors.Is(err, cache.ErrAuth) || !strings.Contains(err.Error(), tc.code) || strings.Contains(err.Error(), "sig=") {
			t.Errorf("%s: %v, want ErrAuth with %s and no signature shown", tc.name, err, tc.code)
		}
	}
	var got bytes.Buffer
	if _, err := newStore(good).Download(t.Context(), "x", &got); err != nil || got.String() != "data" {
		t.Errorf("blob after refused writes = %q, %v; want \"data\"", got.String(), err)
	}
}

// TestPutBlobNeedsBlobType: Put Blob without x-ms-blob-type is refused,
// so the header PutURL returns matters.
func TestPutBlobNeedsBlobType(t *testing.T) {
	t.Parallel()
	srv := azuretest.Start(t)
	u, hdr, _ := newSigner(t, srv.Config()).PutURL(t.Context(), "x", time.Hour)
	if hdr.Get("X-Ms-Blob-Type") != "BlockBlob" {
		t.Errorf("PUT headers %v lack x-ms-blob-type: BlockBlob", hdr)
	}
	err := (&cache.Transfer{Attempts: 1}).Upload(t.Context(), u.String(), http.Header{}, strings.NewReader("data"), 4)
	if err == nil || !strings.Contains(err.Error(), "MissingRequiredHeader") {
		t.Errorf("Upload without x-ms-blob-type = %v, want MissingRequiredHeader", err)
	}
}

func TestNewRefuses(t *testing.T) {
	t.Parallel()
	for _, cfg := range []*cache.AzureConfig{
		{AccountName: "a", ContainerName: "c", AccountKey: "not base64!"},
		{AccountName: "a", ContainerName: "c"},
		{AccountName: "a", AccountKey: "a2V5"},
	} {
		if _, err := New(cfg); err == nil {
			t.Errorf("New(%+v) = nil error, want one", cfg)
		}
	}
}
