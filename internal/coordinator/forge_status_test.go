package coordinator

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/forge"
)

// standInStatus is one commit status a forge stand-in was posted: the
// request's path and token header, and the body's fields (GitHub's
// context, GitLab's name).
type standInStatus struct {
	Path, Token string
	State       string `json:"state"`
	Context     string `json:"context"`
	Name        string `json:"name"`
	Ref         string `json:"ref"`
	TargetURL   string `json:"target_url"`
	Description string `json:"description"`
}

// forgeStandIn is a stand-in for a forge's commit status API (not the
// forge: it only records what it is posted, answering 201 as GitHub's
// and GitLab's APIs document), for the coordinator's side of the loop on
// a machine without a real Gitea (TestWebhookGitea).
func forgeStandIn(t *testing.T) (*httptest.Server, <-chan standInStatus) {
	ch := make(chan standInStatus, 64)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var s standInStatus
		b, err := io.ReadAll(r.Body)
		if err == nil {
			err = json.Unmarshal(b, &s)
		}
		if r.Method != http.MethodPost || err != nil {
			http.Error(w, fmt.Sprintf("%s %s: %v", r.Method, r.URL.Path, err), http.StatusBadRequest)
			return
		}
		s.Path = r.URL.Path
		s.Token = r.Header.Get("Authorization") + r.Header.Get("PRIVATE-TOKEN")
		ch <- s
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		w.Write([]byte(`{"id":1}`))
	}))
	t.Cleanup(srv.Close)
	return srv, ch
}

// TestForgeStatusesStandIn: a project with a forge gets a commit status
// for every status its push's pipeline takes, on the pushed commit,
// under drover/pipeline, linking to the pipeline's page, in each forge's
// API shape; a commit whose configuration does not compile gets a
// failure naming the error's file:line.
func TestForgeStatusesStandIn(t *testing.T) {
	for _, tc := range []struct {
		kind, repo       string
		path             func(sha string) string
		token            string
		running, success string // the forge's states
		failed           string
	}{
		{"github", "team/app", func(sha string) string { return "/repos/team/app/statuses/" + sha }, "Bearer forge-tok", "pending", "success", "failure"},
		{"gitlab", "42", func(sha string) string { return "/api/v4/projects/42/statuses/" + sha }, "forge-tok", "running", "success", "failed"},
		{"gitea", "team/app", func(sha string) string { return "/api/v1/repos/team/app/statuses/" + sha }, "token forge-tok", "pending", "success", "failure"},
	} {
		t.Run(tc.kind, func(t *testing.T) {
			ctx := t.Context()
			standIn, posts := forgeStandIn(t)
			// No reaper sweep in the test's time: the statuses come from
			// the pipeline's own moves (the running one from the job's
			// start, not from a sweep up to 15 s later).
			e := newEnv(t, func(c *Config) { c.ReapInterval = time.Hour })
			runCtx, stop := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { done <- e.c.Run(runCtx) }()
			t.Cleanup(func() { stop(); <-done })

			w := newWorkTree(t)
			sha := w.commit("add CI", map[string]string{".gitlab-ci.yml": "build:\n  script: [make]\n"})
			if resp, b := e.admin("POST", "/api/v1/projects", map[string]any{
				"name": "team/app", "repo_url": w.dir, "webhook_secret": "hook-secret",
				"forge": map[string]string{"kind": tc.kind, "url": standIn.URL, "repo": tc.repo, "token": "forge-tok"},
			}); resp.StatusCode != http.StatusCreated {
				t.Fatalf("POST /api/v1/projects = %d %s", resp.StatusCode, b)
			}
			push := func(sha, delivery string) hookAnswerJSON {
				t.Helper()
				resp, b := e.do("POST", "/api/v1/hooks/generic/team/app", map[string]string{"Authorization": "Bearer hook-secret"},
					forge.GenericPush{Ref: "refs/heads/main", After: sha, DeliveryID: delivery})
				var a hookAnswerJSON
				if err := json.Unmarshal(b, &a); err != nil || resp.StatusCode != http.StatusCreated {
					t.Fatalf("webhook = %d %s (%v)", resp.StatusCode, b, err)
				}
				return a
			}
			// next waits for the stand-in's next status of sha until
			// one says want (in its description).
			var seen []string
			next := func(sha, want string) standInStatus {
				t.Helper()
				for {
					select {
					case s := <-posts:
						if s.Path != tc.path(sha) {
							t.Fatalf("a status posted to %s, want %s", s.Path, tc.path(sha))
						}
						seen = append(seen, s.State+" "+s.Description)
						if strings.Contains(s.Description, want) {
							return s
						}
					case <-ctx.Done():
						t.Fatalf("no status %q of %s; seen %q", want, sha, seen)
					}
				}
			}

			a := push(sha, "d-1")
			pipeURL := fmt.Sprintf("%s/pipelines/%d", e.srv.URL, a.Pipeline.ID)
			first := next(sha, "pending")
			_, tok := e.runner(nil)
			jr := e.take(tok)
			running := next(sha, "running")
			if resp, b := e.put(jr.ID, jr.Token, api.UpdateJobRequest{Token: jr.Token, State: api.StateSuccess}); resp.StatusCode != http.StatusOK {
				t.Fatalf("PUT job = %d %s", resp.StatusCode, b)
			}
			passed := next(sha, "passed")
			for _, s := range []standInStatus{first, running, passed} {
				if s.Token != tc.token || s.Context+s.Name != StatusContext || s.TargetURL != pipeURL {
					t.Errorf("status %+v: want token %q, context %s, target %s", s, tc.token, StatusContext, pipeURL)
				}
				if tc.kind == "gitlab" && s.Ref != "main" {
					t.Errorf("GitLab status %+v without the ref main", s)
				}
			}
			if first.State != "pending" || running.State != tc.running || passed.State != tc.success {
				t.Errorf("states %q, %q, %q; want pending, %s, %s (seen %q)", first.State, running.State, passed.State, tc.running, tc.success, seen)
			}

			// A configuration that does not compile.
			broken := w.commit("break CI", map[string]string{".gitlab-ci.yml": "build:\n  script: [make]\n  when: sometimes\n"})
			push(broken, "d-2")
			if s := next(broken, "invalid CI configuration"); s.State != tc.failed || !strings.Contains(s.Description, ".gitlab-ci.yml:3") {
				t.Errorf("status of the broken commit = %+v, want %s naming .gitlab-ci.yml:3", s, tc.failed)
			}
		})
	}
}
