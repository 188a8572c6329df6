package s3_test

import (
	"bytes"
	"crypto/rand"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/drover-ci/drover/internal/cache"
	"github.com/drover-ci/drover/internal/cache/cachetest"
	"github.com/drover-ci/drover/internal/cache/s3"
	"github.com/drover-ci/drover/internal/cache/s3test"
)

// fastRetries keeps the tests of failures short: the policy is the same,
// only the waits shrink.
func fastRetries() *cache.Transfer { return &cache.Transfer{Attempts: 2, Backoff: time.Millisecond} }

func newStore(t *testing.T, cfg *cache.S3Config) *cache.SignedStore {
	t.Helper()
	p, err := s3.New(cfg)
	if err != nil {
		t.Fatalf("s3.New = %v", err)
	}
	return &cache.SignedStore{Signer: p, Transfer: fastRetries()}
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return b
}

func TestConformance(t *testing.T) {
	t.Parallel()
	srv := s3test.Start(t)
	cachetest.Run(t, cachetest.Harness{
		NewStore: func(t *testing.T, _ cache.Config) cache.Store { return newStore(t, srv.Config()) },
		Keys: func(t *testing.T) []string {
			keys, err := srv.Keys(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			return keys
		},
	})
}

func TestWrongCredentials(t *testing.T) {
	t.Parallel()
	srv := s3test.Start(t)
	for _, bad := range []func(*cache.S3Config){
		func(c *cache.S3Config) { c.SecretKey = "wrong-secret" },
		func(c *cache.S3Config) { c.AccessKey = "nobody" },
	} {
		cfg := srv.Config()
		bad(cfg)
		c := cache.New(nil, cache.Config{}, "tok", newStore(t, cfg))
		err := c.Save(t.Context(), "x", strings.NewReader("data"), 4)
		if !errors.Is(err, cache.ErrAuth) || !strings.Contains(err.Error(), "authentication") {
			t.Errorf("Save with wrong credentials = %v, want ErrAuth mentioning authentication", err)
		}
		_, err = c.Restore(t.Context(), "x", io.Discard)
		if !errors.Is(err, cache.ErrAuth) {
			t.Errorf("Restore with wrong credentials = %v, want ErrAuth", err)
		}
	}
	if keys, _ := srv.Keys(t.Context()); len(keys) != 0 {
		t.Errorf("bucket holds %q after refused uploads, want nothing", keys)
	}
}

func TestServerDown(t *testing.T) {
	t.Parallel()
	srv := s3test.Start(t)
	c := cache.New(nil, cache.Config{}, "tok", newStore(t, srv.Config()))
	srv.Stop()
	_, err := c.Restore(t.Context(), "x", io.Discard)
	if err == nil || errors.Is(err, cache.ErrNotFound) || !strings.Contains(err.Error(), "after 2 attempts") {
		t.Errorf("Restore from a stopped server = %v, want a connection error after 2 attempts", err)
	}
	if err := c.Save(t.Context(), "x", strings.NewReader("data"), 4); err == nil || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("Save to a stopped server = %v, want connection refused", err)
	}
}

func TestMaxUploadedArchiveSize(t *testing.T) {
	t.Parallel()
	srv := s3test.Start(t)
	c := cache.New(nil, cache.Config{MaxUploadedArchiveSize: 1000}, "tok", newStore(t, srv.Config()))
	if err := c.Save(t.Context(), "small", bytes.NewReader(make([]byte, 1000)), 1000); err != nil {
		t.Fatalf("Save(1000 bytes, cap 1000) = %v", err)
	}
	err := c.Save(t.Context(), "big", bytes.NewReader(make([]byte, 1001)), 1001)
	if !errors.Is(err, cache.ErrTooLarge) || !strings.Contains(err.Error(), "MaxUploadedArchiveSize") {
		t.Errorf("Save(1001 bytes, cap 1000) = %v, want ErrTooLarge naming MaxUploadedArchiveSize", err)
	}
	if keys, _ := srv.Keys(t.Context()); !cmp.Equal(keys, []string{"small"}) {
		t.Errorf("bucket keys = %q, want only small", keys)
	}
}

// TestPresignedURLsNeedNoCredentials moves an object with a bare HTTP
// client, as a job's helper would, and checks the server does verify the
// signature: a URL with its signature altered is refused.
func TestPresignedURLsNeedNoCredentials(t *testing.T) {
	t.Parallel()
	srv := s3test.Start(t)
	p, err := s3.New(srv.Config())
	if err != nil {
		t.Fatal(err)
	}
	put, hdr, err := p.PutURL(t.Context(), "project/7/key", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPut, put.String(), strings.NewReader("archive"))
	req.Header = hdr
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("PUT to the pre-signed URL = %s, want 200", resp.Status)
	}
	get, err := p.GetURL(t.Context(), "project/7/key", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	resp, err = http.Get(get.String())
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(body) != "archive" {
		t.Errorf("GET of the pre-signed URL = %s %q, want 200 \"archive\"", resp.Status, body)
	}

	q := get.Query()
	sig := []byte(q.Get("X-Amz-Signature"))
	sig[0] ^= 1
	q.Set("X-Amz-Signature", string(sig))
	get.RawQuery = q.Encode()
	_, err = (&cache.Transfer{Attempts: 1}).Download(t.Context(), get.String(), io.Discard)
	if !errors.Is(err, cache.ErrAuth) {
		t.Errorf("Download with a tampered signature = %v, want ErrAuth", err)
	}
	if strings.Contains(err.Error(), "X-Amz-Signature") {
		t.Errorf("error %q shows the URL's signature", err)
	}
}

