package coordinator

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/clock"
	"github.com/drover-ci/drover/internal/store"
	"github.com/google/go-cmp/cmp"
)

// multipartBody is a body as GitLab Runner uploads an artifact: one file
// field named field.
func multipartBody(t testing.TB, field, filename string, data []byte) (contentType string, body []byte) {
	t.Helper()
	var b bytes.Buffer
	mw := multipart.NewWriter(&b)
	fw, err := mw.CreateFormFile(field, filename)
	if err != nil {
		t.Fatal(err)
	}
	fw.Write(data)
	if err := mw.Close(); err != nil {
		t.Fatal(err)
	}
	return mw.FormDataContentType(), b.Bytes()
}

// upload posts data as job id's artifact with token; query is the query
// string ("" for none).
func (e *env) upload(id int64, token, query string, data []byte) (*http.Response, []byte) {
	e.t.Helper()
	ct, body := multipartBody(e.t, "file", "artifacts.zip", data)
	hdr := map[string]string{"Content-Type": ct}
	if token != "" {
		hdr[hdrJobToken] = token
	}
	path := fmt.Sprintf("/api/v4/jobs/%d/artifacts", id)
	if query != "" {
		path += "?" + query
	}
	return e.do("POST", path, hdr, body)
}

// download gets job id's artifacts through API v4 with hdr.
func (e *env) download(id int64, hdr map[string]string) (*http.Response, []byte) {
	e.t.Helper()
	return e.do("GET", fmt.Sprintf("/api/v4/jobs/%d/artifacts", id), hdr, nil)
}

// running submits spec and takes it with runner token tok: the job is
// running and the payload is returned.
func (e *env) running(tok string, spec map[string]any) *api.JobResponse {
	e.t.Helper()
	e.submit(spec)
	return e.take(tok)
}

// succeed finishes job jr with success.
func (e *env) succeed(jr *api.JobResponse) {
	e.t.Helper()
	if resp, b := e.put(jr.ID, jr.Token, api.UpdateJobRequest{Token: jr.Token, State: api.StateSuccess}); resp.StatusCode != http.StatusOK {
		e.t.Fatalf("PUT success = %d %s", resp.StatusCode, b)
	}
}

// artifactFiles lists the files in the artifacts directory.
func (e *env) artifactFiles() []string {
	e.t.Helper()
	ents, err := os.ReadDir(filepath.Join(e.dir, "artifacts"))
	if err != nil {
		e.t.Fatal(err)
	}
	out := []string{}
	for _, d := range ents {
		out = append(out, d.Name())
	}
	return out
}

