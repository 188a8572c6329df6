package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/client"
)

// adminJSON sends one admin API request to coordinator c.
func adminJSON(t *testing.T, c *coordinator, method, path string, body any) (int, []byte) {
	t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(method, c.url+path, bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	var out bytes.Buffer
	out.ReadFrom(resp.Body)
	return resp.StatusCode, out.Bytes()
}

// TestPostReceiveHook: a plain git server. A bare repository gets drover's
// post-receive hook (drover hook post-receive --install); pushes by the
// real git start pipelines on the coordinator, which a real manager runs;
// the pusher sees each pipeline's URL; the push's own range decides
// rules:changes.
func TestPostReceiveHook(t *testing.T) {
	coord, cl := pipelineFixture(t, 1)
	dir := t.TempDir()
	bare := filepath.Join(dir, "app.git")
	work := filepath.Join(dir, "work")
	git := func(wd string, args ...string) string {
		t.Helper()
		return gitAs(t, "Ada", "ada@example.com", wd, args...)
	}
	git(dir, "init", "-q", "--bare", "-b", "main", bare)

	const secret = "post-receive-secret"
	if code, b := adminJSON(t, coord, "POST", "/api/v1/projects", map[string]any{"name": "team/app", "repo_url": bare, "webhook_secret": secret}); code != http.StatusCreated {
		t.Fatalf("POST /api/v1/projects = %d %s", code, b)
	}
	secretFile := filepath.Join(dir, "secret")
	if err := os.WriteFile(secretFile, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(droverBin, "hook", "post-receive", "--url", coord.url, "--project", "team/app",
		"--secret-file", secretFile, "--install", bare).CombinedOutput()
	if err != nil {
		t.Fatalf("drover hook post-receive --install: %v\n%s", err, out)
	}
	if fi, err := os.Stat(filepath.Join(bare, "hooks", "drover-webhook-secret")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the installed secret: %v, %v; want mode 0600", fi, err)
	}
	// A hook drover did not write is left alone.
	other := filepath.Join(dir, "other.git")
	git(dir, "init", "-q", "--bare", other)
	if err := os.WriteFile(filepath.Join(other, "hooks", "post-receive"), []byte("#!/bin/sh\necho mine\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(droverBin, "hook", "post-receive", "--url", coord.url, "--project", "team/app",
		"--secret-file", secretFile, "--install", other).CombinedOutput(); err == nil || !strings.Contains(string(out), "did not write") {
		t.Errorf("installing over a foreign hook: %v\n%s; want a refusal", err, out)
	}

	ci := `docs:
  script: [echo docs changed]
  rules:
    - changes: [docs/**]
build:
  script: ['echo "build $CI_COMMIT_SHORT_SHA from $CI_COMMIT_BEFORE_SHA"']
`
	git(dir, "clone", "-q", bare, work)
	push := func(files map[string]string, msg string) (sha string, id int64) {
		t.Helper()
		for name, body := range files {
			p := filepath.Join(work, name)
			os.MkdirAll(filepath.Dir(p), 0o755)
			if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		git(work, "add", "-A")
		git(work, "commit", "-q", "-m", msg)
		sha = git(work, "rev-parse", "HEAD")
		out := git(work, "push", "origin", "main")
		m := regexp.MustCompile(`remote: drover: refs/heads/main: pipeline (\d+): (\S+)`).FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("git push's output names no pipeline:\n%s", out)
		}
		id, _ = strconv.ParseInt(m[1], 10, 64)
		if m[2] != fmt.Sprintf("%s/pipelines/%d", coord.url, id) {
			t.Errorf("pipeline URL %s, want %s/pipelines/%d", m[2], coord.url, id)
		}
		return sha, id
	}
	finished := func(p *client.Pipeline) bool { return p.Finished() }
	jobs := func(p *client.Pipeline) []string {
		var names []string
		for _, j := range p.Jobs {
			names = append(names, j.Name+":"+j.Status)
		}
		return names
	}

	// A new branch: every rules:changes holds (GitLab's rule without a
	// range).
	first, id := push(map[string]string{".gitlab-ci.yml": ci, "docs/a.md": "a", "src/a.go": "a"}, "first")
	p := waitPipeline(t, cl, id, 3*time.Minute, finished)
	if p.Status != "success" || p.Source != "push" || p.SHA != first || fmt.Sprint(jobs(p)) != "[docs:success build:success]" {
		t.Fatalf("first push's pipeline = %s %s %s %v, want success of push %s with docs and build", p.Status, p.Source, p.SHA, jobs(p), first)
	}
	// Only src changed in this push: no docs job.
	second, id := push(map[string]string{"src/a.go": "b"}, "second")
	p = waitPipeline(t, cl, id, 3*time.Minute, finished)
	if p.BeforeSHA != first || fmt.Sprint(jobs(p)) != "[build:success]" {
		t.Fatalf("second push's pipeline: before %s, jobs %v; want before %s and build alone", p.BeforeSHA, jobs(p), first)
	}
	if log := trace(t, cl, p.Jobs[0].ID); !strings.Contains(log, "build "+second[:8]+" from "+first) {
		t.Errorf("build's log lacks the push's range:\n%s", log)
	}
	// docs changed: the docs job again.
	_, id = push(map[string]string{"docs/b.md": "b"}, "third")
	p = waitPipeline(t, cl, id, 3*time.Minute, finished)
	if fmt.Sprint(jobs(p)) != "[docs:success build:success]" {
		t.Fatalf("third push's pipeline jobs %v, want docs and build", jobs(p))
	}
}
