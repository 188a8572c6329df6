package executor

import (
	"fmt"
	"os"
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
// concurrent-id) directory: its full path with "." and ".." segments
// dropped, or project-<id> when nothing is left.
func ProjectPath(job *api.JobResponse) string { return projectPath(job) }

// projectPath is the job's project path relative to its concurrent-id
// directory.
func projectPath(job *api.JobResponse) string {
	if job == nil {
		return "project"
	}
	var parts []string
	for _, seg := range strings.Split(job.JobInfo.ProjectFullPath, "/") {
		if seg = cleanSegment(seg); seg != "" {
			parts = append(parts, seg)
		}
	}
	if len(parts) == 0 {
		return fmt.Sprintf("project-%d", job.JobInfo.ProjectID)
	}
	return filepath.Join(parts...)
}

// cleanSegment returns seg as a single, harmless path element ("" if none).
func cleanSegment(seg string) string {
	seg = strings.TrimSpace(seg)
	if seg == "." || seg == ".." || strings.ContainsAny(seg, "/\\\x00") {
		return ""
	}
	return seg
}
