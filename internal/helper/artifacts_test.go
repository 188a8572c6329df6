package helper

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/client"
	"github.com/drover-ci/drover/internal/coordinator"
)

// coord is a real coordinator on loopback and a runner token of it.
type coord struct {
	url, runner string
	api         *client.Client
}

func startCoord(t *testing.T, cfg coordinator.Config) *coord {
	t.Helper()
	cfg.DataDir = t.TempDir()
	c, err := coordinator.New(t.Context(), nil, cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(c.Handler())
	t.Cleanup(func() { srv.Close(); c.Close() })
	cl := client.New(srv.URL, c.AdminToken(), nil)
	yes := true
	r, err := cl.CreateRunner(t.Context(), client.RunnerSpec{RunUntagged: &yes})
	if err != nil {
		t.Fatal(err)
	}
	return &coord{url: srv.URL, runner: r.Token, api: cl}
}

// take submits spec and takes it as a classic runner: the job is running.
func (c *coord) take(t *testing.T, spec client.JobSpec) *api.JobResponse {
	t.Helper()
	if _, err := c.api.Submit(t.Context(), spec); err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(api.JobRequest{Token: c.runner, SystemID: "s_helper"})
	resp, err := http.Post(c.url+"/api/v4/jobs/request", "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var jr api.JobResponse
	if resp.StatusCode != http.StatusCreated || json.NewDecoder(resp.Body).Decode(&jr) != nil {
		t.Fatalf("jobs/request = %d", resp.StatusCode)
	}
	return &jr
}

func (c *coord) finish(t *testing.T, jr *api.JobResponse) {
	t.Helper()
	b, _ := json.Marshal(api.UpdateJobRequest{Token: jr.Token, State: api.StateSuccess})
	req, _ := http.NewRequest(http.MethodPut, c.url+"/api/v4/jobs/"+jsonInt(jr.ID), bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("PUT success: %v %v", err, resp)
	}
	resp.Body.Close()
}

func jsonInt(n int64) string { b, _ := json.Marshal(n); return string(b) }

// TestArtifactsRoundTrip: artifacts-uploader sends a job's artifacts to a
// real coordinator as GitLab Runner does; a later job that depends on it
// gets them with artifacts-downloader and the token its payload carries;
// a job token that does not depend on it is refused without retries.
func TestArtifactsRoundTrip(t *testing.T) {
	c := startCoord(t, coordinator.Config{})
	ctx := context.Background()
	a := c.take(t, client.JobSpec{Name: "build", Script: []string{"true"}, Artifacts: &client.Artifacts{Paths: []string{"dist/"}}})
	proj := t.TempDir()
	writeTree(t, proj, map[string]string{"dist/app": "binary", "dist/app.debug": "symbols", "src/x.go": "package x"})
	var out bytes.Buffer
	err := UploadArtifacts(ctx, ArtifactsUploadOptions{
		URL: c.url, ID: a.ID, Token: a.Token, Root: proj, Paths: []string{"dist/"}, Exclude: []string{"**/*.debug"}, Backoff: time.Millisecond,
	}, &out)
	if err != nil {
		t.Fatalf("upload: %v\n%s", err, out.String())
	}
	for _, want := range []string{"dist/: found", "**/*.debug: excluded 1 files", "201 Created"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("uploader output lacks %q:\n%s", want, out.String())
		}
	}
	c.finish(t, a)

	b := c.take(t, client.JobSpec{Name: "test", Script: []string{"true"}, Dependencies: []client.Dependency{{Name: "build"}}})
	if len(b.Dependencies) != 1 || b.Dependencies[0].ID != a.ID || b.Dependencies[0].ArtifactsFile == nil {
		t.Fatalf("payload dependencies = %+v, want job %d with its artifacts", b.Dependencies, a.ID)
	}
	dest := t.TempDir()
	out.Reset()
	d := b.Dependencies[0]
	if err := DownloadArtifacts(ctx, ArtifactsDownloadOptions{URL: c.url, ID: d.ID, Token: d.Token, Root: dest, Backoff: time.Millisecond}, &out); err != nil {
		t.Fatalf("download: %v\n%s", err, out.String())
	}
	if got, err := os.ReadFile(filepath.Join(dest, "dist/app")); err != nil || string(got) != "binary" {
		t.Errorf("dist/app = %q, %v", got, err)
	}
	for _, gone := range []string{"dist/app.debug", "src/x.go"} {
		if _, err := os.Stat(filepath.Join(dest, gone)); err == nil {
			t.Errorf("%s was in the artifacts", gone)
		}
	}

	// A running job that does not depend on job a.
	other := c.take(t, client.JobSpec{Name: "lint", Script: []string{"true"}})
	err = DownloadArtifacts(ctx, ArtifactsDownloadOptions{URL: c.url, ID: a.ID, Token: other.Token, Root: t.TempDir(), Backoff: time.Hour}, &out)
	if !errors.Is(err, ErrArtifactsDenied) || !strings.Contains(err.Error(), "403") {
		t.Errorf("download with an unrelated job's token = %v, want a 403 not retried", err)
	}
	// Uploading for job a after it finished: 403, not retried.
	err = UploadArtifacts(ctx, ArtifactsUploadOptions{URL: c.url, ID: a.ID, Token: a.Token, Root: proj, Paths: []string{"dist/"}, Backoff: time.Hour}, &out)
	if err == nil || !strings.Contains(err.Error(), "403") {
		t.Errorf("upload for a finished job = %v, want 403", err)
	}
}

// TestArtifactsTooLarge: an archive over the coordinator's cap is refused
// (413, not retried) and the error says so.
func TestArtifactsTooLarge(t *testing.T) {
	c := startCoord(t, coordinator.Config{MaxArtifactSize: 1024})
	a := c.take(t, client.JobSpec{Name: "big", Script: []string{"true"}})
	proj := t.TempDir()
	rnd := make([]byte, 64<<10)
	for i := range rnd {
		rnd[i] = byte(i*7919 + i>>3)
	}
	if err := os.WriteFile(filepath.Join(proj, "blob"), rnd, 0o644); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	err := UploadArtifacts(context.Background(), ArtifactsUploadOptions{URL: c.url, ID: a.ID, Token: a.Token, Root: proj, Paths: []string{"blob"}, Backoff: time.Hour}, &out)
	if !errors.Is(err, ErrArtifactsTooLarge) {
		t.Errorf("upload over the cap = %v, want ErrArtifactsTooLarge", err)
	}
}

// TestArtifactsRetry: 503 answers are retried (up to 6 attempts), then the
// upload succeeds; the same bytes go out each time.
func TestArtifactsRetry(t *testing.T) {
	c := startCoord(t, coordinator.Config{})
	a := c.take(t, client.JobSpec{Name: "flaky", Script: []string{"true"}})
	failures := 4
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if failures > 0 {
			failures--
			http.Error(w, "busy", http.StatusServiceUnavailable)
			return
		}
		req, _ := http.NewRequest(r.Method, c.url+r.URL.RequestURI(), r.Body)
		req.Header = r.Header.Clone()
		req.ContentLength = r.ContentLength
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		w.WriteHeader(resp.StatusCode)
	}))
	defer proxy.Close()
	proj := t.TempDir()
	writeTree(t, proj, map[string]string{"out.txt": "x"})
	var out bytes.Buffer
	if err := UploadArtifacts(context.Background(), ArtifactsUploadOptions{URL: proxy.URL, ID: a.ID, Token: a.Token, Root: proj, Paths: []string{"out.txt"}, Backoff: time.Millisecond}, &out); err != nil {
		t.Fatalf("upload after 4 × 503: %v", err)
	}
	if failures != 0 {
		t.Errorf("%d 503s left unanswered", failures)
	}
	art, err := c.api.Artifacts(context.Background(), a.ID, "")
	if err != nil {
		t.Fatalf("the coordinator has no artifact: %v", err)
	}
	art.Body.Close()
}

