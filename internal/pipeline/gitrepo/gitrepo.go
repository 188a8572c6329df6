// Package gitrepo reads what a pipeline needs to know about a commit from a
// git repository (a work tree or a bare repository), with the git binary:
// the ref and sha, the commit's message, author and time, the files a push
// changed, and the predefined CI/CD variables GitLab derives from them.
package gitrepo

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing/fstest"
	"time"
)

// ZeroSHA is GitLab's before-sha of a pipeline with nothing before it (a
// new branch, a tag, a manual run).
const ZeroSHA = "0000000000000000000000000000000000000000"

// Commit is a pipeline's commit and ref.
type Commit struct {
	SHA string
	// BeforeSHA is the commit the push moved the ref from (ZeroSHA or
	// "" when none).
	BeforeSHA string
	// Ref is the branch or tag name; Tag says which.
	Ref string
	Tag bool
	// Message is the full message, Title its first line.
	Message   string
	Title     string
	Author    string // "Name <email>"
	Timestamp time.Time
	// DefaultBranch is the repository's default branch.
	DefaultBranch string
}

// Git runs git in one repository.
type Git struct {
	Dir string
}

func (g Git) run(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "git", append([]string{"-C", g.Dir}, args...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(errb.String())
		if msg == "" {
			msg = err.Error()
		}
		return "", fmt.Errorf("git %s in %s: %s", strings.Join(args, " "), g.Dir, msg)
	}
	return out.String(), nil
}

// Resolve reads the commit rev names (a sha, a branch, a tag; "" = HEAD)
// and what git knows about it. ref names the pipeline's ref when rev
// alone does not (a sha); for HEAD it is the checked-out branch, or a tag
// pointing at HEAD when detached.
func (g Git) Resolve(ctx context.Context, rev, ref string) (Commit, error) {
	if rev == "" {
		rev = "HEAD"
	}
	out, err := g.run(ctx, "log", "-1", "--format=%H%x00%an <%ae>%x00%cI%x00%B", rev, "--")
	if err != nil {
		return Commit{}, err
	}
	parts := strings.SplitN(out, "\x00", 4)
	if len(parts) != 4 {
		return Commit{}, fmt.Errorf("git log of %s in %s: unexpected output", rev, g.Dir)
	}
	c := Commit{SHA: parts[0], Author: parts[1], Message: strings.TrimRight(parts[3], "\n")}
	c.Title, _, _ = strings.Cut(c.Message, "\n")
	if t, err := time.Parse(time.RFC3339, parts[2]); err == nil {
		c.Timestamp = t
	}
	switch {
	case ref != "":
		c.Ref = strings.TrimPrefix(strings.TrimPrefix(ref, "refs/heads/"), "refs/tags/")
		c.Tag = strings.HasPrefix(ref, "refs/tags/")
		if !c.Tag && !strings.HasPrefix(ref, "refs/heads/") {
			if _, err := g.run(ctx, "rev-parse", "--verify", "-q", "refs/tags/"+ref); err == nil {
				if _, err := g.run(ctx, "rev-parse", "--verify", "-q", "refs/heads/"+ref); err != nil {
					c.Tag = true
				}
			}
		}
	case rev == "HEAD":
		if b, err := g.run(ctx, "symbolic-ref", "-q", "--short", "HEAD"); err == nil {
			c.Ref = strings.TrimSpace(b)
		} else if t, err := g.run(ctx, "describe", "--tags", "--exact-match", "HEAD"); err == nil {
			c.Ref, c.Tag = strings.TrimSpace(t), true
		} else {
			return Commit{}, errors.New("HEAD is detached and no tag points at it: name the branch (--ref)")
		}
	default:
		c.Ref = rev
		if _, err := g.run(ctx, "rev-parse", "--verify", "-q", "refs/tags/"+rev); err == nil {
			if _, err := g.run(ctx, "rev-parse", "--verify", "-q", "refs/heads/"+rev); err != nil {
				c.Tag = true
			}
		}
	}
	c.DefaultBranch = g.defaultBranch(ctx)
	return c, nil
}