// metric returns the line of /metrics starting with name, or "".
func (e *env) metric(name string) string {
	e.t.Helper()
	_, b := e.do("GET", "/metrics", nil, nil)
	for l := range strings.SplitSeq(string(b), "\n") {
		if strings.HasPrefix(l, name+" ") || strings.HasPrefix(l, name+"{") {
			return l
		}
	}
	return ""
}

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func TestArtifactsRoundTrip(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	_, tok := e.runner(nil)
	build := e.running(tok, map[string]any{"name": "build", "project": "g/p", "artifacts": map[string]any{"paths": []string{"bin/"}, "expire_in": "1 week"}})
	data := bytes.Repeat([]byte("artifact bytes "), 10000)
	resp, b := e.upload(build.ID, build.Token, "artifact_format=zip&artifact_type=archive", data)
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("upload = %d %s, want 201", resp.StatusCode, b)
	}
	var av artifactView
	e.decode(b, &av)
	if av.Size != int64(len(data)) || av.SHA256 != sha(data) || av.Filename != "artifacts.zip" || av.Type != "archive" || av.ExpireAt == nil {
		t.Errorf("upload answer = %+v, want size %d, sha256 %s, artifacts.zip, archive, an expiry", av, len(data), sha(data))
	}
	if got := resp.Header.Get(hdrJobStatus); got != "running" {
		t.Errorf("upload Job-Status = %q, want running", got)
	}
	// A report of the same job, kept beside the archive.
	junit := []byte("<testsuites/>")
	if resp, b := e.upload(build.ID, build.Token, "artifact_format=gzip&artifact_type=junit&expire_in=never", junit); resp.StatusCode != http.StatusCreated {
		t.Fatalf("upload junit = %d %s", resp.StatusCode, b)
	}
	e.succeed(build)

	test := e.running(tok, map[string]any{"name": "test", "project": "g/p", "dependencies": []any{"build"}})
	want := []api.Dependency{{ID: build.ID, Name: "build", Token: test.Token, ArtifactsFile: &api.ArtifactsFile{Filename: "artifacts.zip", Size: int64(len(data))}}}
	if d := cmp.Diff(want, test.Dependencies); d != "" {
		t.Errorf("payload dependencies (-want +got):\n%s", d)
	}
	resp, got := e.download(build.ID, map[string]string{hdrJobToken: test.Token})
	if resp.StatusCode != http.StatusOK || !bytes.Equal(got, data) {
		t.Fatalf("download by the dependent job = %d, %d bytes; want 200, the %d bytes uploaded", resp.StatusCode, len(got), len(data))
	}
	for h, want := range map[string]string{
		"Content-Type":        "application/zip",
		"Content-Disposition": `attachment; filename=artifacts.zip`,
		"X-Drover-Sha256":     sha(data),
		"Content-Length":      fmt.Sprint(len(data)),
	} {
		if got := resp.Header.Get(h); got != want {
			t.Errorf("download %s = %q, want %q", h, got, want)
		}
	}
	// The admin, through either API; v1 serves reports too.
	if resp, got := e.download(build.ID, map[string]string{"Authorization": "Bearer " + e.c.AdminToken()}); resp.StatusCode != http.StatusOK || !bytes.Equal(got, data) {
		t.Errorf("v4 download by the admin = %d, %d bytes", resp.StatusCode, len(got))
	}
	if resp, got := e.admin("GET", fmt.Sprintf("/api/v1/jobs/%d/artifacts", build.ID), nil); resp.StatusCode != http.StatusOK || !bytes.Equal(got, data) {
		t.Errorf("v1 download = %d, %d bytes", resp.StatusCode, len(got))
	}
	if resp, got := e.admin("GET", fmt.Sprintf("/api/v1/jobs/%d/artifacts?artifact_type=junit", build.ID), nil); resp.StatusCode != http.StatusOK || !bytes.Equal(got, junit) || resp.Header.Get("Content-Type") != "application/gzip" {
		t.Errorf("v1 download of junit = %d %q %q", resp.StatusCode, resp.Header.Get("Content-Type"), got)
	}
	// A range, as GitLab Runner's parallel download asks.
	resp, part := e.download(build.ID, map[string]string{hdrJobToken: test.Token, "Range": "bytes=15-29"})
	if resp.StatusCode != http.StatusPartialContent || !bytes.Equal(part, data[15:30]) {
		t.Errorf("ranged download = %d %q", resp.StatusCode, part)
	}
	if m := e.metric(metricPrefix + "artifacts_uploaded_bytes_total"); m != fmt.Sprintf("%sartifacts_uploaded_bytes_total %d", metricPrefix, len(data)+len(junit)) {
		t.Errorf("metric %q, want %d bytes", m, len(data)+len(junit))
	}
	if m := e.metric(metricPrefix + "artifacts_downloaded_bytes_total"); m != fmt.Sprintf("%sartifacts_downloaded_bytes_total %d", metricPrefix, 3*len(data)+len(junit)+15) {
		t.Errorf("metric %q, want %d bytes", m, 3*len(data)+len(junit)+15)
	}
}

