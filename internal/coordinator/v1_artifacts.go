package coordinator

import (
	"archive/zip"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/runnerapi"
	"github.com/drover-ci/drover/internal/store"
)

// The cache, artifacts and dependencies of a job spec (POST /api/v1/jobs),
// checked as GitLab checks .gitlab-ci.yml:
//
//	"cache": {"key": "deps", "paths": ["vendor/"], "policy": "pull"}
//	"cache": [{"key": {"files": ["go.sum"], "prefix": "go"}, "paths": [".cache/"]}, ...]
//	"artifacts": {"name": "bin", "paths": ["bin/"], "exclude": ["bin/*.o"], "untracked": false,
//	              "when": "on_success", "expire_in": "1 week", "reports": {"junit": ["report.xml"]}}
//	"dependencies": ["build", 12]
//
// A dependency is an earlier job of the same project: a number is a job
// id, a string a job name, standing for the newest job of that name in the
// project. Either must have finished with success when the job is
// submitted (GitLab fails a job whose dependency did not succeed; drover
// refuses it at once). The job stores the resolved ids.

// Limits of GitLab's CI configuration.
const (
	maxCaches       = 4  // cache entries of a job
	maxFallbackKeys = 5  // fallback_keys of a cache entry
	maxKeyFiles     = 2  // cache:key:files
	maxDependencies = 50 // drover's own bound
	maxSpecPath     = 4096
)

type cacheObject struct {
	Key          json.RawMessage `json:"key"`
	Paths        []string        `json:"paths"`
	Untracked    bool            `json:"untracked"`
	Policy       string          `json:"policy"`
	When         string          `json:"when"`
	FallbackKeys []string        `json:"fallback_keys"`
	Unprotect    bool            `json:"unprotect"`
}

type cacheKeyObject struct {
	Files  []string `json:"files"`
	Prefix string   `json:"prefix"`
}

type artifactsObject struct {
	Name      string                     `json:"name"`
	Paths     []string                   `json:"paths"`
	Exclude   []string                   `json:"exclude"`
	Untracked bool                       `json:"untracked"`
	When      string                     `json:"when"`
	ExpireIn  string                     `json:"expire_in"`
	Reports   map[string]json.RawMessage `json:"reports"`
}

// reportKinds are the artifacts:reports GitLab knows, with the format
// and file name its payload gives each (Ci::JobArtifact's
// TYPE_AND_FORMAT_PAIRS and DEFAULT_FILE_NAMES).
var reportKinds = map[string]struct{ format, filename string }{
	"accessibility":       {"raw", "gl-accessibility.json"},
	"annotations":         {"gzip", "gl-annotations.json"},
	"api_fuzzing":         {"raw", "gl-api-fuzzing-report.json"},
	"browser_performance": {"raw", "browser-performance.json"},
	"codequality":         {"raw", "gl-code-quality-report.json"},
	"container_scanning":  {"raw", "gl-container-scanning-report.json"},
	"coverage_fuzzing":    {"raw", "gl-coverage-fuzzing-report.json"},
	"cobertura":           {"gzip", "cobertura-coverage.xml"},
	"coverage_report":     {"gzip", "coverage-report.xml"},
	"cyclonedx":           {"gzip", "gl-sbom.cdx.json"},
	"dast":                {"raw", "gl-dast-report.json"},
	"dependency_scanning": {"raw", "gl-dependency-scanning-report.json"},
	"dotenv":              {"gzip", ".env"},
	"junit":               {"gzip", "junit.xml"},
	"load_performance":    {"raw", "load-performance.json"},
	"lsif":                {"zip", "lsif.json"},
	"metrics":             {"gzip", "metrics.txt"},
	"requirements":        {"raw", "requirements.json"},
	"sast":                {"raw", "gl-sast-report.json"},
	"secret_detection":    {"raw", "gl-secret-detection-report.json"},
	"terraform":           {"raw", "tfplan.json"},
}

// artifactTypeArchive is the artifact_type of a job's archive of paths.
const artifactTypeArchive = "archive"

// parseWhen checks a when: on_success (the default), on_failure, always.
func parseWhen(s, field string) (string, *runnerapi.BadRequest) {
	switch s {
	case "":
		return api.WhenOnSuccess, nil
	case api.WhenOnSuccess, api.WhenOnFailure, api.WhenAlways:
		return s, nil
	}
	return "", runnerapi.Invalid(field, "%s must be on_success, on_failure or always, not %q", field, s)
}

