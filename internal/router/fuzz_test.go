package router

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// FuzzDownstreamBodies sends arbitrary bodies to every runner-facing
// endpoint of the router that decodes one: it must never panic nor answer
// 5xx for bad input.
func FuzzDownstreamBodies(f *testing.F) {
	for _, seed := range []string{
		`{"token":"glrt-x","info":{"features":{"two_phase_job_commit":true}}}`,
		`{"status":"pending"}`, `{"status":"declined","reason":"x"}`, `{"state":"running","token":"t"}`,
		`{`, `null`, `[]`, `{"info":{"features":1}}`, `{"last_update":12}`, "",
	} {
		f.Add(0, []byte(seed))
		f.Add(1, []byte(seed))
		f.Add(2, []byte(seed))
		f.Add(3, []byte(seed))
	}
	u := newFakeUpstream(f, time.Minute)
	r, err := New(context.Background(), testLogger(f), Config{Upstream: u.url(), UpstreamToken: u.routerToken(), DataDir: f.TempDir(), LongPollTimeout: 10 * time.Millisecond})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { r.Close() })
	h := r.Handler()
	paths := []struct{ method, path string }{
		{http.MethodPost, "/api/v4/jobs/request"},
		{http.MethodPost, "/api/v4/runners/verify"},
		{http.MethodPost, "/api/v4/jobs/1/runner_provisioning"},
		{http.MethodPut, "/api/v4/jobs/1"},
	}
	f.Fuzz(func(t *testing.T, which int, body []byte) {
		if which < 0 {
			which = -which
		}
		p := paths[which%len(paths)]
		req := httptest.NewRequest(p.method, p.path, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("RUNNER-TOKEN", "glrt-unknown")
		req.Header.Set("JOB-TOKEN", "glcbt-unknown")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code >= 500 {
			t.Errorf("%s %s with %q = %d", p.method, p.path, body, w.Code)
		}
	})
}
