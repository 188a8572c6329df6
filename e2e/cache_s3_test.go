package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/cache"
	"github.com/drover-ci/drover/internal/cache/azuretest"
	"github.com/drover-ci/drover/internal/cache/gcstest"
	"github.com/drover-ci/drover/internal/cache/s3test"
	"github.com/drover-ci/drover/internal/client"
)

// sharedCacheBackend is a shared cache server for the tests: the
// [runners.cache.*] section that points at it, how its object names are
// listed, and the start of the URLs the helper logs.
type sharedCacheBackend struct {
	section string
	keys    func(t *testing.T) []string
	url     string
	secret  string // a credential the job environment must not see
	// check, when set, runs after the round trips (one drover process
	// each).
	check func(t *testing.T)
}

// TestSharedCache runs the shell executor of a real drover run with each
// shared cache type on a real server or its stand-in (versitygw for S3,
// also behind an STS AssumeRole stand-in for RoleARN, fake-gcs-server for
// GCS, the Azure blob stand-in): a job's cache lands at GitLab's object
// name (with the runner's namespace, and without it when Shared = true),
// and a job on a machine without the local archive restores it from the
// bucket. The job environment never sees the bucket's credentials.
func TestSharedCache(t *testing.T) {
	for _, tc := range []struct {
		name    string
		backend func(t *testing.T) sharedCacheBackend
	}{
		{"s3", func(t *testing.T) sharedCacheBackend {
			srv := s3test.Start(t)
			return sharedCacheBackend{s3Section(srv.Addr, srv, ""), s3Keys(srv), "http://" + srv.Addr, srv.SecretKey, nil}
		}},
		{"s3 RoleARN", func(t *testing.T) sharedCacheBackend {
			srv := s3test.Start(t)
			sts := s3test.StartSTS(t, srv, "arn:aws:iam::123456789012:role/cache")
			return sharedCacheBackend{s3Section(sts.Addr, srv, fmt.Sprintf("      RoleARN = %q\n", sts.RoleARN)), s3Keys(srv), "http://" + sts.Addr, srv.SecretKey,
				func(t *testing.T) {
					// Each drover process assumes the role once for
					// all its jobs' URLs.
					if n := sts.Calls(); n != 2 {
						t.Errorf("the role was assumed %d times by 2 drover runs of 2 jobs each, want 2", n)
					}
				}}
		}},
		{"gcs", func(t *testing.T) sharedCacheBackend {
			srv := gcstest.Start(t)
			return sharedCacheBackend{fmt.Sprintf(`    Type = "gcs"
    [runners.cache.gcs]
      CredentialsFile = %q
      BucketName = %q
      DroverTestEndpoint = %q
`, srv.CredentialsFile, srv.Bucket, srv.Endpoint), func(t *testing.T) []string {
				keys, err := srv.Keys()
				if err != nil {
					t.Fatal(err)
				}
				return keys
			}, srv.Endpoint + "/" + srv.Bucket + "/", "PRIVATE KEY", nil}
		}},
		{"azure", func(t *testing.T) sharedCacheBackend {
			srv := azuretest.Start(t)
			return sharedCacheBackend{fmt.Sprintf(`    Type = "azure"
    [runners.cache.azure]
      AccountName = %q
      AccountKey = %q
      ContainerName = %q
      DroverTestEndpoint = %q
`, srv.Account, srv.Key, srv.Container, srv.Endpoint), func(*testing.T) []string { return srv.Keys() },
				srv.Endpoint + "/" + srv.Container + "/", srv.Key, nil}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := tc.backend(t)
			for _, shared := range []bool{false, true} {
				t.Run(fmt.Sprintf("shared=%v", shared), func(t *testing.T) { sharedCacheRoundTrip(t, b, shared) })
			}
			if b.check != nil {
				b.check(t)
			}
		})
	}
}

// s3Section is the [runners.cache.s3] of srv through the endpoint addr,
// with the lines extra.
func s3Section(addr string, srv *s3test.Server, extra string) string {
	return fmt.Sprintf(`    Type = "s3"
    [runners.cache.s3]
      ServerAddress = %q
      AccessKey = %q
      SecretKey = %q
      BucketName = %q
      BucketLocation = "us-east-1"
      Insecure = true
`, addr, srv.AccessKey, srv.SecretKey, srv.Bucket) + extra
}

