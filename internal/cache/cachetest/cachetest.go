// Package cachetest is the conformance suite of the cache's stores: every
// backend (S3, GCS, Azure) runs the same tests against its real server or
// stand-in, through the same cache.Cache that the manager's jobs use.
package cachetest

import (
	"bytes"
	"crypto/rand"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/drover-ci/drover/internal/cache"
)

// Harness makes stores of one backend, all over the same bucket.
type Harness struct {
	// NewStore returns a store for the bucket; cfg is [runners.cache]
	// (its MaxUploadedArchiveSize may matter to the backend's signing).
	NewStore func(t *testing.T, cfg cache.Config) cache.Store
	// Keys lists the bucket's object names, sorted.
	Keys func(t *testing.T) []string
}

// Run runs the suite. The bucket must be empty.
func Run(t *testing.T, h Harness) {
	t.Run("RoundTripWithGitLabObjectNames", func(t *testing.T) { roundTrip(t, h) })
	t.Run("MissIsErrNotFound", func(t *testing.T) { miss(t, h) })
}

// roundTrip saves and restores archives under the object names GitLab
// Runner gives them, and finds them at those names in the bucket.
func roundTrip(t *testing.T, h Harness) {
	for _, tc := range []struct {
		name   string
		config cache.Config
		key    string
	}{
		{"per runner", cache.Config{Path: "ci/cache"}, "main/deps"},
		{"shared", cache.Config{Path: "ci/cache", Shared: true}, "main/deps"},
		{"no path, sanitized key, size cap", cache.Config{MaxUploadedArchiveSize: 1 << 20}, `..\job%2Fref`},
	} {
		c := cache.New(nil, tc.config, "glrt-t1_abcdefghijklmnop", h.NewStore(t, tc.config))
		name, _, err := c.Name(42, tc.key)
		if err != nil {
			t.Fatalf("%s: Name = %v", tc.name, err)
		}
		data := make([]byte, 100_000)
		_, _ = rand.Read(data)
		if err := c.Save(t.Context(), name, bytes.NewReader(data), int64(len(data))); err != nil {
			t.Fatalf("%s: Save = %v", tc.name, err)
		}
		var got bytes.Buffer
		n, err := c.Restore(t.Context(), name, &got)
		if err != nil || n != int64(len(data)) || !bytes.Equal(got.Bytes(), data) {
			t.Errorf("%s: Restore = %d bytes, %v; want the %d bytes saved", tc.name, n, err, len(data))
		}
	}
	want := []string{"ci/cache/project/42/main/deps", "ci/cache/runner/abcdefghi/project/42/main/deps", "runner/abcdefghi/project/42/job/ref"}
	if diff := cmp.Diff(want, h.Keys(t)); diff != "" {
		t.Errorf("bucket keys (-want +got):\n%s", diff)
	}
}

// miss: a missing archive is ErrNotFound, with nothing written.
func miss(t *testing.T, h Harness) {
	c := cache.New(nil, cache.Config{}, "tok", h.NewStore(t, cache.Config{}))
	var w bytes.Buffer
	_, err := c.Restore(t.Context(), "runner/tok/project/1/nothing", &w)
	if !errors.Is(err, cache.ErrNotFound) || w.Len() != 0 {
		t.Errorf("Restore(missing) = %v with %d bytes written, want ErrNotFound and nothing", err, w.Len())
	}
}
