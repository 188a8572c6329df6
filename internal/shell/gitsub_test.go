package shell

import (
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/executor"
)

// subRepos are bare repositories under root/group: project has the
// submodule "sub" (relative URL ../sub.git), whose own submodule
// "nested" is subsub (../subsub.git). project records sub's first commit;
// sub has a second one on its main branch.
type subRepos struct {
	root                string
	project             string // the project's main commit
	subFirst, subSecond string // sub's commits
}

const testToken = "job-token-42"

// gitEnv is the environment of the git commands and scripts of a test:
// a HOME of its own (its .gitconfig holds extra, one line of git config
// per entry, "section.key=value"), no system configuration.
func gitEnv(t *testing.T, extra ...string) []string {
	t.Helper()
	home := t.TempDir()
	var cfg strings.Builder
	for _, kv := range extra {
		k, v, _ := strings.Cut(kv, "=")
		sec, key, _ := strings.Cut(k, ".")
		cfg.WriteString("[" + sec + "]\n\t" + key + " = " + v + "\n")
	}
	if err := os.WriteFile(filepath.Join(home, ".gitconfig"), []byte(cfg.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	var env []string
	for _, e := range os.Environ() {
		if k, _, _ := strings.Cut(e, "="); k != "HOME" && !strings.HasPrefix(k, "GIT_") && k != "XDG_CONFIG_HOME" {
			env = append(env, e)
		}
	}
	return append(append(env, "HOME="+home, "GIT_CONFIG_NOSYSTEM=1"), testIdent...)
}

// fileAllowed lets git clone submodules over file:// (off by default
// since git 2.38.1), as a runner serving file:// repositories must.
const fileAllowed = "protocol.allow=always"

func gitIn(t *testing.T, env []string, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir, cmd.Env = dir, env
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// newSubRepos makes the repositories of subRepos.
func newSubRepos(t *testing.T) subRepos {
	t.Helper()
	needProgram(t, "git")
	env := gitEnv(t, fileAllowed)
	r := subRepos{root: t.TempDir()}
	work := t.TempDir()
	// mk makes work/name with files, commits, and pushes it to the bare
	// root/group/name.git; more, when set, runs before the commit.
	mk := func(name string, files map[string]string, more func(wd string)) string {
		wd := filepath.Join(work, name)
		bare := filepath.Join(r.root, "group", name+".git")
		gitIn(t, env, work, "init", "-q", "-b", "main", wd)
		gitIn(t, env, work, "init", "-q", "--bare", "-b", "main", bare)
		gitIn(t, env, wd, "remote", "add", "origin", "file://"+bare)
		for p, c := range files {
			if err := os.WriteFile(filepath.Join(wd, p), []byte(c), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if more != nil {
			more(wd)
		}
		gitIn(t, env, wd, "add", "-A")
		gitIn(t, env, wd, "commit", "-q", "-m", name)
		gitIn(t, env, wd, "push", "-q", "origin", "main")
		return gitIn(t, env, wd, "rev-parse", "HEAD")
	}
	mk("subsub", map[string]string{"subsub.txt": "subsub\n"}, nil)
	r.subFirst = mk("sub", map[string]string{"sub.txt": "sub one\n"}, func(wd string) {
		gitIn(t, env, wd, "submodule", "add", "-q", "../subsub.git", "nested")
	})
	r.project = mk("project", map[string]string{"README": "project\n"}, func(wd string) {
		gitIn(t, env, wd, "submodule", "add", "-q", "../sub.git", "sub")
	})
	// A second commit of sub that the project does not record.
	sub := filepath.Join(work, "sub")
	if err := os.WriteFile(filepath.Join(sub, "sub.txt"), []byte("sub two\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	gitIn(t, env, sub, "commit", "-q", "-am", "two")
	gitIn(t, env, sub, "push", "-q", "origin", "main")
	r.subSecond = gitIn(t, env, sub, "rev-parse", "HEAD")
	return r
}

func (r subRepos) fileURL() string { return "file://" + filepath.Join(r.root, "group", "project.git") }

// serveHTTP serves the repositories with git's smart HTTP backend on
// loopback, to clients that authenticate as the job (gitlab-ci-token and
// testToken), and returns the server's URL.
func (r subRepos) serveHTTP(t *testing.T) string {
	t.Helper()
	execPath, err := exec.Command("git", "--exec-path").Output()
	if err != nil {
		t.Skipf("git --exec-path: %v", err)
	}
	backend := &cgi.Handler{
		Path: filepath.Join(strings.TrimSpace(string(execPath)), "git-http-backend"),
		Env:  []string{"GIT_PROJECT_ROOT=" + r.root, "GIT_HTTP_EXPORT_ALL=1"},
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if user, pass, ok := req.BasicAuth(); !ok || user != "gitlab-ci-token" || pass != testToken {
			w.Header().Set("WWW-Authenticate", `Basic realm="drover"`)
			http.Error(w, "job token required", http.StatusUnauthorized)
			return
		}
		backend.ServeHTTP(w, req)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// runGetSources writes and runs get_sources for info with env, as the
// shell executor runs a stage.
func runGetSources(t *testing.T, info Info, env []string) (string, int) {
	t.Helper()
	return runScriptEnv(t, info.Shell, generate(t, executor.StageGetSources, info), info.ProjectDir, env)
}

func subJob(repoURL, sha string, vars ...api.Variable) *api.JobResponse {
	return &api.JobResponse{
		ID: 1, Token: testToken,
		GitInfo:   api.GitInfo{RepoURL: repoURL, Ref: "main", Sha: sha, RefType: "branch"},
		JobInfo:   api.JobInfo{ProjectFullPath: "group/project"},
		Variables: append(api.Variables{{Key: "CI_PROJECT_PATH", Value: "group/project"}}, vars...),
		Steps:     []api.Step{{Name: api.StepScript, Script: []string{"true"}}},
	}
}

func v(key, value string) api.Variable { return api.Variable{Key: key, Value: value} }

// existsIn reports whether path (under dir) exists.
func existsIn(dir, path string) bool {
	_, err := os.Stat(filepath.Join(dir, path))
	return err == nil
}

func TestGetSourcesSubmodules(t *testing.T) {
	t.Parallel()
	r := newSubRepos(t)
	tests := []struct {
		name  string
		shell string
		vars  []api.Variable
		depth int
		lines []string // the output has them, in order
		// Files that must and must not be there after.
		have, lack []string
		check      func(t *testing.T, env []string, dir string)
	}{{
		name:  "none by default",
		lines: []string{"Checking out", "Skipping Git submodules setup"},
		have:  []string{"README"},
		lack:  []string{"sub/sub.txt"},
	}, {
		name:  "normal",
		shell: Sh,
		vars:  []api.Variable{v("GIT_SUBMODULE_STRATEGY", "normal")},
		lines: []string{"Updating/initializing submodules...", "Updated submodules", "Configuring submodules to use parent git credentials..."},
		have:  []string{"sub/sub.txt"},
		lack:  []string{"sub/nested/subsub.txt"},
		check: func(t *testing.T, env []string, dir string) {
			if got := gitIn(t, env, filepath.Join(dir, "sub"), "rev-parse", "HEAD"); got != r.subFirst {
				t.Errorf("sub HEAD = %s, want the recorded %s", got, r.subFirst)
			}
		},
	}, {
		name:  "recursive",
		vars:  []api.Variable{v("GIT_SUBMODULE_STRATEGY", "recursive")},
		lines: []string{"Updating/initializing submodules recursively...", "Updated submodules"},
		have:  []string{"sub/sub.txt", "sub/nested/subsub.txt"},
	}, {
		name:  "recursive with the job's depth",
		vars:  []api.Variable{v("GIT_SUBMODULE_STRATEGY", "recursive")},
		depth: 1,
		lines: []string{"Fetching changes with git depth set to 1...", "Updating/initializing submodules recursively with git depth set to 1..."},
		have:  []string{"sub/nested/subsub.txt"},
		check: func(t *testing.T, env []string, dir string) {
			if got := gitIn(t, env, filepath.Join(dir, "sub"), "rev-parse", "--is-shallow-repository"); got != "true" {
				t.Errorf("sub is shallow = %s, want true", got)
			}
		},
	}, {
		name:  "GIT_SUBMODULE_DEPTH",
		vars:  []api.Variable{v("GIT_SUBMODULE_STRATEGY", "normal"), v("GIT_SUBMODULE_DEPTH", "1")},
		lines: []string{"Fetching changes...", "Updating/initializing submodules with git depth set to 1..."},
		have:  []string{"sub/sub.txt"},
	}, {
		name:  "GIT_SUBMODULE_PATHS excludes",
		vars:  []api.Variable{v("GIT_SUBMODULE_STRATEGY", "recursive"), v("GIT_SUBMODULE_PATHS", ":(exclude)sub")},
		lines: []string{"Updating/initializing submodules recursively..."},
		lack:  []string{"sub/sub.txt"},
	}, {
		name: "GIT_SUBMODULE_PATHS includes",
		vars: []api.Variable{v("GIT_SUBMODULE_STRATEGY", "normal"), v("GIT_SUBMODULE_PATHS", "sub")},
		have: []string{"sub/sub.txt"},
	}, {
		name: "GIT_SUBMODULE_UPDATE_FLAGS --remote",
		vars: []api.Variable{v("GIT_SUBMODULE_STRATEGY", "normal"), v("GIT_SUBMODULE_UPDATE_FLAGS", "--remote")},
		check: func(t *testing.T, env []string, dir string) {
			if got := gitIn(t, env, filepath.Join(dir, "sub"), "rev-parse", "HEAD"); got != r.subSecond {
				t.Errorf("sub HEAD = %s, want its branch's tip %s", got, r.subSecond)
			}
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			sh := tt.shell
			if sh == "" {
				sh = Bash
			}
			job := subJob(r.fileURL(), r.project, tt.vars...)
			job.GitInfo.Depth = tt.depth
			info := testInfo(t, sh, job)
			env := gitEnv(t, fileAllowed)
			out, code := runGetSources(t, info, env)
			if code != 0 {
				t.Fatalf("get_sources exit code %d:\n%s", code, out)
			}
			at := 0
			for _, l := range tt.lines {
				i := strings.Index(out[at:], l)
				if i < 0 {
					t.Errorf("output lacks %q (after byte %d):\n%s", l, at, out)
					break
				}
				at += i + len(l)
			}
			for _, f := range tt.have {
				if !existsIn(info.ProjectDir, f) {
					t.Errorf("%s is missing after get_sources:\n%s", f, out)
				}
			}
			for _, f := range tt.lack {
				if existsIn(info.ProjectDir, f) {
					t.Errorf("%s is there after get_sources, want not", f)
				}
			}
			if tt.check != nil {
				tt.check(t, env, info.ProjectDir)
			}
		})
	}
}

// TestGetSourcesSubmodulesHTTP fetches over git's smart HTTP, from a
// server that wants the job token: the relative submodule URLs resolve
// against the repository's, without the token, and the URL rewrites of the
// external configuration give it to them.
func TestGetSourcesSubmodulesHTTP(t *testing.T) {
	t.Parallel()
	r := newSubRepos(t)
	server := r.serveHTTP(t)
	repoURL := strings.Replace(server, "http://", "http://gitlab-ci-token:"+testToken+"@", 1) + "/group/project.git"
	tests := []struct {
		name string
		git  GitOptions
		job  *api.JobResponse
	}{
		{"repository URL", GitOptions{ServerURL: server}, subJob(repoURL, r.project, v("GIT_SUBMODULE_STRATEGY", "recursive"))},
		{"clone_url", GitOptions{CloneURL: server + "/", ServerURL: "https://gitlab.invalid"},
			subJob("https://gitlab-ci-token:"+testToken+"@gitlab.invalid/group/project.git", r.project, v("GIT_SUBMODULE_STRATEGY", "recursive"))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			info := testInfo(t, Bash, tt.job)
			info.Git = tt.git
			env := gitEnv(t)
			out, code := runGetSources(t, info, env)
			if code != 0 {
				t.Fatalf("get_sources exit code %d:\n%s", code, out)
			}
			if !existsIn(info.ProjectDir, "sub/nested/subsub.txt") {
				t.Errorf("sub/nested/subsub.txt is missing after get_sources:\n%s", out)
			}
			if strings.Contains(out, testToken) {
				t.Errorf("the output shows the job token:\n%s", out)
			}
			// The checkout's own configuration has no token: it is in
			// the external one, outside the project directory.
			cfg := readFile(t, filepath.Join(info.ProjectDir, ".git", "config"))
			if strings.Contains(cfg, testToken) {
				t.Errorf(".git/config holds the job token:\n%s", cfg)
			}
			if got, want := gitIn(t, env, info.ProjectDir, "config", "--file", ".git/config", "remote.origin.url"), server+"/group/project.git"; got != want {
				t.Errorf("origin = %s, want %s", got, want)
			}
			// A job's own git command in a submodule authenticates too.
			gitIn(t, env, filepath.Join(info.ProjectDir, "sub"), "fetch", "-q", "origin")
		})
	}
}

// TestGetSourcesForceHTTPS fetches a submodule whose URL is the server's
// SSH one over HTTP(S) with GIT_SUBMODULE_FORCE_HTTPS.
func TestGetSourcesForceHTTPS(t *testing.T) {
	t.Parallel()
	r := newSubRepos(t)
	server := r.serveHTTP(t)
	env := gitEnv(t, fileAllowed)
	// A project whose submodule has an absolute SSH URL of the server.
	work := filepath.Join(t.TempDir(), "ssh")
	bare := filepath.Join(r.root, "group", "ssh.git")
	gitIn(t, env, "/", "init", "-q", "-b", "main", work)
	gitIn(t, env, "/", "init", "-q", "--bare", "-b", "main", bare)
	gitIn(t, env, work, "-c", "url.file://"+r.root+"/.insteadOf=git@gitlab.invalid:", "submodule", "add", "-q", "git@gitlab.invalid:group/sub.git", "sub")
	gitIn(t, env, work, "commit", "-q", "-m", "ssh submodule")
	gitIn(t, env, work, "push", "-q", "file://"+bare, "main")
	sha := gitIn(t, env, work, "rev-parse", "HEAD")
	repoURL := strings.Replace(server, "http://", "http://gitlab-ci-token:"+testToken+"@", 1) + "/group/ssh.git"

	for _, force := range []string{"true", "false"} {
		t.Run(force, func(t *testing.T) {
			t.Parallel()
			job := subJob(repoURL, sha, v("GIT_SUBMODULE_STRATEGY", "normal"), v("GIT_SUBMODULE_FORCE_HTTPS", force),
				v("CI_SERVER_HOST", "gitlab.invalid"))
			info := testInfo(t, Bash, job)
			info.Git.ServerURL = server
			out, code := runGetSources(t, info, append(gitEnv(t), "GIT_SSH_COMMAND=false"))
			if force == "false" {
				if code == 0 {
					t.Errorf("get_sources without GIT_SUBMODULE_FORCE_HTTPS exit code 0, want the SSH fetch to fail:\n%s", out)
				}
				return
			}
			if code != 0 || !existsIn(info.ProjectDir, "sub/sub.txt") {
				t.Fatalf("get_sources exit code %d, want 0 and sub/sub.txt:\n%s", code, out)
			}
		})
	}
}

func TestGetSourcesStrategies(t *testing.T) {
	t.Parallel()
	r := newTestRepo(t)
	t.Run("empty", func(t *testing.T) {
		t.Parallel()
		for _, sh := range shells {
			info := testInfo(t, sh, gitJob(r, "main", r.second, 0, v("GIT_STRATEGY", "empty")))
			info.Hooks.PreGetSources = "echo pre-hook-ran"
			for _, f := range []string{".git", "left"} {
				if err := os.Mkdir(filepath.Join(info.ProjectDir, f), 0o500); err != nil {
					t.Fatal(err)
				}
			}
			out, code := getSources(t, info)
			if code != 0 {
				t.Fatalf("%s: get_sources exit code %d:\n%s", sh, code, out)
			}
			entries, err := os.ReadDir(info.ProjectDir)
			if err != nil || len(entries) != 0 {
				t.Errorf("%s: project directory holds %v (%v), want it empty", sh, entries, err)
			}
			want := "Skipping Git repository setup and creating an empty build directory"
			if !strings.Contains(out, want) || !strings.Contains(out, "Skipping Git checkout") ||
				!strings.Contains(out, "Skipping Git submodules setup") {
				t.Errorf("%s: output lacks the empty strategy's lines:\n%s", sh, out)
			}
			if strings.Contains(out, "pre-hook-ran") {
				t.Errorf("%s: the pre_get_sources hook ran for GIT_STRATEGY empty:\n%s", sh, out)
			}
		}
	})
	for _, tt := range []struct {
		flags    string
		wantTags string
	}{
		{"", "v1"},        // --prune --quiet: tags of fetched commits follow
		{"--no-tags", ""}, // none
		{"none", "v1"},    // no flags at all
		{"--prune", "v1"}, // replaces the default
		{"--tags", "v1"},  // all tags
		{"--quiet", "v1"}, // replaces the default
		{"--depth=1", ""}, // v1 is not fetched
		{"--no-tags --quiet", ""},
	} {
		t.Run("GIT_FETCH_EXTRA_FLAGS="+tt.flags, func(t *testing.T) {
			t.Parallel()
			info := testInfo(t, Bash, gitJob(r, "main", r.second, 0, v("GIT_FETCH_EXTRA_FLAGS", tt.flags)))
			out, code := getSources(t, info)
			if code != 0 {
				t.Fatalf("get_sources exit code %d:\n%s", code, out)
			}
			if got := git(t, info.ProjectDir, "tag"); got != tt.wantTags {
				t.Errorf("git tag = %q, want %q", got, tt.wantTags)
			}
		})
	}
}

// TestGetSourcesRunnerGitOptions checks safe_directory_checkout and
// clean_git_config.
func TestGetSourcesRunnerGitOptions(t *testing.T) {
	t.Parallel()
	r := newTestRepo(t)
	t.Run("safe_directory_checkout", func(t *testing.T) {
		t.Parallel()
		info := testInfo(t, Sh, gitJob(r, "main", r.second, 0))
		info.Git.SafeDirectoryCheckout = true
		env := gitEnv(t)
		if out, code := runGetSources(t, info, env); code != 0 {
			t.Fatalf("get_sources exit code %d:\n%s", code, out)
		}
		if got := gitIn(t, env, "/", "config", "--global", "--get-all", "safe.directory"); got != info.ProjectDir {
			t.Errorf("global safe.directory = %q, want %q", got, info.ProjectDir)
		}
	})
	for _, clean := range []bool{true, false} {
		name := "clean_git_config=false"
		if clean {
			name = "clean_git_config=true"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			info := testInfo(t, Bash, gitJob(r, "main", r.first, 0, v("GIT_STRATEGY", "fetch")))
			info.Git.CleanGitConfig = clean
			env := gitEnv(t)
			if out, code := runGetSources(t, info, env); code != 0 {
				t.Fatalf("first get_sources exit code %d:\n%s", code, out)
			}
			// What an earlier job may leave: configuration and a hook.
			gitIn(t, env, info.ProjectDir, "config", "core.pager", "evil")
			hook := filepath.Join(info.ProjectDir, ".git", "hooks", "post-merge")
			if err := os.MkdirAll(filepath.Dir(hook), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(hook, []byte("#!/bin/sh\n"), 0o755); err != nil {
				t.Fatal(err)
			}
			out, code := runGetSources(t, info, env)
			if code != 0 {
				t.Fatalf("second get_sources exit code %d:\n%s", code, out)
			}
			cmd := exec.Command("git", "config", "core.pager")
			cmd.Dir, cmd.Env = info.ProjectDir, env
			pager, _ := cmd.Output()
			if left := strings.TrimSpace(string(pager)) == "evil"; left == clean {
				t.Errorf("core.pager left = %t, want %t", left, !clean)
			}
			if _, err := os.Stat(hook); (err == nil) == clean {
				t.Errorf("stat hook = %v with clean_git_config %t", err, clean)
			}
			if got := gitIn(t, env, info.ProjectDir, "rev-parse", "HEAD"); got != r.first {
				t.Errorf("HEAD = %s, want %s", got, r.first)
			}
		})
	}
}

func TestGetSourcesSettingErrors(t *testing.T) {
	r := testRepo{dir: "/nonexistent"}
	for name, vars := range map[string][]api.Variable{
		"submodule strategy": {v("GIT_SUBMODULE_STRATEGY", "sideways")},
		"lone exclude":       {v("GIT_SUBMODULE_STRATEGY", "normal"), v("GIT_SUBMODULE_PATHS", ":(exclude) sub")},
	} {
		if _, err := Generate(executor.StageGetSources, testInfo(t, Bash, gitJob(r, "main", "", 0, vars...))); err == nil {
			t.Errorf("%s: Generate(get_sources) = nil error, want one", name)
		}
	}
	// Without a checkout the submodule strategy does not matter.
	job := gitJob(r, "main", "", 0, v("GIT_STRATEGY", "none"), v("GIT_SUBMODULE_STRATEGY", "sideways"))
	if _, err := Generate(executor.StageGetSources, testInfo(t, Bash, job)); err != nil {
		t.Errorf("Generate(get_sources) with GIT_STRATEGY none = %v, want nil", err)
	}
}

// TestGetSourcesLFSCommands follows the git-lfs commands get_sources runs
// with a git-lfs on PATH that logs them: `git lfs pull` after the checkout
// and in each submodule, with smudging off during the checkout, and none
// with GIT_LFS_SKIP_SMUDGE.
func TestGetSourcesLFSCommands(t *testing.T) {
	t.Parallel()
	r := newSubRepos(t)
	for _, skip := range []bool{false, true} {
		name := "smudge"
		vars := []api.Variable{v("GIT_SUBMODULE_STRATEGY", "recursive")}
		if skip {
			name = "GIT_LFS_SKIP_SMUDGE"
			vars = append(vars, v("GIT_LFS_SKIP_SMUDGE", "1"))
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			bin := t.TempDir()
			log := filepath.Join(t.TempDir(), "lfs.log")
			fake := "#!/bin/sh\nprintf '%s %s skip=%s\\n' \"$PWD\" \"$*\" \"$GIT_LFS_SKIP_SMUDGE\" >> " + quote(log) + "\n"
			if err := os.WriteFile(filepath.Join(bin, "git-lfs"), []byte(fake), 0o755); err != nil {
				t.Fatal(err)
			}
			info := testInfo(t, Bash, subJob(r.fileURL(), r.project, vars...))
			env := gitEnv(t, fileAllowed)
			for i, e := range env {
				if strings.HasPrefix(e, "PATH=") {
					env[i] = "PATH=" + bin + string(os.PathListSeparator) + strings.TrimPrefix(e, "PATH=")
				}
			}
			out, code := runGetSources(t, info, env)
			if code != 0 {
				t.Fatalf("get_sources exit code %d:\n%s", code, out)
			}
			got, _ := os.ReadFile(log)
			want := ""
			if !skip {
				d := info.ProjectDir
				want = d + " version skip=1\n" + d + " pull skip=1\n" + d + " version skip=1\n" +
					d + "/sub pull skip=1\n" + d + "/sub/nested pull skip=1\n"
				if !strings.Contains(out, "Pulling LFS files...") {
					t.Errorf("output lacks the LFS line:\n%s", out)
				}
			}
			if string(got) != want {
				t.Errorf("git-lfs ran as\n%s\nwant\n%s", got, want)
			}
		})
	}
}

// TestGetSourcesLFS fetches a repository with an LFS object, when git-lfs
// is on PATH (it is set up for the job's HOME here): the checkout has the object's content, or its pointer with
// GIT_LFS_SKIP_SMUDGE.
func TestGetSourcesLFS(t *testing.T) {
	t.Parallel()
	needProgram(t, "git-lfs")
	env := gitEnv(t)
	root := t.TempDir()
	work, bare := filepath.Join(root, "work"), filepath.Join(root, "lfs.git")
	gitIn(t, env, root, "init", "-q", "-b", "main", work)
	gitIn(t, env, root, "init", "-q", "--bare", "-b", "main", bare)
	gitIn(t, env, work, "lfs", "install", "--local")
	gitIn(t, env, work, "lfs", "track", "*.bin")
	if err := os.WriteFile(filepath.Join(work, "big.bin"), []byte("large content\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	gitIn(t, env, work, "add", "-A")
	gitIn(t, env, work, "commit", "-q", "-m", "lfs")
	gitIn(t, env, work, "push", "-q", "file://"+bare, "main")
	sha := gitIn(t, env, work, "rev-parse", "HEAD")

	for _, skip := range []string{"", "1"} {
		t.Run("GIT_LFS_SKIP_SMUDGE="+skip, func(t *testing.T) {
			t.Parallel()
			info := testInfo(t, Bash, subJob("file://"+bare, sha, v("GIT_LFS_SKIP_SMUDGE", skip)))
			// git-lfs's filters in the global configuration, as `git
			// lfs install` leaves them (GitLab Runner's helper image
			// has them): without, `git lfs pull` fetches but does not
			// check out.
			env := gitEnv(t)
			gitIn(t, env, root, "lfs", "install", "--skip-repo")
			out, code := runGetSources(t, info, env)
			if code != 0 {
				t.Fatalf("get_sources exit code %d:\n%s", code, out)
			}
			got := readFile(t, filepath.Join(info.ProjectDir, "big.bin"))
			if pointer := strings.HasPrefix(got, "version https://git-lfs"); pointer != (skip == "1") {
				t.Errorf("big.bin = %q with GIT_LFS_SKIP_SMUDGE=%q", got, skip)
			}
		})
	}
}

// TestGetSourcesTLSFiles: the coordinator's TLS files (the job's
// CI_SERVER_TLS_* file variables) are git's for the repository's server:
// in the global configuration, or in the external one for an environment
// other jobs share.
func TestGetSourcesTLSFiles(t *testing.T) {
	t.Parallel()
	r := newSubRepos(t)
	server := r.serveHTTP(t)
	repoURL := strings.Replace(server, "http://", "http://gitlab-ci-token:"+testToken+"@", 1) + "/group/project.git"
	key := "http." + server + ".sslCAInfo"
	for _, shared := range []bool{false, true} {
		name := "own environment"
		if shared {
			name = "shared environment"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			job := subJob(repoURL, r.project, api.Variable{Key: api.VarTLSCAFile, Value: "PEM", File: true})
			if shared {
				job.Variables = append(job.Variables, v("CI_SHARED_ENVIRONMENT", "true"))
			}
			info := testInfo(t, Bash, job)
			env := gitEnv(t)
			out, code := runGetSources(t, info, env)
			if code != 0 {
				t.Fatalf("get_sources exit code %d:\n%s", code, out)
			}
			caFile := filepath.Join(info.ProjectDir+".tmp", api.VarTLSCAFile)
			global := exec.Command("git", "config", "--global", "--get", key)
			global.Env = env
			got, _ := global.Output()
			ext := exec.Command("git", "config", "--file", filepath.Join(info.ProjectDir+".tmp", ".gitlab-runner.ext.conf"), "--get", key)
			gotExt, _ := ext.Output()
			inGlobal, inExt := strings.TrimSpace(string(got)), strings.TrimSpace(string(gotExt))
			if shared {
				inGlobal, inExt = inExt, inGlobal
			}
			if inGlobal != caFile || inExt != "" {
				t.Errorf("%s = %q in the global configuration and %q in the external one, want %q in the %s one only",
					key, got, gotExt, caFile, map[bool]string{false: "global", true: "external"}[shared])
			}
		})
	}
}

// TestGetSourcesForgetsCredentials: a credential helper of the user's
// that keeps what git used (credential.helper=store) does not keep the
// job token after get_sources.
func TestGetSourcesForgetsCredentials(t *testing.T) {
	t.Parallel()
	r := newSubRepos(t)
	server := r.serveHTTP(t)
	repoURL := strings.Replace(server, "http://", "http://gitlab-ci-token:"+testToken+"@", 1) + "/group/project.git"
	info := testInfo(t, Bash, subJob(repoURL, r.project, v("GIT_SUBMODULE_STRATEGY", "recursive")))
	info.Git.ServerURL = server
	env := gitEnv(t, "credential.helper=store")
	out, code := runGetSources(t, info, env)
	if code != 0 {
		t.Fatalf("get_sources exit code %d:\n%s", code, out)
	}
	var home string
	for _, e := range env {
		if h, ok := strings.CutPrefix(e, "HOME="); ok {
			home = h
		}
	}
	if b, err := os.ReadFile(filepath.Join(home, ".git-credentials")); err == nil && strings.Contains(string(b), testToken) {
		t.Errorf("~/.git-credentials keeps the job token after get_sources:\n%s", b)
	}
}

// TestGetSourcesSubmodulesFetchAgain fetches into a checkout with
// submodules a second time, with clean_git_config (which removes the
// submodules' git configuration) and without.
func TestGetSourcesSubmodulesFetchAgain(t *testing.T) {
	t.Parallel()
	r := newSubRepos(t)
	for _, clean := range []bool{false, true} {
		t.Run(map[bool]string{false: "keep config", true: "clean_git_config"}[clean], func(t *testing.T) {
			t.Parallel()
			info := testInfo(t, Bash, subJob(r.fileURL(), r.project, v("GIT_STRATEGY", "fetch"), v("GIT_SUBMODULE_STRATEGY", "recursive")))
			info.Git.CleanGitConfig = clean
			env := gitEnv(t, fileAllowed)
			for i := range 2 {
				out, code := runGetSources(t, info, env)
				if code != 0 {
					t.Fatalf("get_sources %d exit code %d:\n%s", i+1, code, out)
				}
				if i == 1 && !strings.Contains(out, "Reinitialized existing Git repository") {
					t.Errorf("the second get_sources did not reuse the checkout:\n%s", out)
				}
				if !existsIn(info.ProjectDir, "sub/nested/subsub.txt") {
					t.Errorf("get_sources %d: sub/nested/subsub.txt is missing:\n%s", i+1, out)
				}
				if i > 0 {
					break
				}
				// What a job may leave in a submodule: git clean and
				// reset undo it.
				if err := os.WriteFile(filepath.Join(info.ProjectDir, "sub", "sub.txt"), []byte("changed\n"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if got := readFile(t, filepath.Join(info.ProjectDir, "sub", "sub.txt")); got != "sub one\n" {
				t.Errorf("sub/sub.txt = %q, want the recorded commit's", got)
			}
		})
	}
}