// defaultBranch is origin's HEAD, else init.defaultBranch, else main
// (or master when only that exists).
func (g Git) defaultBranch(ctx context.Context) string {
	if s, err := g.run(ctx, "symbolic-ref", "-q", "--short", "refs/remotes/origin/HEAD"); err == nil {
		return strings.TrimPrefix(strings.TrimSpace(s), "origin/")
	}
	if s, err := g.run(ctx, "config", "init.defaultBranch"); err == nil && strings.TrimSpace(s) != "" {
		return strings.TrimSpace(s)
	}
	if _, err := g.run(ctx, "rev-parse", "--verify", "-q", "refs/heads/main"); err != nil {
		if _, err := g.run(ctx, "rev-parse", "--verify", "-q", "refs/heads/master"); err == nil {
			return "master"
		}
	}
	return "main"
}

// Changed returns the files that differ between from and to (commits or
// refs). known is false when from is empty or ZeroSHA: GitLab then treats
// every rules:changes as true.
func (g Git) Changed(ctx context.Context, from, to string) (files []string, known bool, err error) {
	if from == "" || from == ZeroSHA {
		return nil, false, nil
	}
	out, err := g.run(ctx, "diff", "--name-only", "-z", from, to, "--")
	if err != nil {
		return nil, false, err
	}
	for f := range strings.SplitSeq(out, "\x00") {
		if f != "" {
			files = append(files, f)
		}
	}
	return files, true, nil
}

// ChangedInWorkTree returns the files that differ between HEAD's parent
// (or base, when set) and the work tree, untracked ones included: what a
// local run compares rules:changes with.
func (g Git) ChangedInWorkTree(ctx context.Context, base string) ([]string, error) {
	if base == "" {
		base = "HEAD~1"
		if _, err := g.run(ctx, "rev-parse", "--verify", "-q", "HEAD~1"); err != nil {
			base = "4b825dc642cb6eb9a060e54bf8d69288fbee4904" // the empty tree
		}
	}
	out, err := g.run(ctx, "diff", "--name-only", "-z", base, "--")
	if err != nil {
		return nil, err
	}
	untracked, err := g.run(ctx, "ls-files", "-z", "--others", "--exclude-standard")
	if err != nil {
		return nil, err
	}
	var files []string
	for f := range strings.SplitSeq(out+untracked, "\x00") {
		if f != "" {
			files = append(files, f)
		}
	}
	return files, nil
}

var slugBad = regexp.MustCompile(`[^a-z0-9]`)

// CommonDir is the absolute path of the repository's git directory (for a
// linked work tree, the main repository's, which holds the objects).
func (g Git) CommonDir(ctx context.Context) (string, error) {
	out, err := g.run(ctx, "rev-parse", "--path-format=absolute", "--git-common-dir")
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(out), nil
}

// Slug is GitLab's CI_COMMIT_REF_SLUG of ref: lower-cased, every character
// but 0-9 and a-z replaced by -, at most 63 bytes, no leading or trailing -.
func Slug(ref string) string {
	s := slugBad.ReplaceAllString(strings.ToLower(ref), "-")
	if len(s) > 63 {
		s = s[:63]
	}
	return strings.Trim(s, "-")
}

// Predefined returns the CI/CD variables GitLab derives from the commit
// and the pipeline's source (push, web, api, schedule, trigger...).
func (c Commit) Predefined(source string) map[string]string {
	before := c.BeforeSHA
	if before == "" {
		before = ZeroSHA
	}
	short := c.SHA
	if len(short) > 8 {
		short = short[:8]
	}
	desc := ""
	if _, rest, ok := strings.Cut(c.Message, "\n"); ok {
		desc = strings.TrimLeft(rest, "\n")
	}
	m := map[string]string{
		"CI":                    "true",
		"GITLAB_CI":             "true",
		"CI_PIPELINE_SOURCE":    source,
		"CI_COMMIT_SHA":         c.SHA,
		"CI_COMMIT_SHORT_SHA":   short,
		"CI_COMMIT_BEFORE_SHA":  before,
		"CI_COMMIT_REF_NAME":    c.Ref,
		"CI_COMMIT_REF_SLUG":    Slug(c.Ref),
		"CI_COMMIT_MESSAGE":     c.Message,
		"CI_COMMIT_TITLE":       c.Title,
		"CI_COMMIT_DESCRIPTION": desc,
		"CI_COMMIT_AUTHOR":      c.Author,
		"CI_DEFAULT_BRANCH":     c.DefaultBranch,
	}
	if !c.Timestamp.IsZero() {
		m["CI_COMMIT_TIMESTAMP"] = c.Timestamp.Format(time.RFC3339)
	}
	if c.Tag {
		m["CI_COMMIT_TAG"] = c.Ref
		m["CI_COMMIT_TAG_MESSAGE"] = c.Message
	} else {
		m["CI_COMMIT_BRANCH"] = c.Ref
	}
	return m
}

