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
	"github.com/drover-ci/drover/internal/cache/s3test"
	"github.com/drover-ci/drover/internal/client"
)

// TestSharedCacheS3 runs the shell executor of a real drover run with
// [runners.cache] Type = "s3" on a real S3 server (versitygw): a job's
// cache lands at GitLab's object name (with the runner's namespace, and
// without it when Shared = true), and a job on a machine without the local
// archive restores it from the bucket. The job environment never sees the
// bucket's credentials.
func TestSharedCacheS3(t *testing.T) {
	srv := s3test.Start(t)
	for _, shared := range []bool{false, true} {
		t.Run(fmt.Sprintf("shared=%v", shared), func(t *testing.T) {
			dir := t.TempDir()
			c := startCoordinator(t, filepath.Join(dir, "coord"))
			token := c.runnerToken(t)
			cacheDir := filepath.Join(dir, "cache")
			cfg := writeConfig(t, dir, c.url, token, 1, fmt.Sprintf(`  cache_dir = %q
  [runners.cache]
    Type = "s3"
    Path = "ci"
    Shared = %v
    [runners.cache.s3]
      ServerAddress = %q
      AccessKey = %q
      SecretKey = %q
      BucketName = %q
      BucketLocation = "us-east-1"
      Insecure = true
`, cacheDir, shared, srv.Addr, srv.AccessKey, srv.SecretKey, srv.Bucket))
			m := start(t, dir, "run", "--config", cfg)
			m.waitLog("runner manager started", 10*time.Second)
			cl := c.client()
			ctx := context.Background()
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
			log := run(spec("fill", "test ! -e deps/lib.txt", "mkdir -p deps", "echo from-s3 > deps/lib.txt", "! env | grep -qF "+srv.SecretKey))
			if !strings.Contains(log, "Uploading cache.zip to http://"+srv.Addr) || !strings.Contains(log, "Created cache") {
				t.Errorf("fill job's log lacks the upload:\n%s", log)
			}
			keys, err := srv.Keys(ctx)
			if err != nil {
				t.Fatal(err)
			}
			prefix := "ci/runner/" + cache.ShortToken(token) + "/project/"
			if shared {
				prefix = "ci/project/"
			}
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
			if !strings.Contains(log, "from-s3") || !strings.Contains(log, "Downloading cache.zip from http://"+srv.Addr) {
				t.Errorf("use job did not restore from the bucket:\n%s", log)
			}
			m.signal(syscall.SIGTERM)
			m.wait(20 * time.Second)
		})
	}
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
