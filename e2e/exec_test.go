package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/drover-ci/drover/internal/dockerimage"
)

// hasLogLine reports whether drover exec's output has a line of job's
// log (prefixed with its padded name) containing text.
func hasLogLine(out, job, text string) bool {
	return regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(job) + ` *│ .*` + regexp.QuoteMeta(text)).MatchString(out)
}

// TestExec runs drover exec in a real work tree: the pipeline of the
// checked-out branch with an uncommitted change the jobs see, a job named
// with its needs, --manual, a failing pipeline (exit 1), a configuration
// error (exit 2, every error with file:line), a cache kept between runs
// in .drover/, which git ignores.
func TestExec(t *testing.T) {
	repo, _ := ciRepo(t, map[string]string{
		"notes.txt": "committed\n",
		".gitlab-ci.yml": `
stages: [build, test, deploy]
build:
  stage: build
  cache: {key: deps, paths: [deps/]}
  script:
    - 'if [ -e deps/seen ]; then echo "cache restored"; fi'
    - mkdir -p deps out && touch deps/seen
    - 'echo "notes: $(cat notes.txt)" | tee out/notes'
  artifacts:
    paths: [out/]
unit:
  stage: test
  needs: [build]
  script: [cat out/notes]
other:
  stage: test
  script: ['echo "other ran"']
deploy:
  stage: deploy
  script: ['echo "deploying from $CI_COMMIT_BRANCH"']
  rules:
    - if: $CI_COMMIT_BRANCH == "main"
      when: manual
`,
	})
	if err := os.WriteFile(filepath.Join(repo, "notes.txt"), []byte("edited, not committed\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	out, code := runCLI(t, repo, nil, "exec")
	if code != 0 {
		t.Fatalf("drover exec = exit %d:\n%s", code, out)
	}
	for _, want := range []string{"the work tree as it is", "manual (not played)", "pipeline 1: manual"} {
		if !strings.Contains(out, want) {
			t.Errorf("drover exec's output lacks %q:\n%s", want, out)
		}
	}
	for _, want := range [][2]string{{"build", "notes: edited, not committed"}, {"unit", "notes: edited, not committed"}, {"other", "other ran"}} {
		if !hasLogLine(out, want[0], want[1]) {
			t.Errorf("drover exec's output lacks %s's log line %q:\n%s", want[0], want[1], out)
		}
	}
	if strings.Contains(out, "\x1b[") {
		t.Errorf("drover exec wrote colours to a pipe:\n%q", out)
	}
	st, err := exec.Command("git", "-C", repo, "status", "--porcelain").Output()
	if err != nil || strings.TrimSpace(string(st)) != "M notes.txt" {
		t.Errorf("git status after drover exec = %q, %v; want only the user's own change (.drover/ ignored, index untouched)", st, err)
	}

	// unit with its need; the cache of the first run is back.
	out, code = runCLI(t, repo, nil, "exec", "--committed", "unit")
	if code != 0 || !hasLogLine(out, "unit", "notes: committed") || !hasLogLine(out, "build", "cache restored") || strings.Contains(out, "other ran") {
		t.Errorf("drover exec --committed unit = exit %d, want build (cache restored) and unit on the committed notes only:\n%s", code, out)
	}

	out, code = runCLI(t, repo, nil, "exec", "--manual", "--variable", "X=1")
	if code != 0 || !hasLogLine(out, "deploy", "deploying from main") || !strings.Contains(out, "pipeline 3: success") {
		t.Errorf("drover exec --manual = exit %d, want the deploy played and success:\n%s", code, out)
	}

	if err := os.WriteFile(filepath.Join(repo, ".gitlab-ci.yml"), []byte("a:\n  script: [exit 3]\nb:\n  stage: deploy\n  script: [echo never]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, code = runCLI(t, repo, nil, "exec")
	if code != 1 || !strings.Contains(out, "pipeline 4: failed") || !strings.Contains(out, "skipped") {
		t.Errorf("drover exec of a failing job = exit %d, want 1, a failed pipeline and b skipped:\n%s", code, out)
	}

	if err := os.WriteFile(filepath.Join(repo, ".gitlab-ci.yml"), []byte("a:\n  scirpt: [x]\nb:\n  script: [x]\n  needs: [nope]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, code = runCLI(t, repo, nil, "exec")
	if code != 2 || !strings.Contains(out, ".gitlab-ci.yml:2: jobs:a config contains unknown keys: scirpt") || !strings.Contains(out, ".gitlab-ci.yml:5: b job: undefined need: nope") {
		t.Errorf("drover exec of an invalid file = exit %d, want 2 and both errors:\n%s", code, out)
	}
	out, code = runCLI(t, repo, nil, "lint")
	if code != 2 || !strings.Contains(out, "jobs:a config contains unknown keys: scirpt") {
		t.Errorf("drover lint of an invalid file = exit %d, want 2:\n%s", code, out)
	}
}

// TestExecDocker: jobs that name images run on the docker executor when
// an engine answers (no flag needed), cloning the work tree mounted
// read-only into their containers and reaching the embedded coordinator
// (artifacts) and their services; --shell runs them on the shell
// executor with image: and services: ignored, and says so.
func TestExecDocker(t *testing.T) {
	needDockerImages(t)
	repo, _ := ciRepo(t, map[string]string{".gitlab-ci.yml": fmt.Sprintf(`
build:
  stage: build
  image: %[1]s
  script:
    - 'if [ -f /.dockerenv ]; then echo "where: container"; else echo "where: host"; fi'
    - mkdir -p out && echo "built in $CI_JOB_NAME" > out/x
  artifacts: {paths: [out/]}
test:
  stage: test
  image: %[1]s
  services:
    - name: %[2]s
      alias: web
  script:
    - cat out/x
    - wget -qO- http://web:8080/
`, dockerimage.TestImageBusybox, dockerimage.TestImageService)})

	out, code := runCLI(t, repo, nil, "exec")
	if code != 0 {
		t.Fatalf("drover exec = exit %d:\n%s", code, out)
	}
	for _, want := range []string{"on the docker executor", "jobs name images (" + dockerimage.TestImageBusybox + ")", "pipeline 1: success"} {
		if !strings.Contains(out, want) {
			t.Errorf("drover exec's output lacks %q:\n%s", want, out)
		}
	}
	for _, want := range [][2]string{{"build", "where: container"}, {"test", "built in build"}, {"test", "drover service ok"}} {
		if !hasLogLine(out, want[0], want[1]) {
			t.Errorf("drover exec's output lacks %s's log line %q:\n%s", want[0], want[1], out)
		}
	}

	out, code = runCLI(t, repo, nil, "exec", "--shell", "build")
	if code != 0 || !strings.Contains(out, "on the shell executor") || !strings.Contains(out, "image: and services: ignored") || !hasLogLine(out, "build", "where: host") {
		t.Errorf("drover exec --shell build = exit %d, want build on the host with a warning that its image is ignored:\n%s", code, out)
	}
}
