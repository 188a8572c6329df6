package difftest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Repos are the git repositories the fixtures fetch, made by MakeRepos
// under a directory: every commit has a fixed author, committer and date,
// so their ids are the same in every run and on every machine, and the
// recorded logs of the two runners name the same commits.
type Repos struct {
	Dir string // holds project/, sub/ and subsub/ (bare)
	// Vars are the placeholders of the fixtures they fill: REPO_URL (the
	// project, file://), SHA and BEFORE_SHA (main's last two commits),
	// SHORT_SHA, FEATURE_SHA (branch feature), TAG_SHA (tag v1.0).
	Vars map[string]string
}

// MakeRepos makes the repositories under dir:
//   - subsub: one file;
//   - sub: one file and subsub as submodule "nested" (relative URL);
//   - project: README.md, a lock file for cache key:files, a script, the
//     submodule "sub" (relative URL ../sub.git), two commits on main, a
//     branch feature with one more, tag v1.0 on main's first commit, and
//     refs/pipelines/100 (GitLab's pipeline ref) on main.
func MakeRepos(ctx context.Context, dir string) (*Repos, error) {
	work := filepath.Join(dir, "work")
	r := &Repos{Dir: dir, Vars: map[string]string{}}
	g := func(wd string, args ...string) (string, error) {
		cmd := exec.CommandContext(ctx, "git", append([]string{"-c", "protocol.file.allow=always", "-c", "init.defaultBranch=main"}, args...)...)
		cmd.Dir = wd
		cmd.Env = append(os.Environ(),
			"GIT_AUTHOR_NAME=Difftest", "GIT_AUTHOR_EMAIL=difftest@example.com", "GIT_AUTHOR_DATE=2026-01-02T03:04:05Z",
			"GIT_COMMITTER_NAME=Difftest", "GIT_COMMITTER_EMAIL=difftest@example.com", "GIT_COMMITTER_DATE=2026-01-02T03:04:05Z",
			"GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null")
		out, err := cmd.CombinedOutput()
		if err != nil {
			return "", fmt.Errorf("git %s in %s: %v: %s", strings.Join(args, " "), wd, err, out)
		}
		return strings.TrimSpace(string(out)), nil
	}
	write := func(path, content string) error {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		return os.WriteFile(path, []byte(content), 0o644)
	}
	// mk makes work/name with files, commits them (plus what extra does)
	// and clones it bare to dir/name.git.
	mk := func(name string, files map[string]string, extra func(wd string) error) (string, error) {
		wd := filepath.Join(work, name)
		if err := os.MkdirAll(wd, 0o755); err != nil {
			return "", err
		}
		if _, err := g(wd, "init", "-q"); err != nil {
			return "", err
		}
		// Relative submodule URLs resolve against it, so the same
		// recorded .gitmodules works wherever the repositories are.
		if _, err := g(wd, "remote", "add", "origin", filepath.Join(dir, name+".git")); err != nil {
			return "", err
		}
		for p, c := range files {
			if err := write(filepath.Join(wd, p), c); err != nil {
				return "", err
			}
		}
		if extra != nil {
			if err := extra(wd); err != nil {
				return "", err
			}
		}
		if _, err := g(wd, "add", "-A"); err != nil {
			return "", err
		}
		if _, err := g(wd, "commit", "-q", "-m", "first commit of "+name); err != nil {
			return "", err
		}
		if _, err := g(dir, "clone", "-q", "--bare", wd, filepath.Join(dir, name+".git")); err != nil {
			return "", err
		}
		return wd, nil
	}
	if _, err := mk("subsub", map[string]string{"subsub.txt": "in subsub\n"}, nil); err != nil {
		return nil, err
	}
	if _, err := mk("sub", map[string]string{"sub.txt": "in sub\n"}, func(wd string) error {
		_, err := g(wd, "submodule", "add", "-q", "../subsub.git", "nested")
		return err
	}); err != nil {
		return nil, err
	}
	project := filepath.Join(work, "project")
	if _, err := mk("project", map[string]string{
		"README.md":     "# difftest project\n",
		"Gemfile.lock":  "lock v1\n",
		"build.sh":      "#!/bin/sh\necho \"built from $(basename \"$PWD\")\"\n",
		"docs/guide.md": "guide\n",
		".gitignore":    "ignored/\n",
	}, func(wd string) error {
		_, err := g(wd, "submodule", "add", "-q", "../sub.git", "sub")
		return err
	}); err != nil {
		return nil, err
	}
	// commitFile writes one file of the project, commits it with msg and
	// returns the commit's hash.
	commitFile := func(path, content, msg string) (string, error) {
		if err := write(filepath.Join(project, path), content); err != nil {
			return "", err
		}
		if _, err := g(project, "add", "-A"); err != nil {
			return "", err
		}
		if _, err := g(project, "commit", "-q", "-m", msg); err != nil {
			return "", err
		}
		return g(project, "rev-parse", "HEAD")
	}
	first, err := g(project, "rev-parse", "HEAD")
	if err != nil {
		return nil, err
	}
	if _, err := g(project, "tag", "v1.0"); err != nil {
		return nil, err
	}
	second, err := commitFile("CHANGELOG.md", "second commit\n", "second commit")
	if err != nil {
		return nil, err
	}
	if _, err := g(project, "checkout", "-q", "-b", "feature"); err != nil {
		return nil, err
	}
	feature, err := commitFile("feature.txt", "feature\n", "feature commit")
	if err != nil {
		return nil, err
	}
	bare := filepath.Join(dir, "project.git")
	if _, err := g(project, "push", "-q", "--tags", bare, "main", "feature"); err != nil {
		return nil, err
	}
	// GitLab keeps a ref per pipeline; the payloads fetch it.
	if _, err := g(dir, "-C", bare, "update-ref", "refs/pipelines/100", second); err != nil {
		return nil, err
	}
	r.Vars["REPO_URL"] = "file://" + bare
	r.Vars["SHA"] = second
	r.Vars["SHORT_SHA"] = second[:8]
	r.Vars["BEFORE_SHA"] = first
	r.Vars["TAG_SHA"] = first
	r.Vars["FEATURE_SHA"] = feature
	return r, nil
}