// TestArtifactsWrittenOnce: as in GitLab, a job's artifact of a type is
// written once. The same bytes again (a retry whose answer was lost) is
// 201 with the first; other bytes are 400 "another artifact of the same
// type already exists", and the first stays, alone on disk. Another
// type is not in the way.
func TestArtifactsWrittenOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	_, tok := e.runner(nil)
	jr := e.running(tok, nil)
	first := []byte("first")
	if resp, b := e.upload(jr.ID, jr.Token, "", first); resp.StatusCode != http.StatusCreated {
		t.Fatalf("upload first = %d %s", resp.StatusCode, b)
	}
	resp, b := e.upload(jr.ID, jr.Token, "", first)
	var av artifactView
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("upload of the same bytes again = %d %s, want 201", resp.StatusCode, b)
	}
	if e.decode(b, &av); av.SHA256 != sha(first) {
		t.Errorf("upload of the same bytes again answered %+v, want the first", av)
	}
	resp, b = e.upload(jr.ID, jr.Token, "artifact_type=archive", []byte("second"))
	var msg struct{ Message, Error string }
	e.decode(b, &msg)
	if resp.StatusCode != http.StatusBadRequest || msg.Message != "another artifact of the same type already exists" || msg.Error != msg.Message {
		t.Errorf("upload of other bytes = %d %s, want 400 {message: another artifact of the same type already exists}", resp.StatusCode, b)
	}
	if got := resp.Header.Get(hdrJobStatus); got != "running" {
		t.Errorf("refused upload Job-Status = %q, want running", got)
	}
	if resp, b := e.upload(jr.ID, jr.Token, "artifact_type=junit&artifact_format=gzip", []byte("<testsuites/>")); resp.StatusCode != http.StatusCreated {
		t.Errorf("upload of another type = %d %s, want 201", resp.StatusCode, b)
	}
	if files := e.artifactFiles(); len(files) != 2 {
		t.Errorf("artifact files = %v, want two (the first archive, the junit)", files)
	}
	if resp, got := e.admin("GET", fmt.Sprintf("/api/v1/jobs/%d/artifacts", jr.ID), nil); resp.StatusCode != http.StatusOK || !bytes.Equal(got, first) {
		t.Errorf("download = %d %q, want the first upload", resp.StatusCode, got)
	}
}

