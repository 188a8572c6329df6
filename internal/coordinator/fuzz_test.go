package coordinator

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/clock"
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
		// image and services as objects.
		`{"name":"a","script":["x"],"image":{"name":"i","entrypoint":["sh","-c"],"pull_policy":["always","never"],"docker":{"user":1000}},` +
			`"services":["s",{"name":"t","alias":"a b,c","command":["c"],"entrypoint":[""],"variables":[{"key":"K","value":"v"}],"pull_policy":"if-not-present"}]}`,
		`{"name":"a","script":["x"],"image":{"name":"i","docker":{"user":"u:g"}},"services":[{"name":"t","alias":"a;b"}]}`,
		`{"name":"a","script":["x"],"image":{"name":"","pull_policy":""},"services":[null,{"variables":[null]}]}`,
		`{"name":"a","script":["x"],"image":{"name":"i","docker":{"user":-1e999,"x":1}},"services":[{"name":"t","variables":[{"key":"K","value":1}]}]}`,
		`{"name":"a","script":["x"],"image":[],"services":{}}`,
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
	e.submit(map[string]any{"tags": []string{"a"},
		"image":    map[string]any{"name": "alpine", "entrypoint": []string{""}, "pull_policy": "never", "docker": map[string]any{"user": 0}},
		"services": []any{"redis", map[string]any{"name": "pg", "alias": "db", "variables": []map[string]string{{"key": "K", "value": "v"}}}},
	})
	for _, s := range []string{
		fmt.Sprintf(`{"token":%q,"system_id":"s_1","info":{"features":{"image":true}}}`, tok),
		fmt.Sprintf(`{"token":%q,"system_id":"s_1","info":{"features":{"image":true,"services":true}}}`, tok),
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

// FuzzProvisioning throws bodies at runner_provisioning (and the same
// words as PUT states) for jobs in every stage of the two-phase start:
// never a 5xx, never an answer outside the contract.
func FuzzProvisioning(f *testing.F) {
	fc := clock.NewFake(fakeStart)
	e := newEnv(f, func(c *Config) { c.Clock = fc; c.MaxProvisioningRetries = 1000 })
	_, tok := e.runner(nil)
	var jobs []*api.JobResponse
	for range 20 {
		e.submit(nil)
	}
	for i := range 20 {
		jobs = append(jobs, e.takeAs(tok, fmt.Sprintf("s_%d", i%3)))
	}
	for _, s := range []string{
		`{"status":"pending"}`, `{"status":"accepted","reason":"ready"}`, `{"status":"declined","reason":"no capacity"}`,
		`{"status":"pending","reason":"` + strings.Repeat("x", 2000) + `"}`, `{"status":"PENDING"}`, `{"status":null}`,
		`{"status":["accepted"]}`, `{}`, `[]`, `null`, `{"status":"accepted"} x`, ``, `{`,
	} {
		f.Add([]byte(s), uint8(0), uint8(0))
	}
	f.Fuzz(func(t *testing.T, body []byte, which, how uint8) {
		j := jobs[int(which)%len(jobs)]
		token := j.Token
		switch how % 4 {
		case 1:
			token = "glcbt-not-a-token"
		case 2:
			// Refill: hand a queued job out again so the fuzzer keeps finding waiting jobs.
			req := httptest.NewRequest("POST", "/api/v4/jobs/request", strings.NewReader(fmt.Sprintf(
				`{"token":%q,"system_id":"s_fuzz","info":{"features":{"two_phase_job_commit":true}}}`, tok)))
			if rec := serve(t, e, req); rec.Code == http.StatusCreated {
				var jr api.JobResponse
				if err := json.Unmarshal(rec.Body.Bytes(), &jr); err == nil {
					for i := range jobs {
						if jobs[i].ID == jr.ID {
							jobs[i] = &jr
						}
					}
				}
			}
		case 3:
			fc.Advance(DefaultAckTimeout / 2)
			e.c.reapOnce(t.Context())
		}
		req := httptest.NewRequest("POST", fmt.Sprintf("/api/v4/jobs/%d/runner_provisioning", j.ID), bytes.NewReader(body))
		req.Header.Set(hdrJobToken, token)
		rec := serve(t, e, req)
		switch rec.Code {
		case http.StatusOK, http.StatusBadRequest, http.StatusForbidden, http.StatusConflict, http.StatusRequestEntityTooLarge:
		default:
			t.Fatalf("runner_provisioning = %d %s", rec.Code, rec.Body)
		}
		if (rec.Code == http.StatusOK || rec.Code == http.StatusConflict) && rec.Header().Get(hdrJobStatus) == "" {
			t.Fatalf("runner_provisioning = %d without Job-Status", rec.Code)
		}
		// The same words as PUT states.
		var p api.ProvisioningRequest
		if json.Unmarshal(body, &p) == nil {
			state := map[string]string{"pending": "pending", "accepted": "running"}[p.Status]
			if state != "" {
				req := httptest.NewRequest("PUT", fmt.Sprintf("/api/v4/jobs/%d", j.ID), strings.NewReader(`{"state":"`+state+`"}`))
				req.Header.Set(hdrJobToken, token)
				switch rec := serve(t, e, req); rec.Code {
				case http.StatusOK, http.StatusForbidden, http.StatusConflict:
				default:
					t.Fatalf("PUT %s = %d", state, rec.Code)
				}
			}
		}
	})
}
