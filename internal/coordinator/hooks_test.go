package coordinator

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/forge"
	"github.com/drover-ci/drover/internal/forge/giteatest"
)

// workTree is a git work tree with commits made by the real git binary.
type workTree struct {
	t   testing.TB
	dir string
}

func newWorkTree(t testing.TB) *workTree {
	w := &workTree{t: t, dir: t.TempDir()}
	w.git("init", "-q", "-b", "main")
	return w
}

func (w *workTree) git(args ...string) string {
	w.t.Helper()
	cmd := exec.Command("git", append([]string{"-C", w.dir, "-c", "user.name=Ada", "-c", "user.email=ada@example.com"}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		w.t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// commit writes files and commits them with message; it returns the sha.
func (w *workTree) commit(message string, files map[string]string) string {
	w.t.Helper()
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(w.dir, name), []byte(body), 0o644); err != nil {
			w.t.Fatal(err)
		}
	}
	w.git("add", "-A")
	w.git("commit", "-q", "--allow-empty", "-m", message)
	return w.git("rev-parse", "HEAD")
}

// hookAnswerJSON is a webhook's answer.
type hookAnswerJSON struct {
	Error     string `json:"error"`
	Message   string `json:"message"`
	Duplicate bool   `json:"duplicate"`
	Pipeline  struct {
		ID     int64  `json:"id"`
		Status string `json:"status"`
		WebURL string `json:"web_url"`
	} `json:"pipeline"`
}

func (e *env) countPipelines() int {
	e.t.Helper()
	resp, b := e.admin("GET", "/api/v1/pipelines", nil)
	if resp.StatusCode != http.StatusOK {
		e.t.Fatalf("GET /api/v1/pipelines = %d %s", resp.StatusCode, b)
	}
	var ps []json.RawMessage
	e.decode(b, &ps)
	return len(ps)
}

func TestWebhookGeneric(t *testing.T) {
	e := newEnv(t, nil)
	w := newWorkTree(t)
	first := w.commit("first", map[string]string{".gitlab-ci.yml": "build:\n  script: [echo $CI_COMMIT_BEFORE_SHA]\n"})
	second := w.commit("second\n\nwith a body", map[string]string{"a.txt": "a"})
	skipped := w.commit("docs only [skip ci]", map[string]string{"b.txt": "b"})
	w.git("checkout", "-q", "-b", "broken")
	broken := w.commit("break it", map[string]string{".gitlab-ci.yml": "build:\n  script: [x]\n  when: sometimes\n"})
	w.git("checkout", "-q", "-b", "filtered", "main")
	filtered := w.commit("filter it", map[string]string{".gitlab-ci.yml": "workflow: {rules: [{if: $CI_COMMIT_BRANCH == \"main\"}]}\nbuild:\n  script: [x]\n"})

	if resp, b := e.admin("POST", "/api/v1/projects", map[string]any{"name": "team/app", "repo_url": w.dir, "webhook_secret": "s3cret-hook"}); resp.StatusCode != http.StatusCreated {
		t.Fatalf("POST /api/v1/projects = %d %s", resp.StatusCode, b)
	}
	push := func(project, token string, p forge.GenericPush) (int, hookAnswerJSON) {
		t.Helper()
		hdr := map[string]string{"Content-Type": "application/json"}
		if token != "" {
			hdr["Authorization"] = "Bearer " + token
		}
		resp, b := e.do("POST", "/api/v1/hooks/generic/"+project, hdr, p)
		var a hookAnswerJSON
		if err := json.Unmarshal(b, &a); err != nil {
			t.Fatalf("webhook answer %d %q: %v", resp.StatusCode, b, err)
		}
		return resp.StatusCode, a
	}
	ok := forge.GenericPush{Ref: "refs/heads/main", Before: first, After: second, Message: "second", DeliveryID: "d-1"}

	for _, tc := range []struct {
		name, project, token string
		push                 forge.GenericPush
		code                 int
		want                 string // in the answer's error or message
	}{
		{"no token", "team/app", "", ok, http.StatusUnauthorized, "no signature or token"},
		{"wrong token", "team/app", "guess", ok, http.StatusUnauthorized, "token"},
		{"unknown project", "team/other", "s3cret-hook", ok, http.StatusNotFound, `no project "team/other"`},
		{"[skip ci]", "team/app", "s3cret-hook", forge.GenericPush{Ref: "refs/heads/main", Before: second, After: skipped, Message: "docs only [skip ci]", DeliveryID: "d-2"},
			http.StatusAccepted, "skipped"},
		{"branch deleted", "team/app", "s3cret-hook", forge.GenericPush{Ref: "refs/heads/gone", Before: second, After: strings.Repeat("0", 40), DeliveryID: "d-3"},
			http.StatusAccepted, "ignored"},
		{"workflow:rules filter it out", "team/app", "s3cret-hook", forge.GenericPush{Ref: "refs/heads/filtered", After: filtered, DeliveryID: "d-4"},
			http.StatusAccepted, "filtered out by workflow rules"},
		{"a commit that is not there", "team/app", "s3cret-hook", forge.GenericPush{Ref: "refs/heads/main", After: strings.Repeat("1", 40), DeliveryID: "d-5"},
			http.StatusUnprocessableEntity, ""},
		// Its delivery was given back: the redelivery is tried again.
		{"a commit that is not there, delivered again", "team/app", "s3cret-hook", forge.GenericPush{Ref: "refs/heads/main", After: strings.Repeat("1", 40), DeliveryID: "d-5"},
			http.StatusUnprocessableEntity, "could not be fetched"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, a := push(tc.project, tc.token, tc.push)
			if code != tc.code || !strings.Contains(a.Error+a.Message, tc.want) {
				t.Errorf("webhook = %d %+v, want %d with %q", code, a, tc.code, tc.want)
			}
			if n := e.countPipelines(); n != 0 {
				t.Errorf("%d pipelines, want none", n)
			}
		})
	}

	code, a := push("team/app", "s3cret-hook", ok)
	if code != http.StatusCreated || a.Pipeline.ID == 0 || !strings.HasSuffix(a.Pipeline.WebURL, fmt.Sprintf("/pipelines/%d", a.Pipeline.ID)) {
		t.Fatalf("webhook = %d %+v, want 201 with the pipeline", code, a)
	}
	var pv pipelineView
	_, b := e.admin("GET", fmt.Sprintf("/api/v1/pipelines/%d", a.Pipeline.ID), nil)
	e.decode(b, &pv)
	if pv.Source != "push" || pv.SHA != second || pv.BeforeSHA != first || pv.Ref != "main" || pv.Project != "team/app" || len(pv.Jobs) != 1 {
		t.Errorf("pipeline = %+v, want a push of main at %s from %s with one job", pv, second, first)
	}
	// The same delivery again (a forge's redelivery, a flood): no second
	// pipeline.
	for range 3 {
		code, again := push("team/app", "s3cret-hook", ok)
		if code != http.StatusOK || !again.Duplicate || again.Pipeline.ID != a.Pipeline.ID {
			t.Errorf("the same delivery again = %d %+v, want 200, duplicate, pipeline %d", code, again, a.Pipeline.ID)
		}
	}
	// Concurrent redeliveries of a new delivery: one pipeline.
	var wg sync.WaitGroup
	codes := make(chan int, 4)
	for range 4 {
		wg.Go(func() {
			code, _ := push("team/app", "s3cret-hook", forge.GenericPush{Ref: "refs/heads/main", Before: first, After: second, DeliveryID: "d-flood"})
			codes <- code
		})
	}
	wg.Wait()
	close(codes)
	created := 0
	for c := range codes {
		if c == http.StatusCreated {
			created++
		}
	}
	if created != 1 || e.countPipelines() != 2 {
		t.Errorf("4 concurrent deliveries of one id: %d created, %d pipelines; want 1 and 2", created, e.countPipelines())
	}

	// A configuration that does not compile: a failed pipeline with the
	// errors.
	code, a = push("team/app", "s3cret-hook", forge.GenericPush{Ref: "refs/heads/broken", After: broken, DeliveryID: "d-6"})
	if code != http.StatusCreated || a.Pipeline.Status != "failed" {
		t.Fatalf("webhook of a broken configuration = %d %+v, want 201 failed", code, a)
	}
	_, b = e.admin("GET", fmt.Sprintf("/api/v1/pipelines/%d", a.Pipeline.ID), nil)
	pv = pipelineView{}
	e.decode(b, &pv)
	if pv.Status != "failed" || len(pv.Errors) != 1 || !strings.HasPrefix(pv.Errors[0], ".gitlab-ci.yml:3:") || len(pv.Jobs) != 0 {
		t.Errorf("broken pipeline = %+v, want failed with the error at .gitlab-ci.yml:3 and no jobs", pv)
	}
	if resp, b := e.admin("GET", fmt.Sprintf("/pipelines/%d", a.Pipeline.ID), nil); resp.StatusCode != http.StatusOK || !strings.Contains(string(b), ".gitlab-ci.yml:3:") {
		t.Errorf("the broken pipeline's page = %d, want its error shown:\n%s", resp.StatusCode, b)
	}
	// Badges: public, the newest pipeline of the ref (default: the
	// default branch).
	for _, tc := range []struct {
		path string
		code int
		want string
	}{
		{"/team/app/badge.svg", http.StatusOK, "pipeline: created"},
		{"/team/app/badge.svg?ref=broken", http.StatusOK, "pipeline: failed"},
		{"/team/app/badge.svg?ref=nothing", http.StatusOK, "pipeline: unknown"},
		{"/team/other/badge.svg", http.StatusNotFound, ""},
		{"/team/app/nothing.svg", http.StatusNotFound, ""},
	} {
		resp, b := e.do("GET", tc.path, nil, nil)
		if resp.StatusCode != tc.code || !strings.Contains(string(b), tc.want) ||
			tc.code == http.StatusOK && resp.Header.Get("Content-Type") != "image/svg+xml" {
			t.Errorf("GET %s = %d %s %q, want %d with %q", tc.path, resp.StatusCode, resp.Header.Get("Content-Type"), b, tc.code, tc.want)
		}
	}
	if resp, _ := e.do("POST", "/api/v1/hooks/bitbucket/team/app", nil, "{}"); resp.StatusCode != http.StatusNotFound {
		t.Errorf("a forge drover does not know = %d, want 404", resp.StatusCode)
	}
}