func TestArtifactsAuth(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	_, tok := e.runner(nil)
	admin := "Bearer " + e.c.AdminToken()

	build := e.running(tok, map[string]any{"name": "build"})
	if resp, b := e.upload(build.ID, build.Token, "", []byte("zip")); resp.StatusCode != http.StatusCreated {
		t.Fatalf("upload = %d %s", resp.StatusCode, b)
	}
	other := e.running(tok, map[string]any{"name": "other"}) // running, depends on nothing
	e.succeed(build)
	dependent := e.running(tok, map[string]any{"name": "test", "dependencies": []any{build.ID}})
	finishedDep := e.running(tok, map[string]any{"name": "test2", "dependencies": []any{build.ID}})
	e.succeed(finishedDep)
	canceled := e.running(tok, map[string]any{"name": "canceled"})
	if resp, _ := e.admin("POST", fmt.Sprintf("/api/v1/jobs/%d/cancel", canceled.ID), nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("cancel = %d", resp.StatusCode)
	}
	if resp, _ := e.put(canceled.ID, canceled.Token, api.UpdateJobRequest{Token: canceled.Token, State: api.StateFailed}); resp.StatusCode != http.StatusOK {
		t.Fatalf("PUT after cancel = %d", resp.StatusCode)
	}
	empty := e.running(tok, map[string]any{"name": "empty"}) // no artifacts
	emptyDep := e.running(tok, map[string]any{"name": "nothing", "dependencies": []any{build.ID}})
	_ = emptyDep

	for _, tc := range []struct {
		name       string
		id         int64
		token      string
		wantCode   int
		wantStatus string // Job-Status
	}{
		{"own token of a running job", other.ID, other.Token, http.StatusCreated, "running"},
		{"another job's token", other.ID, dependent.Token, http.StatusForbidden, ""},
		{"no token", other.ID, "", http.StatusForbidden, ""},
		{"unknown token", other.ID, "glcbt-nope", http.StatusForbidden, ""},
		{"finished job's own token", build.ID, build.Token, http.StatusForbidden, "success"},
		{"canceled job's own token", canceled.ID, canceled.Token, http.StatusConflict, "canceled"},
		{"unknown job", 9999, other.Token, http.StatusNotFound, ""},
	} {
		t.Run("upload/"+tc.name, func(t *testing.T) {
			resp, b := e.upload(tc.id, tc.token, "", []byte("data"))
			if resp.StatusCode != tc.wantCode || resp.Header.Get(hdrJobStatus) != tc.wantStatus {
				t.Errorf("upload = %d (Job-Status %q) %s; want %d (%q)", resp.StatusCode, resp.Header.Get(hdrJobStatus), b, tc.wantCode, tc.wantStatus)
			}
		})
	}
	for _, tc := range []struct {
		name     string
		id       int64
		hdr      map[string]string
		wantCode int
	}{
		{"dependent running job", build.ID, map[string]string{hdrJobToken: dependent.Token}, http.StatusOK},
		{"admin", build.ID, map[string]string{"Authorization": admin}, http.StatusOK},
		{"no credentials", build.ID, nil, http.StatusUnauthorized},
		{"wrong admin token", build.ID, map[string]string{"Authorization": "Bearer nope"}, http.StatusForbidden},
		{"running job that does not depend on it", build.ID, map[string]string{hdrJobToken: other.Token}, http.StatusForbidden},
		{"the job's own token, finished", build.ID, map[string]string{hdrJobToken: build.Token}, http.StatusForbidden},
		{"finished dependent job", build.ID, map[string]string{hdrJobToken: finishedDep.Token}, http.StatusForbidden},
		{"unknown token", build.ID, map[string]string{hdrJobToken: "glcbt-nope"}, http.StatusForbidden},
		{"dependent, no artifact", empty.ID, map[string]string{"Authorization": admin}, http.StatusNotFound},
		{"unknown job, admin", 9999, map[string]string{"Authorization": admin}, http.StatusNotFound},
	} {
		t.Run("download/"+tc.name, func(t *testing.T) {
			resp, b := e.download(tc.id, tc.hdr)
			if resp.StatusCode != tc.wantCode {
				t.Errorf("download = %d %.200s; want %d", resp.StatusCode, b, tc.wantCode)
			}
		})
	}
	// A token of an earlier assignment: 409 with Job-Status, as PUT.
	t.Run("upload/retired token", func(t *testing.T) {
		e2 := newEnv(t, nil)
		_, tok := e2.runner(nil)
		e2.submit(nil)
		_, jr := e2.request(tok, "", api.FeaturesInfo{TwoPhaseJobCommit: true})
		if jr == nil {
			t.Fatal("no job")
		}
		if resp, b := e2.do("POST", fmt.Sprintf("/api/v4/jobs/%d/runner_provisioning", jr.ID), map[string]string{hdrJobToken: jr.Token}, api.ProvisioningRequest{Status: "declined"}); resp.StatusCode != http.StatusOK {
			t.Fatalf("decline = %d %s", resp.StatusCode, b)
		}
		resp, b := e2.upload(jr.ID, jr.Token, "", []byte("x"))
		if resp.StatusCode != http.StatusConflict || resp.Header.Get(hdrJobStatus) != "canceled" {
			t.Errorf("upload with a retired token = %d (Job-Status %q) %s; want 409 (canceled)", resp.StatusCode, resp.Header.Get(hdrJobStatus), b)
		}
	})
}

