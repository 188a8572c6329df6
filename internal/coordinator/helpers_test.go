package coordinator

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/api"
)

// env is a coordinator served over real loopback HTTP, on real SQLite in a
// temporary directory.
type env struct {
	t   testing.TB
	c   *Coordinator
	srv *httptest.Server
	dir string
	// errorLogs counts the coordinator's log records at level ERROR.
	errorLogs *atomic.Int64
}

func newEnv(t testing.TB, mod func(*Config)) *env {
	t.Helper()
	dir := t.TempDir()
	return openEnv(t, dir, mod)
}

func openEnv(t testing.TB, dir string, mod func(*Config)) *env {
	t.Helper()
	cfg := Config{DataDir: dir, LongPollTimeout: 2 * time.Second}
	if mod != nil {
		mod(&cfg)
	}
	logger := slog.New(slog.DiscardHandler)
	if verboseNotJSON() {
		logger = slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	errs := new(atomic.Int64)
	logger = slog.New(errorCounter{logger.Handler(), errs})
	c, err := New(t.Context(), logger, cfg)
	if err != nil {
		t.Fatalf("New = %v", err)
	}
	e := &env{t: t, c: c, srv: httptest.NewServer(c.Handler()), dir: dir, errorLogs: errs}
	t.Cleanup(e.close)
	return e
}

func (e *env) close() {
	if e.srv != nil {
		e.srv.CloseClientConnections()
		e.srv.Close()
		e.srv = nil
		e.c.Close()
	}
}

// errorCounter passes records on and counts those at level ERROR.
type errorCounter struct {
	slog.Handler
	n *atomic.Int64
}

func (h errorCounter) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelError || h.Handler.Enabled(ctx, l)
}

func (h errorCounter) Handle(ctx context.Context, r slog.Record) error {
	if r.Level >= slog.LevelError {
		h.n.Add(1)
	}
	if !h.Handler.Enabled(ctx, r.Level) {
		return nil
	}
	return h.Handler.Handle(ctx, r)
}

func (h errorCounter) WithAttrs(as []slog.Attr) slog.Handler {
	return errorCounter{h.Handler.WithAttrs(as), h.n}
}

func (h errorCounter) WithGroup(g string) slog.Handler {
	return errorCounter{h.Handler.WithGroup(g), h.n}
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(b)))
	return len(b), nil
}

// do sends one request. body may be nil, a string / []byte (sent as is) or
// anything else (sent as JSON).
func (e *env) do(method, path string, hdr map[string]string, body any) (*http.Response, []byte) {
	e.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		js, err := json.Marshal(b)
		if err != nil {
			e.t.Fatal(err)
		}
		rd = bytes.NewReader(js)
	}
	req, err := http.NewRequest(method, e.srv.URL+path, rd)
	if err != nil {
		e.t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatalf("%s %s: read body: %v", method, path, err)
	}
	return resp, out
}

func (e *env) admin(method, path string, body any) (*http.Response, []byte) {
	e.t.Helper()
	return e.do(method, path, map[string]string{"Authorization": "Bearer " + e.c.AdminToken()}, body)
}

func (e *env) decode(b []byte, v any) {
	e.t.Helper()
	if err := json.Unmarshal(b, v); err != nil {
		e.t.Fatalf("decode %q: %v", b, err)
	}
}

// runner creates a runner through the admin API and returns its id and token.
func (e *env) runner(spec map[string]any) (int64, string) {
	e.t.Helper()
	resp, b := e.admin("POST", "/api/v1/runners", spec)
	if resp.StatusCode != http.StatusCreated {
		e.t.Fatalf("create runner = %d %s", resp.StatusCode, b)
	}
	var out struct {
		ID    int64  `json:"id"`
		Token string `json:"token"`
	}
	e.decode(b, &out)
	return out.ID, out.Token
}

