package jobrun

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/drover-ci/drover/internal/api"
)

// TestProjectDirFromVariables runs jobs through the shell executor whose
// variables choose their project directory: GIT_CLONE_PATH, allowed by
// [runners.custom_build_dir] and only within the builds directory, and
// GIT_STRATEGY empty's directory of its own.
func TestProjectDirFromVariables(t *testing.T) {
	t.Parallel()
	s := newGitServer(t, 0)
	tests := []struct {
		name   string
		custom bool
		vars   []api.Variable
		// dir is the project directory the job runs in, relative to the
		// builds directory; "" when the job must fail.
		dir  string
		want []string // in the trace
	}{
		{
			name:   "GIT_CLONE_PATH",
			custom: true,
			vars:   []api.Variable{{Key: "GIT_CLONE_PATH", Value: "$CI_BUILDS_DIR/custom/$CI_CONCURRENT_ID/here"}},
			dir:    "custom/1/here",
			want:   []string{"checked out\n"},
		},
		{
			name: "GIT_CLONE_PATH without custom_build_dir",
			vars: []api.Variable{{Key: "GIT_CLONE_PATH", Value: "$CI_BUILDS_DIR/custom"}},
			want: []string{"setting GIT_CLONE_PATH is not allowed, enable `custom_build_dir` feature"},
		},
		{
			name:   "GIT_CLONE_PATH outside the builds directory",
			custom: true,
			vars:   []api.Variable{{Key: "GIT_CLONE_PATH", Value: "$CI_BUILDS_DIR/../elsewhere"}},
			want:   []string{"has to be within"},
		},
		{
			name: "GIT_STRATEGY empty",
			vars: []api.Variable{{Key: "GIT_STRATEGY", Value: "empty"}},
			dir:  "-empty", // beside the project directory
			want: []string{"Skipping Git repository setup and creating an empty build directory"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			j := s.job(nil, tt.vars...)
			j.Steps[0].Script = []string{"pwd", "cat file.txt 2>/dev/null || true"}
			f := newFixture(t, "bash", j)
			f.opts.Settings.Git.CustomBuildDir = tt.custom
			res := f.run(t.Context(), nil)
			if tt.dir == "" {
				if res.State != api.StateFailed || res.FailureReason != api.RunnerConfigurationError {
					t.Errorf("Result = %+v, want failed with runner_configuration_error", res)
				}
				f.assertTrace(t, tt.want, []string{"checked out\n"})
				return
			}
			checkResult(t, res, Result{State: api.StateSuccess})
			want := filepath.Join(f.opts.Settings.BuildsDir, tt.dir) + "\n"
			if tt.dir == "-empty" {
				// The project's own directory (from the repository's URL), -empty.
				want = f.projectDir() + "-empty\n"
			}
			f.assertTrace(t, append(tt.want, want), nil)
		})
	}
}

// TestCloneURL fetches from the runner's clone_url, not from the
// repository URL the coordinator sent.
func TestCloneURL(t *testing.T) {
	t.Parallel()
	s := newGitServer(t, 0)
	base := strings.TrimSuffix(s.url, "/repo.git")
	j := s.job(nil, api.Variable{Key: "CI_PROJECT_PATH", Value: "repo"})
	j.GitInfo.RepoURL = "http://gitlab-ci-token:secret@gitlab.invalid/group/project.git"
	f := newFixture(t, "bash", j)
	f.opts.Settings.Git.CloneURL = base
	checkResult(t, f.run(t.Context(), nil), Result{State: api.StateSuccess})
	f.assertTrace(t, []string{"checked out\n"}, []string{"secret"})
}
