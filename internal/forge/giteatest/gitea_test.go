package giteatest

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

type delivery struct {
	header http.Header
	body   []byte
}

// TestGiteaStarts runs the real Gitea and does what drover's forge tests
// will: a repository, a webhook to a loopback server, a push with the real
// git over HTTP, the signed push delivery, and commit statuses written and
// read back.
func TestGiteaStarts(t *testing.T) {
	g := Start(t)
	ctx := t.Context()

	deliveries := make(chan delivery, 16)
	hooks := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		select {
		case deliveries <- delivery{header: r.Header.Clone(), body: b}:
		default:
			t.Errorf("more deliveries than expected: %s %s", r.Header.Get("X-Gitea-Event"), b)
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	defer hooks.Close()

	// The admin's password works for basic auth, as the web UI and git use it.
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, g.URL+"api/v1/user", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.SetBasicAuth(g.AdminUser, g.AdminPassword)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET /api/v1/user with basic auth: %v", err)
	}
	var me struct {
		Login   string `json:"login"`
		IsAdmin bool   `json:"is_admin"`
	}
	err = json.NewDecoder(resp.Body).Decode(&me)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK || me.Login != g.AdminUser || !me.IsAdmin {
		t.Errorf("GET /api/v1/user as %s = %d %+v (%v), want 200 and an admin named so", g.AdminUser, resp.StatusCode, me, err)
	}

	repo, err := g.CreateRepo(ctx, "hello")
	if err != nil {
		t.Fatalf("CreateRepo(hello) = %v", err)
	}
	if repo.FullName != g.AdminUser+"/hello" {
		t.Errorf("CreateRepo(hello).FullName = %q, want %q", repo.FullName, g.AdminUser+"/hello")
	}
	const secret = "s3cret"
	hook, err := g.AddWebhook(ctx, "hello", hooks.URL+"/hooks/gitea", secret)
	if err != nil {
		t.Fatalf("AddWebhook = %v", err)
	}
	if !hook.Active || hook.Type != "gitea" {
		t.Errorf("AddWebhook = %+v, want an active hook of type gitea", hook)
	}

	work := t.TempDir()
	git(t, work, "init", "-q", "-b", "main")
	if err := os.WriteFile(filepath.Join(work, ".drover.yml"), []byte("build:\n  script: echo hi\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	git(t, work, "add", ".")
	git(t, work, "commit", "-q", "-m", "first")
	sha := git(t, work, "rev-parse", "HEAD")
	git(t, work, "push", "-q", g.PushURL("hello"), "HEAD:refs/heads/main")

	var d delivery
	select {
	case d = <-deliveries:
	case <-ctx.Done():
		t.Fatalf("no webhook delivery before the test's end; gitea.log:\n%s", lastLines(g.Log(), 40))
	}
	if ev := d.header.Get("X-Gitea-Event"); ev != "push" {
		t.Errorf("X-Gitea-Event = %q, want push", ev)
	}
	sig := d.header.Get("X-Gitea-Signature")
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write(d.body)
	if want := hex.EncodeToString(mac.Sum(nil)); sig != want {
		t.Errorf("X-Gitea-Signature = %q, want %q (hex HMAC-SHA256 of the body with the hook's secret)", sig, want)
	}
	var push struct {
		Ref        string `json:"ref"`
		After      string `json:"after"`
		Repository struct {
			FullName string `json:"full_name"`
			CloneURL string `json:"clone_url"`
		} `json:"repository"`
	}
	if err := json.Unmarshal(d.body, &push); err != nil {
		t.Fatalf("push payload %s: %v", d.body, err)
	}
	if push.Ref != "refs/heads/main" || push.After != sha || push.Repository.FullName != repo.FullName {
		t.Errorf("push payload ref=%q after=%q repo=%q, want refs/heads/main %s %s", push.Ref, push.After, push.Repository.FullName, sha, repo.FullName)
	}

	if _, err := g.CreateStatus(ctx, "hello", sha, "pending", "drover/build", "running", "http://127.0.0.1:1/jobs/1"); err != nil {
		t.Fatalf("CreateStatus(pending) = %v", err)
	}
	if _, err := g.CreateStatus(ctx, "hello", sha, "success", "drover/build", "passed", "http://127.0.0.1:1/jobs/1"); err != nil {
		t.Fatalf("CreateStatus(success) = %v", err)
	}
	statuses, err := g.CommitStatuses(ctx, "hello", sha)
	if err != nil {
		t.Fatalf("CommitStatuses = %v", err)
	}
	var got []string
	for _, s := range statuses {
		got = append(got, s.Context+"="+s.State+" "+s.Description)
	}
	if want := []string{"drover/build=success passed", "drover/build=pending running"}; strings.Join(got, ", ") != strings.Join(want, ", ") {
		t.Errorf("CommitStatuses = %q, want %q", got, want)
	}

	var api *APIError
	if _, err := g.CommitStatuses(ctx, "no-such-repo", sha); !errors.As(err, &api) || api.StatusCode != http.StatusNotFound {
		t.Errorf("CommitStatuses(no-such-repo) = %v, want an *APIError with 404", err)
	}
}

// git runs the real git in dir, with no configuration of this machine's.
func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), "git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(),
		"HOME="+dir, "GIT_CONFIG_NOSYSTEM=1", "GIT_TERMINAL_PROMPT=0",
		"GIT_AUTHOR_NAME=drover", "GIT_AUTHOR_EMAIL=drover@example.com",
		"GIT_COMMITTER_NAME=drover", "GIT_COMMITTER_EMAIL=drover@example.com")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

func TestParseToken(t *testing.T) {
	for _, tc := range []struct {
		name, out, want string
		wantErr         bool
	}{
		{"after the user line", "New user 'drover' has been successfully created!\nAccess token was successfully created... 0123abcd\n", "0123abcd", false},
		{"log lines around", "2026/01/01 ... info\nAccess token was successfully created... tok\n2026/01/01 ... done\n", "tok", false},
		{"no token line", "New user 'drover' has been successfully created!\n", "", true},
		{"empty token", "Access token was successfully created...   \n", "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseToken(tc.out)
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Errorf("parseToken(%q) = %q, %v; want %q, error %v", tc.out, got, err, tc.want, tc.wantErr)
			}
		})
	}
}
