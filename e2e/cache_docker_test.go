package e2e

import (
	"archive/zip"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/drover-ci/drover/internal/cache"
	"github.com/drover-ci/drover/internal/cache/s3test"
	"github.com/drover-ci/drover/internal/client"
	"github.com/drover-ci/drover/internal/dockerimage"
)

// bridgeIP is the host's address on Docker's default bridge: containers
// on any bridge network reach the host's servers through it.
func bridgeIP(t *testing.T) string {
	t.Helper()
	ifc, err := net.InterfaceByName("docker0")
	if err != nil {
		t.Skipf("no docker0 bridge on this host (%v): containers cannot reach the test's servers", err)
	}
	addrs, err := ifc.Addrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil {
			return ipn.IP.String()
		}
	}
	t.Skip("docker0 has no IPv4 address")
	return ""
}

// TestCacheAndArtifactsDocker runs the cache and artifact stages of the
// docker executor, in its helper container, against a real coordinator
// and manager and, for the shared cache, a real S3 server (versitygw), both
// on the docker bridge's address so that the containers reach them. With
// the local cache (the runner's cache volume) and with the shared one:
// a cache round trip across fresh clones, policy pull (no upload), policy
// push (no restore), fallback keys, and an artifact handed to a dependent
// job. With S3 also: the exact object key, a zip-slip archive planted in
// the bucket refused (the job goes on without it), and the S3 server
// stopped in the middle of a job (a warning, the job succeeds).
func TestCacheAndArtifactsDocker(t *testing.T) {
	needDockerImages(t)
	host := bridgeIP(t)
	srv := s3test.StartAt(t, host)
	for _, shared := range []bool{false, true} {
		name := "local"
		if shared {
			name = "s3"
		}
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			c := startCoordinatorAt(t, filepath.Join(dir, "coord"), host+":0", "--long-poll-timeout", "3s")
			token := c.runnerToken(t)
			repo, shas := gitRepo(t)
			signal := filepath.Join(dir, "signal")
			if err := os.MkdirAll(signal, 0o777); err != nil {
				t.Fatal(err)
			}
			runner := ""
			if shared {
				runner = "  [runners.cache]\n    Path = \"ci\"\n" + s3Section(srv.Addr, srv, "")
			}
			cfg := dockerConfig(t, dir, c.url, token, 1, runner,
				fmt.Sprintf("    volumes = [%q, %q]", repo+":"+repo+":ro", signal+":/signal"))
			m := start(t, dir, "run", "--config", cfg)
			m.waitLog("runner manager started", 20*time.Second)
			cl := c.client()
			ctx := context.Background()
			spec := func(jobName, cacheJSON string, script ...string) client.JobSpec {
				s := client.JobSpec{
					Name: jobName, Project: "g/p", Script: script,
					Image:     &client.Image{Name: dockerimage.TestImageBusybox},
					Variables: []client.Variable{{Key: "GIT_STRATEGY", Value: "clone"}},
					Git:       &client.Git{RepoURL: "file://" + repo, Ref: "main", Sha: shas[1]},
				}
				if cacheJSON != "" {
					s.Cache = []json.RawMessage{json.RawMessage(cacheJSON)}
				}
				return s
			}
			run := func(s client.JobSpec) (int64, string) {
				t.Helper()
				return runSuccess(t, cl, s, 120*time.Second)
			}
			has := func(what, log string, want ...string) {
				t.Helper()
				for _, w := range want {
					if !strings.Contains(log, w) {
						t.Errorf("%s: the log lacks %q:\n%s", what, w, log)
					}
				}
			}

			// Fill: a cache and an artifact; the helper container runs the
			// stages, the build container (busybox) has no drover.
			fill := spec("fill", `{"key":"deps-v1","paths":["deps/"]}`,
				"test ! -e deps/lib.txt", "! command -v drover", "mkdir -p deps dist",
				"echo v1 > deps/lib.txt", "echo built-$CI_JOB_ID > dist/app.txt", "echo junk > dist/app.tmp")
			fill.Artifacts = &client.Artifacts{Paths: []string{"dist/"}, Exclude: []string{"dist/*.tmp"}}
			fillID, log := run(fill)
			has("fill", log, "Creating cache deps-v1...", "deps/: found", "Created cache",
				"Uploading artifacts as \"archive\" to coordinator... 201 Created")
			var projectPrefix string // ci/runner/<token>/project/<id>/
			if shared {
				has("fill", log, "Uploading cache.zip to http://"+srv.Addr)
				keys, err := srv.Keys(ctx)
				if err != nil {
					t.Fatal(err)
				}
				want := "ci/runner/" + cache.ShortToken(token) + "/project/"
				for _, k := range keys {
					if rest, ok := strings.CutPrefix(k, want); ok && strings.HasSuffix(rest, "/deps-v1") && strings.Count(rest, "/") == 1 {
						projectPrefix = strings.TrimSuffix(k, "deps-v1")
					}
				}
				if projectPrefix == "" {
					t.Fatalf("bucket keys %q: none is %s<project id>/deps-v1", keys, want)
				}
			} else {
				has("fill", log, "No URL provided, cache will not be uploaded to shared cache server")
			}

			// Use with policy pull: restored from the cache, the artifact
			// downloaded; the change it makes to the cache is not saved.
			use := spec("use", `{"key":"deps-v1","paths":["deps/"],"policy":"pull"}`,
				"cat deps/lib.txt", "cat dist/app.txt", "test ! -e dist/app.tmp", "echo v-changed > deps/lib.txt")
			use.Dependencies = []client.Dependency{{ID: fillID}}
			_, log = run(use)
			has("use", log, "Checking cache for deps-v1...", "Successfully extracted cache", "v1\n",
				"built-"+jsonInt(fillID), "("+jsonInt(fillID)+")...", "Downloading artifacts from coordinator... ok")
			if strings.Contains(log, "Creating cache") {
				t.Errorf("use: policy pull saved the cache:\n%s", log)
			}

			// Fallback keys: a key never saved falls back to deps-v1, which
			// still holds v1 (the pull job saved nothing).
			_, log = run(spec("fallback", `{"key":"never-saved","fallback_keys":["deps-v1"],"paths":["deps/"],"policy":"pull"}`,
				"grep -x v1 deps/lib.txt"))
			has("fallback", log, "Checking cache for never-saved...", "Checking cache for deps-v1...", "Successfully extracted cache")

			// Policy push: nothing restored, the new content saved.
			_, log = run(spec("push", `{"key":"deps-v1","paths":["deps/"],"policy":"push"}`,
				"test ! -e deps/lib.txt", "mkdir deps", "echo v2 > deps/lib.txt"))
			has("push", log, "Creating cache deps-v1...", "Created cache")
			if strings.Contains(log, "Checking cache") {
				t.Errorf("push: policy push restored the cache:\n%s", log)
			}
			_, log = run(spec("after push", `{"key":"deps-v1","paths":["deps/"],"policy":"pull"}`, "grep -x v2 deps/lib.txt"))
			has("after push", log, "Successfully extracted cache")

			// A key from files (drover's cache:key:files): computed from
			// file.txt as checked out, kept though the script changes it.
			wantKey, err := cache.FilesKey("lock", []string{"file.txt"}, func(string) (io.ReadCloser, error) {
				return io.NopCloser(strings.NewReader("version 2\n")), nil
			})
			if err != nil {
				t.Fatal(err)
			}
			filesCache := `{"key":{"files":["file.txt"],"prefix":"lock"},"paths":["deps/"]}`
			_, log = run(spec("files key fill", filesCache, "mkdir deps", "echo locked > deps/lib.txt", "echo version 3 > file.txt"))
			has("files key fill", log, "Creating cache "+wantKey+"...", "Created cache")
			_, log = run(spec("files key use", filesCache, "grep -x locked deps/lib.txt"))
			has("files key use", log, "Checking cache for "+wantKey+"...", "Successfully extracted cache")
			if shared {
				if _, err := srv.Client().StatObject(ctx, srv.Bucket, projectPrefix+wantKey, minio.StatObjectOptions{}); err != nil {
					t.Errorf("no object %s%s: %v", projectPrefix, wantKey, err)
				}
			}

			if !shared {
				m.signal(syscall.SIGTERM)
				m.wait(30 * time.Second)
				return
			}

			// A zip-slip archive planted at a key's object: refused, the
			// job goes on without the cache, nothing lands outside.
			var evil bytes.Buffer
			zw := zip.NewWriter(&evil)
			w, _ := zw.Create("../../escaped.txt")
			_, _ = w.Write([]byte("must not be written\n"))
			_ = zw.Close()
			if _, err := srv.Client().PutObject(ctx, srv.Bucket, projectPrefix+"evil", bytes.NewReader(evil.Bytes()), int64(evil.Len()), minio.PutObjectOptions{}); err != nil {
				t.Fatal(err)
			}
			_, log = run(spec("zip slip", `{"key":"evil","paths":["deps/"],"policy":"pull"}`,
				"test ! -e ../../escaped.txt", "test ! -e /builds/escaped.txt", "echo went-on"))
			has("zip slip", log, `archive entry "../../escaped.txt": path leaves the destination`, "Failed to extract cache", "went-on")

			// S3 stopped while the job runs: the archive stage warns, the
			// job succeeds.
			down := spec("s3 down", `{"key":"down","paths":["deps/"]}`,
				"mkdir deps && echo x > deps/x", "echo waiting-for-s3-stop",
				"until [ -e /signal/go ]; do sleep 0.1; done")
			j, err := cl.Submit(ctx, down)
			if err != nil {
				t.Fatal(err)
			}
			waitTrace(t, cl, j.ID, "waiting-for-s3-stop", 120*time.Second)
			srv.Stop()
			if err := os.WriteFile(filepath.Join(signal, "go"), nil, 0o644); err != nil {
				t.Fatal(err)
			}
			got := waitJob(t, cl, j.ID, 120*time.Second, finished)
			log = trace(t, cl, j.ID)
			if got.Status != "success" {
				t.Fatalf("s3 down: job = %s (%s):\n%s", got.Status, got.FailureReason, log)
			}
			has("s3 down", log, "Creating cache down...", "WARNING: Failed to create cache")
			m.signal(syscall.SIGTERM)
			m.wait(30 * time.Second)
		})
	}
}

// waitTrace waits until job id's log contains s.
func waitTrace(t *testing.T, cl *client.Client, id int64, s string, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		b, _, err := cl.Trace(context.Background(), id, 0)
		if err == nil && bytes.Contains(b, []byte(s)) {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("job %d's log never showed %q:\n%s", id, s, trace(t, cl, id))
}
