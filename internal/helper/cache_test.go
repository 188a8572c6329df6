package helper

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/cache"
	"github.com/drover-ci/drover/internal/cache/s3"
	"github.com/drover-ci/drover/internal/cache/s3test"
)

func writeTree(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for name, body := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestCacheRoundTripS3: `drover helper cache-archiver` uploads through a
// pre-signed PUT URL to a real S3 server (versitygw), and cache-extractor
// on a fresh project directory restores exactly the cached paths from a
// pre-signed GET URL; the helper holds no credentials.
func TestCacheRoundTripS3(t *testing.T) {
	srv := s3test.Start(t)
	p, err := s3.New(srv.Config())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const object = "runner/abc/project/1/main"
	put, hdr, err := p.PutURL(ctx, object, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	get, err := p.GetURL(ctx, object, time.Hour)
	if err != nil {
		t.Fatal(err)
	}

	// A miss first: nothing in the bucket, no local archive.
	fresh := t.TempDir()
	var out bytes.Buffer
	err = ExtractCache(ctx, CacheExtractOptions{Root: fresh, File: filepath.Join(t.TempDir(), "cache.zip"), URL: get.String()}, &out)
	if !errors.Is(err, cache.ErrNotFound) || !strings.Contains(out.String(), "is not in the shared cache") {
		t.Fatalf("miss: err %v, out:\n%s", err, out.String())
	}

	proj := t.TempDir()
	writeTree(t, proj, map[string]string{
		"node_modules/a/index.js": "a", "node_modules/b/x.log": "log", "vendor/v.txt": "v", "src/main.go": "package main",
	})
	out.Reset()
	err = ArchiveCache(ctx, CacheArchiveOptions{
		Root: proj, File: filepath.Join(t.TempDir(), "cache.zip"),
		Paths: []string{"node_modules/", "vendor/"}, Exclude: []string{"**/*.log"},
		URL: put.String(), Header: hdr,
	}, &out)
	if err != nil {
		t.Fatalf("archive: %v\n%s", err, out.String())
	}
	for _, want := range []string{"node_modules/: found", "Uploading cache.zip to"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("archiver output lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "X-Amz-Signature") {
		t.Errorf("the log shows the URL's signature:\n%s", out.String())
	}
	if keys, err := srv.Keys(ctx); err != nil || len(keys) != 1 || keys[0] != object {
		t.Fatalf("bucket holds %v (%v), want [%s]", keys, err, object)
	}

	out.Reset()
	if err := ExtractCache(ctx, CacheExtractOptions{Root: fresh, File: filepath.Join(t.TempDir(), "cache.zip"), URL: get.String()}, &out); err != nil {
		t.Fatalf("extract: %v\n%s", err, out.String())
	}
	for name, want := range map[string]string{"node_modules/a/index.js": "a", "vendor/v.txt": "v"} {
		if b, err := os.ReadFile(filepath.Join(fresh, name)); err != nil || string(b) != want {
			t.Errorf("%s = %q, %v; want %q", name, b, err, want)
		}
	}
	for _, gone := range []string{"node_modules/b/x.log", "src/main.go"} {
		if _, err := os.Stat(filepath.Join(fresh, gone)); err == nil {
			t.Errorf("%s was restored: it is excluded or not cached", gone)
		}
	}
}

// TestCacheLocal: without a URL the archive stays in --file and is
// extracted from there; an empty selection saves nothing; a cap under the
// archive's size refuses the upload; a corrupt archive is refused.
func TestCacheLocal(t *testing.T) {
	ctx := context.Background()
	proj := t.TempDir()
	writeTree(t, proj, map[string]string{"build/out.bin": strings.Repeat("x", 4096)})
	file := filepath.Join(t.TempDir(), "key", "cache.zip")
	var out bytes.Buffer

	if err := ArchiveCache(ctx, CacheArchiveOptions{Root: proj, File: file, Paths: []string{"nothing-here/"}}, &out); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(file); err == nil || !strings.Contains(out.String(), "no files to cache") {
		t.Fatalf("an empty cache was saved (%v):\n%s", err, out.String())
	}

	if err := ArchiveCache(ctx, CacheArchiveOptions{Root: proj, File: file, Paths: []string{"build/"}}, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "stored only locally") {
		t.Errorf("output lacks the local-only line:\n%s", out.String())
	}
	if m, _ := filepath.Glob(file + ".tmp-*"); len(m) != 0 {
		t.Errorf("temporary files left: %v", m)
	}
	dest := t.TempDir()
	if err := ExtractCache(ctx, CacheExtractOptions{Root: dest, File: file}, &out); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dest, "build/out.bin")); len(b) != 4096 {
		t.Errorf("restored %d bytes, want 4096", len(b))
	}

	err := ArchiveCache(ctx, CacheArchiveOptions{Root: proj, File: file, Paths: []string{"build/"}, URL: "http://127.0.0.1:1/x", MaxSize: 10}, &out)
	if !errors.Is(err, cache.ErrTooLarge) {
		t.Errorf("an archive over MaxSize = %v, want ErrTooLarge", err)
	}

	if err := os.WriteFile(file, []byte("PK\x03\x04 not a zip"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := ExtractCache(ctx, CacheExtractOptions{Root: t.TempDir(), File: file}, &out); err == nil {
		t.Error("a corrupt archive was extracted")
	}
}

// TestCacheMainExitCodes: the commands' exit codes (0 done, 1 failed, 2
// bad flags) and their messages.
func TestCacheMainExitCodes(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	for _, tc := range []struct {
		args           []string
		code           int
		stderr, stdout string
	}{
		{[]string{"cache-archiver"}, 2, "--file is required", ""},
		{[]string{"cache-archiver", "--file", filepath.Join(dir, "c.zip"), "--header", "nocolon"}, 2, "want Name: value", ""},
		// A missing cache says so as GitLab Runner does, once.
		{[]string{"cache-extractor", "--file", filepath.Join(dir, "missing.zip"), "--root", dir}, 1, "", "WARNING: Cache file does not exist"},
		{[]string{"cache-archiver", "--file", filepath.Join(dir, "c.zip"), "--root", dir, "--path", "../outside"}, 1, "../outside", ""},
		{[]string{"cache-archiver", "--file", filepath.Join(dir, "c.zip"), "--root", dir, "--path", "x"}, 0, "", ""},
	} {
		var stdout, stderr bytes.Buffer
		code := Main(ctx, tc.args, &stdout, &stderr)
		if code != tc.code || !strings.Contains(stderr.String(), tc.stderr) || tc.stderr == "" && stderr.Len() > 0 || !strings.Contains(stdout.String(), tc.stdout) {
			t.Errorf("%q = exit %d, stderr %q, stdout %q; want %d with %q, %q", tc.args, code, stderr.String(), stdout.String(), tc.code, tc.stderr, tc.stdout)
		}
	}
}

// TestCacheRequestTimeoutFlag: --request-timeout (CACHE_REQUEST_TIMEOUT)
// bounds each request of the cache commands: a shared cache that never
// answers fails the command (exit 1, the reason on stderr) instead of
// holding the job.
func TestCacheRequestTimeoutFlag(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		<-r.Context().Done()
	}))
	defer srv.Close()
	dir := t.TempDir()
	writeTree(t, filepath.Join(dir, "p"), map[string]string{"vendor/a": "a"})
	for _, args := range [][]string{
		{"cache-extractor", "--file", filepath.Join(dir, "c1.zip"), "--root", filepath.Join(dir, "p"), "--url", srv.URL + "/c1"},
		{"cache-archiver", "--file", filepath.Join(dir, "c2.zip"), "--root", filepath.Join(dir, "p"), "--path", "vendor", "--url", srv.URL + "/c2"},
	} {
		var stdout, stderr bytes.Buffer
		code := Main(t.Context(), append(args, "--request-timeout", "100ms"), &stdout, &stderr)
		if code != 1 || !strings.Contains(stderr.String(), "request timeout of 100ms exceeded") {
			t.Errorf("%s = exit %d, stderr %q; want 1 with the request timeout", args[0], code, stderr.String())
		}
	}
}

// TestCacheMetadata: a local cache has GitLab Runner's metadata.json
// beside it, naming the key.
func TestCacheMetadata(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "vendor"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "vendor", "a"), []byte("a"), 0o644); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "cache", "deps-v1", "cache.zip")
	var out, errOut bytes.Buffer
	if code := Main(context.Background(), []string{"cache-archiver", "--file", file, "--key", "deps-v1", "--root", dir, "--path", "vendor/"}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s%s", code, out.String(), errOut.String())
	}
	b, err := os.ReadFile(filepath.Join(filepath.Dir(file), "metadata.json"))
	if err != nil || string(b) != `{"cachekey":"deps-v1"}` {
		t.Errorf("metadata.json = %q, %v; want the key", b, err)
	}
}
