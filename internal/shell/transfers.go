package shell

import (
	"fmt"
	"net/http"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/cache"
	"github.com/drover-ci/drover/internal/executor"
)

// Transfers are what the cache and artifact stages need beyond the job.
type Transfers struct {
	// Helper is the shell words that run `drover helper` where the
	// stages run ("" when the executor has none there: the stages then
	// only say that they are skipped).
	Helper string
	// CacheDir keeps local caches: <CacheDir>/<project path>/<key>/cache.zip.
	CacheDir string
	// ServerURL is the coordinator's URL the artifacts go to and come
	// from (the runner's url).
	ServerURL string
	// SharedCache, when set, returns the shared cache's pre-signed URLs of
	// a (sanitised) cache key; ok false keeps that key local only.
	SharedCache func(key string) (urls SharedCacheURLs, ok bool)
	// ExtractMaxSize and ExtractMaxEntries cap the archives the helper
	// extracts (dependencies' artifacts, caches): bytes expanded and
	// entries; zero leaves the helper's defaults.
	ExtractMaxSize, ExtractMaxEntries int64
	// CacheRequestTimeout bounds each request of a cache download or
	// upload (CACHE_REQUEST_TIMEOUT); zero leaves the helper's default
	// (10 minutes).
	CacheRequestTimeout time.Duration
}

// cacheTimeout is the helper's flag for the cache requests' timeout, or
// "".
func (t Transfers) cacheTimeout() string {
	if t.CacheRequestTimeout <= 0 {
		return ""
	}
	return " --request-timeout " + t.CacheRequestTimeout.String()
}

// extractCaps is the helper's flags for the caps of t, or "".
func (t Transfers) extractCaps() string {
	s := ""
	if t.ExtractMaxSize > 0 {
		s += " --extract-max-size " + strconv.FormatInt(t.ExtractMaxSize, 10)
	}
	if t.ExtractMaxEntries > 0 {
		s += " --extract-max-entries " + strconv.FormatInt(t.ExtractMaxEntries, 10)
	}
	return s
}

// SharedCacheURLs are one cache key's pre-signed URLs in the shared
// cache: they carry their own signature, never the credentials.
type SharedCacheURLs struct {
	Get, Put string
	// Header goes with the PUT: the headers its signature covers.
	Header http.Header
	// MaxSize refuses an upload over this many bytes (0: no cap).
	MaxSize int64
}

// sharedGet is the --url of the extractor for key, or "".
func (t Transfers) sharedGet(key string) string {
	if t.SharedCache == nil {
		return ""
	}
	if u, ok := t.SharedCache(key); ok {
		return " --url " + quote(u.Get)
	}
	return ""
}

// sharedPut is the --url, --header and --max-size of the archiver for
// key, or "".
func (t Transfers) sharedPut(key string) string {
	if t.SharedCache == nil {
		return ""
	}
	u, ok := t.SharedCache(key)
	if !ok {
		return ""
	}
	s := " --url " + quote(u.Put)
	names := make([]string, 0, len(u.Header))
	for k := range u.Header {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		for _, v := range u.Header[k] {
			s += " --header " + quote(k+": "+v)
		}
	}
	if u.MaxSize > 0 {
		s += " --max-size " + strconv.FormatInt(u.MaxSize, 10)
	}
	return s
}

// ansiYellow colours warnings, as GitLab Runner does.
const ansiYellow = "\033[0;33m"

// When values of cache and artifacts entries.
const (
	whenOnSuccess = "on_success"
	whenOnFailure = "on_failure"
	whenAlways    = "always"
)

// runsOn reports whether an entry with when runs after a job that
// failed (or succeeded).
func runsOn(when string, failed bool) bool {
	switch when {
	case whenAlways:
		return true
	case whenOnFailure:
		return failed
	default:
		return !failed
	}
}

