package runnerapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/drover-ci/drover/internal/coordinator"
	"github.com/drover-ci/drover/internal/router"
)

// daemon is one server of the runner API under contract test: its base
// URL, admin token and the prefix of its metrics.
type daemon struct {
	name, url, admin, metricPrefix string
}

// server is a daemon under test: its handler, its Run loop and Close.
type server interface {
	Handler() http.Handler
	Run(ctx context.Context) error
	Close() error
}

// serve serves d on loopback, runs it, and stops both at the end of t.
func serve(t *testing.T, d server) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); d.Run(ctx) }()
	srv := httptest.NewServer(d.Handler())
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
		cancel()
		<-done
		d.Close()
	})
	return srv.URL
}

// startCoordinator serves a coordinator, on SQLite in a temporary
// directory.
func startCoordinator(t *testing.T) daemon {
	t.Helper()
	c, err := coordinator.New(t.Context(), nil, coordinator.Config{DataDir: t.TempDir()})
	if err != nil {
		t.Fatalf("coordinator.New = %v", err)
	}
	return daemon{name: "coordinator", url: serve(t, c), admin: c.AdminToken(), metricPrefix: "drover_coordinator_"}
}

// startRouter serves a router in front of up, with a runner token up
// issued.
func startRouter(t *testing.T, up daemon) daemon {
	t.Helper()
	tok := createRunner(t, up)
	r, err := router.New(t.Context(), nil, router.Config{DataDir: t.TempDir(), Upstream: up.url, UpstreamToken: tok})
	if err != nil {
		t.Fatalf("router.New = %v", err)
	}
	return daemon{name: "router", url: serve(t, r), admin: r.AdminToken(), metricPrefix: "drover_router_"}
}

type answer struct {
	code   int
	header http.Header
	body   []byte
}

func (d daemon) call(t *testing.T, method, path string, header map[string]string, body string) answer {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, d.url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return answer{resp.StatusCode, resp.Header, b}
}

func (d daemon) bearer() map[string]string {
	return map[string]string{"Authorization": "Bearer " + d.admin}
}

func createRunner(t *testing.T, d daemon) string {
	t.Helper()
	a := d.call(t, "POST", "/api/v1/runners", d.bearer(), `{"description":"contract"}`)
	var out struct {
		Token string `json:"token"`
	}
	if a.code != http.StatusCreated || json.Unmarshal(a.body, &out) != nil || out.Token == "" {
		t.Fatalf("%s: create runner: %d %s", d.name, a.code, a.body)
	}
	return out.Token
}

