package executor

import (
	"fmt"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/drover-ci/drover/internal/api"
)

// Paths are where a job's files live, as its scripts see them.
type Paths struct {
	BuildsDir  string // CI_BUILDS_DIR
	CacheDir   string // where the job's cache archives are kept (cache_dir)
	ProjectDir string // CI_PROJECT_DIR: <BuildsDir>/<short token>/<concurrent id>/<project path>
}

// PathsReporter is implemented by executors that decide a job's paths in
// Prepare. The build runner asks it after a successful Prepare; for
// executors without it, it uses HostPaths.
type PathsReporter interface {
	// Paths returns the job's paths as the executor decided them in
	// Prepare.
	Paths() Paths
}

// JobPaths returns p with the project directory the job's variables
// choose (PrepareOptions.ProjectDir: GIT_CLONE_PATH, GIT_STRATEGY empty's
// own directory). A choice the runner does not allow is a BuildError that
// fails the job with runner_configuration_error, as GitLab Runner's.
func (o PrepareOptions) JobPaths(p Paths) (Paths, error) {
	if o.ProjectDir == nil {
		return p, nil
	}
	dir, err := o.ProjectDir(p)
	if err != nil {
		return Paths{}, &BuildError{Inner: err, Reason: api.RunnerConfigurationError}
	}
	p.ProjectDir = dir
	return p, nil
}

// HostPaths returns the paths of a job whose files live on the runner's own
// host: builds_dir defaults to $PWD/builds and cache_dir to $PWD/cache, and
// the project directory is
// <builds_dir>/<short token>/<concurrent id>/<project full path>.
//
// The project path comes from the coordinator, so "." and ".." segments are
// dropped: a job can never place its checkout outside its builds directory.
func HostPaths(s Settings, job *api.JobResponse) (Paths, error) {
	var p Paths
	var err error
	if p.BuildsDir, err = absOrDefault(s.BuildsDir, "builds"); err != nil {
		return Paths{}, fmt.Errorf("builds_dir: %w", err)
	}
	if p.CacheDir, err = absOrDefault(s.CacheDir, "cache"); err != nil {
		return Paths{}, fmt.Errorf("cache_dir: %w", err)
	}
	p.ProjectDir = ProjectDir(p.BuildsDir, s.ShortToken, s.ConcurrentID, job)
	return p, nil
}

// ProjectDir returns a job's project directory under buildsDir:
// <buildsDir>/<short token>/<id>/<project full path>, with the segments
// cleaned as HostPaths does. Executors whose builds directory is elsewhere
// (on an instance, in a container) use it with their own buildsDir and id.
func ProjectDir(buildsDir, shortToken string, id int, job *api.JobResponse) string {
	return filepath.Join(buildsDir, cleanSegment(shortToken), strconv.Itoa(id), projectPath(job))
}

func absOrDefault(dir, def string) (string, error) {
	if dir == "" {
		wd, err := os.Getwd()
		if err != nil {
			return "", err
		}
		return filepath.Join(wd, def), nil
	}
	return filepath.Abs(dir)
}

// ProjectPath is the job's project path relative to its builds (or
// concurrent-id) directory, as GitLab Runner makes it (see projectPath).
func ProjectPath(job *api.JobResponse) string { return projectPath(job) }

// projectPath is the job's project path relative to its concurrent-id
// directory. As GitLab Runner's: the path of the repository's URL without
// ".git" (https://host/group/project.git: group/project), or project-<id>
// when the URL has no host (file://) or its path is not a clean one. A
// job without a repository (drover's own jobs may have none) uses its
// project's full path. "." and ".." segments are dropped either way.
func projectPath(job *api.JobResponse) string {
	if job == nil {
		return "project"
	}
	fallback := fmt.Sprintf("project-%d", job.JobInfo.ProjectID)
	raw := job.JobInfo.ProjectFullPath
	if job.GitInfo.RepoURL != "" {
		raw = repoSlug(job.GitInfo.RepoURL)
		if raw == "" {
			return fallback
		}
	}
	var parts []string
	for _, seg := range strings.Split(raw, "/") {
		if seg = cleanSegment(seg); seg != "" {
			parts = append(parts, seg)
		}
	}
	if len(parts) == 0 {
		return fallback
	}
	return filepath.Join(parts...)
}

// repoSlug is the path of a repository URL without ".git", or "" when
// the URL has no host or its path is unusable, as GitLab Runner reads it.
func repoSlug(repoURL string) string {
	u, err := url.Parse(repoURL)
	if err != nil || u.Host == "" {
		return ""
	}
	slug := path.Clean(strings.TrimSuffix(u.Path, ".git"))
	if slug == "." || slug == "/" || strings.Contains(slug, "..") {
		return ""
	}
	return slug
}

// cleanSegment returns seg as a single, harmless path element ("" if none).
func cleanSegment(seg string) string {
	seg = strings.TrimSpace(seg)
	if seg == "." || seg == ".." || strings.ContainsAny(seg, "/\\\x00") {
		return ""
	}
	return seg
}
