package e2e

import (
	"bufio"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/client"
	"github.com/drover-ci/drover/internal/pgtest"
)

// ciRepo makes a git repository whose main branch holds files (path →
// contents) in one commit, and returns its path and the commit's sha.
func ciRepo(t testing.TB, files map[string]string) (string, string) {
	t.Helper()
	dir := t.TempDir()
	git := func(args ...string) string { return gitAs(t, "Ada", "ada@example.com", dir, args...) }
	git("init", "-q", "-b", "main")
	for name, data := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	git("add", "-A")
	git("commit", "-q", "-m", "CI pipeline\n\nWith a body.")
	return dir, git("rev-parse", "HEAD")
}

// waitPipeline polls until pipeline id satisfies ok.
func waitPipeline(t *testing.T, c *client.Client, id int64, d time.Duration, ok func(*client.Pipeline) bool) *client.Pipeline {
	t.Helper()
	d = patience(d)
	deadline := time.Now().Add(d)
	var p *client.Pipeline
	var err error
	for time.Now().Before(deadline) {
		p, err = c.Pipeline(context.Background(), id)
		if err == nil && ok(p) {
			return p
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("pipeline %d: condition not met within %v; last: %+v, err %v", id, d, p, err)
	return nil
}

func pipelineJob(p *client.Pipeline, name string) *client.Job {
	for i := range p.Jobs {
		if p.Jobs[i].Name == name {
			return &p.Jobs[i]
		}
	}
	return nil
}

// pipelineFixture is a coordinator and a shell runner manager.
func pipelineFixture(t *testing.T, concurrent int, coordArgs ...string) (*coordinator, *client.Client) {
	t.Helper()
	dir := t.TempDir()
	c := startCoordinator(t, filepath.Join(dir, "coord"), coordArgs...)
	cfg := writeConfig(t, dir, c.url, c.runnerToken(t), concurrent, "  cache_dir = "+jsonQuote(filepath.Join(dir, "cache"))+"\n"+
		"  pre_get_sources_script = \"echo runner pre-get-sources hook\"\n  pre_build_script = \"echo runner pre-build hook\"\n")
	m := start(t, dir, "run", "--config", cfg)
	m.waitLog("runner manager started", 30*time.Second)
	t.Cleanup(func() {
		m.signal(syscall.SIGTERM)
		m.wait(30 * time.Second)
	})
	return c, c.client()
}

// TestPipelineShell runs a repository's .gitlab-ci.yml on a real
// coordinator and a real manager (shell executor): the DAG order (a
// need on a job of the same stage), allow_failure, the retry of a flaky
// job, artifacts and a dotenv report across needs, parallel:matrix, a
// manual job played, and the pipeline's status as it goes.
func TestPipelineShell(t *testing.T) {
	marks := t.TempDir() // where the flaky job remembers its first run
	repo, sha := ciRepo(t, map[string]string{
		".gitlab-ci.yml": strings.ReplaceAll(`
stages: [build, test, deploy]
variables:
  GREETING: hello
default:
  before_script: [echo "before $CI_JOB_NAME"]
build:
  stage: build
  script:
    - mkdir -p out && echo "built at $CI_COMMIT_SHORT_SHA" > out/app.txt
    - echo "VERSION=1.2.$CI_PIPELINE_IID" > build.env
  artifacts:
    paths: [out/]
    reports:
      dotenv: build.env
lint:
  stage: build
  needs: [build]
  hooks:
    pre_get_sources_script: [echo "job pre-get-sources hook"]
  script:
    - cat out/app.txt
    - 'echo "lint sees $VERSION"'
    - 'echo "pipeline page $CI_PIPELINE_URL"'
    - 'printf "  Lines:   48.46%% (510/650)\n\033[32m  Lines:   78.456%%\033[0m (510/650)\n"'
    - echo '<testsuite name="lint" tests="1"><testcase name="style"/></testsuite>' > report.xml
  coverage: '/^\s*Lines:\s*(\d+.\d+)\%/'
  artifacts:
    reports:
      junit: report.xml
flaky:
  stage: test
  retry: 2
  script:
    - 'if [ ! -e MARKS/flaky-$CI_PIPELINE_ID ]; then touch MARKS/flaky-$CI_PIPELINE_ID; exit 3; fi'
    - echo flaky passed
may-fail:
  stage: test
  allow_failure: true
  script: ['echo "TOTAL  18  0  100%"', exit 1]
  coverage: /total.*? (\d+)%$/i
test:
  stage: test
  parallel:
    matrix:
      - OS: [linux, bsd]
  script: ['echo "$GREETING from $OS $CI_NODE_INDEX/$CI_NODE_TOTAL"', cat out/app.txt]
deploy:
  stage: deploy
  script: ['echo "deploying $VERSION"']
  rules:
    - if: $CI_COMMIT_BRANCH == "main"
      when: manual
never:
  script: [exit 1]
  rules:
    - if: $CI_COMMIT_TAG
`, "MARKS", marks),
	})
	coord, cl := pipelineFixture(t, 2)
	ctx := context.Background()
	p, err := cl.CreatePipeline(ctx, client.PipelineSpec{Project: "g/app", RepoURL: repo, Ref: "main", Source: "push"})
	if err != nil {
		t.Fatal(err)
	}
	if p.SHA != sha || p.IID != 1 || len(p.Jobs) != 7 {
		t.Fatalf("pipeline = %+v, want sha %s, iid 1, 7 jobs", p, sha)
	}
	// The manual deploy blocks: the pipeline waits for a person.
	p = waitPipeline(t, cl, p.ID, 3*time.Minute, func(p *client.Pipeline) bool { return p.Status == "manual" || p.Finished() })
	if p.Status != "manual" {
		t.Fatalf("pipeline = %s, want manual (blocked on deploy); jobs: %+v", p.Status, p.Jobs)
	}
	want := map[string]string{"build": "success", "lint": "success", "flaky": "success", "may-fail": "failed",
		"test: [linux]": "success", "test: [bsd]": "success", "deploy": "manual"}
	for name, st := range want {
		j := pipelineJob(p, name)
		if j == nil || j.Status != st {
			t.Errorf("job %s = %+v, want %s", name, j, st)
		}
	}
	if pipelineJob(p, "never") != nil {
		t.Error("job never is in the pipeline: its rules should leave it out")
	}
	// coverage: the last line of the log that matches, colours and all,
	// for a job that succeeds or fails; the pipeline's is the average.
	covs := map[string]string{}
	for _, j := range p.Jobs {
		if j.Coverage != "" {
			covs[j.Name] = j.Coverage
		}
	}
	if want := map[string]string{"lint": "78.46", "may-fail": "100"}; !maps.Equal(covs, want) || p.Coverage != "89.23" {
		t.Errorf("coverage: jobs %v, pipeline %q; want %v and 89.23", covs, p.Coverage, want)
	}
	if len(p.Retried) != 1 || p.Retried[0].Name != "flaky" || p.Retried[0].Status != "failed" {
		t.Errorf("retried jobs = %+v, want flaky's first (failed) run", p.Retried)
	}
	lint := trace(t, cl, pipelineJob(p, "lint").ID)
	pageURL := fmt.Sprintf("%s/pipelines/%d", coord.url, p.ID)
	for _, w := range []string{"before lint", "built at " + sha[:8], "lint sees 1.2.1", "pipeline page " + pageURL} {
		if !strings.Contains(lint, w) {
			t.Errorf("lint's log lacks %q:\n%s", w, lint)
		}
	}
	// The runner's hooks and the job's, where GitLab Runner runs them.
	if !regexp.MustCompile(`(?s)runner pre-get-sources hook\n.*job pre-get-sources hook\n.*Fetching changes.*runner pre-build hook\n.*before lint`).MatchString(lint) {
		t.Errorf("lint's log lacks the hooks in order (runner's and job's pre_get_sources_script before the fetch, pre_build_script before the script):\n%s", lint)
	}
	// reports:junit: stored as the job's junit report.
	if a, err := cl.Artifacts(ctx, pipelineJob(p, "lint").ID, "junit"); err != nil {
		t.Errorf("lint's junit report: %v", err)
	} else {
		br := bufio.NewReader(a.Body)
		var r io.Reader = br
		if magic, _ := br.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
			if r, err = gzip.NewReader(br); err != nil {
				t.Fatal(err)
			}
		}
		b, err := io.ReadAll(r)
		a.Body.Close()
		if err != nil || !strings.Contains(string(b), `<testcase name="style"/>`) {
			t.Errorf("lint's junit report = %q, %v; want the report.xml it wrote", b, err)
		}
	}
	tl := trace(t, cl, pipelineJob(p, "test: [bsd]").ID)
	if !strings.Contains(tl, "hello from bsd 2/2") {
		t.Errorf("test: [bsd]'s log lacks its matrix values:\n%s", tl)
	}
	// lint ran before the test stage: a need within its stage.
	b, l, f := pipelineJob(p, "build"), pipelineJob(p, "lint"), p.Retried[0]
	if l.StartedAt.Before(*b.FinishedAt) || f.StartedAt.Before(*l.FinishedAt) {
		t.Errorf("order: build ended %v, lint ran %v–%v, flaky started %v", b.FinishedAt, l.StartedAt, l.FinishedAt, f.StartedAt)
	}

	// CI_PIPELINE_URL is a page: the graph's stages, each job linked.
	req, _ := http.NewRequest(http.MethodGet, pageURL, nil)
	req.Header.Set("Authorization", "Bearer "+coord.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s = %d:\n%s", pageURL, resp.StatusCode, page)
	}
	for _, w := range []string{"Pipeline #" + fmt.Sprint(p.ID), `class="stage-name" x="`, ">build</text>", ">deploy</text>", fmt.Sprintf(`href="/jobs/%d"`, l.ID), "test: [bsd]", "st-manual",
		"<td>78.46%</td>", "<dd>89.23%</dd>"} {
		if !strings.Contains(string(page), w) {
			t.Errorf("the pipeline page lacks %q:\n%s", w, page)
		}
	}

	deploy := pipelineJob(p, "deploy")
	if _, err := cl.Play(ctx, deploy.ID); err != nil {
		t.Fatal(err)
	}
	p = waitPipeline(t, cl, p.ID, 2*time.Minute, (*client.Pipeline).Finished)
	if p.Status != "success" {
		t.Fatalf("pipeline = %s after the deploy, want success (may-fail may fail); jobs %+v", p.Status, p.Jobs)
	}
	if d := trace(t, cl, deploy.ID); !strings.Contains(d, "deploying 1.2.1") {
		t.Errorf("deploy's log lacks the dotenv variable of build:\n%s", d)
	}

	// A second pipeline of the project: iid 2; cancel it while a job runs.
	slow, _ := ciRepo(t, map[string]string{".gitlab-ci.yml": "wait:\n  script: [sleep 600]\nafter:\n  stage: deploy\n  script: [echo never]\n"})
	p2, err := cl.CreatePipeline(ctx, client.PipelineSpec{Project: "g/app", RepoURL: slow, Ref: "main"})
	if err != nil {
		t.Fatal(err)
	}
	if p2.IID != 2 {
		t.Errorf("second pipeline's iid = %d, want 2", p2.IID)
	}
	waitPipeline(t, cl, p2.ID, time.Minute, func(p *client.Pipeline) bool { return p.Status == "running" })
	if _, err := cl.CancelPipeline(ctx, p2.ID); err != nil {
		t.Fatal(err)
	}
	p2 = waitPipeline(t, cl, p2.ID, time.Minute, (*client.Pipeline).Finished)
	if p2.Status != "canceled" || pipelineJob(p2, "after").Status != "canceled" {
		t.Errorf("canceled pipeline = %s, jobs %+v", p2.Status, p2.Jobs)
	}
}

// TestPipelineErrors: a configuration with errors is refused with every
// error, file and line, and nothing is created.
func TestPipelineErrors(t *testing.T) {
	repo, _ := ciRepo(t, map[string]string{".gitlab-ci.yml": "a:\n  scirpt: [x]\nb:\n  script: [x]\n  needs: [nope]\n"})
	_, cl := pipelineFixture(t, 1)
	ctx := context.Background()
	_, err := cl.CreatePipeline(ctx, client.PipelineSpec{Project: "g/bad", RepoURL: repo, Ref: "main"})
	if err == nil || !strings.Contains(err.Error(), ".gitlab-ci.yml:2: jobs:a config contains unknown keys: scirpt") ||
		!strings.Contains(err.Error(), "b job: undefined need: nope") {
		t.Fatalf("CreatePipeline = %v, want both errors with file:line", err)
	}
	if ps, err := cl.Pipelines(ctx, "g/bad", 10); err != nil || len(ps) != 0 {
		t.Errorf("pipelines of g/bad = %+v, %v; want none", ps, err)
	}
	if _, err := cl.CreatePipeline(ctx, client.PipelineSpec{Project: "g/bad", RepoURL: repo, Ref: "no-such-branch"}); err == nil || !strings.Contains(err.Error(), "no-such-branch") {
		t.Errorf("CreatePipeline of a missing branch = %v, want an error naming it", err)
	}
}

// TestPipelinePostgresTwoCoordinators: a pipeline created through one
// coordinator is run by a manager of the other, both on one PostgreSQL
// database: every job runs once, in order, and two pipelines of one
// project with a resource_group never run its jobs at once.
func TestPipelinePostgresTwoCoordinators(t *testing.T) {
	url := pgtest.NewDatabase(t)
	dir := t.TempDir()
	c1 := startCoordinator(t, filepath.Join(dir, "coord1"), "--database-url", url)
	c1.waitLog(`job store: PostgreSQL`, 10*time.Second)
	c2 := startCoordinator(t, filepath.Join(dir, "coord2"), "--database-url", url,
		"--secret-key-file", filepath.Join(dir, "coord1", "secret-key"))
	c2.waitLog(`job store: PostgreSQL`, 10*time.Second)
	cfg := writeConfig(t, dir, c2.url, c2.runnerToken(t), 4, "")
	m := start(t, dir, "run", "--config", cfg)
	m.waitLog("runner manager started", 20*time.Second)
	t.Cleanup(func() {
		m.signal(syscall.SIGTERM)
		m.wait(30 * time.Second)
	})
	marks := t.TempDir()
	repo, _ := ciRepo(t, map[string]string{".gitlab-ci.yml": strings.ReplaceAll(`
stages: [build, deploy]
build:
  stage: build
  script: ['echo "$CI_PIPELINE_ID" >> MARKS/build-runs']
deploy:
  stage: deploy
  resource_group: production
  script:
    - 'if [ -e MARKS/deploying ]; then echo "another deploy is running"; exit 1; fi'
    - touch MARKS/deploying
    - sleep 1
    - rm MARKS/deploying
    - 'echo "$CI_PIPELINE_ID" >> MARKS/deploys'
`, "MARKS", marks)})
	ctx := context.Background()
	cl1 := c1.client()
	var ids []int64
	for range 2 {
		p, err := cl1.CreatePipeline(ctx, client.PipelineSpec{Project: "g/pg", RepoURL: repo, Ref: "main"})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, p.ID)
	}
	for _, id := range ids {
		p := waitPipeline(t, c2.client(), id, 2*time.Minute, (*client.Pipeline).Finished)
		if p.Status != "success" {
			t.Errorf("pipeline %d = %s, jobs %+v", id, p.Status, p.Jobs)
		}
	}
	for _, f := range []string{"build-runs", "deploys"} {
		b, err := os.ReadFile(filepath.Join(marks, f))
		if err != nil {
			t.Fatal(err)
		}
		if lines := strings.Fields(string(b)); len(lines) != 2 || lines[0] == lines[1] {
			t.Errorf("%s = %q, want each pipeline's job once", f, lines)
		}
	}
}