// TestContract runs one table of requests against the coordinator and
// the router: the status codes, error fields and headers a runner or an
// admin sees are the same from both.
func TestContract(t *testing.T) {
	t.Parallel()
	c := startCoordinator(t)
	daemons := []daemon{c, startRouter(t, c)}
	// admin is the header of an admin call.
	admin := map[string]string{"Authorization": "Bearer {admin}"}
	big := `{"token":"` + strings.Repeat("x", 1<<20) + `"}`
	type step struct {
		method, path string
		// header, body and substr may use {admin}, {token} and
		// {prefix}: the daemon's admin token, a runner token it issued
		// for this case and the prefix of its metrics.
		header map[string]string
		body   string
		code   int
		field  string            // the error's field, when an APIError
		has    map[string]string // headers the answer carries ("" = any value)
		substr string            // the body contains this
	}
	cases := []struct {
		name  string
		steps []step
	}{
		{"live", []step{{method: "GET", path: "/health/live", code: 200, substr: "ok"}}},
		{"metrics", []step{{method: "GET", path: "/health/live", code: 200},
			{method: "GET", path: "/metrics", code: 200, substr: "{prefix}api_requests_total{code=\"201\",endpoint=\"POST /api/v1/runners\"}"}}},
		{"admin without token", []step{{method: "GET", path: "/api/v1/runners", code: 401, has: map[string]string{"WWW-Authenticate": `Bearer realm="drover"`}}}},
		{"admin wrong token", []step{{method: "GET", path: "/api/v1/runners", header: map[string]string{"Authorization": "Bearer nope"}, code: 403}}},
		{"create: tags as a string", []step{{method: "POST", path: "/api/v1/runners", header: admin, body: `{"description":"d","tag_list":"a, b,a"}`, code: 201, substr: `"token":"glrt-`}}},
		{"create: bad tag_list", []step{{method: "POST", path: "/api/v1/runners", header: admin, body: `{"tag_list":5}`, code: 400, field: "tag_list"}}},
		{"create: unknown field", []step{{method: "POST", path: "/api/v1/runners", header: admin, body: `{"nope":1}`, code: 400, field: "nope"}}},
		{"create: negative maximum_timeout", []step{{method: "POST", path: "/api/v1/runners", header: admin, body: `{"maximum_timeout":-1}`, code: 400, field: "maximum_timeout"}}},
		{"create: tag with a comma", []step{{method: "POST", path: "/api/v1/runners", header: admin, body: `{"tag_list":["a,b"]}`, code: 400, field: "tag_list"}}},
		{"get unknown runner", []step{{method: "GET", path: "/api/v1/runners/999999", header: admin, code: 404, field: "id"}}},
		{"get runner, bad id", []step{{method: "GET", path: "/api/v1/runners/abc", header: admin, code: 404, field: "id"}}},
		{"delete unknown runner", []step{{method: "DELETE", path: "/api/v1/runners/999999", header: admin, code: 404, field: "id"}}},
		{"list runners", []step{{method: "GET", path: "/api/v1/runners", header: admin, code: 200, has: map[string]string{"Content-Type": "application/json"}, substr: `"managers":[`}}},
		{"verify without token", []step{{method: "POST", path: "/api/v4/runners/verify", body: `{}`, code: 403, field: "token"}}},
		{"verify unknown token", []step{{method: "POST", path: "/api/v4/runners/verify", body: `{"token":"glrt-nope"}`, code: 403, field: "token"}}},
		{"verify", []step{{method: "POST", path: "/api/v4/runners/verify", body: `{"token":"{token}","system_id":"s_contract"}`, code: 200, substr: `"token":"glrt-`}}},
		{"verify, token in the header", []step{{method: "POST", path: "/api/v4/runners/verify", header: map[string]string{"RUNNER-TOKEN": "{token}"}, body: `{}`, code: 200}}},
		{"verify: system_id too long", []step{{method: "POST", path: "/api/v4/runners/verify", body: `{"token":"{token}","system_id":"` + strings.Repeat("s", 65) + `"}`, code: 400, field: "system_id"}}},
		{"verify: info at its limits", []step{{method: "POST", path: "/api/v4/runners/verify", body: `{"token":"{token}","info":{"version":"` + strings.Repeat("1", 2048) + `","platform":"` + strings.Repeat("é", 255) + `"}}`, code: 200}}},
		{"verify: info.version too long", []step{{method: "POST", path: "/api/v4/runners/verify", body: `{"token":"{token}","info":{"version":"` + strings.Repeat("1", 2049) + `"}}`, code: 400, field: "info.version"}}},
		{"verify: info.name too long", []step{{method: "POST", path: "/api/v4/runners/verify", body: `{"token":"{token}","info":{"name":"` + strings.Repeat("n", 256) + `"}}`, code: 400, field: "info.name"}}},
		{"jobs/request: info.platform with a control character", []step{{method: "POST", path: "/api/v4/jobs/request", body: `{"token":"{token}","info":{"platform":"linux\u001b[31m"}}`, code: 400, field: "info.platform"}}},
		{"jobs/request: info.architecture with a bidi override", []step{{method: "POST", path: "/api/v4/jobs/request", body: `{"token":"{token}","info":{"architecture":"amd\u202e64"}}`, code: 400, field: "info.architecture"}}},
		{"update job: info.executor with a newline", []step{{method: "PUT", path: "/api/v4/jobs/999999", body: `{"token":"glcbt-nope","state":"running","info":{"executor":"shell\nforged log line"}}`, code: 400, field: "info.executor"}}},
		{"verify: malformed JSON", []step{{method: "POST", path: "/api/v4/runners/verify", body: `{"token":`, code: 400}}},
		{"verify: body over the limit", []step{{method: "POST", path: "/api/v4/runners/verify", body: big, code: 413}}},
		{"jobs/request, none", []step{{method: "POST", path: "/api/v4/jobs/request", body: `{"token":"{token}","system_id":"s_contract"}`, code: 204, has: map[string]string{"X-GitLab-Last-Update": ""}}}},
		{"jobs/request, unknown token", []step{{method: "POST", path: "/api/v4/jobs/request", body: `{"token":"glrt-nope"}`, code: 403, field: "token"}}},
		{"jobs/request: system_id with control characters", []step{{method: "POST", path: "/api/v4/jobs/request", body: `{"token":"{token}","system_id":"a\u0001"}`, code: 400, field: "system_id"}}},
		{"unregister manager without system_id", []step{{method: "DELETE", path: "/api/v4/runners/managers", body: `{"token":"{token}"}`, code: 400, field: "system_id"}}},
		{"unregister manager", []step{
			{method: "POST", path: "/api/v4/runners/verify", body: `{"token":"{token}","system_id":"s_gone"}`, code: 200},
			{method: "DELETE", path: "/api/v4/runners/managers", body: `{"token":"{token}","system_id":"s_gone"}`, code: 204},
		}},
		{"legacy registration, wrong token", []step{{method: "POST", path: "/api/v4/runners", body: `{"token":"GR1348941nope"}`, code: 403, field: "token"}}},
		{"reset token", []step{
			{method: "POST", path: "/api/v4/runners/reset_authentication_token", body: `{"token":"{token}"}`, code: 201, substr: `"token":"glrt-`},
			{method: "POST", path: "/api/v4/runners/verify", body: `{"token":"{token}"}`, code: 403, field: "token"},
		}},
		{"unregister", []step{
			{method: "DELETE", path: "/api/v4/runners", body: `{"token":"{token}"}`, code: 204},
			{method: "POST", path: "/api/v4/runners/verify", body: `{"token":"{token}"}`, code: 403, field: "token"},
		}},
		{"update unknown job", []step{{method: "PUT", path: "/api/v4/jobs/999999", body: `{"token":"glcbt-nope","state":"running"}`, code: 404, field: "id"}}},
		{"upload artifacts, unknown job", []step{{method: "POST", path: "/api/v4/jobs/999999/artifacts", header: map[string]string{"JOB-TOKEN": "glcbt-nope"}, code: 404, field: "id"}}},
		{"download artifacts without credentials", []step{{method: "GET", path: "/api/v4/jobs/999999/artifacts", code: 401, field: "token", has: map[string]string{"WWW-Authenticate": `Bearer realm="drover"`}}}},
		{"download artifacts, unknown job token", []step{{method: "GET", path: "/api/v4/jobs/1/artifacts", header: map[string]string{"JOB-TOKEN": "glcbt-nope"}, code: 403, field: "token"}}},
	}
	for _, d := range daemons {
		t.Run(d.name, func(t *testing.T) {
			for _, tc := range cases {
				t.Run(tc.name, func(t *testing.T) {
					tok := createRunner(t, d)
					fill := func(s string) string {
						return strings.NewReplacer("{token}", tok, "{admin}", d.admin, "{prefix}", d.metricPrefix).Replace(s)
					}
					for i, s := range tc.steps {
						hdr := map[string]string{}
						for k, v := range s.header {
							hdr[k] = fill(v)
						}
						a := d.call(t, s.method, s.path, hdr, fill(s.body))
						if a.code != s.code {
							t.Fatalf("step %d: %s %s = %d, want %d; body %s", i, s.method, s.path, a.code, s.code, a.body)
						}
						for k, v := range s.has {
							if got := a.header.Get(k); got == "" || (v != "" && !strings.HasPrefix(got, v)) {
								t.Errorf("step %d: header %s = %q, want %q", i, k, got, v)
							}
						}
						if sub := fill(s.substr); sub != "" && !bytes.Contains(a.body, []byte(sub)) {
							t.Errorf("step %d: body lacks %s:\n%s", i, sub, a.body)
						}
						if s.code >= 400 && s.code != 413 {
							var e struct {
								Error string `json:"error"`
								Field string `json:"field"`
							}
							if err := json.Unmarshal(a.body, &e); err != nil || e.Error == "" {
								t.Errorf("step %d: error body %q is not an APIError", i, a.body)
							}
							if e.Field != s.field {
								t.Errorf("step %d: error field %q, want %q (%s)", i, e.Field, s.field, e.Error)
							}
						}
					}
				})
			}
		})
	}
}
