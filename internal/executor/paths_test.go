package executor

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/drover-ci/drover/internal/api"
)

func TestHostPaths(t *testing.T) {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		s        Settings
		fullPath string
		repoURL  string
		want     Paths
	}{
		{
			name:     "defaults",
			s:        Settings{ShortToken: "abcdefghi", ConcurrentID: 1},
			fullPath: "group/project",
			want: Paths{
				BuildsDir:  filepath.Join(wd, "builds"),
				CacheDir:   filepath.Join(wd, "cache"),
				ProjectDir: filepath.Join(wd, "builds", "abcdefghi", "1", "group", "project"),
			},
		},
		{
			name:     "traversal dropped",
			s:        Settings{BuildsDir: "/b", CacheDir: "/c", ShortToken: "../x"},
			fullPath: "../../etc/./passwd",
			want:     Paths{BuildsDir: "/b", CacheDir: "/c", ProjectDir: "/b/0/etc/passwd"},
		},
		{
			name:     "from the repository's URL, as GitLab Runner",
			s:        Settings{BuildsDir: "/b", CacheDir: "/c", ShortToken: "tok"},
			fullPath: "group/project",
			repoURL:  "https://gitlab-ci-token:x@gitlab.example.com/other/sub/repo.git",
			want:     Paths{BuildsDir: "/b", CacheDir: "/c", ProjectDir: "/b/tok/0/other/sub/repo"},
		},
		{
			name:     "a URL without a host: project-<id>, as GitLab Runner",
			s:        Settings{BuildsDir: "/b", CacheDir: "/c", ShortToken: "tok"},
			fullPath: "group/project",
			repoURL:  "file:///srv/git/project.git",
			want:     Paths{BuildsDir: "/b", CacheDir: "/c", ProjectDir: "/b/tok/0/project-42"},
		},
		{
			name:     "a URL path going up stays inside",
			s:        Settings{BuildsDir: "/b", CacheDir: "/c", ShortToken: "tok"},
			fullPath: "group/project",
			repoURL:  "https://h/a/../../x.git",
			want:     Paths{BuildsDir: "/b", CacheDir: "/c", ProjectDir: "/b/tok/0/x"},
		},
		{
			name: "no project path",
			s:    Settings{BuildsDir: "/b", CacheDir: "/c", ShortToken: "tok"},
			want: Paths{BuildsDir: "/b", CacheDir: "/c", ProjectDir: "/b/tok/0/project-42"},
		},
	}
	for _, tt := range tests {
		job := &api.JobResponse{JobInfo: api.JobInfo{ProjectFullPath: tt.fullPath, ProjectID: 42}, GitInfo: api.GitInfo{RepoURL: tt.repoURL}}
		got, err := HostPaths(tt.s, job)
		if err != nil || got != tt.want {
			t.Errorf("%s: HostPaths() = %+v, %v; want %+v", tt.name, got, err, tt.want)
		}
	}
}