// TopLevel returns the root of the work tree dir is in.
func TopLevel(ctx context.Context, dir string) (string, error) {
	out, err := Git{Dir: dir}.run(ctx, "rev-parse", "--show-toplevel")
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(out), nil
}

// Fetch brings the commit a pipeline runs into the bare repository at
// g.Dir (created when missing) from url: the ref (a branch or tag name, or
// a full refs/ name), and sha when given (it must be the ref's commit or
// one the fetch brought). It returns the commit's sha.
func (g Git) Fetch(ctx context.Context, url, ref, sha string) (string, error) {
	if _, err := exec.LookPath("git"); err != nil {
		return "", fmt.Errorf("git is needed to read the repository's CI configuration: %w", err)
	}
	if out, err := exec.CommandContext(ctx, "git", "init", "-q", "--bare", g.Dir).CombinedOutput(); err != nil {
		return "", fmt.Errorf("git init %s: %s", g.Dir, strings.TrimSpace(string(out)))
	}
	if sha != "" {
		// Already here (an earlier pipeline of the same commit)?
		if _, err := g.run(ctx, "cat-file", "-e", sha+"^{commit}"); err == nil {
			return g.revParse(ctx, sha)
		}
	}
	var refspecs []string
	switch {
	case strings.HasPrefix(ref, "refs/"):
		refspecs = []string{"+" + ref + ":" + ref}
	case ref != "":
		refspecs = []string{"+refs/heads/" + ref + ":refs/heads/" + ref, "+refs/tags/" + ref + ":refs/tags/" + ref}
	}
	var lastErr error
	for _, rs := range refspecs {
		if _, err := g.run(ctx, "fetch", "-q", "--no-tags", url, rs); err != nil {
			lastErr = err
			continue
		}
		lastErr = nil
		if sha == "" {
			return g.revParse(ctx, strings.TrimPrefix(strings.SplitN(rs, ":", 2)[1], "+"))
		}
		break
	}
	if sha != "" {
		if _, err := g.run(ctx, "cat-file", "-e", sha+"^{commit}"); err != nil {
			// Not on the ref: ask for the commit itself (servers that
			// allow it, and local repositories, serve it).
			if _, err := g.run(ctx, "fetch", "-q", "--no-tags", url, sha); err != nil {
				return "", fmt.Errorf("commit %s is not on %s of %s and could not be fetched: %w", sha, ref, url, err)
			}
		}
		return g.revParse(ctx, sha)
	}
	if lastErr != nil {
		return "", fmt.Errorf("fetching %s of %s: %w", ref, url, lastErr)
	}
	return "", fmt.Errorf("fetching %s: no ref or sha given", url)
}

func (g Git) revParse(ctx context.Context, rev string) (string, error) {
	out, err := g.run(ctx, "rev-parse", "--verify", "-q", rev+"^{commit}")
	if err != nil {
		return "", fmt.Errorf("%s is not a commit in %s", rev, g.Dir)
	}
	return strings.TrimSpace(out), nil
}

