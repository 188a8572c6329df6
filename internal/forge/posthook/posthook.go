// Package posthook makes a plain git server announce its pushes to a
// drover coordinator: the post-receive hook script that `drover hook
// post-receive` writes into a bare repository, and what the script runs
// (`drover hook announce`): one generic webhook (forge.GenericPush) per
// pushed ref, authenticated with the project's webhook secret.
package posthook

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/drover-ci/drover/internal/forge"
)

// Marker is in every script Script writes: Install replaces a hook that
// has it and refuses, unless forced, one that has not.
const Marker = "# drover post-receive hook"

// SecretFile is the name, in the hooks directory, of the file Install
// writes the secret to (mode 0600).
const SecretFile = "drover-webhook-secret"

// Hook is what the script announces pushes with.
type Hook struct {
	// Drover is the drover binary the hook runs (an absolute path).
	Drover string
	// URL is the coordinator's base URL; Project the project's path.
	URL, Project string
	// RepoURL, when set, is where the coordinator fetches the commits
	// from (default: the project's repository URL).
	RepoURL string
}

// Script returns the post-receive hook: a POSIX sh script that hands
// git's "old new ref" lines to `drover hook announce`, reading the secret
// from SecretFile next to it.
func Script(h Hook) string {
	var b strings.Builder
	b.WriteString("#!/bin/sh\n" + Marker + ": announces each pushed ref to drover.\n")
	b.WriteString("# Written by `drover hook post-receive`; run it again to change it.\n")
	b.WriteString("# A failed announcement never fails the push: it is reported to the pusher.\n")
	b.WriteString("exec " + shellQuote(h.Drover) + " hook announce --url " + shellQuote(h.URL) +
		" --project " + shellQuote(h.Project))
	if h.RepoURL != "" {
		b.WriteString(" --repo-url " + shellQuote(h.RepoURL))
	}
	b.WriteString(" --secret-file \"$(dirname \"$0\")/" + SecretFile + "\"\n")
	return b.String()
}

func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// ErrForeignHook is returned by Install for a post-receive hook that
// drover did not write.
var ErrForeignHook = errors.New("the repository has a post-receive hook that drover did not write")

// Install writes the hook and the secret into bare repository (or .git
// directory) dir. An existing post-receive hook is replaced only if
// drover wrote it, or force is set.
func Install(dir string, h Hook, secret string, force bool) (string, error) {
	if secret == "" {
		return "", errors.New("install post-receive hook: the webhook secret is empty")
	}
	hooks := filepath.Join(dir, "hooks")
	if _, err := os.Stat(filepath.Join(dir, "objects")); err != nil {
		return "", fmt.Errorf("install post-receive hook: %s is not a git repository (bare, or a .git directory): %w", dir, err)
	}
	if err := os.MkdirAll(hooks, 0o755); err != nil {
		return "", fmt.Errorf("install post-receive hook: %w", err)
	}
	path := filepath.Join(hooks, "post-receive")
	if old, err := os.ReadFile(path); err == nil && !force && !bytes.Contains(old, []byte(Marker)) {
		return "", fmt.Errorf("%s: %w (pass --force to replace it)", path, ErrForeignHook)
	}
	if err := writeFile(filepath.Join(hooks, SecretFile), []byte(secret+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("install post-receive hook: %w", err)
	}
	if err := writeFile(path, []byte(Script(h)), 0o755); err != nil {
		return "", fmt.Errorf("install post-receive hook: %w", err)
	}
	return path, nil
}

// writeFile replaces name atomically with data.
func writeFile(name string, data []byte, mode os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(name), "."+filepath.Base(name)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Chmod(mode); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), name)
}

// Update is one line git gives a post-receive hook.
type Update struct{ Old, New, Ref string }

// ParseUpdates reads git's "old new ref" lines.
func ParseUpdates(r io.Reader) ([]Update, error) {
	var out []Update
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		if len(f) != 3 || !isHex(f[0]) || !isHex(f[1]) || !strings.HasPrefix(f[2], "refs/") {
			return nil, fmt.Errorf("line %d: %q is not \"old-sha new-sha refs/...\"", n, sc.Text())
		}
		out = append(out, Update{Old: f[0], New: f[1], Ref: f[2]})
	}
	return out, sc.Err()
}