func TestArtifactsBadUploads(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	_, tok := e.runner(nil)
	jr := e.running(tok, nil)
	path := fmt.Sprintf("/api/v4/jobs/%d/artifacts", jr.ID)
	for _, tc := range []struct {
		name, query string
		ct          string
		body        []byte
		wantField   string
	}{
		{"bad format", "artifact_format=rar", "", nil, "artifact_format"},
		{"archive not zip", "artifact_format=gzip", "", nil, "artifact_format"},
		{"bad type", "artifact_type=../x", "", nil, "artifact_type"},
		{"bad expire_in", "expire_in=soon", "", nil, "expire_in"},
		{"not multipart", "", "application/octet-stream", []byte("zip"), "file"},
		{"no file field", "", "", nil, "file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ct, body := multipartBody(t, "file", "a.zip", []byte("zip"))
			if tc.name == "no file field" {
				ct, body = multipartBody(t, "other", "a.zip", []byte("zip"))
			}
			if tc.ct != "" {
				ct, body = tc.ct, tc.body
			}
			p := path
			if tc.query != "" {
				p += "?" + tc.query
			}
			resp, b := e.do("POST", p, map[string]string{hdrJobToken: jr.Token, "Content-Type": ct}, body)
			var ae struct{ Field string }
			json.Unmarshal(b, &ae)
			if resp.StatusCode != http.StatusBadRequest || ae.Field != tc.wantField {
				t.Errorf("upload = %d %s; want 400 naming %s", resp.StatusCode, b, tc.wantField)
			}
		})
	}
	if files := e.artifactFiles(); len(files) != 0 {
		t.Errorf("artifact files after bad uploads = %v, want none", files)
	}
}

// TestArtifactsTooLarge: 413 from Content-Length before the body is read,
// and from a chunked body while it streams; nothing is kept.
func TestArtifactsTooLarge(t *testing.T) {
	t.Parallel()
	const limit = 100 << 10
	e := newEnv(t, func(c *Config) { c.MaxArtifactSize = limit })
	_, tok := e.runner(nil)
	jr := e.running(tok, nil)
	url := fmt.Sprintf("%s/api/v4/jobs/%d/artifacts", e.srv.URL, jr.ID)

	// At the limit is fine.
	if resp, b := e.upload(jr.ID, jr.Token, "", make([]byte, limit)); resp.StatusCode != http.StatusCreated {
		t.Fatalf("upload of exactly the limit = %d %s", resp.StatusCode, b)
	}
	t.Run("Content-Length", func(t *testing.T) {
		// The body never comes: the answer must not wait for it.
		pr, pw := io.Pipe()
		defer pw.Close()
		req, _ := http.NewRequest("POST", url, pr)
		req.ContentLength = limit + multipartSlack + 1
		req.Header.Set(hdrJobToken, jr.Token)
		req.Header.Set("Content-Type", "multipart/form-data; boundary=x")
		resp, err := e.srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestEntityTooLarge {
			t.Errorf("upload with a large Content-Length = %d, want 413", resp.StatusCode)
		}
	})
	t.Run("chunked", func(t *testing.T) {
		ct, body := multipartBody(t, "file", "big.zip", make([]byte, limit+1))
		req, _ := http.NewRequest("POST", url, io.MultiReader(bytes.NewReader(body))) // no length: chunked
		req.Header.Set(hdrJobToken, jr.Token)
		req.Header.Set("Content-Type", ct)
		resp, err := e.srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestEntityTooLarge || req.ContentLength != 0 {
			t.Errorf("chunked upload over the limit = %d, want 413", resp.StatusCode)
		}
	})
	if m := e.metric(metricPrefix + "artifacts_rejected_too_large_total"); m != metricPrefix+"artifacts_rejected_too_large_total 2" {
		t.Errorf("metric = %q, want 2", m)
	}
	if files := e.artifactFiles(); len(files) != 1 {
		t.Errorf("artifact files = %v, want only the first upload's", files)
	}
	if resp, got := e.admin("GET", fmt.Sprintf("/api/v1/jobs/%d/artifacts", jr.ID), nil); resp.StatusCode != http.StatusOK || len(got) != limit {
		t.Errorf("download = %d, %d bytes; want the first upload", resp.StatusCode, len(got))
	}
}

