package shell

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/executor"
)

// testRepo is a real repository: main has two commits, feature one more,
// and tag v1 points at main's first commit.
type testRepo struct {
	dir                   string
	first, second, branch string // commit shas
}

// testIdent is the author and committer of the tests' commits.
var testIdent = []string{
	"GIT_AUTHOR_NAME=Drover Test", "GIT_AUTHOR_EMAIL=test@drover.invalid",
	"GIT_COMMITTER_NAME=Drover Test", "GIT_COMMITTER_EMAIL=test@drover.invalid",
}

// git runs git in dir with this process's environment and testIdent.
func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	return gitIn(t, append(os.Environ(), testIdent...), dir, args...)
}

// needProgram skips t when the program name is not installed.
func needProgram(t *testing.T, name string) {
	t.Helper()
	if _, err := exec.LookPath(name); err != nil {
		t.Skip(name + " not installed")
	}
}

func newTestRepo(t *testing.T) testRepo {
	t.Helper()
	needProgram(t, "git")
	r := testRepo{dir: t.TempDir()}
	git(t, r.dir, "init", "-q", "-b", "main")
	commit := func(file, content string) string {
		if err := os.WriteFile(filepath.Join(r.dir, file), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		git(t, r.dir, "add", file)
		git(t, r.dir, "commit", "-q", "-m", file+": "+content)
		return git(t, r.dir, "rev-parse", "HEAD")
	}
	r.first = commit("README", "one\n")
	git(t, r.dir, "tag", "v1")
	r.second = commit("README", "two\n")
	git(t, r.dir, "checkout", "-q", "-b", "feature")
	r.branch = commit("feature.txt", "feature\n")
	git(t, r.dir, "checkout", "-q", "main")
	return r
}

func (r testRepo) url() string { return "file://" + r.dir }

func gitJob(r testRepo, ref, sha string, depth int, vars ...api.Variable) *api.JobResponse {
	return &api.JobResponse{
		ID:        1,
		GitInfo:   api.GitInfo{RepoURL: r.url(), Ref: ref, Sha: sha, RefType: "branch", Depth: depth},
		Variables: vars,
		Steps:     []api.Step{{Name: api.StepScript, Script: []string{"true"}}},
	}
}

func getSources(t *testing.T, info Info) (string, int) {
	t.Helper()
	return runScript(t, info.Shell, generate(t, executor.StageGetSources, info), info.ProjectDir)
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestGetSourcesClone(t *testing.T) {
	t.Parallel()
	r := newTestRepo(t)
	for _, sh := range shells {
		t.Run(sh+"/at sha", func(t *testing.T) {
			t.Parallel()
			info := testInfo(t, sh, gitJob(r, "main", r.first, 0))
			out, code := getSources(t, info)
			if code != 0 {
				t.Fatalf("get_sources exit code %d:\n%s", code, out)
			}
			if got := git(t, info.ProjectDir, "rev-parse", "HEAD"); got != r.first {
				t.Errorf("HEAD = %s, want %s", got, r.first)
			}
			if got := readFile(t, filepath.Join(info.ProjectDir, "README")); got != "one\n" {
				t.Errorf("README = %q, want %q", got, "one\n")
			}
			for _, w := range []string{"Fetching changes...", "Created fresh repository.",
				"Checking out " + r.first[:8] + " as detached HEAD (ref is main)..."} {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
		})
		t.Run(sh+"/depth 1", func(t *testing.T) {
			t.Parallel()
			info := testInfo(t, sh, gitJob(r, "main", r.second, 1))
			out, code := getSources(t, info)
			if code != 0 {
				t.Fatalf("get_sources exit code %d:\n%s", code, out)
			}
			if got := git(t, info.ProjectDir, "rev-list", "--count", "HEAD"); got != "1" {
				t.Errorf("git rev-list --count HEAD = %s, want 1", got)
			}
			if !strings.Contains(out, "Fetching changes with git depth set to 1...") {
				t.Errorf("output lacks the depth line:\n%s", out)
			}
		})
	}
	t.Run("no sha checks out the ref", func(t *testing.T) {
		t.Parallel()
		info := testInfo(t, Bash, gitJob(r, "feature", "", 0))
		if out, code := getSources(t, info); code != 0 {
			t.Fatalf("get_sources exit code %d:\n%s", code, out)
		}
		if got := git(t, info.ProjectDir, "rev-parse", "HEAD"); got != r.branch {
			t.Errorf("HEAD = %s, want feature's %s", got, r.branch)
		}
	})
	t.Run("tag", func(t *testing.T) {
		t.Parallel()
		job := gitJob(r, "v1", "", 0)
		job.GitInfo.RefType = "tag"
		info := testInfo(t, Sh, job)
		if out, code := getSources(t, info); code != 0 {
			t.Fatalf("get_sources exit code %d:\n%s", code, out)
		}
		if got := git(t, info.ProjectDir, "rev-parse", "HEAD"); got != r.first {
			t.Errorf("HEAD = %s, want v1's %s", got, r.first)
		}
	})
	t.Run("clone replaces the directory", func(t *testing.T) {
		t.Parallel()
		info := testInfo(t, Bash, gitJob(r, "main", r.second, 0))
		stale := filepath.Join(info.ProjectDir, "stale")
		if err := os.WriteFile(stale, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if out, code := getSources(t, info); code != 0 {
			t.Fatalf("get_sources exit code %d:\n%s", code, out)
		}
		if _, err := os.Stat(stale); !os.IsNotExist(err) {
			t.Errorf("stat stale file = %v, want not exist", err)
		}
	})
	t.Run("bad sha fails", func(t *testing.T) {
		t.Parallel()
		info := testInfo(t, Bash, gitJob(r, "main", strings.Repeat("de", 20), 0))
		if out, code := getSources(t, info); code == 0 {
			t.Errorf("get_sources with an unknown sha exit code = 0, want non-zero:\n%s", out)
		}
	})
	t.Run("GIT_CHECKOUT false", func(t *testing.T) {
		t.Parallel()
		info := testInfo(t, Bash, gitJob(r, "main", r.second, 0, api.Variable{Key: "GIT_CHECKOUT", Value: "false"}))
		out, code := getSources(t, info)
		if code != 0 || !strings.Contains(out, "Skipping Git checkout") {
			t.Fatalf("get_sources exit code %d, want 0 and a skip line:\n%s", code, out)
		}
		if _, err := os.Stat(filepath.Join(info.ProjectDir, "README")); !os.IsNotExist(err) {
			t.Errorf("stat README = %v, want not exist (no checkout)", err)
		}
	})
}

func TestGetSourcesFetchReuses(t *testing.T) {
	t.Parallel()
	r := newTestRepo(t)
	for _, sh := range shells {
		t.Run(sh, func(t *testing.T) {
			t.Parallel()
			info := testInfo(t, sh, gitJob(r, "main", r.first, 0))
			if out, code := getSources(t, info); code != 0 {
				t.Fatalf("first get_sources exit code %d:\n%s", code, out)
			}
			marker := filepath.Join(info.ProjectDir, ".git", "drover-marker")
			untracked := filepath.Join(info.ProjectDir, "untracked")
			for _, f := range []string{marker, untracked} {
				if err := os.WriteFile(f, nil, 0o644); err != nil {
					t.Fatal(err)
				}
			}

			job := gitJob(r, "feature", r.branch, 0, api.Variable{Key: "GIT_STRATEGY", Value: "fetch"})
			info.Job, info.Variables = job, job.Variables
			out, code := getSources(t, info)
			if code != 0 {
				t.Fatalf("fetch get_sources exit code %d:\n%s", code, out)
			}
			if _, err := os.Stat(marker); err != nil {
				t.Errorf("the fetch strategy did not reuse the repository: %v\n%s", err, out)
			}
			if _, err := os.Stat(untracked); !os.IsNotExist(err) {
				t.Errorf("stat untracked file = %v, want removed by git clean", err)
			}
			if got := git(t, info.ProjectDir, "rev-parse", "HEAD"); got != r.branch {
				t.Errorf("HEAD = %s, want %s", got, r.branch)
			}
			if !strings.Contains(out, "Reinitialized existing Git repository") {
				t.Errorf("output lacks the reuse line:\n%s", out)
			}
		})
	}
	t.Run("allow_git_fetch without a repository clones", func(t *testing.T) {
		t.Parallel()
		job := gitJob(r, "main", r.second, 0)
		job.AllowGitFetch = true
		info := testInfo(t, Sh, job)
		out, code := getSources(t, info)
		if code != 0 || !strings.Contains(out, "Created fresh repository.") {
			t.Fatalf("get_sources exit code %d, want 0 and a fresh repository:\n%s", code, out)
		}
	})
}

func TestGetSourcesNone(t *testing.T) {
	t.Parallel()
	r := newTestRepo(t)
	for _, job := range []*api.JobResponse{
		gitJob(r, "main", r.second, 0, api.Variable{Key: "GIT_STRATEGY", Value: "none"}),
		{Steps: []api.Step{{Name: api.StepScript, Script: []string{"true"}}}}, // no repo_url
	} {
		info := testInfo(t, Sh, job)
		keep := filepath.Join(info.ProjectDir, "keep")
		if err := os.WriteFile(keep, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		out, code := getSources(t, info)
		// GitLab Runner's three lines, in its order.
		i, j, k := strings.Index(out, "Skipping Git repository setup"), strings.Index(out, "Skipping Git checkout"), strings.Index(out, "Skipping Git submodules setup")
		if code != 0 || i < 0 || j < i || k < j {
			t.Errorf("get_sources exit code %d, want 0 and the three skip lines in order:\n%s", code, out)
		}
		if _, err := os.Stat(keep); err != nil {
			t.Errorf("none strategy touched the project directory: %v", err)
		}
		if _, err := os.Stat(filepath.Join(info.ProjectDir, ".git")); !os.IsNotExist(err) {
			t.Errorf("stat .git = %v, want not exist", err)
		}
	}
}

func TestGetSourcesRejects(t *testing.T) {
	r := testRepo{dir: "/nonexistent"}
	for name, job := range map[string]*api.JobResponse{
		"strategy": gitJob(r, "main", "", 0, api.Variable{Key: "GIT_STRATEGY", Value: "teleport"}),
		"ref":      gitJob(r, "--upload-pack=evil", "", 0),
		"refspec":  {GitInfo: api.GitInfo{RepoURL: r.url(), Refspecs: []string{"--upload-pack=evil"}}},
	} {
		if _, err := Generate(executor.StageGetSources, testInfo(t, Bash, job)); err == nil {
			t.Errorf("%s: Generate(get_sources) = nil error, want one", name)
		}
	}
}

// TestStrategy: GIT_STRATEGY as written (any case), else fetch when the
// job allows it, else clone.
func TestStrategy(t *testing.T) {
	for _, tc := range []struct {
		value string
		fetch bool
		want  string
	}{
		{"", false, GitClone},
		{"", true, GitFetch},
		{" None ", true, GitNone},
		{"clone", true, GitClone},
		{"empty", false, GitEmpty},
	} {
		job := &api.JobResponse{AllowGitFetch: tc.fetch}
		if tc.value != "" {
			job.Variables = api.Variables{{Key: "GIT_STRATEGY", Value: tc.value}}
		}
		if got := Strategy(job); got != tc.want {
			t.Errorf("Strategy(%q, allow fetch %v) = %q, want %q", tc.value, tc.fetch, got, tc.want)
		}
	}
}
