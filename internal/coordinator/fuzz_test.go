package coordinator

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/api"
)

// serve runs one request through the handler in process (fuzzing needs
// speed more than a socket) and fails on a 5xx.
func serve(t *testing.T, e *env, req *http.Request) *httptest.ResponseRecorder {
	t.Helper()
	rec := httptest.NewRecorder()
	e.c.Handler().ServeHTTP(rec, req)
	if rec.Code >= 500 {
		t.Fatalf("%s %s = %d %s", req.Method, req.URL, rec.Code, rec.Body)
	}
	return rec
}

func FuzzSubmitJob(f *testing.F) {
	e := newEnv(f, nil)
	for _, s := range []string{
		`{"name":"a","script":["x"]}`,
		`{"name":"a","project":"g/p","stage":"s","script":["x"],"after_script":["y"],"variables":[{"key":"K","value":"12345678","masked":true,"file":true,"public":false,"raw":true}],"tags":["t"],"timeout":5,"image":"i","services":["s"],"git":{"repo_url":"u","ref":"r","sha":"abcdef0","depth":3}}`,
		`{"name":"a","script":"x"}`, `{"tag_list":"a,b"}`, `[]`, `null`, `{"name":"\u0000","script":[""]}`, `{"timeout":1e30}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req := httptest.NewRequest("POST", "/api/v1/jobs", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+e.c.AdminToken())
		rec := serve(t, e, req)
		if rec.Code != http.StatusCreated && rec.Code != http.StatusBadRequest && rec.Code != http.StatusRequestEntityTooLarge {
			t.Fatalf("POST /api/v1/jobs = %d", rec.Code)
		}
		// The admin runner endpoint shares the decoder.
		req = httptest.NewRequest("POST", "/api/v1/runners", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+e.c.AdminToken())
		serve(t, e, req)
	})
}

func FuzzJobRequest(f *testing.F) {
	e := newEnv(f, func(c *Config) { c.LongPollTimeout = time.Millisecond })
	_, tok := e.runner(map[string]any{"tag_list": []string{"a"}})
	e.submit(map[string]any{"tags": []string{"a"}, "image": "alpine"})
	for _, s := range []string{
		fmt.Sprintf(`{"token":%q,"system_id":"s_1","info":{"features":{"image":true}}}`, tok),
		fmt.Sprintf(`{"token":%q,"last_update":"x"}`, tok),
		`{"token":"glrt-x"}`, `{"info":{"features":{"image":"yes"}}}`, `{"session":{"url":1}}`, `{`, ``,
	} {
		f.Add([]byte(s), true)
	}
	f.Fuzz(func(t *testing.T, body []byte, header bool) {
		req := httptest.NewRequest("POST", "/api/v4/jobs/request", bytes.NewReader(body))
		if header {
			req.Header.Set(hdrRunnerToken, tok)
		}
		rec := serve(t, e, req)
		switch rec.Code {
		case http.StatusCreated, http.StatusNoContent, http.StatusForbidden, http.StatusBadRequest, http.StatusRequestEntityTooLarge:
		default:
			t.Fatalf("jobs/request = %d", rec.Code)
		}
	})
}

func FuzzUpdateJob(f *testing.F) {
	e := newEnv(f, nil)
	_, tok := e.runner(nil)
	// Plenty of running jobs, so the fuzzer does not finish them all at once.
	var jobs []*api.JobResponse
	for range 20 {
		e.submit(nil)
		jobs = append(jobs, e.take(tok))
	}
	for _, s := range []string{
		`{"state":"running"}`, `{"state":"success","output":{"checksum":"crc32:00000000","bytesize":0}}`,
		`{"state":"failed","failure_reason":"script_failure","exit_code":1}`, `{"state":"failed","exit_code":"x"}`,
		`{"state":7}`, `{"token":"glcbt-x","state":"running"}`, `nope`,
	} {
		f.Add([]byte(s), uint8(0), "0-4", []byte("hello"))
	}
	f.Fuzz(func(t *testing.T, body []byte, which uint8, contentRange string, trace []byte) {
		j := jobs[int(which)%len(jobs)]
		req := httptest.NewRequest("PATCH", fmt.Sprintf("/api/v4/jobs/%d/trace", j.ID), bytes.NewReader(trace))
		req.Header.Set(hdrJobToken, j.Token)
		req.Header.Set("Content-Range", contentRange)
		serve(t, e, req)

		req = httptest.NewRequest("PUT", fmt.Sprintf("/api/v4/jobs/%d", j.ID), bytes.NewReader(body))
		req.Header.Set(hdrJobToken, j.Token)
		rec := serve(t, e, req)
		switch rec.Code {
		case http.StatusOK, http.StatusForbidden, http.StatusBadRequest, http.StatusPreconditionFailed, http.StatusRequestEntityTooLarge:
		default:
			t.Fatalf("PUT = %d", rec.Code)
		}
	})
}