// recordingPoster posts with a real StatusClient and tells ch of every
// post's outcome.
type recordingPoster struct {
	forge.StatusClient
	ch chan error
}

func (p *recordingPoster) Post(ctx context.Context, s forge.Status) error {
	err := p.StatusClient.Post(ctx, s)
	p.ch <- err
	return err
}

// TestWebhookGitea is the whole loop against a real Gitea: a repository
// with a webhook to the coordinator, a push by git, the pipeline, its
// jobs run, and the commit statuses on the commit in Gitea.
func TestWebhookGitea(t *testing.T) {
	g := giteatest.Start(t)
	ctx := t.Context()
	posts := &recordingPoster{ch: make(chan error, 64)}
	e := newEnv(t, func(c *Config) { c.ForgeStatuses = posts })
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- e.c.Run(runCtx) }()
	t.Cleanup(func() { stop(); <-done })

	repo, err := g.CreateRepo(ctx, "app")
	if err != nil {
		t.Fatal(err)
	}
	if resp, b := e.admin("POST", "/api/v1/projects", map[string]any{
		"name": "team/app", "repo_url": repo.CloneURL, "webhook_secret": "hook-secret",
		"forge": map[string]string{"kind": "gitea", "url": g.URL, "repo": repo.FullName, "token": g.Token},
	}); resp.StatusCode != http.StatusCreated {
		t.Fatalf("POST /api/v1/projects = %d %s", resp.StatusCode, b)
	}
	if _, err := g.AddWebhook(ctx, "app", e.srv.URL+"/api/v1/hooks/gitea/team/app", "hook-secret"); err != nil {
		t.Fatal(err)
	}
	_, tok := e.runner(nil)

	w := newWorkTree(t)
	sha := w.commit("add CI", map[string]string{".gitlab-ci.yml": "stages: [build, test]\nbuild: {stage: build, script: [make]}\ntest: {stage: test, script: [make test]}\n"})
	w.git("push", "-q", g.PushURL("app"), "main")

	// The push's pipeline: its jobs, run by the runner in order.
	for _, name := range []string{"build", "test"} {
		// Asked until the webhook's pipeline queues the job (Gitea
		// delivers from a queue of its own).
		var jr *api.JobResponse
		for jr == nil && ctx.Err() == nil {
			_, jr = e.request(tok, "", api.FeaturesInfo{})
		}
		if jr == nil {
			t.Fatalf("no job %s", name)
		}
		if jr.JobInfo.Name != name || jr.GitInfo.Sha != sha || jr.JobInfo.ProjectName != "app" {
			t.Fatalf("job %s of %s in %s, want %s of %s", jr.JobInfo.Name, jr.GitInfo.Sha, jr.JobInfo.ProjectName, name, sha)
		}
		if resp, b := e.put(jr.ID, jr.Token, api.UpdateJobRequest{Token: jr.Token, State: api.StateSuccess}); resp.StatusCode != http.StatusOK {
			t.Fatalf("PUT %s = %d %s", name, resp.StatusCode, b)
		}
	}
	// The statuses reach Gitea: wait for the post of success.
	for {
		var st []giteatest.Status
		select {
		case err := <-posts.ch:
			if err != nil {
				t.Fatalf("a commit status post failed: %v", err)
			}
		case <-ctx.Done():
			t.Fatal("no success status posted")
		}
		st, err = g.CommitStatuses(ctx, "app", sha)
		if err != nil {
			t.Fatal(err)
		}
		if len(st) > 0 && st[0].State == "success" {
			if st[0].Context != StatusContext || !strings.HasPrefix(st[0].TargetURL, e.srv.URL+"/pipelines/") || !strings.Contains(st[0].Description, "passed") {
				t.Errorf("status %+v, want context %s, target the pipeline's page, 'passed'", st[0], StatusContext)
			}
			break
		}
	}

	// A push whose configuration does not compile: a failed pipeline, and
	// the forge's status says why.
	broken := w.commit("break CI", map[string]string{".gitlab-ci.yml": "build:\n  script: [make]\n  when: sometimes\n"})
	w.git("push", "-q", g.PushURL("app"), "main")
	for {
		select {
		case err := <-posts.ch:
			if err != nil {
				t.Fatalf("a commit status post failed: %v", err)
			}
		case <-ctx.Done():
			t.Fatal("no status posted for the broken commit")
		}
		st, err := g.CommitStatuses(ctx, "app", broken)
		if err != nil {
			t.Fatal(err)
		}
		if len(st) > 0 {
			if st[0].State != "failure" || !strings.Contains(st[0].Description, ".gitlab-ci.yml:3") {
				t.Errorf("status of the broken commit = %+v, want failure naming .gitlab-ci.yml:3", st[0])
			}
			break
		}
	}
}
