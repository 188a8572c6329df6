package s3_test

import (
	"bytes"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/cache"
	"github.com/drover-ci/drover/internal/cache/s3"
	"github.com/drover-ci/drover/internal/cache/s3test"
)

const roleARN = "arn:aws:iam::123456789012:role/drover-cache"

// credential is the access key a pre-signed URL was signed with.
func credential(u *url.URL) string {
	access, _, _ := strings.Cut(u.Query().Get("X-Amz-Credential"), "/")
	return access
}

// TestRoleARNRoundTrip assumes the role through the STS stand-in in front
// of a real S3 server and moves archives with URLs signed by the
// temporary credentials, which are a real account of that server: they
// work, and the role is assumed once for many signings.
func TestRoleARNRoundTrip(t *testing.T) {
	t.Parallel()
	srv := s3test.Start(t)
	sts := s3test.StartSTS(t, srv, roleARN)
	p, err := s3.New(sts.Config())
	if err != nil {
		t.Fatal(err)
	}
	c := cache.New(nil, cache.Config{}, "tok", &cache.SignedStore{Signer: p, Transfer: fastRetries()})
	for _, name := range []string{"project/1/a", "project/1/b"} {
		data := randomBytes(50_000)
		if err := c.Save(t.Context(), name, bytes.NewReader(data), int64(len(data))); err != nil {
			t.Fatalf("Save(%s) = %v", name, err)
		}
		var got bytes.Buffer
		if _, err := c.Restore(t.Context(), name, &got); err != nil || !bytes.Equal(got.Bytes(), data) {
			t.Errorf("Restore(%s) = %v, %d bytes; want the bytes saved", name, err, got.Len())
		}
	}
	keys := sts.AccessKeys()
	if len(keys) != 1 || sts.Calls() != 1 {
		t.Fatalf("AssumeRole answered %d times (keys %q), want once for all signings", sts.Calls(), keys)
	}
	get, err := p.GetURL(t.Context(), "project/1/a", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if got := credential(get); got != keys[0] || got == srv.AccessKey {
		t.Errorf("URL signed by %q, want the role's temporary key %q", got, keys[0])
	}
	if got, _ := srv.Keys(t.Context()); len(got) != 2 {
		t.Errorf("bucket keys = %q, want the two archives", got)
	}
}

// TestUploadRoleARN: only uploads use the role; downloads are signed with
// the configured keys, as GitLab Runner does.
func TestUploadRoleARN(t *testing.T) {
	t.Parallel()
	srv := s3test.Start(t)
	sts := s3test.StartSTS(t, srv, roleARN)
	cfg := sts.Config()
	cfg.RoleARN, cfg.UploadRoleARN = "", roleARN
	p, err := s3.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	store := &cache.SignedStore{Signer: p, Transfer: fastRetries()}
	if err := store.Upload(t.Context(), "k", strings.NewReader("data"), 4); err != nil {
		t.Fatalf("Upload = %v", err)
	}
	var got bytes.Buffer
	if _, err := store.Download(t.Context(), "k", &got); err != nil || got.String() != "data" {
		t.Errorf("Download = %v, %q", err, got.String())
	}
	put, _, _ := p.PutURL(t.Context(), "k", time.Hour)
	get, _ := p.GetURL(t.Context(), "k", time.Hour)
	if keys := sts.AccessKeys(); len(keys) != 1 || credential(put) != keys[0] || credential(get) != srv.AccessKey {
		t.Errorf("PUT signed by %q, GET by %q; want the role's %q and the root's %q", credential(put), credential(get), keys, srv.AccessKey)
	}
}

// TestRoleRefused: a role the STS refuses, or wrong keys for AssumeRole,
// make signing fail with STS's reason, and nothing is signed.
func TestRoleRefused(t *testing.T) {
	t.Parallel()
	srv := s3test.Start(t)
	sts := s3test.StartSTS(t, srv, roleARN)
	for _, tc := range []struct {
		name string
		bad  func(*cache.S3Config)
		want string
	}{
		{"other role", func(c *cache.S3Config) { c.RoleARN = "arn:aws:iam::123456789012:role/other" }, "AccessDenied"},
		{"wrong secret", func(c *cache.S3Config) { c.SecretKey = "wrong" }, "SignatureDoesNotMatch"},
	} {
		cfg := sts.Config()
		tc.bad(cfg)
		p, err := s3.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := p.GetURL(t.Context(), "k", time.Hour); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: GetURL = %v, want an error with %s", tc.name, err, tc.want)
		}
	}
	if sts.Calls() != 0 {
		t.Errorf("AssumeRole handed out %d credentials, want none", sts.Calls())
	}
}

// TestRoleURLsLiveNoLongerThanCredentials: URLs signed with temporary
// credentials expire with them, and carry their session token.
func TestRoleURLsLiveNoLongerThanCredentials(t *testing.T) {
	t.Parallel()
	srv := s3test.Start(t)
	sts := s3test.StartSTS(t, srv, roleARN)
	sts.Lifetime, sts.SessionToken = 20*time.Minute, "FwoGZXIvYXdzEXAMPLE"
	p, err := s3.New(sts.Config())
	if err != nil {
		t.Fatal(err)
	}
	u, err := p.GetURL(t.Context(), "k", 3*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	if q.Get("X-Amz-Security-Token") != sts.SessionToken {
		t.Errorf("X-Amz-Security-Token = %q, want the session token", q.Get("X-Amz-Security-Token"))
	}
	if exp := q.Get("X-Amz-Expires"); exp > "1200" || len(exp) != 4 || exp < "1100" {
		t.Errorf("X-Amz-Expires = %s, want about 1200 s (the credentials' 20 minutes), not 3 hours", exp)
	}
}

// TestAccelerate signs for the accelerate endpoint on AWS, and refuses
// elsewhere, where acceleration does not exist.
func TestAccelerate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		server, want string
	}{
		{"", "https://drover-cache.s3-accelerate.amazonaws.com/k?"},
		{"s3-accelerate.amazonaws.com", "https://drover-cache.s3-accelerate.amazonaws.com/k?"},
		{"s3-accelerate.dualstack.amazonaws.com", "https://drover-cache.s3-accelerate.dualstack.amazonaws.com/k?"},
	} {
		cfg := &cache.S3Config{ServerAddress: tc.server, AccessKey: "AKIAEXAMPLE", SecretKey: "secret", BucketName: "drover-cache", AuthenticationType: "access-key", Accelerate: true}
		p, err := s3.New(cfg)
		if err != nil {
			t.Fatalf("New(%q) = %v", tc.server, err)
		}
		u, err := p.GetURL(t.Context(), "k", time.Hour)
		if err != nil || !strings.HasPrefix(u.String(), tc.want) {
			t.Errorf("ServerAddress %q: GetURL = %v, %v; want %s...", tc.server, u, err, tc.want)
		}
	}
	_, err := s3.New(&cache.S3Config{ServerAddress: "minio:9000", AccessKey: "a", SecretKey: "s", BucketName: "b", Accelerate: true})
	if err == nil || !strings.Contains(err.Error(), "AWS only") {
		t.Errorf("New(Accelerate on minio:9000) = %v, want a refusal saying AWS only", err)
	}
}