// transferStage is the body of a cache or artifacts stage (after the
// prelude, in the project directory), "" when the stage has nothing to do.
func transferStage(stage executor.Stage, info Info) (string, error) {
	job := info.Job
	w := &writer{}
	t := info.Transfers
	// Keys, paths and names may name variables: GitLab Runner expands
	// them with the job's (a path under the project directory, such as
	// $CI_PROJECT_DIR/dist, is taken relative to it).
	expand := info.ExpandVariables
	path := func(p string) string {
		p = expand(p)
		if rel, ok := strings.CutPrefix(p, strings.TrimSuffix(info.ProjectDir, "/")+"/"); ok && info.ProjectDir != "" {
			if rel == "" {
				return "."
			}
			return rel
		}
		return p
	}
	skip := func(what string) (string, error) {
		w.echo(ansiYellow, "WARNING: "+what+" skipped: drover's helper is not available on this executor yet")
		return w.String(), nil
	}
	switch stage {
	case executor.StageRestoreCache:
		var entries []api.Cache
		for _, c := range job.Cache {
			if len(c.Paths) > 0 || c.Untracked {
				entries = append(entries, c)
			}
		}
		if len(entries) == 0 {
			return "", nil
		}
		if t.Helper == "" {
			return skip("restoring the cache")
		}
		for _, c := range entries {
			if c.Policy == "push" {
				if key, _, ok := cacheFile(w, info, expand(c.Key)); ok {
					w.echo(ansiBoldGreen, "Not downloading cache "+key+" due to policy")
				}
				continue
			}
			// Each key in turn until one extracts, each saying how it
			// went, as GitLab Runner's.
			open := 0
			for _, raw := range append([]string{c.Key}, c.FallbackKeys...) {
				key, file, ok := cacheFile(w, info, expand(raw))
				if !ok {
					continue
				}
				w.echo(ansiBoldGreen, "Checking cache for "+key+"...")
				w.raw("if " + t.Helper + " cache-extractor --file " + quote(file) + " --root " + quote(info.ProjectDir) + t.extractCaps() + t.cacheTimeout() + t.sharedGet(key) + "; then")
				w.echo(ansiBoldGreen, "Successfully extracted cache")
				w.raw("else")
				w.echo(ansiYellow, "Failed to extract cache")
				open++
			}
			for range open {
				w.raw("fi")
			}
		}
	case executor.StageArchiveCache, executor.StageArchiveCacheFail:
		failed := stage == executor.StageArchiveCacheFail
		var entries []api.Cache
		for _, c := range job.Cache {
			if (len(c.Paths) > 0 || c.Untracked) && runsOn(c.When, failed) {
				entries = append(entries, c)
			}
		}
		if len(entries) == 0 {
			return "", nil
		}
		if t.Helper == "" {
			return skip("saving the cache")
		}
		for _, c := range entries {
			key, file, ok := cacheFile(w, info, expand(c.Key))
			if !ok {
				continue
			}
			if c.Policy == "pull" {
				w.echo(ansiBoldGreen, "Not uploading cache "+key+" due to policy")
				continue
			}
			w.echo(ansiBoldGreen, "Creating cache "+key+"...")
			args := []string{"cache-archiver", "--file", quote(file), "--key", quote(key), "--root", quote(info.ProjectDir)}
			for _, p := range c.Paths {
				args = append(args, "--path", quote(path(p)))
			}
			if c.Untracked {
				args = append(args, "--untracked")
			}
			w.raw("if " + t.Helper + " " + strings.Join(args, " ") + t.cacheTimeout() + t.sharedPut(key) + "; then")
			w.echo(ansiBoldGreen, "Created cache")
			w.raw("else")
			w.echo(ansiYellow, "WARNING: Failed to create cache")
			w.raw("fi")
		}
	case executor.StageDownloadArtifacts:
		var deps []api.Dependency
		for _, d := range job.Dependencies {
			if d.ArtifactsFile != nil {
				deps = append(deps, d)
			}
		}
		if len(deps) == 0 {
			return "", nil
		}
		if t.Helper == "" {
			return skip("downloading artifacts")
		}
		for _, d := range deps {
			// The payload's token is the running job's own, which the
			// prelude exported as CI_JOB_TOKEN: it stays out of the script.
			name := ""
			if d.Name != "" {
				name = " --name " + quote(d.Name)
			}
			w.echo(ansiBoldGreen, fmt.Sprintf("Downloading artifacts for %s (%d)...", d.Name, d.ID))
			w.raw(t.Helper + " artifacts-downloader --url " + quote(t.ServerURL) + " --id " + strconv.FormatInt(d.ID, 10) + name + ` --token "$CI_JOB_TOKEN" --root ` + quote(info.ProjectDir) + t.extractCaps())
		}
	case executor.StageUploadArtifacts, executor.StageUploadArtifactsFail:
		failed := stage == executor.StageUploadArtifactsFail
		var arts []api.Artifact
		for _, a := range job.Artifacts {
			if (len(a.Paths) > 0 || a.Untracked) && runsOn(a.When, failed) {
				arts = append(arts, a)
			}
		}
		if len(arts) == 0 {
			return "", nil
		}
		if t.Helper == "" {
			return skip("uploading artifacts")
		}
		for _, a := range arts {
			args := []string{"artifacts-uploader", "--url", quote(t.ServerURL), "--id", strconv.FormatInt(job.ID, 10), `--token "$CI_JOB_TOKEN"`, "--root", quote(info.ProjectDir)}
			for _, p := range a.Paths {
				args = append(args, "--path", quote(path(p)))
			}
			for _, p := range a.Exclude {
				args = append(args, "--exclude", quote(path(p)))
			}
			if a.Untracked {
				args = append(args, "--untracked")
			}
			if a.Name != "" {
				args = append(args, "--name", quote(expand(a.Name)))
			}
			if a.Type != "" {
				args = append(args, "--artifact-type", quote(a.Type))
			}
			if a.Format != "" && a.Format != "zip" {
				args = append(args, "--artifact-format", quote(a.Format))
			}
			if a.ExpireIn != "" {
				args = append(args, "--expire-in", quote(a.ExpireIn))
			}
			w.echo(ansiBoldGreen, "Uploading artifacts...")
			w.raw(t.Helper + " " + strings.Join(args, " "))
		}
	default:
		return "", fmt.Errorf("%w: %s", ErrUnsupportedStage, stage)
	}
	return w.String(), nil
}

// cacheFile sanitises a cache key as GitLab does and returns it with its
// local archive; a key that cannot be used is reported in the script and
// ok is false.
func cacheFile(w *writer, info Info, raw string) (key, file string, ok bool) {
	if raw == "" {
		raw = "default"
	}
	key, warning, err := cache.SanitizeKey(raw)
	if err != nil {
		w.echo(ansiYellow, fmt.Sprintf("WARNING: cache key %q cannot be used: %v", raw, err))
		return "", "", false
	}
	if warning != "" {
		w.echo(ansiYellow, "WARNING: "+warning)
	}
	// The project's directory under the cache directory is its builds
	// directory's, as GitLab Runner's.
	file, err = cache.LocalPath(info.Transfers.CacheDir, executor.ProjectPath(info.Job), key)
	if err != nil {
		w.echo(ansiYellow, fmt.Sprintf("WARNING: cache %q: %v", key, err))
		return "", "", false
	}
	return key, filepath.Clean(file), true
}
