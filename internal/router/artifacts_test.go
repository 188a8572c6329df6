package router

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/api"
)

// takeJob asks url for a job with a classic (one-phase) runner token until
// one comes, and accepts it (PUT state=running).
func takeJob(t *testing.T, c *api.Client, token string) *api.JobResponse {
	t.Helper()
	ctx := t.Context()
	last := ""
	for {
		job, resp, err := c.RequestJob(ctx, api.JobRequest{Token: token, SystemID: "s_art", LastUpdate: last,
			Info: api.VersionInfo{Name: "test", Features: api.FeaturesInfo{Artifacts: true, UploadRawArtifacts: true}}})
		if err != nil {
			t.Fatalf("jobs/request: %v", err)
		}
		if job != nil {
			if r, err := c.UpdateJob(ctx, job.ID, api.UpdateJobRequest{Token: job.Token, State: api.StateRunning}); err != nil || r.StatusCode != http.StatusOK {
				t.Fatalf("accept job %d: %v %v", job.ID, r, err)
			}
			return job
		}
		last = resp.LastUpdate // held until the router has a job
	}
}

// TestArtifactsThroughRouter: a runner behind the router uploads an
// artifact (a chunked multipart body, streamed through) and a dependent
// job downloads it, both forwarded to a real coordinator.
func TestArtifactsThroughRouter(t *testing.T) {
	t.Parallel()
	c := startCoordinator(t, 2*time.Second)
	x := startRouter(t, Config{Upstream: c.srv.URL, UpstreamToken: c.routerToken(), LongPollTimeout: 2 * time.Second})
	tok := createRunner(t, x.srv.URL, x.r.AdminToken(), nil)
	rc, err := api.NewClient(x.srv.URL, api.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}

	var build struct {
		ID int64 `json:"id"`
	}
	if code := adminCall(t, c.srv.URL, c.admin, http.MethodPost, "/api/v1/jobs",
		map[string]any{"name": "build", "project": "g/p", "script": []string{"true"}, "artifacts": map[string]any{"paths": []string{"out/"}}}, &build); code != http.StatusCreated {
		t.Fatalf("submit build = %d", code)
	}
	job := takeJob(t, rc, tok)
	if job.ID != build.ID || len(job.Artifacts) != 1 || job.Artifacts[0].Type != "archive" {
		t.Fatalf("payload through the router: job %d, artifacts %+v", job.ID, job.Artifacts)
	}

	// 8 MiB through an io.Pipe: no Content-Length, the router cannot
	// know the size, and streams.
	data := bytes.Repeat([]byte("0123456789abcdef"), 512<<10)
	pr, pw := io.Pipe()
	mw := multipart.NewWriter(pw)
	go func() {
		fw, err := mw.CreateFormFile("file", "out.zip")
		if err == nil {
			for off := 0; off < len(data) && err == nil; off += 64 << 10 {
				_, err = fw.Write(data[off : off+64<<10])
			}
		}
		if err == nil {
			err = mw.Close()
		}
		pw.CloseWithError(err)
	}()
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost,
		fmt.Sprintf("%s/api/v4/jobs/%d/artifacts?artifact_format=zip&artifact_type=archive", x.srv.URL, job.ID), pr)
	req.Header.Set(api.HeaderJobToken, job.Token)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated || req.ContentLength != 0 {
		t.Fatalf("chunked upload through the router = %d %s, want 201", resp.StatusCode, b)
	}
	if r, err := rc.UpdateJob(t.Context(), job.ID, api.UpdateJobRequest{Token: job.Token, State: api.StateSuccess}); err != nil || r.StatusCode != http.StatusOK {
		t.Fatalf("finish build: %v %v", r, err)
	}

	if code := adminCall(t, c.srv.URL, c.admin, http.MethodPost, "/api/v1/jobs",
		map[string]any{"name": "test", "project": "g/p", "script": []string{"true"}, "dependencies": []any{"build"}}, nil); code != http.StatusCreated {
		t.Fatalf("submit test = %d", code)
	}
	dep := takeJob(t, rc, tok)
	if len(dep.Dependencies) != 1 || dep.Dependencies[0].ID != build.ID || dep.Dependencies[0].ArtifactsFile == nil ||
		dep.Dependencies[0].ArtifactsFile.Size != int64(len(data)) {
		t.Fatalf("dependencies through the router = %+v", dep.Dependencies)
	}
	d := dep.Dependencies[0]
	req, _ = http.NewRequestWithContext(t.Context(), http.MethodGet, fmt.Sprintf("%s/api/v4/jobs/%d/artifacts", x.srv.URL, d.ID), nil)
	req.Header.Set(api.HeaderJobToken, d.Token)
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	h := sha256.New()
	n, err := io.Copy(h, resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK || n != int64(len(data)) {
		t.Fatalf("download through the router = %d, %d bytes, %v; want 200, %d bytes", resp.StatusCode, n, err, len(data))
	}
	if want := sha256.Sum256(data); !bytes.Equal(h.Sum(nil), want[:]) {
		t.Errorf("downloaded bytes differ from the upload")
	}
	if got, want := resp.Header.Get("X-Drover-Sha256"), fmt.Sprintf("%x", sha256.Sum256(data)); got != want {
		t.Errorf("X-Drover-Sha256 = %q, want %q", got, want)
	}

	// And the refusals come back through it as they are.
	req, _ = http.NewRequestWithContext(t.Context(), http.MethodGet, fmt.Sprintf("%s/api/v4/jobs/%d/artifacts", x.srv.URL, d.ID), nil)
	req.Header.Set(api.HeaderJobToken, job.Token) // the finished build's own
	resp2, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp2.Body.Close()
	if resp2.StatusCode != http.StatusForbidden {
		t.Errorf("download with a finished job's token through the router = %d, want 403", resp2.StatusCode)
	}
}
