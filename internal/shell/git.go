package shell

import (
	"fmt"
	"net/url"
	"os"
	"path"
	"strconv"
	"strings"
)

// Git strategies (GIT_STRATEGY).
const (
	GitClone = "clone"
	GitFetch = "fetch"
	GitNone  = "none"
)

const defaultGitCleanFlags = "-ffdx"

// MaskURL returns rawURL with any password (the job token in GitLab's
// repo_url) replaced by [MASKED], fit to be printed.
func MaskURL(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil || u.User == nil {
		if i := strings.LastIndex(rawURL, "@"); err != nil && i >= 0 {
			// Unparsable but has credentials: print only the host part.
			return "[MASKED]" + rawURL[i:]
		}
		return rawURL
	}
	if _, has := u.User.Password(); has {
		u.User = url.UserPassword(u.User.Username(), "[MASKED]")
	}
	// url.URL.String would escape the brackets; rebuild around them.
	return strings.Replace(u.String(), "%5BMASKED%5D", "[MASKED]", 1)
}

// getSources writes the checkout of the job's repository into the project
// directory, following GIT_STRATEGY, GIT_CHECKOUT and GIT_CLEAN_FLAGS.
func (w *writer) getSources(info Info, values map[string]string) error {
	job := info.Job
	gi := job.GitInfo
	strategy := strings.ToLower(strings.TrimSpace(values["GIT_STRATEGY"]))
	if strategy == "" {
		strategy = GitClone
		if job.AllowGitFetch {
			strategy = GitFetch
		}
	}
	dir := quote(info.ProjectDir)
	switch {
	case strategy == GitNone || gi.RepoURL == "":
		w.raw("mkdir -p -- " + dir)
		for _, l := range SkippedSourcesLines {
			w.echo(ansiBoldGreen, l)
		}
		return nil
	case strategy != GitClone && strategy != GitFetch:
		return fmt.Errorf("GIT_STRATEGY %q: want %s, %s or %s", strategy, GitClone, GitFetch, GitNone)
	}

	refspecs, target, err := fetchPlan(gi.Ref, gi.RefType, gi.Sha, gi.Refspecs)
	if err != nil {
		return err
	}

	// git must never wait for a password on a terminal nobody watches.
	w.raw("export GIT_TERMINAL_PROMPT=0")
	if gi.Depth > 0 {
		w.echo(ansiBoldGreen, fmt.Sprintf("Fetching changes with git depth set to %d...", gi.Depth))
	} else {
		w.echo(ansiBoldGreen, "Fetching changes...")
	}
	fresh := func(indent string) {
		w.raw(indent + "rm -rf -- " + dir)
		w.raw(indent + "mkdir -p -- " + dir)
		w.raw(indent + "cd -- " + dir)
		w.raw(indent + "git init -q")
		w.raw(indent + "git remote add origin " + quote(gi.RepoURL))
		w.raw(indent + "printf '%s\\n' 'Created fresh repository.'")
	}
	if strategy == GitClone {
		fresh("")
	} else {
		w.raw("if [ -d " + quote(info.ProjectDir+"/.git") + " ]; then")
		w.raw("  cd -- " + dir)
		w.raw("  printf '%s\\n' " + quote("Reinitialized existing Git repository in "+info.ProjectDir+"/.git/"))
		// Lock files left by a killed git would make every command fail.
		w.raw("  rm -f .git/index.lock .git/shallow.lock .git/HEAD.lock .git/config.lock")
		w.raw("  git init -q")
		w.raw("  if git remote get-url origin >/dev/null 2>&1; then")
		w.raw("    git remote set-url origin " + quote(gi.RepoURL))
		w.raw("  else")
		w.raw("    git remote add origin " + quote(gi.RepoURL))
		w.raw("  fi")
		w.raw("else")
		fresh("  ")
		w.raw("fi")
	}
	w.echo("", "Fetching from "+MaskURL(gi.RepoURL))

	fetch := "git fetch --prune --quiet"
	if gi.Depth > 0 {
		fetch += " --depth " + strconv.Itoa(gi.Depth) + " --no-tags"
	}
	fetch += " origin"
	for _, rs := range refspecs {
		fetch += " " + quote(rs)
	}
	if gi.Depth <= 0 {
		// A full fetch into a repository an earlier shallow job left
		// behind must deepen it, or older commits stay unreachable.
		w.raw("if [ -f .git/shallow ]; then " + strings.Replace(fetch, "git fetch ", "git fetch --unshallow ", 1) + "; else " + fetch + "; fi")
	} else {
		w.raw(fetch)
	}

	if checkout, err := strconv.ParseBool(strings.TrimSpace(values["GIT_CHECKOUT"])); err == nil && !checkout {
		w.echo(ansiBoldGreen, "Skipping Git checkout")
	} else {
		shown := target
		if gi.Sha != "" {
			shown = gi.Sha
			if len(shown) > 8 {
				shown = shown[:8]
			}
		}
		w.echo(ansiBoldGreen, fmt.Sprintf("Checking out %s as detached HEAD (ref is %s)...", shown, gi.Ref))
		w.raw("git checkout -f -q " + quote(target) + " --")
		flags := strings.TrimSpace(values["GIT_CLEAN_FLAGS"])
		if flags == "" {
			flags = defaultGitCleanFlags
		}
		if flags != "none" {
			clean := "git clean"
			for _, f := range strings.Fields(flags) {
				clean += " " + quote(f)
			}
			w.raw(clean)
		}
	}
	w.echo(ansiBoldGreen, "Skipping Git submodules setup")
	return nil
}