func s3Keys(srv *s3test.Server) func(t *testing.T) []string {
	return func(t *testing.T) []string {
		keys, err := srv.Keys(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return keys
	}
}

// sharedCacheRoundTrip: a job fills the cache, another on a machine
// without the local archive restores it from b.
func sharedCacheRoundTrip(t *testing.T, b sharedCacheBackend, shared bool) {
	dir := t.TempDir()
	c := startCoordinator(t, filepath.Join(dir, "coord"))
	token := c.runnerToken(t)
	cacheDir := filepath.Join(dir, "cache")
	cfg := writeConfig(t, dir, c.url, token, 1, fmt.Sprintf(`  cache_dir = %q
  [runners.cache]
    Path = "ci"
    Shared = %v
`, cacheDir, shared)+b.section)
	m := start(t, dir, "run", "--config", cfg)
	m.waitLog("runner manager started", 10*time.Second)
	cl := c.client()
	repo, shas := gitRepo(t)
	key := fmt.Sprintf("deps-%v", shared)
	spec := func(name string, script ...string) client.JobSpec {
		return client.JobSpec{
			Name: name, Project: "g/p", Script: script,
			Variables: []client.Variable{{Key: "GIT_STRATEGY", Value: "clone"}},
			Git:       &client.Git{RepoURL: "file://" + repo, Ref: "main", Sha: shas[1]},
			Cache:     []json.RawMessage{json.RawMessage(`{"key":"` + key + `","paths":["deps/"]}`)},
		}
	}
	run := func(s client.JobSpec) string {
		t.Helper()
		_, log := runSuccess(t, cl, s, 60*time.Second)
		return log
	}
	log := run(spec("fill", "test ! -e deps/lib.txt", "mkdir -p deps", "echo from-the-bucket > deps/lib.txt", "! env | grep -qF -- '"+b.secret+"'"))
	if !strings.Contains(log, "Uploading cache.zip to "+b.url) || !strings.Contains(log, "Created cache") {
		t.Errorf("fill job's log lacks the upload to %s:\n%s", b.url, log)
	}
	prefix := "ci/runner/" + cache.ShortToken(token) + "/project/"
	if shared {
		prefix = "ci/project/"
	}
	keys := b.keys(t)
	var found string
	for _, k := range keys {
		if strings.HasPrefix(k, prefix) && strings.HasSuffix(k, "/"+key) && strings.Count(k[len(prefix):], "/") == 1 {
			found = k
		}
	}
	if found == "" {
		t.Fatalf("bucket keys %q: none is %s<project id>/%s", keys, prefix, key)
	}

	// Another machine: no local archive.
	if err := os.RemoveAll(cacheDir); err != nil {
		t.Fatal(err)
	}
	log = run(spec("use", "cat deps/lib.txt"))
	if !strings.Contains(log, "from-the-bucket") || !strings.Contains(log, "Downloading cache.zip from "+b.url) {
		t.Errorf("use job did not restore from the bucket:\n%s", log)
	}
	m.signal(syscall.SIGTERM)
	m.wait(20 * time.Second)
}

// TestSharedCacheWrongCredentials: with a secret key the S3 server does
// not know, the signed URLs are refused: the job's log warns that the
// cache could not be saved or restored, and the job succeeds (the cache
// is best effort).
func TestSharedCacheWrongCredentials(t *testing.T) {
	srv := s3test.Start(t)
	dir := t.TempDir()
	c := startCoordinator(t, filepath.Join(dir, "coord"))
	cfg := writeConfig(t, dir, c.url, c.runnerToken(t), 1, fmt.Sprintf(`  cache_dir = %q
  [runners.cache]
    Type = "s3"
    [runners.cache.s3]
      ServerAddress = %q
      AccessKey = %q
      SecretKey = "not-the-secret"
      BucketName = %q
      BucketLocation = "us-east-1"
      Insecure = true
`, filepath.Join(dir, "cache"), srv.Addr, srv.AccessKey, srv.Bucket))
	m := start(t, dir, "run", "--config", cfg)
	m.waitLog("runner manager started", 10*time.Second)
	cl := c.client()
	spec := client.JobSpec{
		Name: "wrong key", Project: "g/p", Script: []string{"mkdir -p deps", "echo x > deps/x"},
		Variables: []client.Variable{{Key: "GIT_STRATEGY", Value: "none"}},
		Cache:     []json.RawMessage{json.RawMessage(`{"key":"k","paths":["deps/"]}`)},
	}
	_, log := runSuccess(t, cl, spec, 60*time.Second)
	for _, want := range []string{"Uploading cache.zip to http://" + srv.Addr, "403", "WARNING: Failed to create cache"} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %q:\n%s", want, log)
		}
	}
	if keys, err := srv.Keys(context.Background()); err != nil || len(keys) != 0 {
		t.Errorf("bucket keys = %q, %v; want none", keys, err)
	}
	_, log = runSuccess(t, cl, spec, 60*time.Second)
	if !strings.Contains(log, "Checking cache for k...") || !strings.Contains(log, "403") {
		t.Errorf("restore with the wrong key did not report the refusal:\n%s", log)
	}
	m.signal(syscall.SIGTERM)
	m.wait(20 * time.Second)
}
