package shell

import (
	"errors"
	"fmt"
	"net/url"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/executor"
)

// GitOptions are the runner's config.toml keys that change get_sources.
type GitOptions struct {
	// CloneURL is the runner's clone_url: when it has a scheme, the job
	// fetches <CloneURL>/<CI_PROJECT_PATH>.git with the job token, not
	// the repository URL the coordinator sent, and URLs under CloneURL
	// get the job token (submodules on the same server).
	CloneURL string
	// ServerURL is the runner's url: without CloneURL, URLs under it get
	// the job token (submodules on the same server).
	ServerURL string
	// SafeDirectoryCheckout adds the project directory to git's global
	// safe.directory before the checkout (safe_directory_checkout).
	SafeDirectoryCheckout bool
	// CleanGitConfig removes the checkout's (and its submodules') git
	// configuration and hooks before the fetch (clean_git_config, with
	// the executor's default already applied).
	CleanGitConfig bool
	// CorrelationID, when set, goes to the git server with every request
	// (X-Gitaly-Correlation-ID) and is printed, as GitLab Runner does
	// with FF_USE_GITALY_CORRELATION_ID.
	CorrelationID string
}

// gitSettings are the job variables of get_sources, read as GitLab
// Runner reads them.
type gitSettings struct {
	strategy   string // GitClone, GitFetch, GitNone or GitEmpty
	checkout   bool
	submodules string // SubmoduleNone, SubmoduleNormal or SubmoduleRecursive
	// submodulePaths are GIT_SUBMODULE_PATHS' pathspecs, nil for all.
	submodulePaths []string
	submoduleDepth int
	// Flags of git clean, git fetch and git submodule update; empty for
	// none.
	cleanFlags, fetchFlags, submoduleUpdateFlags []string
	lfsSkipSmudge                                bool
	// hooks is set when the hooks around get_sources run.
	hooks bool
	// sharedEnv is set for an environment other jobs share
	// (CI_SHARED_ENVIRONMENT): no global git configuration then.
	sharedEnv bool
	// tlsFiles tells which of the coordinator's TLS file variables
	// (api.VarTLSCAFile, ...) the job has.
	tlsFiles map[string]bool
	auth     gitAuth
}