// TestArtifactsUploadCutOff: a client that goes away mid-upload leaves no
// file and no record.
func TestArtifactsUploadCutOff(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	_, tok := e.runner(nil)
	jr := e.running(tok, nil)
	ct, body := multipartBody(t, "file", "a.zip", bytes.Repeat([]byte("x"), 1<<20))
	conn, err := net.Dial("tcp", e.srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(conn, "POST /api/v4/jobs/%d/artifacts HTTP/1.1\r\nHost: x\r\nJOB-TOKEN: %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n", jr.ID, jr.Token, ct, len(body))
	conn.Write(body[:len(body)/2])
	conn.Close()
	// The handler has returned once the request is counted.
	pattern := `endpoint="POST /api/v4/jobs/{id}/artifacts"`
	for !strings.Contains(e.metricLines(metricPrefix+"api_requests_total"), pattern) {
		time.Sleep(5 * time.Millisecond) // polling for an event, not a deadline
	}
	if files := e.artifactFiles(); len(files) != 0 {
		t.Errorf("artifact files after a cut-off upload = %v, want none", files)
	}
	if _, err := e.c.st.GetArtifact(t.Context(), jr.ID, "archive"); err == nil {
		t.Errorf("an artifact was recorded for a cut-off upload")
	}
}

// metricLines returns the lines of /metrics starting with name.
func (e *env) metricLines(name string) string {
	e.t.Helper()
	_, b := e.do("GET", "/metrics", nil, nil)
	var out []string
	for l := range strings.SplitSeq(string(b), "\n") {
		if strings.HasPrefix(l, name) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

func TestArtifactsExpiry(t *testing.T) {
	t.Parallel()
	fc := clock.NewFake(fakeStart)
	e := newEnv(t, func(c *Config) { c.Clock = fc })
	_, tok := e.runner(nil)
	jr := e.running(tok, map[string]any{"artifacts": map[string]any{"paths": []string{"a"}, "expire_in": "2 hours"}})
	for _, u := range []struct{ query, data string }{
		{"expire_in=1+hour", "archive"},                                      // the upload's expire_in
		{"artifact_type=junit&artifact_format=gzip", "junit"},                // the spec's: 2 hours
		{"artifact_type=dotenv&artifact_format=gzip&expire_in=never", "env"}, // kept
	} {
		if resp, b := e.upload(jr.ID, jr.Token, u.query, []byte(u.data)); resp.StatusCode != http.StatusCreated {
			t.Fatalf("upload %s = %d %s", u.query, resp.StatusCode, b)
		}
	}
	get := func(typ string) int {
		resp, _ := e.admin("GET", fmt.Sprintf("/api/v1/jobs/%d/artifacts?artifact_type=%s", jr.ID, typ), nil)
		return resp.StatusCode
	}
	fc.Advance(time.Hour - time.Second)
	e.c.reapOnce(t.Context())
	if got := []int{get("archive"), get("junit"), get("dotenv")}; !cmp.Equal(got, []int{200, 200, 200}) {
		t.Errorf("before 1 hour: downloads = %v, want all 200", got)
	}
	fc.Advance(time.Second)
	// Expired is not served, even before the reaper deletes it.
	if got := get("archive"); got != http.StatusNotFound {
		t.Errorf("expired archive before the reaper = %d, want 404", got)
	}
	if len(e.artifactFiles()) != 3 {
		t.Errorf("files = %v before the reaper, want 3", e.artifactFiles())
	}
	e.c.reapOnce(t.Context())
	if got := []int{get("archive"), get("junit"), get("dotenv")}; !cmp.Equal(got, []int{404, 200, 200}) {
		t.Errorf("after 1 hour: downloads = %v, want 404 200 200", got)
	}
	if len(e.artifactFiles()) != 2 {
		t.Errorf("files = %v after the reaper, want 2", e.artifactFiles())
	}
	fc.Advance(100 * 24 * time.Hour)
	e.c.reapOnce(t.Context())
	if got := []int{get("junit"), get("dotenv")}; !cmp.Equal(got, []int{404, 200}) {
		t.Errorf("after 100 days: downloads = %v, want 404 200 (never expires)", got)
	}
	if files := e.artifactFiles(); len(files) != 1 {
		t.Errorf("files = %v, want only the one that never expires", files)
	}
	if m := e.metric(metricPrefix + "artifacts_expired_total"); m != metricPrefix+"artifacts_expired_total 2" {
		t.Errorf("metric = %q, want 2", m)
	}
	if a, err := e.c.st.GetArtifact(t.Context(), jr.ID, "archive"); err != nil || !a.Retired() {
		t.Errorf("the expired archive's record = %+v, %v; want it retired (the mark of an expired artifact)", a, err)
	}
	// A default expiry: DefaultArtifactExpireIn from the upload.
	jr2 := e.running(tok, nil)
	e.upload(jr2.ID, jr2.Token, "", []byte("x"))
	a, err := e.c.st.GetArtifact(t.Context(), jr2.ID, "archive")
	if err != nil || !a.ExpireAt.Equal(fc.Now().Add(DefaultArtifactExpireIn)) {
		t.Errorf("default expiry = %v, %v; want now + %v", a.ExpireAt, err, DefaultArtifactExpireIn)
	}
}

// TestArtifactsLeftoversRemoved: temporary files of uploads a crash cut
// off are removed at start.
func TestArtifactsLeftoversRemoved(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "artifacts"), 0o700); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "artifacts", uploadPrefix+"123"), []byte("half"), 0o600)
	os.WriteFile(filepath.Join(dir, "artifacts", "1.archive.kept"), []byte("whole"), 0o600)
	e := openEnv(t, dir, nil)
	if d := cmp.Diff([]string{"1.archive.kept"}, e.artifactFiles()); d != "" {
		t.Errorf("artifact files after start (-want +got):\n%s", d)
	}
}

