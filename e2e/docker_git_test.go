package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// submoduleRepos makes bare repositories under a directory of their own:
// group/project.git has the submodule "sub" (../sub.git), which has
// "nested" (../subsub.git). It returns the directory and project's commit.
func submoduleRepos(t *testing.T) (string, string) {
	t.Helper()
	root, work := t.TempDir(), t.TempDir()
	git := func(dir string, args ...string) string {
		return gitAs(t, "t", "t@example.com", dir, append([]string{"-c", "protocol.file.allow=always", "-c", "init.defaultBranch=main"}, args...)...)
	}
	var sha string
	for _, r := range []struct{ name, file, sub, subURL string }{
		{"subsub", "subsub.txt", "", ""},
		{"sub", "sub.txt", "nested", "../subsub.git"},
		{"project", "README", "sub", "../sub.git"},
	} {
		wd, bare := filepath.Join(work, r.name), filepath.Join(root, "group", r.name+".git")
		git(work, "init", "-q", wd)
		git(work, "init", "-q", "--bare", bare)
		git(wd, "remote", "add", "origin", "file://"+bare)
		if err := os.WriteFile(filepath.Join(wd, r.file), []byte(r.name+" content\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if r.sub != "" {
			git(wd, "submodule", "add", "-q", r.subURL, r.sub)
		}
		git(wd, "add", "-A")
		git(wd, "commit", "-q", "-m", r.name)
		git(wd, "push", "-q", "origin", "main")
		sha = git(wd, "rev-parse", "HEAD")
	}
	return root, sha
}

// TestDockerGetSources runs get_sources in the docker executor's helper
// container: nested submodules with relative URLs, GIT_CLONE_PATH (which
// the docker executor allows by default) and GIT_STRATEGY empty.
func TestDockerGetSources(t *testing.T) {
	needDockerImages(t)
	root, sha := submoduleRepos(t)
	dir := t.TempDir()
	c := startCoordinator(t, filepath.Join(dir, "coord"))
	// git refuses file:// submodules unless told otherwise; a runner
	// serving such repositories says so in its environment.
	env := `  environment = ["GIT_CONFIG_COUNT=1", "GIT_CONFIG_KEY_0=protocol.file.allow", "GIT_CONFIG_VALUE_0=always"]`
	cfg := dockerConfig(t, dir, c.url, c.runnerToken(t), 1, env, fmt.Sprintf("    volumes = [%q]", root+":"+root+":ro"))
	m := start(t, dir, "run", "--config", cfg)
	m.waitLog("runner manager started", 20*time.Second)
	cl := c.client()
	for _, tt := range []struct {
		name   string
		vars   map[string]string
		script []string
		want   []string
	}{
		{"recursive submodules", map[string]string{"GIT_SUBMODULE_STRATEGY": "recursive"},
			[]string{"cat sub/nested/subsub.txt"},
			[]string{"Updating/initializing submodules recursively...", "subsub content\n"}},
		{"GIT_CLONE_PATH", map[string]string{"GIT_CLONE_PATH": "$CI_BUILDS_DIR/elsewhere/project"},
			[]string{"pwd", "cat README"},
			[]string{"/builds/elsewhere/project\n", "project content\n"}},
		{"GIT_STRATEGY empty", map[string]string{"GIT_STRATEGY": "empty"},
			[]string{"pwd", "ls -A | wc -l"},
			[]string{"Skipping Git repository setup and creating an empty build directory",
				// A file:// repository's directory is project-<id>, as GitLab Runner names it.
				"/builds/project-", "-empty\n", "0\n"}},
	} {
		var vars []map[string]any
		for k, v := range tt.vars {
			vars = append(vars, map[string]any{"key": k, "value": v})
		}
		id := submitJSON(t, c, map[string]any{
			"name": tt.name, "project": "group/repo", "script": tt.script, "variables": vars,
			"git": map[string]any{"repo_url": "file://" + filepath.Join(root, "group", "project.git"), "ref": "main", "sha": sha},
		})
		j := waitJob(t, cl, id, 2*time.Minute, finished)
		log := trace(t, cl, id)
		if j.Status != "success" {
			t.Errorf("%s: job = %s %s\n%s", tt.name, j.Status, j.FailureReason, log)
			continue
		}
		for _, w := range tt.want {
			if !strings.Contains(log, w) {
				t.Errorf("%s: log lacks %q:\n%s", tt.name, w, log)
			}
		}
	}
}