// readGitSettings reads the get_sources variables of info from values (the
// expanded variables). A value that cannot be read is its default, as in
// GitLab Runner, but an unknown strategy or an invalid GIT_SUBMODULE_PATHS
// is an error: the stage cannot be written.
func readGitSettings(info Info, values map[string]string) (gitSettings, error) {
	job := info.Job
	boolean := func(key string, def bool) bool {
		if v, err := strconv.ParseBool(values[key]); err == nil {
			return v
		}
		return def
	}
	flags := func(key string, def []string) []string {
		switch raw := values[key]; raw {
		case "":
			return def
		case "none":
			return []string{}
		default:
			return strings.Fields(raw)
		}
	}
	gs := gitSettings{
		strategy:             strings.ToLower(strings.TrimSpace(values["GIT_STRATEGY"])),
		checkout:             boolean("GIT_CHECKOUT", true),
		submoduleDepth:       job.GitInfo.Depth,
		cleanFlags:           flags("GIT_CLEAN_FLAGS", []string{defaultGitCleanFlags}),
		fetchFlags:           flags("GIT_FETCH_EXTRA_FLAGS", []string{"--prune", "--quiet"}),
		submoduleUpdateFlags: flags("GIT_SUBMODULE_UPDATE_FLAGS", nil),
		lfsSkipSmudge:        boolean("GIT_LFS_SKIP_SMUDGE", false),
		submodules:           SubmoduleNone,
	}
	switch gs.strategy {
	case "":
		gs.strategy = GitClone
		if job.AllowGitFetch {
			gs.strategy = GitFetch
		}
	case GitClone, GitFetch, GitNone, GitEmpty:
	default:
		return gs, fmt.Errorf("GIT_STRATEGY %q: want %s, %s, %s or %s", gs.strategy, GitClone, GitFetch, GitNone, GitEmpty)
	}
	// GitLab Runner runs the hooks around get_sources unless the
	// strategy says there is no checkout.
	gs.hooks = gs.strategy != GitNone && gs.strategy != GitEmpty
	if job.GitInfo.RepoURL == "" && gs.strategy != GitEmpty {
		gs.strategy = GitNone // nothing to fetch
	}
	if d, err := strconv.Atoi(values["GIT_SUBMODULE_DEPTH"]); err == nil {
		gs.submoduleDepth = d
	}
	if gs.strategy == GitNone || gs.strategy == GitEmpty {
		return gs, nil // no repository, no submodules
	}
	switch s := values["GIT_SUBMODULE_STRATEGY"]; strings.ToLower(strings.TrimSpace(s)) {
	case "", SubmoduleNone:
	case SubmoduleNormal:
		gs.submodules = SubmoduleNormal
	case SubmoduleRecursive:
		gs.submodules = SubmoduleRecursive
	default:
		return gs, fmt.Errorf("unknown GIT_SUBMODULE_STRATEGY: expected either 'normal', 'recursive' or 'none' got %q", s)
	}
	if p := strings.Fields(values["GIT_SUBMODULE_PATHS"]); len(p) > 0 {
		// A lone ":(exclude)" would exclude nothing and git would take
		// the next word for a pathspec of its own.
		if slices.Contains(p, ":(exclude)") {
			return gs, fmt.Errorf("GIT_SUBMODULE_PATHS: invalid submodule pathspec %q", p)
		}
		gs.submodulePaths = p
	}
	gs.sharedEnv = values["CI_SHARED_ENVIRONMENT"] == "true"
	gs.tlsFiles = map[string]bool{}
	for _, k := range []string{api.VarTLSCAFile, api.VarTLSCertFile, api.VarTLSKeyFile} {
		gs.tlsFiles[k] = values[k] != ""
	}
	gs.auth = gitAuth{
		cloneURL:   info.Git.CloneURL,
		serverURL:  info.Git.ServerURL,
		repoURL:    job.GitInfo.RepoURL,
		forceHTTPS: boolean("GIT_SUBMODULE_FORCE_HTTPS", false),
		token:      job.Token,
		project:    values["CI_PROJECT_PATH"],
		host:       values["CI_SERVER_HOST"],
		sshHost:    values["CI_SERVER_SHELL_SSH_HOST"],
		sshPort:    values["CI_SERVER_SHELL_SSH_PORT"],
	}
	if gs.auth.project == "" {
		gs.auth.project = job.JobInfo.ProjectFullPath
	}
	return gs, nil
}

// gitAuth makes the URL the job fetches from and the URL rewrites
// (url.<base>.insteadOf) that give the job token to the fetches of the
// repository and of its submodules on the same server, as GitLab Runner
// does with the job token in the URLs.
type gitAuth struct {
	cloneURL, serverURL, repoURL string
	// forceHTTPS rewrites the server's SSH URLs to its HTTP(S) one
	// (GIT_SUBMODULE_FORCE_HTTPS).
	forceHTTPS bool
	token      string
	project    string // CI_PROJECT_PATH
	// The server's host, and SSH host and port when they differ
	// (CI_SERVER_HOST, CI_SERVER_SHELL_SSH_HOST, CI_SERVER_SHELL_SSH_PORT).
	host, sshHost, sshPort string
}

var errInvalidURL = errors.New("invalid URL")

// remoteURL is the URL the job fetches from, credentials included:
// clone_url's when it has a scheme, else the repository URL.
func (a gitAuth) remoteURL() (*url.URL, error) {
	u, _ := url.Parse(a.cloneURL)
	if u == nil || u.Scheme == "" {
		return url.Parse(a.repoURL)
	}
	u.Path = path.Join(u.Path, a.project+".git")
	return a.withToken(u), nil
}