type failingWriter struct{ n int }

func (w *failingWriter) Write(b []byte) (int, error) {
	if w.n++; w.n > 1 {
		return 0, os.ErrClosed
	}
	return len(b), nil
}

// TestCopyHashed: the copy's digest is the bytes', and a write that fails
// (a full disk) stops the reading instead of taking the rest of the body.
func TestCopyHashed(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	n, sum, err := copyHashed(&buf, newPatternReader(3*copyBufferSize+5))
	if err != nil || n != 3*copyBufferSize+5 || sum != sha(buf.Bytes()) {
		t.Errorf("copyHashed = %d, %s, %v; want %d bytes and their digest", n, sum, err, 3*copyBufferSize+5)
	}
	src := newPatternReader(1 << 40)
	if _, _, err := copyHashed(&failingWriter{}, src); err == nil {
		t.Error("copyHashed into a failing writer = nil error")
	}
	if src.off > 16*copyBufferSize {
		t.Errorf("copyHashed read %d bytes after the write failed, want a few blocks", src.off)
	}
}

// FuzzUploadParams: the query of an upload and the file name a runner
// gives never panic; what is accepted is a known format, a type that is
// safe in a file name, an expiry in the future or none, and a plain file
// name.
func FuzzUploadParams(f *testing.F) {
	f.Add("artifact_format=zip&artifact_type=archive&expire_in=1+week", "artifacts.zip")
	f.Add("artifact_format=gzip&artifact_type=junit&expire_in=never", "../../etc/passwd")
	f.Add("artifact_type=dotenv&artifact_format=raw", `a"b\c`)
	f.Add("expire_in=3600", "")
	c := &Coordinator{}
	now := fakeStart
	f.Fuzz(func(t *testing.T, query, filename string) {
		q, err := url.ParseQuery(query)
		if err != nil {
			return
		}
		p, e := c.parseUploadParams(q, &store.Job{}, now)
		if e == nil {
			if _, ok := artifactContentTypes[p.format]; !ok || !artifactTypeRE.MatchString(p.typ) || strings.ContainsAny(p.typ, `/\.`) {
				t.Fatalf("parseUploadParams(%q) = %+v", query, p)
			}
			if !p.expireAt.IsZero() && !p.expireAt.After(now) {
				t.Fatalf("parseUploadParams(%q): expiry %v not after now", query, p.expireAt)
			}
		}
		name := artifactFilename(filename, p.format)
		if name == "" || strings.ContainsAny(name, `/\"`) || name == "." || name == ".." {
			t.Fatalf("artifactFilename(%q) = %q", filename, name)
		}
	})
}