// parsePaths checks a list of paths or globs.
func parsePaths(ps []string, field string) ([]string, *runnerapi.BadRequest) {
	for i, p := range ps {
		if p == "" || len(p) > maxSpecPath || runnerapi.HasControl(p) {
			f := fmt.Sprintf("%s[%d]", field, i)
			return nil, runnerapi.Invalid(f, "%s must be 1-%d printable characters", f, maxSpecPath)
		}
	}
	return ps, nil
}

// validCacheKey checks a cache key (or key prefix, or fallback key) as
// GitLab does: it becomes part of an object or file name, so no "/" and
// not "." or "..", also URL-encoded.
func validCacheKey(k, field string) *runnerapi.BadRequest {
	if k == "" || len(k) > 255 || runnerapi.HasControl(k) {
		return runnerapi.Invalid(field, "%s must be 1-255 printable characters", field)
	}
	dec, err := url.PathUnescape(k)
	if err != nil {
		dec = k
	}
	if strings.ContainsAny(dec, `/\`) || dec == "." || dec == ".." {
		return runnerapi.Invalid(field, `%s must not contain "/" or be "." or ".."`, field)
	}
	return nil
}

// parseCache reads cache: one object or a list of them.
func parseCache(raw json.RawMessage) ([]store.CacheSpec, *runnerapi.BadRequest) {
	if isNull(raw) {
		return nil, nil
	}
	var entries []json.RawMessage
	single := bytes.TrimSpace(raw)[0] == '{'
	if single {
		entries = []json.RawMessage{raw}
	} else if err := json.Unmarshal(raw, &entries); err != nil {
		return nil, runnerapi.Invalid("cache", "cache must be an object or an array of objects")
	}
	if len(entries) > maxCaches {
		return nil, runnerapi.Invalid("cache", "at most %d cache entries, not %d", maxCaches, len(entries))
	}
	out := make([]store.CacheSpec, 0, len(entries))
	for i, e := range entries {
		field := fmt.Sprintf("cache[%d]", i)
		if single {
			field = "cache"
		}
		c, bad := parseCacheEntry(e, field)
		if bad != nil {
			return nil, bad
		}
		out = append(out, c)
	}
	return out, nil
}

func parseCacheEntry(raw json.RawMessage, field string) (store.CacheSpec, *runnerapi.BadRequest) {
	var o cacheObject
	if bytes.TrimSpace(raw)[0] != '{' {
		return store.CacheSpec{}, runnerapi.Invalid(field, "%s must be an object", field)
	}
	if e := decodeStrict(raw, &o, field); e != nil {
		return store.CacheSpec{}, e
	}
	c := store.CacheSpec{Untracked: o.Untracked, Unprotect: o.Unprotect}
	kraw := bytes.TrimSpace(o.Key)
	switch {
	case isNull(kraw):
		c.Key = "default" // GitLab's
	case kraw[0] == '"':
		if err := json.Unmarshal(kraw, &c.Key); err != nil {
			return c, runnerapi.Invalid(field+".key", "%s.key: %v", field, err)
		}
		if e := validCacheKey(c.Key, field+".key"); e != nil {
			return c, e
		}
	case kraw[0] == '{':
		var k cacheKeyObject
		if e := decodeStrict(kraw, &k, field+".key"); e != nil {
			return c, e
		}
		if len(k.Files) == 0 || len(k.Files) > maxKeyFiles {
			return c, runnerapi.Invalid(field+".key.files", "%s.key.files must list 1-%d files", field, maxKeyFiles)
		}
		var e *runnerapi.BadRequest
		if c.KeyFiles, e = parsePaths(k.Files, field+".key.files"); e != nil {
			return c, e
		}
		if k.Prefix != "" {
			if e := validCacheKey(k.Prefix, field+".key.prefix"); e != nil {
				return c, e
			}
		}
		c.KeyPrefix = k.Prefix
	default:
		return c, runnerapi.Invalid(field+".key", "%s.key must be a string or an object {files, prefix}", field)
	}
	var e *runnerapi.BadRequest
	if c.Paths, e = parsePaths(o.Paths, field+".paths"); e != nil {
		return c, e
	}
	switch o.Policy {
	case "":
		c.Policy = "pull-push"
	case "pull", "push", "pull-push":
		c.Policy = o.Policy
	default:
		return c, runnerapi.Invalid(field+".policy", "%s.policy must be pull, push or pull-push, not %q", field, o.Policy)
	}
	if c.When, e = parseWhen(o.When, field+".when"); e != nil {
		return c, e
	}
	if len(o.FallbackKeys) > maxFallbackKeys {
		return c, runnerapi.Invalid(field+".fallback_keys", "at most %d fallback keys", maxFallbackKeys)
	}
	for i, k := range o.FallbackKeys {
		if e := validCacheKey(k, fmt.Sprintf("%s.fallback_keys[%d]", field, i)); e != nil {
			return c, e
		}
	}
	c.FallbackKeys = o.FallbackKeys
	return c, nil
}

// parseArtifacts reads artifacts.
func parseArtifacts(raw json.RawMessage) (*store.ArtifactsSpec, *runnerapi.BadRequest) {
	const field = "artifacts"
	if isNull(raw) {
		return nil, nil
	}
	if bytes.TrimSpace(raw)[0] != '{' {
		return nil, runnerapi.Invalid(field, "artifacts must be an object")
	}
	var o artifactsObject
	if e := decodeStrict(raw, &o, field); e != nil {
		return nil, e
	}
	a := &store.ArtifactsSpec{Name: o.Name, Untracked: o.Untracked, ExpireIn: strings.TrimSpace(o.ExpireIn)}
	if len(a.Name) > 255 || runnerapi.HasControl(a.Name) || strings.ContainsAny(a.Name, `/\`) {
		return nil, runnerapi.Invalid(field+".name", `artifacts.name must be at most 255 printable characters without "/"`)
	}
	var e *runnerapi.BadRequest
	if a.Paths, e = parsePaths(o.Paths, field+".paths"); e != nil {
		return nil, e
	}
	if a.Exclude, e = parsePaths(o.Exclude, field+".exclude"); e != nil {
		return nil, e
	}
	if a.When, e = parseWhen(o.When, field+".when"); e != nil {
		return nil, e
	}
	if a.ExpireIn != "" {
		if _, _, err := parseExpireIn(a.ExpireIn); err != nil {
			return nil, runnerapi.Invalid(field+".expire_in", "%v", err)
		}
	}
	for kind, raw := range o.Reports {
		f := field + ".reports." + kind
		if _, ok := reportKinds[kind]; !ok {
			return nil, runnerapi.Invalid(f, "unknown report kind %q", kind)
		}
		ps, ok := api.StringOrList(raw, func(s string) []string { return []string{s} })
		if !ok || len(ps) == 0 {
			return nil, runnerapi.Invalid(f, "%s must be a path or a non-empty array of paths", f)
		}
		if ps, e = parsePaths(ps, f); e != nil {
			return nil, e
		}
		if a.Reports == nil {
			a.Reports = map[string][]string{}
		}
		a.Reports[kind] = ps
	}
	if len(a.Paths) == 0 && !a.Untracked && len(a.Reports) == 0 {
		return nil, runnerapi.Invalid(field+".paths", "artifacts needs paths, untracked or reports")
	}
	return a, nil
}

// parseDependencies reads dependencies: job ids (numbers) and names
// (strings), unresolved (a name has ID 0); resolveDependencies resolves
// them.
func parseDependencies(raws []json.RawMessage) ([]store.DependencySpec, *runnerapi.BadRequest) {
	if len(raws) > maxDependencies {
		return nil, runnerapi.Invalid("dependencies", "at most %d dependencies", maxDependencies)
	}
	var out []store.DependencySpec
	for i, raw := range raws {
		field := fmt.Sprintf("dependencies[%d]", i)
		raw = bytes.TrimSpace(raw)
		var d store.DependencySpec
		if len(raw) > 0 && raw[0] == '"' {
			if err := json.Unmarshal(raw, &d.Name); err != nil || d.Name == "" || len(d.Name) > 255 || runnerapi.HasControl(d.Name) {
				return nil, runnerapi.Invalid(field, "%s must be a job name (1-255 printable characters) or a job id", field)
			}
		} else {
			id, err := strconv.ParseInt(string(raw), 10, 64)
			if err != nil || id <= 0 {
				return nil, runnerapi.Invalid(field, "%s must be a job name or a positive job id", field)
			}
			d.ID = id
		}
		out = append(out, d)
	}
	return out, nil
}

// resolveDependencies gives each of j's dependencies its job id and name:
// by id, that job; by name, the newest job of that name in j's project.
// Each must be of j's project and have finished with success; otherwise
// the answer is a 400 naming the dependency. Duplicates are dropped.
func (c *Coordinator) resolveDependencies(ctx context.Context, j *store.Job) (*runnerapi.BadRequest, error) {
	var out []store.DependencySpec
	for i, d := range j.Spec.Dependencies {
		field := fmt.Sprintf("dependencies[%d]", i)
		var dep store.Job
		if d.ID != 0 {
			var err error
			dep, err = c.st.GetJob(ctx, d.ID)
			if errors.Is(err, store.ErrNotFound) {
				return runnerapi.Invalid(field, "dependency: no job %d", d.ID), nil
			}
			if err != nil {
				return nil, fmt.Errorf("dependency %d: %w", d.ID, err)
			}
			if dep.Project != j.Project {
				return runnerapi.Invalid(field, "dependency: job %d is of project %s, not %s", d.ID, dep.Project, j.Project), nil
			}
		} else {
			jobs, err := c.st.ListJobs(ctx, store.JobFilter{Project: j.Project, Name: d.Name, Newest: true, Limit: 1})
			if err != nil {
				return nil, fmt.Errorf("dependency %q: %w", d.Name, err)
			}
			if len(jobs) == 0 {
				return runnerapi.Invalid(field, "dependency: no job named %q in project %s", d.Name, j.Project), nil
			}
			dep = jobs[0]
		}
		if dep.Status != store.StatusSuccess {
			return runnerapi.Invalid(field, "dependency: job %d (%s) is %s, want success", dep.ID, dep.Name, dep.Status), nil
		}
		if !slices.ContainsFunc(out, func(o store.DependencySpec) bool { return o.ID == dep.ID }) {
			out = append(out, store.DependencySpec{ID: dep.ID, Name: dep.Name})
		}
	}
	j.Spec.Dependencies = out
	return nil, nil
}

// payloadArtifacts is the payload's artifacts (facts §2.1): the archive of
// paths, then one entry per report, as GitLab's runner presenter builds
// them (reports are uploaded whatever the job's outcome: when always).
func payloadArtifacts(a *store.ArtifactsSpec) []api.Artifact {
	out := []api.Artifact{}
	if a == nil {
		return out
	}
	if len(a.Paths) > 0 || a.Untracked {
		out = append(out, api.Artifact{
			Name: a.Name, Untracked: a.Untracked, Paths: a.Paths, Exclude: a.Exclude, When: a.When,
			Type: artifactTypeArchive, Format: "zip", ExpireIn: a.ExpireIn,
		})
	}
	kinds := make([]string, 0, len(a.Reports))
	for k := range a.Reports {
		kinds = append(kinds, k)
	}
	slices.Sort(kinds)
	for _, k := range kinds {
		rk := reportKinds[k]
		out = append(out, api.Artifact{
			Name: rk.filename, Paths: a.Reports[k], When: api.WhenAlways,
			Type: k, Format: rk.format, ExpireIn: a.ExpireIn,
		})
	}
	return out
}

// payloadCache is the payload's cache. A key computed from files is
// drover's extension (key_files, key_prefix), with key the prefix (or
// "default") so that a runner that does not compute it still caches.
func payloadCache(cs []store.CacheSpec) []api.Cache {
	out := make([]api.Cache, 0, len(cs))
	for _, c := range cs {
		key := c.Key
		if len(c.KeyFiles) > 0 {
			key = c.KeyPrefix
			if key == "" {
				key = "default"
			}
		}
		out = append(out, api.Cache{
			Key: key, KeyFiles: c.KeyFiles, KeyPrefix: c.KeyPrefix, Untracked: c.Untracked, Policy: c.Policy,
			Paths: c.Paths, When: c.When, FallbackKeys: c.FallbackKeys,
		})
	}
	return out
}

// dependencies are the payload's dependencies of job j as of now, each
// with the dependency's id and name, and artifacts_file when it has an
// archive that has not expired (the caller adds the token); and the
// dependencies whose archive expired, or was retired when it did: GitLab
// fails such a job at hand-out with missing_dependency_failure
// (Ci::Build#valid_dependency?: artifacts expired or erased). A
// dependency that never had an archive is no obstacle, as in GitLab: its
// job may have had nothing to upload. A store error leaves that
// dependency's archive out of the payload, with a warning.
func (c *Coordinator) dependencies(ctx context.Context, j *store.Job, now time.Time) (deps []api.Dependency, expired []store.DependencySpec) {
	deps = []api.Dependency{}
	specs, err := c.jobDependencies(ctx, j)
	if err != nil {
		c.log.Warn("dependencies: left out of the payload", "job_id", j.ID, "err", err)
	}
	for _, d := range specs {
		dep := api.Dependency{ID: d.ID, Name: d.Name}
		a, err := c.st.GetArtifact(ctx, d.ID, artifactTypeArchive)
		switch {
		case err == nil && !a.Expired(now):
			dep.ArtifactsFile = &api.ArtifactsFile{Filename: a.Filename, Size: a.Size}
		case err == nil:
			expired = append(expired, d)
		case !errors.Is(err, store.ErrNotFound):
			c.log.Warn("dependency artifacts: left out of the payload", "job_id", j.ID, "dependency", d.ID, "err", err)
		}
		deps = append(deps, dep)
	}
	return deps, expired
}

// failMissingDependency fails pending job j (as read) with
// missing_dependency_failure, its log naming the dependencies whose
// artifacts expired; a job that moved meanwhile is left alone.
func (c *Coordinator) failMissingDependency(ctx context.Context, j *store.Job, expired []store.DependencySpec) {
	names := make([]string, 0, len(expired))
	for _, d := range expired {
		names = append(names, fmt.Sprintf("%s (job %d)", d.Name, d.ID))
	}
	line := "ERROR: Job failed (missing_dependency_failure): the artifacts of " + strings.Join(names, ", ") +
		" expired or were erased; retry the jobs that made them, then this one"
	c.endJob(ctx, j.ID, "job failed: a dependency's artifacts expired", func(cur *store.Job) (store.Status, api.FailureReason, string) {
		if cur.Status != store.StatusPending || cur.Version != j.Version {
			return "", "", ""
		}
		return store.StatusFailed, api.MissingDependencyFailure, line
	})
}

// readArtifactText reads a small artifact's bytes: gunzipped when its
// format is gzip, the first file of a zip, at most max bytes (more is an
// error).
func readArtifactText(file, format string, max int64) ([]byte, error) {
	if format == "zip" {
		zr, err := zip.OpenReader(file)
		if err != nil {
			return nil, err
		}
		defer zr.Close()
		// Every file, in the archive's order, a newline between them:
		// a report of several files (dotenv: [a.env, b.env]) is their
		// concatenation, later ones winning.
		var out []byte
		files := 0
		for _, zf := range zr.File {
			if zf.FileInfo().IsDir() {
				continue
			}
			files++
			if zf.UncompressedSize64 > uint64(max) || int64(len(out))+int64(zf.UncompressedSize64) > max {
				return nil, fmt.Errorf("more than %d bytes", max)
			}
			rc, err := zf.Open()
			if err != nil {
				return nil, err
			}
			b, err := io.ReadAll(io.LimitReader(rc, max-int64(len(out))+1))
			rc.Close()
			if err != nil {
				return nil, err
			}
			if len(out) > 0 && out[len(out)-1] != '\n' {
				out = append(out, '\n')
			}
			out = append(out, b...)
			if int64(len(out)) > max {
				return nil, fmt.Errorf("more than %d bytes", max)
			}
		}
		if files > 0 {
			return out, nil
		}
		return nil, errors.New("an empty zip archive")
	}
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var src io.Reader = f
	if format == "gzip" {
		zr, err := gzip.NewReader(f)
		if err != nil {
			return nil, err
		}
		defer zr.Close()
		src = zr
	}
	data, err := io.ReadAll(io.LimitReader(src, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > max {
		return nil, fmt.Errorf("more than %d bytes", max)
	}
	return data, nil
}
