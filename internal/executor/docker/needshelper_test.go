package docker

import (
	"testing"

	"github.com/drover-ci/drover/internal/api"
)

// TestNeedsHelper: the helper container is started with the build
// container when a stage of the job will run in it.
func TestNeedsHelper(t *testing.T) {
	none := api.Variables{{Key: "GIT_STRATEGY", Value: "none"}}
	repo := api.GitInfo{RepoURL: "https://example.com/g/p.git"}
	for _, tc := range []struct {
		name string
		job  api.JobResponse
		want bool
	}{
		{"no repository, nothing to transfer", api.JobResponse{}, false},
		{"GIT_STRATEGY none", api.JobResponse{GitInfo: repo, Variables: none}, false},
		{"a repository to fetch", api.JobResponse{GitInfo: repo}, true},
		{"a cache", api.JobResponse{GitInfo: repo, Variables: none, Cache: []api.Cache{{Key: "k"}}}, true},
		{"artifacts", api.JobResponse{Artifacts: []api.Artifact{{Paths: []string{"out"}}}}, true},
		{"a dependency with artifacts", api.JobResponse{Dependencies: []api.Dependency{{ID: 1, ArtifactsFile: &api.ArtifactsFile{Filename: "a.zip"}}}}, true},
		{"a dependency without artifacts", api.JobResponse{Dependencies: []api.Dependency{{ID: 1}}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := &Executor{job: &tc.job}
			if got := e.needsHelper(); got != tc.want {
				t.Errorf("needsHelper() = %v, want %v", got, tc.want)
			}
		})
	}
}