// submit submits a job; spec gets name and script if it lacks them.
func (e *env) submit(spec map[string]any) jobView {
	e.t.Helper()
	if spec == nil {
		spec = map[string]any{}
	}
	if _, ok := spec["name"]; !ok {
		spec["name"] = "job"
	}
	if _, ok := spec["script"]; !ok {
		spec["script"] = []string{"echo hi"}
	}
	resp, b := e.admin("POST", "/api/v1/jobs", spec)
	if resp.StatusCode != http.StatusCreated {
		e.t.Fatalf("submit = %d %s", resp.StatusCode, b)
	}
	var j jobView
	e.decode(b, &j)
	return j
}

func (e *env) job(id int64) jobView {
	e.t.Helper()
	resp, b := e.admin("GET", fmt.Sprintf("/api/v1/jobs/%d", id), nil)
	if resp.StatusCode != http.StatusOK {
		e.t.Fatalf("get job = %d %s", resp.StatusCode, b)
	}
	var j jobView
	e.decode(b, &j)
	return j
}

// request is one jobs/request; it returns the response and, on 201, the
// payload.
func (e *env) request(token, lastUpdate string, f api.FeaturesInfo) (*http.Response, *api.JobResponse) {
	e.t.Helper()
	return e.postRequest(api.JobRequest{Token: token, SystemID: "s_test", LastUpdate: lastUpdate, Info: api.VersionInfo{Name: "gitlab-runner", Version: "19.4.0", Executor: "shell", Features: f}})
}

// postRequest sends req to jobs/request with its runner token; the job
// comes back only with a 201.
func (e *env) postRequest(req api.JobRequest) (*http.Response, *api.JobResponse) {
	e.t.Helper()
	resp, b := e.do("POST", "/api/v4/jobs/request", map[string]string{hdrRunnerToken: req.Token}, req)
	if resp.StatusCode != http.StatusCreated {
		return resp, nil
	}
	var jr api.JobResponse
	e.decode(b, &jr)
	return resp, &jr
}

// take submits nothing; it claims the next job for token and fails if none.
func (e *env) take(token string) *api.JobResponse {
	e.t.Helper()
	resp, jr := e.request(token, "", api.FeaturesInfo{Image: true, Services: true})
	if resp.StatusCode != http.StatusCreated {
		e.t.Fatalf("jobs/request = %d, want 201", resp.StatusCode)
	}
	return jr
}

func (e *env) put(id int64, token string, req api.UpdateJobRequest) (*http.Response, []byte) {
	e.t.Helper()
	return e.do("PUT", fmt.Sprintf("/api/v4/jobs/%d", id), map[string]string{hdrJobToken: token}, req)
}

func (e *env) patch(id int64, token, contentRange string, body []byte) *http.Response {
	e.t.Helper()
	hdr := map[string]string{hdrJobToken: token, "Content-Type": "text/plain"}
	if contentRange != "" {
		hdr["Content-Range"] = contentRange
	}
	resp, _ := e.do("PATCH", fmt.Sprintf("/api/v4/jobs/%d/trace", id), hdr, body)
	return resp
}

func (e *env) trace(id int64) string {
	e.t.Helper()
	resp, b := e.admin("GET", fmt.Sprintf("/api/v1/jobs/%d/trace", id), nil)
	if resp.StatusCode != http.StatusOK {
		e.t.Fatalf("trace = %d", resp.StatusCode)
	}
	return string(b)
}

var fakeStart = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func contextWithCancel(t testing.TB) (context.Context, context.CancelFunc) {
	return context.WithCancel(t.Context())
}

func ptr[T any](v T) *T { return &v }

// verboseNotJSON reports go test -v. Under -json (-test.v=test2json,
// scripts/test.sh through scripts/testreport, which keeps only failing
// tests' output) the debug log stays off, as without -v: it would only
// make every test's output larger.
func verboseNotJSON() bool {
	f := flag.Lookup("test.v")
	return f != nil && f.Value.String() == "true"
}