// insteadOfs returns the rewrites, each {with the token, without}: the
// base URL (clone_url, else the runner's url) and the repository URL's
// server get the token, and with forceHTTPS the server's SSH URLs become
// the base URL with the token. Nothing when the base is not HTTP(S).
func (a gitAuth) insteadOfs() ([][2]string, error) {
	base, err := url.Parse(a.cloneURL)
	if err != nil || base.Scheme == "" {
		if base, err = url.Parse(a.serverURL); err != nil {
			return nil, errInvalidURL
		}
	}
	if !isHTTP(base) {
		return nil, nil
	}
	authed := trimmedURL(a.withToken(base))
	ios := [][2]string{{authed, trimmedURL(base)}}
	if a.forceHTTPS {
		host := a.sshHost
		if host == "" {
			host = a.host
		}
		if a.sshPort == "" || a.sshPort == "22" {
			ios = append(ios, [2]string{authed + "/", "git@" + host + ":"}, [2]string{authed, "ssh://git@" + host})
		} else {
			ios = append(ios, [2]string{authed, "ssh://git@" + host + ":" + a.sshPort})
		}
	}
	// Submodules of other projects on the repository's server, which
	// may not be the runner's url.
	if repo, err := url.Parse(a.repoURL); err == nil && isHTTP(repo) {
		server := *repo
		server.Path, server.RawPath, server.RawQuery, server.Fragment = "", "", "", ""
		withToken := trimmedURL(a.withToken(&server))
		server.User = nil
		ios = append(ios, [2]string{withToken, trimmedURL(&server)})
	}
	return ios, nil
}

// withToken returns u with the job token as its credentials (an ssh URL
// keeps its user, git by default).
func (a gitAuth) withToken(u *url.URL) *url.URL {
	c := *u
	if c.Scheme == "ssh" {
		if c.User == nil {
			c.User = url.User("git")
		}
		return &c
	}
	c.User = url.UserPassword("gitlab-ci-token", a.token)
	return &c
}

func isHTTP(u *url.URL) bool {
	return u != nil && (strings.EqualFold(u.Scheme, "http") || strings.EqualFold(u.Scheme, "https"))
}

func trimmedURL(u *url.URL) string { return strings.TrimRight(u.String(), "/") }

// gitTmpDir is the project's temporary directory, which holds the git
// template and the external git configuration.
func (info Info) gitTmpDir() string {
	if info.TmpDir != "" {
		return info.TmpDir
	}
	return info.ProjectDir + ".tmp"
}

// ProjectDir returns the project directory of a job whose variables are
// vars (as executor.JobVariables gives them for paths p), as GitLab Runner
// chooses it: GIT_CLONE_PATH (expanded) when set, which custom (the
// runner's [runners.custom_build_dir] enabled) must allow and which must
// be within p.BuildsDir; else p.ProjectDir, or p.ProjectDir + "-empty"
// with GIT_STRATEGY empty, so that an empty directory never replaces a
// checkout that later jobs fetch into.
func ProjectDir(vars api.Variables, p executor.Paths, custom bool) (string, error) {
	_, values := resolve(vars, p.ProjectDir+".tmp", func(string) (string, bool) { return "", false })
	dir := values["GIT_CLONE_PATH"]
	if dir == "" {
		if strings.ToLower(strings.TrimSpace(values["GIT_STRATEGY"])) == GitEmpty {
			return p.ProjectDir + "-empty", nil
		}
		return p.ProjectDir, nil
	}
	if !custom {
		return "", errors.New("setting GIT_CLONE_PATH is not allowed, enable `custom_build_dir` feature")
	}
	rel, err := filepath.Rel(p.BuildsDir, dir)
	if err != nil {
		return "", err
	}
	if strings.HasPrefix(rel, "..") {
		return "", fmt.Errorf("the GIT_CLONE_PATH=%q has to be within %q", dir, p.BuildsDir)
	}
	return path.Clean(dir), nil
}

// Strategy is the job's GIT_STRATEGY as get_sources reads it (GitClone,
// GitFetch, GitNone, GitEmpty or what the job wrote): without the
// variable, fetch when the job allows it (allow_git_fetch), else clone.
func Strategy(job *api.JobResponse) string {
	s := strings.ToLower(strings.TrimSpace(job.Variables.Get("GIT_STRATEGY")))
	if s != "" {
		return s
	}
	if job.AllowGitFetch {
		return GitFetch
	}
	return GitClone
}
