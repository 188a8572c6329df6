package main

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"

	"github.com/drover-ci/drover/internal/client"
)

// fakeSubmit is a coordinator that records the body of POST /api/v1/jobs.
func fakeSubmit(t *testing.T) (*httptest.Server, *[]byte) {
	t.Helper()
	var body []byte
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/api/v1/jobs" || r.Header.Get("Authorization") != "Bearer tok" {
			http.Error(w, `{"error":"unexpected request"}`, http.StatusBadRequest)
			return
		}
		body, _ = io.ReadAll(r.Body)
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, `{"id":42,"status":"pending"}`)
	}))
	t.Cleanup(srv.Close)
	return srv, &body
}

func TestSubmitImageFlags(t *testing.T) {
	srv, body := fakeSubmit(t)
	base := []string{"submit", "--url", srv.URL, "--token", "tok", "--name", "n", "--script", "true"}
	for _, tc := range []struct {
		name string
		args []string
		want string // body sent; "" = no request (usage error, exit 2)
	}{
		{"no image", nil, `{"name":"n","script":["true"]}`},
		{"image name", []string{"--image", "alpine:3"}, `{"name":"n","script":["true"],"image":"alpine:3"}`},
		{"image object", []string{"--image", "alpine:3", "--image-entrypoint", "/bin/sh", "--image-entrypoint", "-c",
			"--image-pull-policy", "if-not-present", "--image-pull-policy", "always", "--image-user", "1000:1000"},
			`{"name":"n","script":["true"],"image":{"name":"alpine:3","entrypoint":["/bin/sh","-c"],"pull_policy":["if-not-present","always"],"docker":{"user":"1000:1000"}}}`},
		{"entrypoint cleared", []string{"--image", "alpine", "--image-entrypoint", ""},
			`{"name":"n","script":["true"],"image":{"name":"alpine","entrypoint":[""]}}`},
		{"services", []string{"--service", "redis:7", "--service", `{"name":"postgres:17","alias":"db pg","command":["postgres"],"entrypoint":["e"],"variables":[{"key":"K","value":"v"}],"pull_policy":"never"}`, "--service", `{"name":"plain"}`},
			`{"name":"n","script":["true"],"services":["redis:7",{"name":"postgres:17","alias":"db pg","command":["postgres"],"entrypoint":["e"],"variables":[{"key":"K","value":"v"}],"pull_policy":["never"]},"plain"]}`},
		{"image flags without image", []string{"--image-user", "1000"}, ""},
		{"entrypoint without image", []string{"--image-entrypoint", "sh"}, ""},
		{"service unknown key", []string{"--service", `{"name":"r","aliases":"x"}`}, ""},
		{"service without name", []string{"--service", `{"alias":"x"}`}, ""},
		{"service bad json", []string{"--service", `{"name":`}, ""},
		{"service trailing data", []string{"--service", `{"name":"r"} x`}, ""},
		{"service empty", []string{"--service", ""}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			*body = nil
			out, code, err := drover(t, append(base, tc.args...)...)
			if tc.want == "" {
				if code != 2 || *body != nil {
					t.Errorf("exit %d (%v), sent %s; want usage error and no request\n%s", code, err, *body, out)
				}
				return
			}
			// The id alone on its line (stdout), the hint after it (stderr).
			if code != 0 || !strings.HasPrefix(out, "42\n") || !strings.Contains(out, "follow it: drover logs 42 -f") {
				t.Fatalf("exit %d (%v): %s", code, err, out)
			}
			if string(*body) != tc.want {
				t.Errorf("body\n got %s\nwant %s", *body, tc.want)
			}
		})
	}
}

func TestSubmitRejected(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		io.WriteString(w, `{"error":"unknown pull policy","field":"image.pull_policy"}`)
	}))
	defer srv.Close()
	out, code, err := drover(t, "submit", "--url", srv.URL, "--token", "tok", "--name", "n", "--script", "true",
		"--image", "a", "--image-pull-policy", "sometimes")
	if code != 1 || err == nil || !strings.Contains(err.Error(), "image.pull_policy") {
		t.Errorf("exit %d, %v\n%s", code, err, out)
	}
}

