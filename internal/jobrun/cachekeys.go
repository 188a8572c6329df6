package jobrun

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/cache"
	"github.com/drover-ci/drover/internal/executor"
)

// cacheKeyed returns job with the keys of its cache entries keyed by
// files (drover's cache:key:files) computed from the project's files, as
// they are after get_sources. They are computed once, the first time a
// cache stage needs them, and kept for the job's later cache stages, so
// that a script changing a key file does not move the cache it saves. A
// key that cannot be computed is the prefix's default, with a warning.
func (b *build) cacheKeyed(ctx context.Context, job *api.JobResponse) *api.JobResponse {
	if b.keyed != nil {
		return b.keyed
	}
	b.keyed = job
	if !slices.ContainsFunc(job.Cache, func(c api.Cache) bool { return len(c.KeyFiles) > 0 }) {
		return job
	}
	cp := *job
	cp.Cache = slices.Clone(job.Cache)
	open := b.projectFileOpener(ctx)
	for i, c := range cp.Cache {
		if len(c.KeyFiles) == 0 {
			continue
		}
		var key string
		var err error
		if open == nil {
			err = errors.New("this executor cannot read the project's files")
		} else {
			// The files' names may name variables ($CI_PROJECT_DIR/x
			// is x), as the prefix may.
			files := make([]string, len(c.KeyFiles))
			for i, f := range c.KeyFiles {
				f = b.info.ExpandVariables(f)
				if rel, ok := strings.CutPrefix(f, strings.TrimSuffix(b.info.ProjectDir, "/")+"/"); ok && b.info.ProjectDir != "" {
					f = rel
				}
				files[i] = f
			}
			key, err = cache.FilesKey(b.info.ExpandVariables(c.KeyPrefix), files, open)
		}
		if err != nil {
			key, _ = cache.FilesKey(b.info.ExpandVariables(c.KeyPrefix), nil, nil)
			b.trace.line(ansiYellow, fmt.Sprintf("WARNING: cache key from files %s: %v; using %q", strings.Join(c.KeyFiles, ", "), err, key))
		}
		cp.Cache[i].Key = key
	}
	b.keyed = &cp
	return b.keyed
}

// projectFileOpener opens files of the project directory: on the
// manager's host for executor.Local, through the executor for an
// executor.FileOpener; nil for other executors.
func (b *build) projectFileOpener(ctx context.Context) func(string) (io.ReadCloser, error) {
	if fo, ok := b.exec.(executor.FileOpener); ok {
		return func(name string) (io.ReadCloser, error) { return fo.OpenProjectFile(ctx, name) }
	}
	if _, ok := b.exec.(executor.Local); ok {
		dir := b.info.ProjectDir
		return func(name string) (io.ReadCloser, error) { return os.Open(filepath.Join(dir, filepath.FromSlash(name))) }
	}
	return nil
}

// cacheStage reports whether stage restores or saves caches.
func cacheStage(stage executor.Stage) bool {
	switch stage {
	case executor.StageRestoreCache, executor.StageArchiveCache, executor.StageArchiveCacheFail:
		return true
	}
	return false
}
