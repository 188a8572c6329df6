package helper

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/client"
	"github.com/drover-ci/drover/internal/coordinator"
)

// zeros writes n files of size zero bytes each under dir/out: build
// output that compresses a thousand times.
func zeros(t *testing.T, dir string, n int, size int) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(dir, "out"), 0o755); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if err := os.WriteFile(filepath.Join(dir, "out", fmt.Sprintf("zeros-%d.bin", i)), make([]byte, size), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestDownloadRefusesZipBomb: a job's artifacts that expand far beyond
// their size (a zip bomb: files of zeros) go through a real coordinator
// to a job that depends on them; `drover helper artifacts-downloader`
// refuses them over --extract-max-size or --extract-max-entries, before
// writing a byte, exiting 1 with the dependency (id, name) and the file
// named and the reason; under the caps (the defaults) they are extracted.
func TestDownloadRefusesZipBomb(t *testing.T) {
	c := startCoord(t, coordinator.Config{})
	ctx := context.Background()
	const mib = 1 << 20
	build := c.take(t, client.JobSpec{Name: "build", Script: []string{"true"}, Artifacts: &client.Artifacts{Paths: []string{"out/"}}})
	proj := t.TempDir()
	zeros(t, proj, 3, 16*mib)
	var out bytes.Buffer
	if err := UploadArtifacts(ctx, ArtifactsUploadOptions{URL: c.url, ID: build.ID, Token: build.Token, Root: proj, Paths: []string{"out/"}, Backoff: time.Millisecond}, &out); err != nil {
		t.Fatalf("upload: %v\n%s", err, out.String())
	}
	c.finish(t, build)
	test := c.take(t, client.JobSpec{Name: "test", Script: []string{"true"}, Dependencies: []client.Dependency{{Name: "build"}}})
	d := test.Dependencies[0]
	t.Logf("artifacts: %d bytes expanding to %d", d.ArtifactsFile.Size, 48*mib)

	for _, tc := range []struct {
		name  string
		flags []string
		want  string // in stderr; "" for success
	}{
		{"over the size cap", []string{"--extract-max-size", fmt.Sprint(32 * mib)}, fmt.Sprintf("expands to more than %d bytes (32.0 MiB) by entry \"out/zeros-2.bin\"", 32*mib)},
		{"over the entries cap", []string{"--extract-max-entries", "3"}, "more than 3 entries"},
		{"the defaults", nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dest := t.TempDir()
			args := append([]string{"artifacts-downloader", "--url", c.url, "--id", fmt.Sprint(d.ID), "--token", d.Token, "--root", dest, "--name", d.Name}, tc.flags...)
			var stdout, stderr bytes.Buffer
			code := Main(ctx, args, &stdout, &stderr)
			if tc.want == "" {
				if code != 0 {
					t.Fatalf("artifacts-downloader = %d, want 0\n%s%s", code, stdout.String(), stderr.String())
				}
				if fi, err := os.Stat(filepath.Join(dest, "out/zeros-2.bin")); err != nil || fi.Size() != 16*mib {
					t.Errorf("out/zeros-2.bin: %v, %v; want %d bytes", fi, err, 16*mib)
				}
				return
			}
			msg := stderr.String()
			for _, want := range []string{
				fmt.Sprintf("the artifacts of job %d (build), artifacts.zip (%d bytes), refused", d.ID, d.ArtifactsFile.Size),
				"archive over the extraction limits", tc.want, "extract_max_size",
			} {
				if !strings.Contains(msg, want) {
					t.Errorf("artifacts-downloader stderr lacks %q:\n%s", want, msg)
				}
			}
			if code != 1 {
				t.Errorf("artifacts-downloader = %d, want 1", code)
			}
			if ents, _ := os.ReadDir(dest); len(ents) != 0 {
				t.Errorf("a refused archive left %d entries in the project directory", len(ents))
			}
		})
	}
}

// TestCacheExtractRefusesZipBomb: cache-extractor shares the caps.
func TestCacheExtractRefusesZipBomb(t *testing.T) {
	ctx := context.Background()
	proj := t.TempDir()
	zeros(t, proj, 2, 8<<20)
	file := filepath.Join(t.TempDir(), "cache.zip")
	var out bytes.Buffer
	if code := Main(ctx, []string{"cache-archiver", "--file", file, "--root", proj, "--path", "out/"}, &out, &out); code != 0 {
		t.Fatalf("cache-archiver = %d\n%s", code, out.String())
	}
	dest := t.TempDir()
	var stdout, stderr bytes.Buffer
	code := Main(ctx, []string{"cache-extractor", "--file", file, "--root", dest, "--extract-max-size", fmt.Sprint(12 << 20)}, &stdout, &stderr)
	if code != 1 || !strings.Contains(stderr.String(), "cache.zip") || !strings.Contains(stderr.String(), "archive over the extraction limits") {
		t.Errorf("cache-extractor = %d, stderr %q; want 1 naming cache.zip and the limit", code, stderr.String())
	}
	if ents, _ := os.ReadDir(dest); len(ents) != 0 {
		t.Errorf("a refused cache left %d entries", len(ents))
	}
}