// fetchPlan returns the refspecs to fetch and what to check out after.
func fetchPlan(ref, refType, sha string, refspecs []string) ([]string, string, error) {
	for _, rs := range refspecs {
		if strings.HasPrefix(rs, "-") || strings.TrimSpace(rs) == "" {
			return nil, "", fmt.Errorf("refspec %q is not valid", rs)
		}
	}
	if ref != "" && !validRef(ref) {
		return nil, "", fmt.Errorf("ref %q is not valid", ref)
	}
	if sha != "" && strings.Trim(sha, "0") == "" {
		// The all-zero sha a coordinator sends for a job submitted without
		// one: no commit, so the ref's tip.
		sha = ""
	}
	target := sha
	if len(refspecs) == 0 && ref != "" {
		if refType == "tag" {
			refspecs = []string{"+refs/tags/" + ref + ":refs/tags/" + ref}
			if target == "" {
				target = "refs/tags/" + ref
			}
		} else {
			refspecs = []string{"+refs/heads/" + ref + ":refs/remotes/origin/" + ref}
			if target == "" {
				target = "refs/remotes/origin/" + ref
			}
		}
	}
	if target == "" {
		target = "FETCH_HEAD"
	}
	if strings.HasPrefix(target, "-") {
		return nil, "", fmt.Errorf("sha %q is not valid", sha)
	}
	return refspecs, target, nil
}

// validRef rejects refs git would misread as options or paths outside refs/.
func validRef(ref string) bool {
	return !strings.HasPrefix(ref, "-") && !strings.Contains(ref, "..") &&
		path.Clean("/"+ref) == "/"+ref
}

// SkippedSourcesLines are what get_sources prints when it has nothing to
// fetch (GIT_STRATEGY none), as GitLab Runner prints them: no repository,
// so no checkout and no submodules either.
var SkippedSourcesLines = []string{"Skipping Git repository setup", "Skipping Git checkout", "Skipping Git submodules setup"}

// SkipsSources reports whether get_sources has nothing to fetch for info:
// GIT_STRATEGY is none or the job has no repository.
func SkipsSources(info Info) bool {
	if info.Job == nil {
		return false
	}
	if info.Job.GitInfo.RepoURL == "" {
		return true
	}
	env := info.LookupEnv
	if env == nil {
		env = os.LookupEnv
	}
	_, values := resolve(info.Variables, info.tmpDir(), env)
	return strings.ToLower(strings.TrimSpace(values["GIT_STRATEGY"])) == GitNone
}