// CommitFS returns the files of commit sha as a file system for the
// pipeline compiler: every file is listed (rules:exists, include
// wildcards), and the YAML files (.yml, .yaml) and the file named config
// have their contents (what include:local and the configuration read), up
// to maxSize bytes each; larger ones are listed with their size only, so
// reading them fails the size check.
func (g Git) CommitFS(ctx context.Context, sha, config string, maxSize int64) (fstest.MapFS, error) {
	out, err := g.run(ctx, "ls-tree", "-r", "-z", "--long", "--full-tree", sha)
	if err != nil {
		return nil, err
	}
	fsys := fstest.MapFS{}
	var want []string
	blobs := map[string]string{}
	for entry := range strings.SplitSeq(out, "\x00") {
		// "<mode> <type> <object> <size>\t<path>"
		meta, name, ok := strings.Cut(entry, "\t")
		if !ok {
			continue
		}
		f := strings.Fields(meta)
		if len(f) != 4 || f[1] != "blob" {
			continue
		}
		size, _ := strconv.ParseInt(f[3], 10, 64)
		fsys[name] = &fstest.MapFile{Mode: 0o644}
		ext := path.Ext(name)
		if (ext == ".yml" || ext == ".yaml" || name == config) && size <= maxSize {
			want = append(want, name)
			blobs[name] = f[2]
		} else if size > maxSize {
			// Listed with a placeholder of the right size.
			fsys[name].Data = make([]byte, 0)
			fsys[name].Sys = size
		}
	}
	if len(want) == 0 {
		return fsys, nil
	}
	cmd := exec.CommandContext(ctx, "git", "-C", g.Dir, "cat-file", "--batch")
	var in bytes.Buffer
	for _, name := range want {
		in.WriteString(blobs[name] + "\n")
	}
	cmd.Stdin = &in
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("git cat-file in %s: %s", g.Dir, strings.TrimSpace(stderr.String()))
	}
	data := stdout.Bytes()
	for _, name := range want {
		// "<object> blob <size>\n<contents>\n"
		nl := bytes.IndexByte(data, '\n')
		if nl < 0 {
			return nil, fmt.Errorf("git cat-file in %s: short output", g.Dir)
		}
		f := strings.Fields(string(data[:nl]))
		if len(f) != 3 {
			return nil, fmt.Errorf("git cat-file in %s: %q", g.Dir, data[:nl])
		}
		n, _ := strconv.Atoi(f[2])
		if nl+1+n > len(data) {
			return nil, fmt.Errorf("git cat-file in %s: short output", g.Dir)
		}
		fsys[name].Data = bytes.Clone(data[nl+1 : nl+1+n])
		data = data[nl+1+n+1:]
	}
	return fsys, nil
}

// Snapshot records the work tree as it is (tracked files with their
// changes, and untracked files git does not ignore) as a commit whose
// parent is HEAD, points ref at it and returns its sha. The user's index,
// branch and files are untouched: the commit is made with a temporary
// index (in tmpDir).
func (g Git) Snapshot(ctx context.Context, ref, tmpDir string) (string, error) {
	index := filepath.Join(tmpDir, "snapshot-index")
	_ = os.Remove(index)
	defer os.Remove(index)
	run := func(args ...string) (string, error) {
		cmd := exec.CommandContext(ctx, "git", append([]string{"-C", g.Dir}, args...)...)
		cmd.Env = append(os.Environ(), "GIT_INDEX_FILE="+index,
			"GIT_AUTHOR_NAME=drover exec", "GIT_AUTHOR_EMAIL=drover@localhost",
			"GIT_COMMITTER_NAME=drover exec", "GIT_COMMITTER_EMAIL=drover@localhost")
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Run(); err != nil {
			return "", fmt.Errorf("git %s in %s: %s", strings.Join(args, " "), g.Dir, strings.TrimSpace(errb.String()))
		}
		return strings.TrimSpace(out.String()), nil
	}
	head, headErr := run("rev-parse", "--verify", "-q", "HEAD")
	if headErr == nil {
		if _, err := run("read-tree", "HEAD"); err != nil {
			return "", err
		}
	}
	if _, err := run("add", "-A", "."); err != nil {
		return "", err
	}
	tree, err := run("write-tree")
	if err != nil {
		return "", err
	}
	args := []string{"commit-tree", tree, "-m", "drover exec: the work tree"}
	if headErr == nil {
		args = append(args, "-p", head)
	}
	sha, err := run(args...)
	if err != nil {
		return "", err
	}
	if _, err := run("update-ref", ref, sha); err != nil {
		return "", err
	}
	return sha, nil
}

// Exclude adds pattern to the repository's .git/info/exclude (git ignores
// it without a change to .gitignore), once.
func (g Git) Exclude(ctx context.Context, pattern string) error {
	dir, err := g.run(ctx, "rev-parse", "--git-path", "info/exclude")
	if err != nil {
		return err
	}
	file := strings.TrimSpace(dir)
	if !filepath.IsAbs(file) {
		file = filepath.Join(g.Dir, file)
	}
	data, _ := os.ReadFile(file)
	for line := range strings.SplitSeq(string(data), "\n") {
		if strings.TrimSpace(line) == pattern {
			return nil
		}
	}
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(file, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if len(data) > 0 && !bytes.HasSuffix(data, []byte("\n")) {
		fmt.Fprintln(f)
	}
	_, err = fmt.Fprintf(f, "# drover exec's state (artifacts, caches, logs)\n%s\n", pattern)
	return errors.Join(err, f.Close())
}
