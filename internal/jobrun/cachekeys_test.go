package jobrun

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/cache"
)

// TestCacheKeyFromFiles: a cache keyed by files gets its key from the
// project's files as get_sources left them, and keeps it for the save
// even when the script changes a key file; with no key file present the
// key is the prefix's default.
func TestCacheKeyFromFiles(t *testing.T) {
	for _, tc := range []struct {
		name    string
		present bool
	}{{"key file present", true}, {"no key file", false}} {
		t.Run(tc.name, func(t *testing.T) {
			j := job([]string{"echo changed > go.sum"}, nil)
			j.Cache = []api.Cache{{KeyFiles: []string{"go.sum", "missing.lock"}, KeyPrefix: "go", Key: "go", Paths: []string{"vendor/"}, Policy: "pull-push", When: "on_success"}}
			f := newFixture(t, "bash", j)
			f.opts.Helper = "true"           // the helper's calls succeed without doing anything
			f.opts.Executor = f.rec.Executor // unwrapped: executor.Local shows
			want := "go-default"
			if tc.present {
				if err := os.MkdirAll(f.projectDir(), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(f.projectDir(), "go.sum"), []byte("a v1\n"), 0o644); err != nil {
					t.Fatal(err)
				}
				var err error
				want, err = cache.FilesKey("go", []string{"go.sum"}, func(name string) (io.ReadCloser, error) {
					return os.Open(filepath.Join(f.projectDir(), name))
				})
				if err != nil {
					t.Fatal(err)
				}
			}
			res := f.run(context.Background(), nil)
			if res.State != api.StateSuccess {
				t.Fatalf("result = %+v:\n%s", res, f.trace.String())
			}
			f.assertTrace(t, []string{"Checking cache for " + want + "...", "Creating cache " + want + "..."}, []string{"WARNING: cache key"})
			if got, _ := os.ReadFile(filepath.Join(f.projectDir(), "go.sum")); tc.present && string(got) != "changed\n" {
				t.Errorf("the script did not run: go.sum = %q", got)
			}
		})
	}
}