func TestValidateNamesFields(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cfg  cache.Config
		want []string
	}{
		{cache.Config{Type: "s3"}, []string{"needs a [runners.cache.s3] section"}},
		{cache.Config{Type: "s3", S3: &cache.S3Config{AuthenticationType: "access-key"}}, []string{"BucketName: required", "needs AccessKey and SecretKey"}},
		{cache.Config{Type: "s3", S3: &cache.S3Config{BucketName: "b", ServerSideEncryption: "KMS"}}, []string{"ServerSideEncryptionKeyID"}},
		{cache.Config{Type: "s3", MaxUploadedArchiveSize: -1, S3: &cache.S3Config{BucketName: "b", ServerAddress: "http://x"}}, []string{"MaxUploadedArchiveSize", "without a scheme"}},
		{cache.Config{Type: "s3", S3: &cache.S3Config{BucketName: "b", ServerAddress: "minio:9000", Accelerate: true}}, []string{"Accelerate: S3 Transfer Acceleration exists on AWS only"}},
		{cache.Config{Type: "s3", S3: &cache.S3Config{BucketName: "a.b", Accelerate: true}}, []string{"has a dot"}},
		{cache.Config{Type: "s3", S3: &cache.S3Config{BucketName: "b", RoleARN: "arn:aws:iam::1:role/r"}}, []string{"assuming a role needs AccessKey and SecretKey"}},
		{cache.Config{Type: "gcs"}, []string{"needs a [runners.cache.gcs] section"}},
		{cache.Config{Type: "gcs", GCS: &cache.GCSConfig{}}, []string{"BucketName: required", "needs CredentialsFile, or AccessID and PrivateKey"}},
		{cache.Config{Type: "gcs", GCS: &cache.GCSConfig{BucketName: "b", CredentialsFile: "k.json", DroverTestEndpoint: "127.0.0.1:1"}}, []string{"DroverTestEndpoint"}},
		{cache.Config{Type: "azure"}, []string{"needs a [runners.cache.azure] section"}},
		{cache.Config{Type: "azure", Azure: &cache.AzureConfig{}}, []string{"AccountName: required", "ContainerName: required", "AccountKey: required"}},
		{cache.Config{Type: "azure", Azure: &cache.AzureConfig{AccountName: "a", ContainerName: "c", AccountKey: "%%"}}, []string{"AccountKey: not base64"}},
		{cache.Config{Type: "ftp"}, []string{`Type = "ftp": unknown`}},
	} {
		err := tc.cfg.Validate()
		for _, w := range tc.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("Validate(%+v) = %v, want it to mention %q", tc.cfg, err, w)
			}
		}
	}
	for _, ok := range []cache.Config{
		{},
		{Type: "s3", S3: &cache.S3Config{BucketName: "b"}}, // iam
		{Type: "s3", S3: &cache.S3Config{BucketName: "b", ServerAddress: "s3:9000", AccessKey: "a", SecretKey: "s", ServerSideEncryption: "aws:kms", ServerSideEncryptionKeyID: "k"}},
		{Type: "s3", S3: &cache.S3Config{BucketName: "b", Accelerate: true, AccessKey: "a", SecretKey: "s", UploadRoleARN: "arn:aws:iam::1:role/r"}},
		{Type: "s3", S3: &cache.S3Config{BucketName: "b", ServerAddress: "s3.eu-west-1.amazonaws.com", Accelerate: true}},
		{Type: "gcsv2", GCS: &cache.GCSConfig{BucketName: "b", AccessID: "a@p.iam.gserviceaccount.com", PrivateKey: "k"}},
		{Type: "azure", Azure: &cache.AzureConfig{AccountName: "a", ContainerName: "c", AccountKey: "a2V5"}},
	} {
		if err := ok.Validate(); err != nil {
			t.Errorf("Validate(%+v) = %v, want nil", ok, err)
		}
	}
}

// bigReaderAt pretends to be a huge archive; reading it is a test failure.
type bigReaderAt struct{ t *testing.T }

func (b bigReaderAt) ReadAt([]byte, int64) (int, error) {
	b.t.Error("an archive over 5 GiB was read")
	return 0, io.EOF
}

func TestUploadOver5GiBRefused(t *testing.T) {
	t.Parallel()
	err := fastRetries().Upload(t.Context(), "http://127.0.0.1:1/x", nil, bigReaderAt{t}, cache.MaxSinglePut+1)
	if !errors.Is(err, cache.ErrTooLarge) || !strings.Contains(err.Error(), "5 GiB") {
		t.Errorf("Upload(5 GiB + 1) = %v, want ErrTooLarge mentioning 5 GiB", err)
	}
}

// TestMissingBucketIsNotAMiss: a bucket that does not exist is a
// configuration error to report, not a cache miss to pass over quietly.
func TestMissingBucketIsNotAMiss(t *testing.T) {
	t.Parallel()
	srv := s3test.Start(t)
	cfg := srv.Config()
	cfg.BucketName = "no-such-bucket"
	_, err := newStore(t, cfg).Download(t.Context(), "x", io.Discard)
	if err == nil || errors.Is(err, cache.ErrNotFound) || !strings.Contains(err.Error(), "NoSuchBucket") {
		t.Errorf("Download from a missing bucket = %v, want a NoSuchBucket error that is not ErrNotFound", err)
	}
}
