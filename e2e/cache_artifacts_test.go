package e2e

import (
	"archive/zip"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"mime/multipart"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/client"
	"github.com/drover-ci/drover/internal/sshx/sshxtest"
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
	// Under the project's directory as GitLab Runner names it (project-<id>
	// for a file:// repository, the URL's path for others).
	if m, _ := filepath.Glob(filepath.Join(dir, "cache", "*", "deps-v1", "cache.zip")); len(m) != 1 {
		t.Errorf("local cache archives at <cache_dir>/<project>/deps-v1/cache.zip: %v, want one", m)
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
	for _, want := range []string{"Checking cache for deps-v1...", "Successfully extracted cache", "fetched-once", "built-" + jsonInt(first.ID), "Downloading artifacts from coordinator... ok"} {
		if !strings.Contains(log, want) {
			t.Errorf("second job's log lacks %q:\n%s", want, log)
		}
	}
	m.signal(syscall.SIGTERM)
	m.wait(20 * time.Second)
}

func jsonQuote(s string) string { b, _ := json.Marshal(s); return string(b) }

func jsonInt(n int64) string { b, _ := json.Marshal(n); return string(b) }

// TestArtifactsRefusedShell: with the shell executor of a real drover
// run and a real coordinator, an artifact over --max-artifact-size is
// answered 413 and the job's log says so (the job fails), and a dependency
// whose artifact escapes the build directory (zip slip, planted with the
// job's own token while it ran) fails the dependent job with
// runner_system_failure, naming the entry, and writes nothing outside.
func TestArtifactsRefusedShell(t *testing.T) {
	dir := t.TempDir()
	c := startCoordinator(t, filepath.Join(dir, "coord"), "--max-artifact-size", "4096")
	cfg := writeConfig(t, dir, c.url, c.runnerToken(t), 1, "")
	m := start(t, dir, "run", "--config", cfg)
	m.waitLog("runner manager started", 10*time.Second)
	cl := c.client()
	ctx := context.Background()

	// Over the cap: 64 KiB of random bytes do not compress under 4 KiB.
	big, err := cl.Submit(ctx, client.JobSpec{
		Name: "big", Project: "g/p",
		Script:    []string{"mkdir -p out", "head -c 65536 /dev/urandom > out/blob"},
		Artifacts: &client.Artifacts{Paths: []string{"out/"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	j := waitJob(t, cl, big.ID, 60*time.Second, finished)
	log := trace(t, cl, big.ID)
	if j.Status != "failed" || !strings.Contains(log, "413 Request Entity Too Large") || !strings.Contains(log, "artifact larger than 4096 bytes") {
		t.Errorf("oversize artifact: job = %s (%s), want failed with the 413 in the log:\n%s", j.Status, j.FailureReason, log)
	}

	// A job that hands its token to the test and waits: the test uploads
	// a zip-slip archive as its artifact.
	tokenFile := filepath.Join(dir, "job-token")
	goFile := filepath.Join(dir, "go")
	evilJob, err := cl.Submit(ctx, client.JobSpec{
		Name: "evil", Project: "g/p",
		Script: []string{"printf %s \"$CI_JOB_TOKEN\" > " + tokenFile + ".tmp && mv " + tokenFile + ".tmp " + tokenFile,
			"until [ -e " + goFile + " ]; do sleep 0.1; done"},
	})
	if err != nil {
		t.Fatal(err)
	}
	var token []byte
	for deadline := time.Now().Add(60 * time.Second); len(token) == 0; {
		if time.Now().After(deadline) {
			t.Fatalf("the evil job never wrote its token:\n%s", trace(t, cl, evilJob.ID))
		}
		token, _ = os.ReadFile(tokenFile)
		time.Sleep(50 * time.Millisecond)
	}
	var zbuf bytes.Buffer
	zw := zip.NewWriter(&zbuf)
	w, _ := zw.Create("../../../escaped-artifact.txt")
	_, _ = w.Write([]byte("must not be written\n"))
	_ = zw.Close()
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	fw, _ := mw.CreateFormFile("file", "artifacts.zip")
	_, _ = fw.Write(zbuf.Bytes())
	_ = mw.Close()
	req, _ := http.NewRequest(http.MethodPost, c.url+"/api/v4/jobs/"+jsonInt(evilJob.ID)+"/artifacts?artifact_format=zip&artifact_type=archive", &body)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	req.Header.Set("JOB-TOKEN", string(token))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("planting the artifact: %s", resp.Status)
	}
	if err := os.WriteFile(goFile, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if j := waitJob(t, cl, evilJob.ID, 60*time.Second, finished); j.Status != "success" {
		t.Fatalf("evil job = %s:\n%s", j.Status, trace(t, cl, evilJob.ID))
	}

	victim, err := cl.Submit(ctx, client.JobSpec{
		Name: "victim", Project: "g/p", Dependencies: []client.Dependency{{ID: evilJob.ID}},
		Script: []string{"echo must not run"},
	})
	if err != nil {
		t.Fatal(err)
	}
	j = waitJob(t, cl, victim.ID, 60*time.Second, finished)
	log = trace(t, cl, victim.ID)
	if j.Status != "failed" || j.FailureReason != "runner_system_failure" ||
		!strings.Contains(log, `archive entry "../../../escaped-artifact.txt": path leaves the destination`) || strings.Contains(log, "must not run\n") {
		t.Errorf("victim = %s (%s), want runner_system_failure naming the entry, no script:\n%s", j.Status, j.FailureReason, log)
	}
	matches, _ := filepath.Glob(filepath.Join(dir, "**", "escaped-artifact.txt"))
	if _, err := os.Stat(filepath.Join(dir, "escaped-artifact.txt")); err == nil || len(matches) > 0 {
		t.Errorf("the zip-slip entry was written: %v", matches)
	}
	m.signal(syscall.SIGTERM)
	m.wait(20 * time.Second)
}

// TestCacheAndArtifactsSSH: the ssh executor (the instance executor's
// code on a fixed host) installs drover's own binary on the host once, by
// its hash, and runs the cache and artifact stages with it: a cache saved
// by one job is restored by the next, and an artifact reaches its
// dependent job.
func TestCacheAndArtifactsSSH(t *testing.T) {
	srv := sshxtest.Start(t)
	dir := t.TempDir()
	c := startCoordinator(t, filepath.Join(dir, "coord"))
	kh := knownHosts(t, dir, srv, srv.HostKey)
	cacheDir := filepath.Join(dir, "host-cache")
	cfg := sshRunner(t, dir, c.url, c.runnerToken(t), srv, fmt.Sprintf("    known_hosts_file = %q\n", kh))
	b, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Replace(string(b), "  builds_dir = ", "  cache_dir = "+jsonQuote(cacheDir)+"\n  builds_dir = ", 1)
	cfgPath := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(cfgPath, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	m := start(t, dir, "run", "--config", cfgPath)
	m.waitLog("runner manager started", 10*time.Second)
	cl := c.client()
	cache := []json.RawMessage{json.RawMessage(`{"key":"deps","paths":["deps/"]}`)}
	// A fresh clone for each job: the second finds only what the cache
	// and the artifacts bring back.
	repo, shas := gitRepo(t)
	git := &client.Git{RepoURL: "file://" + repo, Ref: "main", Sha: shas[1]}
	clone := []client.Variable{{Key: "GIT_STRATEGY", Value: "clone"}}

	fillID, log := runSuccess(t, cl, client.JobSpec{
		Name: "fill", Project: "g/p", Variables: clone, Cache: cache, Git: git,
		Script:    []string{"test ! -e deps", "mkdir deps dist", "echo over-ssh > deps/lib.txt", "echo built-$CI_JOB_ID > dist/app.txt"},
		Artifacts: &client.Artifacts{Paths: []string{"dist/"}},
	}, 60*time.Second)
	for _, want := range []string{"Installing drover's helper on the host", "Creating cache deps...", "Created cache", "201 Created"} {
		if !strings.Contains(log, want) {
			t.Errorf("fill job's log lacks %q:\n%s", want, log)
		}
	}
	if bins, _ := filepath.Glob(filepath.Join(cacheDir, ".drover-helper", "drover-*")); len(bins) != 1 {
		t.Errorf("helper binaries on the host: %v, want one", bins)
	}
	_, log = runSuccess(t, cl, client.JobSpec{
		Name: "check", Project: "g/p", Variables: clone, Cache: cache, Git: git, Dependencies: []client.Dependency{{ID: fillID}},
		Script: []string{"cat deps/lib.txt", "cat dist/app.txt"},
	}, 60*time.Second)
	for _, want := range []string{"Successfully extracted cache", "over-ssh", "built-" + jsonInt(fillID), "(" + jsonInt(fillID) + ")...", "Downloading artifacts from coordinator... ok"} {
		if !strings.Contains(log, want) {
			t.Errorf("check job's log lacks %q:\n%s", want, log)
		}
	}
	if strings.Contains(log, "Installing drover's helper") {
		t.Errorf("the helper was installed again:\n%s", log)
	}
	m.signal(syscall.SIGTERM)
	m.wait(20 * time.Second)
}
