package e2e

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/client"
)

// TestCacheAndArtifactsShell: with the shell executor of a real drover
// run and a real coordinator, a job fills its cache and uploads artifacts;
// a second job restores the cache from the local cache_dir and downloads
// the first job's artifacts as its dependency.
func TestCacheAndArtifactsShell(t *testing.T) {
	dir := t.TempDir()
	c := startCoordinator(t, filepath.Join(dir, "coord"))
	cfg := writeConfig(t, dir, c.url, c.runnerToken(t), 1, "  cache_dir = "+jsonQuote(filepath.Join(dir, "cache"))+"\n")
	m := start(t, dir, "run", "--config", cfg)
	m.waitLog("runner manager started", 10*time.Second)
	cl := c.client()
	ctx := context.Background()
	cache := []json.RawMessage{json.RawMessage(`{"key":"deps-v1","paths":["deps/"]}`)}
	// A fresh clone for each job: the second finds only what the cache
	// and the artifacts bring back.
	repo, shas := gitRepo(t)
	git := &client.Git{RepoURL: "file://" + repo, Ref: "main", Sha: shas[1]}
	noGit := []client.Variable{{Key: "GIT_STRATEGY", Value: "clone"}}

	first, err := cl.Submit(ctx, client.JobSpec{
		Name: "build", Project: "g/p", Variables: noGit, Cache: cache, Git: git,
		Script: []string{
			"test ! -e deps/lib.txt", "mkdir -p deps dist", "echo fetched-once > deps/lib.txt",
			"echo built-$CI_JOB_ID > dist/app.txt", "echo junk > dist/app.tmp",
		},
		Artifacts: &client.Artifacts{Paths: []string{"dist/"}, Exclude: []string{"dist/*.tmp"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	j := waitJob(t, cl, first.ID, 60*time.Second, finished)
	log := trace(t, cl, first.ID)
	if j.Status != "success" {
		t.Fatalf("first job = %s (%s):\n%s", j.Status, j.FailureReason, log)
	}
	for _, want := range []string{"Creating cache deps-v1...", "deps/: found", "Uploading artifacts as \"archive\" to coordinator... 201 Created"} {
		if !strings.Contains(log, want) {
			t.Errorf("first job's log lacks %q:\n%s", want, log)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "cache", "g", "p", "deps-v1", "cache.zip")); err != nil {
		t.Errorf("no local cache archive at <cache_dir>/g/p/deps-v1/cache.zip: %v", err)
	}

	second, err := cl.Submit(ctx, client.JobSpec{
		Name: "test", Project: "g/p", Variables: noGit, Cache: cache, Git: git,
		Dependencies: []client.Dependency{{Name: "build"}},
		Script:       []string{"cat deps/lib.txt", "cat dist/app.txt", "test ! -e dist/app.tmp"},
	})
	if err != nil {
		t.Fatal(err)
	}
	j = waitJob(t, cl, second.ID, 60*time.Second, finished)
	log = trace(t, cl, second.ID)
	if j.Status != "success" {
		t.Fatalf("second job = %s (%s):\n%s", j.Status, j.FailureReason, log)
	}
	for _, want := range []string{"Checking cache for deps-v1...", "Successfully extracted cache", "fetched-once", "built-" + jsonInt(first.ID), "Downloading artifacts for job"} {
		if !strings.Contains(log, want) {
			t.Errorf("second job's log lacks %q:\n%s", want, log)
		}
	}
	m.signal(syscall.SIGTERM)
	m.wait(20 * time.Second)
}

func jsonQuote(s string) string { b, _ := json.Marshal(s); return string(b) }

func jsonInt(n int64) string { b, _ := json.Marshal(n); return string(b) }