// TestJobsNewestFirstAndPaging: `drover jobs` against a real coordinator
// lists the newest jobs first, says how many more there are and how to see
// them, and that command shows the next page.
func TestJobsNewestFirstAndPaging(t *testing.T) {
	srvURL, adminToken, cl := adminServer(t)
	for i := range 5 {
		if _, err := cl.Submit(t.Context(), client.JobSpec{Name: fmt.Sprintf("job-%d", i+1), Script: []string{"true"}}); err != nil {
			t.Fatal(err)
		}
	}
	base := []string{"jobs", "--url", srvURL, "--token", adminToken}
	ids := func(out string) []string {
		var got []string
		for _, l := range strings.Split(out, "\n")[1:] {
			if f := strings.Fields(l); len(f) > 1 && strings.HasPrefix(f[1], "job-") {
				got = append(got, f[0])
			}
		}
		return got
	}
	out, code, err := drover(t, append(base, "--limit", "2")...)
	if code != 0 {
		t.Fatalf("exit %d (%v): %s", code, err, out)
	}
	// No runner has ever asked for jobs: the pending jobs say they are stuck.
	if !strings.Contains(out, "stuck: no runner is online") {
		t.Errorf("drover jobs does not show why the jobs are stuck:\n%s", out)
	}
	if got := strings.Join(ids(out), " "); got != "5 4" || !strings.Contains(out, "3 more: drover jobs --before 4") {
		t.Fatalf("first page: ids %q, output:\n%s\nwant 5 4 and \"3 more: drover jobs --before 4\"", got, out)
	}
	out, _, _ = drover(t, append(base, "--limit", "2", "--before", "4")...)
	if got := strings.Join(ids(out), " "); got != "3 2" || !strings.Contains(out, "more may follow: drover jobs --before 2") {
		t.Fatalf("second page: ids %q, output:\n%s", got, out)
	}
	out, _, _ = drover(t, append(base, "--oldest", "--limit", "10")...)
	if got := strings.Join(ids(out), " "); got != "1 2 3 4 5" || strings.Contains(out, "more") {
		t.Fatalf("--oldest: ids %q, output:\n%s", got, out)
	}
	if _, code, _ := drover(t, append(base, "--limit", "0")...); code != 2 {
		t.Fatalf("--limit 0: exit %d, want 2", code)
	}
}

// TestResolveRef: submit resolves --git-ref to the commit with a real git
// repository: a branch, an annotated tag (to its commit), the default
// HEAD; an unknown ref is an error naming it.
func TestResolveRef(t *testing.T) {
	dir := t.TempDir()
	git := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@e", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@e")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	git("init", "-q", "-b", "main")
	git("commit", "-q", "--allow-empty", "-m", "one")
	first := git("rev-parse", "HEAD")
	git("tag", "-a", "v1", "-m", "tag")
	git("commit", "-q", "--allow-empty", "-m", "two")
	second := git("rev-parse", "HEAD")
	url := "file://" + dir
	for _, tc := range []struct{ ref, want string }{{"main", second}, {"v1", first}, {"", second}} {
		got, err := resolveRef(t.Context(), url, tc.ref)
		if err != nil || got != tc.want {
			t.Errorf("resolveRef(%q) = %q, %v; want %s", tc.ref, got, err, tc.want)
		}
	}
	if _, err := resolveRef(t.Context(), url, "nope"); err == nil || !strings.Contains(err.Error(), `"nope"`) {
		t.Errorf("resolveRef(nope) = %v, want an error naming the ref", err)
	}
}

func TestVersion(t *testing.T) {
	out, code, err := drover(t, "version")
	if code != 0 {
		t.Fatalf("exit %d (%v)", code, err)
	}
	for _, want := range []string{"drover " + version + "\n", "commit:", "built:", "go:         " + runtime.Version(), "os/arch:    " + runtime.GOOS + "/" + runtime.GOARCH} {
		if !strings.Contains(out, want) {
			t.Errorf("version output lacks %q:\n%s", want, out)
		}
	}
}