// TestPipelineDelayed: a when: delayed job waits its start_in after the
// jobs before it, then runs (woken by its own timer, not the sweep).
func TestPipelineDelayed(t *testing.T) {
	repo, _ := ciRepo(t, map[string]string{".gitlab-ci.yml": `
build:
  stage: build
  script: [echo built]
later:
  stage: deploy
  when: delayed
  start_in: 2 seconds
  script: [echo later]
`})
	_, cl := pipelineFixture(t, 1)
	p, err := cl.CreatePipeline(context.Background(), client.PipelineSpec{Project: "g/delayed", RepoURL: repo, Ref: "main"})
	if err != nil {
		t.Fatal(err)
	}
	waitPipeline(t, cl, p.ID, time.Minute, func(p *client.Pipeline) bool {
		j := pipelineJob(p, "later")
		return j != nil && j.Status == "scheduled"
	})
	p = waitPipeline(t, cl, p.ID, time.Minute, (*client.Pipeline).Finished)
	build, later := pipelineJob(p, "build"), pipelineJob(p, "later")
	if p.Status != "success" || later.Status != "success" {
		t.Fatalf("pipeline = %s, jobs %+v", p.Status, p.Jobs)
	}
	if wait := later.StartedAt.Sub(*build.FinishedAt); wait < 2*time.Second {
		t.Errorf("the delayed job started %v after build ended, want at least its start_in, 2s", wait)
	}
}