func isHex(s string) bool {
	if len(s) != 40 && len(s) != 64 {
		return false
	}
	for _, c := range s {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

func zero(s string) bool { return strings.Trim(s, "0") == "" }

// Announcer sends the generic webhooks of a push.
type Announcer struct {
	URL, Project, Secret, RepoURL string
	// GitDir is the repository the commits are read from ("": git's
	// default, the hook's GIT_DIR).
	GitDir string
	HTTP   *http.Client
	// Out gets one line per ref: what the coordinator did.
	Out io.Writer
}

// Result is the coordinator's answer to one announcement.
type Result struct {
	Ref    string
	Status int
	// Pipeline and WebURL are the pipeline created (or found again).
	Pipeline int64
	WebURL   string
	Message  string
}

// Announce sends one webhook per update (deletions are not announced).
// Each is tried three times on a transport error or a 5xx; the first
// failure that remains is returned after every ref had its turn.
func (a *Announcer) Announce(ctx context.Context, updates []Update) ([]Result, error) {
	var results []Result
	var firstErr error
	for _, u := range updates {
		if zero(u.New) {
			continue
		}
		res, err := a.announce(ctx, u)
		if err != nil {
			if firstErr == nil {
				firstErr = err
			}
			if a.Out != nil {
				fmt.Fprintf(a.Out, "drover: %s: not announced: %v\n", u.Ref, err)
			}
			continue
		}
		results = append(results, res)
		if a.Out != nil {
			switch {
			case res.WebURL != "":
				fmt.Fprintf(a.Out, "drover: %s: pipeline %d: %s\n", u.Ref, res.Pipeline, res.WebURL)
			case res.Pipeline != 0:
				fmt.Fprintf(a.Out, "drover: %s: pipeline %d\n", u.Ref, res.Pipeline)
			default:
				fmt.Fprintf(a.Out, "drover: %s: %s\n", u.Ref, cmpOr(res.Message, http.StatusText(res.Status)))
			}
		}
	}
	return results, firstErr
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func (a *Announcer) announce(ctx context.Context, u Update) (Result, error) {
	p := forge.GenericPush{Ref: u.Ref, Before: u.Old, After: u.New, RepoURL: a.RepoURL}
	if zero(u.Old) {
		p.Before = ""
	}
	name, email, msg, err := a.commit(ctx, u.New)
	if err != nil {
		return Result{}, err
	}
	p.AuthorName, p.AuthorEmail, p.Message = name, email, msg
	p.Pusher = os.Getenv("GL_USERNAME") // set by some git servers; "" otherwise
	sum := sha256.Sum256([]byte(a.Project + "\x00" + u.Ref + "\x00" + u.Old + "\x00" + u.New))
	p.DeliveryID = "git-" + hex.EncodeToString(sum[:16])
	body, err := json.Marshal(p)
	if err != nil {
		return Result{}, err
	}
	endpoint := strings.TrimSuffix(a.URL, "/") + "/api/v1/hooks/generic/" + escapeProject(a.Project)
	hc := a.HTTP
	if hc == nil {
		hc = &http.Client{Timeout: 30 * time.Second}
	}
	var last error
	for attempt := range 3 {
		if attempt > 0 {
			select {
			case <-ctx.Done():
				return Result{}, ctx.Err()
			case <-time.After(time.Duration(attempt) * time.Second):
			}
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, bytes.NewReader(body))
		if err != nil {
			return Result{}, err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+a.Secret)
		req.Header.Set("X-Drover-Delivery", p.DeliveryID)
		resp, err := hc.Do(req)
		if err != nil {
			last = err
			continue
		}
		rb, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
		var out struct {
			Error    string `json:"error"`
			Message  string `json:"message"`
			Pipeline struct {
				ID     int64  `json:"id"`
				WebURL string `json:"web_url"`
			} `json:"pipeline"`
		}
		_ = json.Unmarshal(rb, &out)
		if resp.StatusCode >= 500 {
			last = fmt.Errorf("POST %s: %s: %s", endpoint, resp.Status, cmpOr(out.Error, strings.TrimSpace(string(rb))))
			continue
		}
		if resp.StatusCode >= 400 {
			return Result{}, fmt.Errorf("POST %s: %s: %s", endpoint, resp.Status, cmpOr(out.Error, strings.TrimSpace(string(rb))))
		}
		return Result{Ref: u.Ref, Status: resp.StatusCode, Pipeline: out.Pipeline.ID, WebURL: out.Pipeline.WebURL, Message: out.Message}, nil
	}
	return Result{}, last
}

// escapeProject escapes each segment of a project path (group/name).
func escapeProject(p string) string {
	segs := strings.Split(p, "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	return strings.Join(segs, "/")
}

// commit reads the author and message of commit sha.
func (a *Announcer) commit(ctx context.Context, sha string) (name, email, msg string, err error) {
	args := []string{}
	if a.GitDir != "" {
		args = append(args, "--git-dir", a.GitDir)
	}
	args = append(args, "log", "-1", "--format=%an%x00%ae%x00%B", sha, "--")
	out, err := exec.CommandContext(ctx, "git", args...).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return "", "", "", fmt.Errorf("git log %s: %v: %s", sha, err, strings.TrimSpace(string(ee.Stderr)))
		}
		return "", "", "", fmt.Errorf("git log %s: %w", sha, err)
	}
	parts := strings.SplitN(string(out), "\x00", 3)
	if len(parts) != 3 {
		return "", "", "", fmt.Errorf("git log %s: unexpected output", sha)
	}
	return parts[0], parts[1], strings.TrimRight(parts[2], "\n"), nil
}