// TestArtifactsReportFormat: a report is uploaded in the format its
// payload asks for: gzip, each file a gzip member named in its header
// (GitLab Runner's form, which GitLab requires for junit), read back from
// a real coordinator as the concatenation of the files; raw takes exactly
// one file.
func TestArtifactsReportFormat(t *testing.T) {
	c := startCoord(t, coordinator.Config{})
	ctx := context.Background()
	a := c.take(t, client.JobSpec{Name: "test", Script: []string{"true"}})
	proj := t.TempDir()
	writeTree(t, proj, map[string]string{"reports/a.xml": "<testsuite name=\"a\"/>\n", "reports/b.xml": "<testsuite name=\"b\"/>\n"})
	var out bytes.Buffer
	err := UploadArtifacts(ctx, ArtifactsUploadOptions{
		URL: c.url, ID: a.ID, Token: a.Token, Root: proj, Paths: []string{"reports/*.xml"}, Name: "junit.xml",
		Type: "junit", Format: "gzip", Backoff: time.Millisecond,
	}, &out)
	if err != nil {
		t.Fatalf("upload: %v\n%s", err, out.String())
	}
	art, err := c.api.Artifacts(ctx, a.ID, "junit")
	if err != nil {
		t.Fatal(err)
	}
	defer art.Body.Close()
	// A ByteReader: gzip reads no further than each member's end.
	body := bufio.NewReader(art.Body)
	zr, err := gzip.NewReader(body)
	if err != nil {
		t.Fatalf("the junit report is not gzip: %v", err)
	}
	zr.Multistream(false)
	var members []string
	var all bytes.Buffer
	for {
		members = append(members, zr.Name)
		if _, err := io.Copy(&all, zr); err != nil {
			t.Fatal(err)
		}
		if err := zr.Reset(body); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		zr.Multistream(false)
	}
	if want := "<testsuite name=\"a\"/>\n<testsuite name=\"b\"/>\n"; all.String() != want || strings.Join(members, " ") != "reports/a.xml reports/b.xml" {
		t.Errorf("junit report = %q in members %v, want %q in reports/a.xml and reports/b.xml", all.String(), members, want)
	}
	if art.Filename != "junit.xml.gz" {
		t.Errorf("report file name = %q, want junit.xml.gz", art.Filename)
	}

	err = UploadArtifacts(ctx, ArtifactsUploadOptions{
		URL: c.url, ID: a.ID, Token: a.Token, Root: proj, Paths: []string{"reports/*.xml"}, Type: "metrics", Format: "raw", Backoff: time.Hour,
	}, &out)
	if err == nil || !strings.Contains(err.Error(), "exactly one file") {
		t.Errorf("raw upload of two files = %v, want a refusal", err)
	}
}