// TestMissingDependencyFailsAtHandOut: as GitLab's pre-assign check, a job
// whose dependency's archive expired (before or after the reaper deleted
// it) never reaches a runner: it fails with missing_dependency_failure and
// its log names the dependency, and the request hands out the next job.
// A dependency that never uploaded an archive is no obstacle.
func TestMissingDependencyFailsAtHandOut(t *testing.T) {
	t.Parallel()
	fc := clock.NewFake(fakeStart)
	e := newEnv(t, func(c *Config) { c.Clock = fc })
	_, tok := e.runner(nil)
	build := e.running(tok, map[string]any{"name": "build", "project": "g/p"})
	if resp, b := e.upload(build.ID, build.Token, "expire_in=1+hour", []byte("zip bytes")); resp.StatusCode != http.StatusCreated {
		t.Fatalf("upload = %d %s", resp.StatusCode, b)
	}
	e.succeed(build)
	lint := e.running(tok, map[string]any{"name": "lint", "project": "g/p"}) // uploads nothing
	e.succeed(lint)
	fc.Advance(time.Hour)

	for _, reaped := range []bool{false, true} {
		if reaped {
			e.c.reapOnce(t.Context())
			if a, err := e.c.st.GetArtifact(t.Context(), build.ID, "archive"); err != nil || !a.Retired() {
				t.Fatalf("after the reaper: archive = %+v, %v; want retired", a, err)
			}
		}
		test := e.submit(map[string]any{"name": "test", "project": "g/p", "dependencies": []any{"lint", "build"}})
		after := e.submit(map[string]any{"name": "deploy", "project": "g/p", "dependencies": []any{"lint"}})
		jr := e.take(tok)
		if jr.ID != after.ID {
			t.Fatalf("reaped %v: handed out job %d (%s), want %d (deploy): the job with an expired dependency must not reach a runner", reaped, jr.ID, jr.JobInfo.Name, after.ID)
		}
		want := []api.Dependency{{ID: lint.ID, Name: "lint", Token: jr.Token}}
		if d := cmp.Diff(want, jr.Dependencies); d != "" {
			t.Errorf("reaped %v: deploy's dependencies (-want +got):\n%s", reaped, d)
		}
		e.succeed(jr)
		got := e.job(test.ID)
		if got.Status != "failed" || got.FailureReason != "missing_dependency_failure" || got.RunnerID != 0 {
			t.Errorf("reaped %v: test = %s/%s runner %d, want failed/missing_dependency_failure, no runner", reaped, got.Status, got.FailureReason, got.RunnerID)
		}
		if log := e.trace(test.ID); !strings.Contains(log, fmt.Sprintf("build (job %d)", build.ID)) || strings.Contains(log, "lint") {
			t.Errorf("reaped %v: test's log = %q, want it to name build (job %d) alone", reaped, log, build.ID)
		}
	}
}
