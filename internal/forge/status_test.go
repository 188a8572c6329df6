package forge

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// seen is one request a forge stand-in received.
type seen struct {
	Method, Path, RawPath string
	Header                http.Header
	Body                  map[string]any
}

// standIn starts an httptest server standing in for a forge's status API.
// Every request is recorded on the returned channel, then answered by
// reply (nil: 201).
func standIn(t *testing.T, reply func(w http.ResponseWriter, r *http.Request)) (*httptest.Server, chan seen) {
	t.Helper()
	got := make(chan seen, 100)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var body map[string]any
		_ = json.Unmarshal(b, &body)
		got <- seen{r.Method, r.URL.Path, r.URL.EscapedPath(), r.Header.Clone(), body}
		if reply != nil {
			reply(w, r)
			return
		}
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"id":1}`)
	}))
	t.Cleanup(srv.Close)
	return srv, got
}

func TestStatusClientPost(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		forge      Forge
		path       string // repo path
		apiSuffix  string // appended to the stand-in's URL as the Repo's APIURL
		state      PipelineStatus
		wantPath   string
		wantHeader map[string]string
		wantBody   map[string]any
	}{{
		name: "gitea", forge: Gitea, path: "o/r", apiSuffix: "/", state: StatusFailed,
		wantPath:   "/api/v1/repos/o/r/statuses/" + sha1,
		wantHeader: map[string]string{"Authorization": "token tok", "Content-Type": "application/json", "User-Agent": "drover"},
		wantBody: map[string]any{"state": "failure", "context": "drover/pipeline",
			"target_url": "https://ci.example.com/p/1", "description": "Pipeline #1 failed"},
	}, {
		name: "forgejo under a sub-path", forge: Gitea, path: "o/r", apiSuffix: "/git", state: StatusSkipped,
		wantPath:   "/git/api/v1/repos/o/r/statuses/" + sha1,
		wantHeader: map[string]string{"Authorization": "token tok"},
		wantBody: map[string]any{"state": "warning", "context": "drover/pipeline",
			"target_url": "https://ci.example.com/p/1", "description": "Pipeline #1 failed"},
	}, {
		name: "github", forge: GitHub, path: "octo/hello-world", state: StatusRunning,
		wantPath: "/repos/octo/hello-world/statuses/" + sha1,
		wantHeader: map[string]string{"Authorization": "Bearer tok", "Accept": "application/vnd.github+json",
			"X-Github-Api-Version": "2022-11-28"},
		wantBody: map[string]any{"state": "pending", "context": "drover/pipeline",
			"target_url": "https://ci.example.com/p/1", "description": "Pipeline #1 failed"},
	}, {
		name: "gitlab by path", forge: GitLab, path: "group/sub/proj", state: StatusCanceled,
		wantPath:   "/api/v4/projects/group%2Fsub%2Fproj/statuses/" + sha1,
		wantHeader: map[string]string{"Private-Token": "tok", "Authorization": ""},
		wantBody: map[string]any{"state": "canceled", "name": "drover/pipeline", "ref": "main",
			"target_url": "https://ci.example.com/p/1", "description": "Pipeline #1 failed"},
	}, {
		name: "gitlab by id", forge: GitLab, path: "42", state: StatusManual,
		wantPath:   "/api/v4/projects/42/statuses/" + sha1,
		wantHeader: map[string]string{"Private-Token": "tok"},
		wantBody: map[string]any{"state": "pending", "name": "drover/pipeline", "ref": "main",
			"target_url": "https://ci.example.com/p/1", "description": "Pipeline #1 failed"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv, got := standIn(t, nil)
			c := &StatusClient{HTTP: srv.Client()}
			err := c.Post(t.Context(), Status{
				Repo: Repo{Forge: tc.forge, APIURL: srv.URL + tc.apiSuffix, Path: tc.path, Token: "tok"},
				SHA:  sha1, State: tc.state, Context: "drover/pipeline", Ref: "main",
				TargetURL: "https://ci.example.com/p/1", Description: "Pipeline #1 failed",
			})
			if err != nil {
				t.Fatalf("Post = %v, want nil", err)
			}
			r := <-got
			if r.Method != http.MethodPost || r.RawPath != tc.wantPath {
				t.Errorf("request = %s %s, want POST %s", r.Method, r.RawPath, tc.wantPath)
			}
			for k, v := range tc.wantHeader {
				if g := r.Header.Get(k); g != v {
					t.Errorf("header %s = %q, want %q", k, g, v)
				}
			}
			if d := cmp.Diff(tc.wantBody, r.Body); d != "" {
				t.Errorf("body (-want +got):\n%s", d)
			}
		})
	}
}

func TestStatusClientDefaults(t *testing.T) {
	t.Parallel()
	srv, got := standIn(t, nil)
	c := &StatusClient{HTTP: srv.Client(), UserAgent: "drover/1.2"}
	long := strings.Repeat("é", 300)
	if err := c.Post(t.Context(), Status{Repo: Repo{Forge: GitHub, APIURL: srv.URL, Path: "o/r"}, SHA: sha1,
		State: StatusSuccess, Description: long}); err != nil {
		t.Fatal(err)
	}
	r := <-got
	if r.Body["context"] != DefaultContext {
		t.Errorf("context = %v, want %q", r.Body["context"], DefaultContext)
	}
	if d := r.Body["description"].(string); len([]rune(d)) != 140 || !strings.HasSuffix(d, "…") {
		t.Errorf("description has %d runes, want 140 ending in …", len([]rune(d)))
	}
	if _, ok := r.Body["target_url"]; ok {
		t.Error("empty target_url was sent")
	}
	if ua := r.Header.Get("User-Agent"); ua != "drover/1.2" {
		t.Errorf("User-Agent = %q", ua)
	}
}

func TestStatusClientErrors(t *testing.T) {
	t.Parallel()
	srv, _ := standIn(t, func(w http.ResponseWriter, r *http.Request) {
		switch {
		case strings.Contains(r.URL.Path, "/gone/"):
			w.WriteHeader(http.StatusNotFound)
			_, _ = io.WriteString(w, `{"message":"Not Found"}`)
		case strings.Contains(r.URL.Path, "/busy/"):
			w.Header().Set("Retry-After", "7")
			w.WriteHeader(http.StatusTooManyRequests)
		default:
			w.WriteHeader(http.StatusBadGateway)
		}
	})
	c := &StatusClient{HTTP: srv.Client()}
	post := func(f Forge, api, path, sha string, st PipelineStatus) error {
		return c.Post(t.Context(), Status{Repo: Repo{Forge: f, APIURL: api, Path: path, Token: "secret-token"}, SHA: sha, State: st})
	}
	for _, tc := range []struct {
		name      string
		err       error
		code      int
		retryable bool
		contains  []string
	}{
		{"404", post(Gitea, srv.URL, "o/gone", sha1, StatusSuccess), 404, false,
			[]string{"gitea", "/api/v1/repos/o/gone/statuses/" + sha1, "404", "Not Found"}},
		{"429", post(GitHub, srv.URL, "o/busy", sha1, StatusSuccess), 429, true, []string{"github", "429"}},
		{"502", post(GitLab, srv.URL, "g/p", sha1, StatusSuccess), 502, true, []string{"gitlab", "/api/v4/projects/g%2Fp/statuses/", "502"}},
		{"transport", post(Gitea, "http://127.0.0.1:1", "o/r", sha1, StatusSuccess), 0, true, []string{"gitea", "/api/v1/repos/o/r/statuses/"}},
	} {
		var se *StatusError
		if !errors.As(tc.err, &se) {
			t.Errorf("%s: error %v is not a *StatusError", tc.name, tc.err)
			continue
		}
		if se.Code != tc.code || se.Retryable() != tc.retryable || IsRetryable(tc.err) != tc.retryable {
			t.Errorf("%s: code %d retryable %v, want %d %v", tc.name, se.Code, se.Retryable(), tc.code, tc.retryable)
		}
		for _, s := range tc.contains {
			if !strings.Contains(tc.err.Error(), s) {
				t.Errorf("%s: error %q does not say %q", tc.name, tc.err, s)
			}
		}
		if strings.Contains(tc.err.Error(), "secret-token") {
			t.Errorf("%s: error %q shows the token", tc.name, tc.err)
		}
	}
	var se *StatusError
	if err := post(GitHub, srv.URL, "o/busy", sha1, StatusSuccess); !errors.As(err, &se) || se.RetryAfter != 7*time.Second {
		t.Errorf("429 RetryAfter: %v", err)
	}
	// Statuses that cannot be posted at all fail before any request.
	for _, err := range []error{
		post(Gitea, srv.URL, "o/r", sha1, "exploded"),
		post(Gitea, srv.URL, "no-slash", sha1, StatusSuccess),
		post(GitHub, srv.URL, "o/r/x", sha1, StatusSuccess),
		post(GitLab, srv.URL, "", sha1, StatusSuccess),
		post(Gitea, srv.URL, "o/r", "main", StatusSuccess),
		post(Gitea, "", "o/r", sha1, StatusSuccess),
		post(Generic, srv.URL, "o/r", sha1, StatusSuccess),
	} {
		if err == nil || IsRetryable(err) {
			t.Errorf("Post = %v, want a non-retryable error", err)
		}
	}
}

func TestStateMapping(t *testing.T) {
	t.Parallel()
	valid := map[Forge][]string{
		Gitea:  {"pending", "success", "error", "failure", "warning"},
		GitHub: {"pending", "success", "error", "failure"},
		GitLab: {"pending", "running", "success", "failed", "canceled", "skipped"},
	}
	all := []PipelineStatus{StatusCreated, StatusPending, StatusRunning, StatusSuccess, StatusFailed,
		StatusCanceled, StatusSkipped, StatusManual, StatusScheduled}
	for f, states := range valid {
		for _, s := range all {
			got, ok := s.State(f)
			if !ok || !strings.Contains(" "+strings.Join(states, " ")+" ", " "+got+" ") {
				t.Errorf("%s.State(%s) = %q, %v: not one of %v", s, f, got, ok, states)
			}
		}
		if st, _ := StatusSuccess.State(f); st != "success" {
			t.Errorf("success on %s = %q", f, st)
		}
		if st, _ := StatusFailed.State(f); st != map[Forge]string{Gitea: "failure", GitHub: "failure", GitLab: "failed"}[f] {
			t.Errorf("failed on %s = %q", f, st)
		}
	}
	if _, ok := PipelineStatus("nope").State(GitHub); ok {
		t.Error("unknown status maps")
	}
}
