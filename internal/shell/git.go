package shell

import (
	"fmt"

	"github.com/drover-ci/drover/internal/api"
	"net/url"
	"os"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Git strategies (GIT_STRATEGY).
const (
	GitClone = "clone"
	GitFetch = "fetch"
	GitNone  = "none"
	// GitEmpty is a fresh, empty project directory without git.
	GitEmpty = "empty"
)

// Submodule strategies (GIT_SUBMODULE_STRATEGY).
const (
	SubmoduleNone      = "none"
	SubmoduleNormal    = "normal"
	SubmoduleRecursive = "recursive"
)

// Where get_sources keeps git's files outside the checkout, under the
// project's temporary directory, with GitLab Runner's names: the template
// of `git init`, and the external configuration the checkout includes
// (credentials, URL rewrites), whose path the scripts export in
// extGitConfigVar.
const (
	gitTemplateDir        = "git-template"
	externalGitConfigFile = ".gitlab-runner.ext.conf"
	extGitConfigVar       = "GLR_EXT_GIT_CONFIG_PATH"
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

// getSources writes the get_sources stage after the hooks before it: the
// checkout of the job's repository into the project directory, following
// GIT_STRATEGY, GIT_CHECKOUT, GIT_CLEAN_FLAGS, GIT_FETCH_EXTRA_FLAGS,
// GIT_LFS_SKIP_SMUDGE and the GIT_SUBMODULE_* variables, in the order and
// with the messages of GitLab Runner's script.
func (w *writer) getSources(info Info, gs gitSettings) error {
	job := info.Job
	gi := job.GitInfo
	dir := quote(info.ProjectDir)

	// git must never wait for a password on a terminal nobody watches.
	w.raw("export GIT_TERMINAL_PROMPT=0")
	w.raw("export GCM_INTERACTIVE=Never")
	if !gs.lfsSkipSmudge {
		// The checkout leaves LFS pointers, `git lfs pull` replaces
		// them after it: smudging every file in the checkout's own
		// process can run out of memory (GitLab Runner's reason).
		w.raw("export GIT_LFS_SKIP_SMUDGE=1")
	}

	switch gs.strategy {
	case GitNone:
		w.echo(ansiBoldGreen, "Skipping Git repository setup")
		w.raw("mkdir -p -- " + dir)
	case GitEmpty:
		w.echo(ansiBoldGreen, "Skipping Git repository setup and creating an empty build directory")
		w.rmDir(info.ProjectDir)
		w.raw("mkdir -p -- " + dir)
	default:
		if err := w.fetchSources(info, gs); err != nil {
			return err
		}
	}

	if gs.strategy == GitNone || gs.strategy == GitEmpty || !gs.checkout {
		w.echo(ansiBoldGreen, "Skipping Git checkout")
	} else {
		_, target, _ := fetchPlan(gi.Ref, gi.RefType, gi.Sha, gi.Refspecs)
		shown := target
		if gi.Sha != "" && strings.Trim(gi.Sha, "0") != "" {
			shown = gi.Sha
			if len(shown) > 8 {
				shown = shown[:8]
			}
		}
		w.echo(ansiBoldGreen, fmt.Sprintf("Checking out %s as detached HEAD (ref is %s)...", shown, gi.Ref))
		w.raw("git -c submodule.recurse=false checkout -f -q " + quote(target) + " --")
		if len(gs.cleanFlags) > 0 {
			w.raw("git clean " + quoteAll(gs.cleanFlags))
		}
		if !gs.lfsSkipSmudge {
			w.raw("if git lfs version >/dev/null 2>&1; then")
			w.raw("  git lfs pull")
			w.raw("  echo")
			w.raw("fi")
		}
	}

	switch gs.submodules {
	case SubmoduleNormal, SubmoduleRecursive:
		w.updateSubmodules(gs)
	default:
		w.echo(ansiBoldGreen, "Skipping Git submodules setup")
	}
	return nil
}

// fetchSources writes the clone and fetch strategies: clean what a killed
// git left behind, make the git template and the external configuration
// (the credentials and the URL rewrites live outside the checkout), then
// init the repository and fetch. The clone strategy removes the project
// directory first.
func (w *writer) fetchSources(info Info, gs gitSettings) error {
	gi := info.Job.GitInfo
	refspecs, _, err := fetchPlan(gi.Ref, gi.RefType, gi.Sha, gi.Refspecs)
	if err != nil {
		return err
	}
	remote, err := gs.auth.remoteURL()
	if err != nil {
		return fmt.Errorf("repository URL: %w", err)
	}
	insteadOfs, err := gs.auth.insteadOfs()
	if err != nil {
		return fmt.Errorf("repository URL: %w", err)
	}
	withoutCreds := *remote
	withoutCreds.User = nil
	if withoutCreds.String() != remote.String() {
		insteadOfs = append([][2]string{{remote.String(), withoutCreds.String()}}, insteadOfs...)
	}

	w.gitCleanup(info, gs)

	tmp := info.gitTmpDir()
	template := tmp + "/" + gitTemplateDir
	templateConfig := template + "/config"
	extConfig := tmp + "/" + externalGitConfigFile
	w.raw("mkdir -p -- " + quote(template))
	if info.Git.SafeDirectoryCheckout {
		// Newer git refuses a checkout another user owns (a directory
		// kept from a job that ran as someone else).
		w.raw("git config --global --add safe.directory " + quote(info.ProjectDir))
	}
	for _, kv := range [][2]string{
		{"init.defaultBranch", "none"},
		{"fetch.recurseSubmodules", "false"},
		{"credential.interactive", "never"},
		{"gc.autoDetach", "false"},
	} {
		w.raw("git config -f " + quote(templateConfig) + " " + kv[0] + " " + kv[1])
	}
	w.raw("rm -f -- " + quote(extConfig))
	if id := info.Git.CorrelationID; id != "" {
		w.raw("git config -f " + quote(extConfig) + " http.extraHeader " + quote("X-Gitaly-Correlation-ID: "+id))
		w.echo(ansiBoldGreen, "Gitaly correlation ID: "+id)
	}
	if gs.sharedEnv {
		// Not in the global configuration of a host other jobs share.
		w.gitSSLConfig(gs, remote, "-f "+quote(extConfig))
	}
	seen := map[[2]string]bool{}
	for _, io := range insteadOfs {
		if seen[io] {
			continue
		}
		seen[io] = true
		w.raw("git config --file " + quote(extConfig) + " --replace-all " + quote("url."+io[0]+".insteadOf") + " " + quote(io[1]) + " " + quote("^"+regexp.QuoteMeta(io[1])+"$"))
	}
	includePattern := quote(regexp.QuoteMeta(externalGitConfigFile) + "$")
	w.raw("git config --file " + quote(templateConfig) + " --replace-all include.path " + quote(extConfig) + " " + includePattern)
	w.raw("export " + extGitConfigVar + "=" + quote(extConfig))

	if gs.strategy == GitClone {
		w.rmDir(info.ProjectDir)
	}
	if gi.Depth > 0 {
		w.echo(ansiBoldGreen, fmt.Sprintf("Fetching changes with git depth set to %d...", gi.Depth))
	} else {
		w.echo(ansiBoldGreen, "Fetching changes...")
	}
	initCmd := "git init " + quote(info.ProjectDir) + " --template " + quote(template)
	if f := gi.RepoObjectFormat; f != "" && f != "sha1" {
		initCmd += " --object-format " + quote(f)
	}
	w.raw(initCmd)
	w.raw("cd -- " + quote(info.ProjectDir))
	w.raw("if git remote add origin " + quote(withoutCreds.String()) + " >/dev/null 2>&1; then")
	w.echo(ansiBoldGreen, "Created fresh repository.")
	w.raw("else")
	w.raw("  git remote set-url origin " + quote(withoutCreds.String()))
	// git init does not apply the template to a repository that exists.
	w.raw(`  git config --file .git/config --replace-all include.path "$` + extGitConfigVar + `" ` + includePattern)
	w.raw("fi")

	fetch := "git fetch origin --no-recurse-submodules"
	if len(refspecs) > 0 {
		fetch += " " + quoteAll(refspecs)
	}
	if gi.Depth > 0 {
		fetch += " --depth " + strconv.Itoa(gi.Depth)
	}
	if len(gs.fetchFlags) > 0 {
		fetch += " " + quoteAll(gs.fetchFlags)
	}
	if gi.Depth <= 0 {
		// A full fetch into a repository an earlier shallow job left
		// behind must deepen it, or older commits stay unreachable.
		w.raw("if [ -e .git/shallow ]; then")
		w.raw("  " + fetch + " --unshallow")
		w.raw("else")
		w.raw("  " + fetch)
		w.raw("fi")
	} else {
		w.raw(fetch)
	}
	return nil
}

// globalGitSSLConfig writes the coordinator's TLS files into git's global
// configuration, before the hooks, as GitLab Runner does for an
// environment the job does not share (the shared one gets them in the
// external configuration, see fetchSources). Only with a checkout: without
// one, the job's image may have no git.
func (w *writer) globalGitSSLConfig(gs gitSettings) error {
	if gs.sharedEnv || (gs.strategy != GitClone && gs.strategy != GitFetch) {
		return nil
	}
	remote, err := gs.auth.remoteURL()
	if err != nil {
		return fmt.Errorf("repository URL: %w", err)
	}
	w.gitSSLConfig(gs, remote, "--global")
	return nil
}

// clearGitCredentials ends get_sources with a `git credential reject` of
// the job token for the repository's server, so that a credential helper
// of the user's (credential.helper=store) forgets what it kept during the
// job, as GitLab Runner does; best effort. Only after a checkout: without
// one, the job's image may have no git.
func (w *writer) clearGitCredentials(gs gitSettings) {
	if gs.strategy != GitClone && gs.strategy != GitFetch {
		return
	}
	remote, err := gs.auth.remoteURL()
	if err != nil || remote.Host == "" || (remote.Scheme != "http" && remote.Scheme != "https" && remote.Scheme != "ssh") {
		return
	}
	server := (&url.URL{Scheme: remote.Scheme, Host: remote.Host}).String()
	w.raw("printf 'url=%s\nusername=gitlab-ci-token\n\n' " + quote(server) + " | git credential reject || true")
}

// gitSSLConfig points git at the coordinator's TLS files (the job's
// CI_SERVER_TLS_* file variables) for the remote's server, in the
// configuration where says (--global, or -f a file).
func (w *writer) gitSSLConfig(gs gitSettings, remote *url.URL, where string) {
	host := (&url.URL{Scheme: remote.Scheme, Host: remote.Host}).String()
	for _, f := range []struct{ variable, key string }{
		{api.VarTLSCAFile, "sslCAInfo"},
		{api.VarTLSCertFile, "sslCert"},
		{api.VarTLSKeyFile, "sslKey"},
	} {
		if gs.tlsFiles[f.variable] {
			w.raw("git config " + where + " " + quote("http."+host+"."+f.key) + ` "$` + f.variable + `"`)
		}
	}
}

// gitCleanup removes the lock files a killed git leaves behind (which
// would fail the next one), the post-checkout hook, and with clean_git_config
// the configuration and hooks of the checkout, of the template and of the
// submodules' repositories: whatever an earlier job wrote there.
func (w *writer) gitCleanup(info Info, gs gitSettings) {
	gitDir := info.ProjectDir + "/.git"
	modules := gitDir + "/modules"
	forSubmodules := gs.submodules == SubmoduleNormal || gs.submodules == SubmoduleRecursive
	for _, f := range []string{"index.lock", "shallow.lock", "HEAD.lock", "hooks/post-checkout", "config.lock"} {
		w.raw("rm -f -- " + quote(gitDir+"/"+f))
		if forSubmodules {
			w.rmFilesRecursive(modules, path.Base(f), "f")
		}
	}
	w.rmFilesRecursive(gitDir+"/refs", "*.lock", "f")
	if !info.Git.CleanGitConfig {
		return
	}
	for _, d := range []string{info.gitTmpDir() + "/" + gitTemplateDir, gitDir} {
		w.raw("rm -f -- " + quote(d+"/config"))
		w.rmDir(d + "/hooks")
	}
	if forSubmodules {
		w.rmFilesRecursive(modules, "config", "f")
		w.rmFilesRecursive(modules, "hooks", "d")
	}
}

// rmFilesRecursive removes what is named name under dir, if dir exists:
// files (kind "f") or directories with what they hold ("d").
func (w *writer) rmFilesRecursive(dir, name, kind string) {
	rm := "rm -f -- {} +"
	if kind == "d" {
		rm = "rm -rf -- {} +"
	}
	w.raw("if [ -d " + quote(dir) + " ]; then find " + quote(dir) + " -depth -name " + quote(name) + " -type " + kind + " -exec " + rm + "; fi")
}

// rmDir removes dir and what it holds, read-only parts included (git's
// object files, a job's chmod).
func (w *writer) rmDir(dir string) {
	w.raw("if [ -d " + quote(dir) + " ]; then chmod -R u+rwX -- " + quote(dir) + "; fi")
	w.raw("rm -rf -- " + quote(dir))
}

// updateSubmodules writes the submodule part of get_sources (strategy
// normal or recursive), in the project directory: init and sync, clean
// and reset what an earlier job left in them, update (once more after a
// sync when it fails), then point each submodule's configuration at the
// external one and pull their LFS objects.
func (w *writer) updateSubmodules(gs gitSettings) {
	recursive := gs.submodules == SubmoduleRecursive
	depth := gs.submoduleDepth
	switch {
	case recursive && depth > 0:
		w.echo(ansiBoldGreen, fmt.Sprintf("Updating/initializing submodules recursively with git depth set to %d...", depth))
	case recursive:
		w.echo(ansiBoldGreen, "Updating/initializing submodules recursively...")
	case depth > 0:
		w.echo(ansiBoldGreen, fmt.Sprintf("Updating/initializing submodules with git depth set to %d...", depth))
	default:
		w.echo(ansiBoldGreen, "Updating/initializing submodules...")
	}
	paths := ""
	if len(gs.submodulePaths) > 0 {
		paths = " -- " + quoteAll(gs.submodulePaths)
	}
	rec := ""
	if recursive {
		rec = " --recursive"
	}
	sync := "git submodule sync" + rec + paths
	update := "git submodule update --init" + rec
	if depth > 0 {
		update += " --depth " + strconv.Itoa(depth)
	}
	if len(gs.submoduleUpdateFlags) > 0 {
		update += " " + quoteAll(gs.submoduleUpdateFlags)
	}
	update += paths
	// The submodules' own repositories do not include the main one's
	// configuration: the commands that fetch include it explicitly.
	withCreds := func(cmd string) string {
		return `git -c include.path="$` + extGitConfigVar + `" ` + strings.TrimPrefix(cmd, "git ")
	}
	foreach := "git submodule foreach" + rec
	cleanFlags := gs.cleanFlags
	if len(cleanFlags) == 0 {
		cleanFlags = []string{defaultGitCleanFlags}
	}
	clean := foreach + " git clean " + quoteAll(cleanFlags)
	reset := foreach + " git reset --hard"

	w.raw("git submodule init")
	w.raw(sync)
	w.raw(clean)
	w.raw(reset)
	w.raw("if " + withCreds(update) + "; then")
	w.echo(ansiBoldGreen, "Updated submodules")
	w.raw("  " + sync)
	w.raw("else")
	w.echo(ansiYellow, "Updating submodules failed. Retrying...")
	if slices.ContainsFunc(gs.submoduleUpdateFlags, func(f string) bool { return strings.EqualFold(f, "--remote") }) {
		// With --remote and a branch in .gitmodules that is not the
		// default one, the update may not know that branch yet.
		w.raw("  " + withCreds(foreach+" git fetch origin '+refs/heads/*:refs/remotes/origin/*'"))
	}
	w.raw("  " + sync)
	w.raw("  " + withCreds(update))
	w.raw("  " + reset)
	w.raw("fi")
	w.raw(clean)
	w.echo(ansiBoldGreen, "Configuring submodules to use parent git credentials...")
	// Every level, also with the normal strategy: a job's own git
	// command in a submodule then authenticates as the main repository.
	w.raw(`git submodule foreach --recursive git config --replace-all include.path "$` + extGitConfigVar + `"`)
	if !gs.lfsSkipSmudge {
		w.raw("if git lfs version >/dev/null 2>&1; then")
		w.echo(ansiBoldGreen, "Pulling LFS files...")
		w.raw("  " + withCreds(foreach+" git lfs pull"))
		w.raw("fi")
	}
}

// quoteAll quotes each word and joins them with spaces.
func quoteAll(words []string) string {
	q := make([]string, len(words))
	for i, s := range words {
		q[i] = quote(s)
	}
	return strings.Join(q, " ")
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
