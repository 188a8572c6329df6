package shell

import (
	"strings"
	"testing"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/executor"
)

// TestTransferStages: what the cache and artifact stages run, by the
// job's cache and artifacts entries, their policy and when.
func TestTransferStages(t *testing.T) {
	job := scriptJob([]string{"true"}, nil)
	job.ID = 42
	job.Cache = []api.Cache{
		{Key: "main", Paths: []string{"deps/"}, Policy: "pull-push", FallbackKeys: []string{"default"}},
		{Key: "pulled", Paths: []string{"ro/"}, Policy: "pull"},
		{Key: "pushed", Paths: []string{"wo/"}, Policy: "push", When: "always"},
		{Key: `..\odd%2Fkey`, Paths: []string{"odd/"}, When: "on_failure"},
	}
	job.Artifacts = []api.Artifact{
		{Name: "bin", Paths: []string{"dist/"}, Exclude: []string{"*.tmp"}, Type: "archive", Format: "zip", ExpireIn: "1 week"},
		{Paths: []string{"logs/"}, When: "on_failure", Type: "archive"},
	}
	job.Dependencies = []api.Dependency{{ID: 7, Name: "build", Token: "t", ArtifactsFile: &api.ArtifactsFile{Filename: "artifacts.zip", Size: 1}}, {ID: 8, Name: "none"}}
	info := testInfo(t, Bash, job)
	info.Transfers = Transfers{Helper: "/usr/bin/drover helper", CacheDir: "/cache", ServerURL: "http://coord", ExtractMaxSize: 1 << 30, ExtractMaxEntries: 5000}
	for _, tc := range []struct {
		stage   executor.Stage
		want    []string
		notWant []string
	}{
		{executor.StageRestoreCache,
			[]string{"Checking cache for main...", "/cache/", "/main/cache.zip", "Checking cache for default...", "Checking cache for pulled...", "Failed to extract cache", "Successfully extracted cache", "Not downloading cache pushed due to policy", "--extract-max-size 1073741824 --extract-max-entries 5000"},
			[]string{"Checking cache for pushed", "cache-archiver"}},
		{executor.StageArchiveCache,
			[]string{"Creating cache main...", "--path 'deps/'", "Creating cache pushed...", "Created cache", "Not uploading cache pulled due to policy"},
			[]string{"Creating cache pulled", "odd", "cache-extractor"}},
		{executor.StageArchiveCacheFail,
			[]string{"Creating cache pushed...", "odd/key", "sanitized"},
			[]string{"Creating cache main..."}},
		{executor.StageDownloadArtifacts,
			[]string{`artifacts-downloader --url 'http://coord' --id 7 --name 'build' --token "$CI_JOB_TOKEN"`, "--extract-max-size 1073741824 --extract-max-entries 5000"},
			[]string{"--id 8", " t "}},
		{executor.StageUploadArtifacts,
			[]string{"artifacts-uploader --url 'http://coord' --id 42", "--path 'dist/'", "--exclude '*.tmp'", "--name 'bin'", "--expire-in '1 week'"},
			[]string{"logs/"}},
		{executor.StageUploadArtifactsFail,
			[]string{"--path 'logs/'"},
			[]string{"dist/"}},
	} {
		got := generate(t, tc.stage, info)
		for _, w := range tc.want {
			if !strings.Contains(got, w) {
				t.Errorf("%s lacks %q:\n%s", tc.stage, w, got)
			}
		}
		for _, w := range tc.notWant {
			if strings.Contains(got, w) {
				t.Errorf("%s has %q:\n%s", tc.stage, w, got)
			}
		}
	}
	// Without a helper where the stages run: a warning, nothing run.
	info.Transfers.Helper = ""
	for _, stage := range []executor.Stage{executor.StageRestoreCache, executor.StageUploadArtifacts} {
		if got := generate(t, stage, info); !strings.Contains(got, "not available on this executor") || strings.Contains(got, "drover helper") {
			t.Errorf("%s without a helper:\n%s", stage, got)
		}
	}
}
