package main

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/client"
)

// TestArtifactsCommand: `drover artifacts` against a real coordinator
// writes what a runner uploaded, under the runner's name or -o, and to
// stdout with -o -.
func TestArtifactsCommand(t *testing.T) {
	srvURL, adminToken, cl := adminServer(t)
	rn, err := cl.CreateRunner(t.Context(), client.RunnerSpec{})
	if err != nil {
		t.Fatal(err)
	}
	j, err := cl.Submit(t.Context(), client.JobSpec{Name: "build", Script: []string{"true"},
		Artifacts: &client.Artifacts{Paths: []string{"bin/"}, ExpireIn: "1 day"}})
	if err != nil {
		t.Fatal(err)
	}
	rc, _ := api.NewClient(srvURL, api.ClientOptions{})
	job, _, err := rc.RequestJob(t.Context(), api.JobRequest{Token: rn.Token})
	if err != nil || job == nil || job.ID != j.ID {
		t.Fatalf("jobs/request = %v, %v", job, err)
	}
	data := bytes.Repeat([]byte("zip!"), 50000)
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	fw, _ := mw.CreateFormFile("file", "build-output.zip")
	fw.Write(data)
	mw.Close()
	req, _ := http.NewRequest("POST", fmt.Sprintf("%s/api/v4/jobs/%d/artifacts", srvURL, job.ID), &body)
	req.Header.Set(api.HeaderJobToken, job.Token)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("upload = %v, %v", resp, err)
	}
	resp.Body.Close()

	dir := t.TempDir()
	t.Chdir(dir)
	base := []string{"artifacts", "--url", srvURL, "--token", adminToken, fmt.Sprint(j.ID)}
	if out, code, err := drover(t, base...); code != 0 {
		t.Fatalf("drover artifacts: exit %d (%v): %s", code, err, out)
	}
	if got, err := os.ReadFile(filepath.Join(dir, "build-output.zip")); err != nil || !bytes.Equal(got, data) {
		t.Errorf("build-output.zip: %d bytes, %v; want the %d uploaded", len(got), err, len(data))
	}
	if out, code, err := drover(t, append(base, "-o", "sub.zip")...); code != 0 || !strings.Contains(out, "written to sub.zip") {
		t.Fatalf("drover artifacts -o: exit %d (%v): %s", code, err, out)
	}
	if got, _ := os.ReadFile(filepath.Join(dir, "sub.zip")); !bytes.Equal(got, data) {
		t.Errorf("sub.zip: %d bytes, want the %d uploaded", len(got), len(data))
	}
	stdout, _, code, err := droverSplit(t, append(base, "-o", "-")...)
	if code != 0 || stdout != string(data) {
		t.Errorf("drover artifacts -o -: exit %d (%v), %d bytes on stdout", code, err, len(stdout))
	}
	// No report of that kind: the coordinator's 404, no file.
	if out, code, err := drover(t, append(base, "--type", "junit", "-o", "junit.gz")...); code != 1 || err == nil || !strings.Contains(err.Error(), "404") {
		t.Errorf("drover artifacts --type junit: exit %d, %v: %s; want 1 and the 404", code, err, out)
	}
	if _, err := os.Stat(filepath.Join(dir, "junit.gz")); err == nil {
		t.Error("junit.gz written for a 404")
	}
	// --list: what the job has, from its view.
	jv, err := cl.Job(t.Context(), j.ID)
	if err != nil || len(jv.Artifacts) != 1 || jv.Artifacts[0].ExpireAt == nil || jv.ArtifactsExpireAt == nil {
		t.Fatalf("job view = %+v, %v; want one artifact, expiring", jv, err)
	}
	want := fmt.Sprintf("TYPE     FORMAT  SIZE    FILENAME          EXPIRES\narchive  zip     %d  build-output.zip  %s\n",
		len(data), jv.Artifacts[0].ExpireAt.Local().Format(time.DateTime))
	if stdout, _, code, err := droverSplit(t, append(base, "--list")...); code != 0 || stdout != want {
		t.Errorf("drover artifacts --list: exit %d (%v):\n%s\nwant:\n%s", code, err, stdout, want)
	}
	other, err := cl.Submit(t.Context(), client.JobSpec{Name: "other", Script: []string{"true"}})
	if err != nil {
		t.Fatal(err)
	}
	if stdout, _, code, err := droverSplit(t, "artifacts", "--url", srvURL, "--token", adminToken, "--list", fmt.Sprint(other.ID)); code != 0 || stdout != fmt.Sprintf("job %d has no artifacts\n", other.ID) {
		t.Errorf("drover artifacts --list of a job without: exit %d (%v): %q", code, err, stdout)
	}
	if out, code, _ := drover(t, append(base, "--list", "-o", "x.zip")...); code != 2 {
		t.Errorf("drover artifacts --list -o: exit %d, want 2 (usage): %s", code, out)
	}
	if out, code, _ := drover(t, "artifacts", "--help"); code != 0 || !strings.Contains(out, "drover artifacts 42 -o build.zip") {
		t.Errorf("drover artifacts --help: exit %d, no example:\n%s", code, out)
	}
}

// TestArtifactsCommandCutOff: a download that ends early, or whose bytes
// do not match the recorded SHA-256, leaves no file under the target's
// name (and no temporary file).
func TestArtifactsCommandCutOff(t *testing.T) {
	data := []byte("the whole artifact")
	for name, h := range map[string]http.HandlerFunc{
		"short": func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Length", fmt.Sprint(len(data)+10))
			w.Write(data)
		},
		"bad checksum": func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("X-Drover-Sha256", fmt.Sprintf("%x", sha256.Sum256([]byte("other"))))
			w.Write(data)
		},
	} {
		t.Run(name, func(t *testing.T) {
			srv := httptest.NewServer(h)
			defer srv.Close()
			dir := t.TempDir()
			target := filepath.Join(dir, "a.zip")
			out, code, _ := drover(t, "artifacts", "--url", srv.URL, "--token", "tok", "1", "-o", target)
			if code != 1 {
				t.Errorf("exit %d, want 1: %s", code, out)
			}
			if ents, _ := os.ReadDir(dir); len(ents) != 0 {
				t.Errorf("files left: %v", ents)
			}
		})
	}
}

func TestSubmitArtifactFlags(t *testing.T) {
	srv, body := fakeSubmit(t)
	out, code, err := drover(t, "submit", "--url", srv.URL, "--token", "tok", "--name", "n", "--script", "true",
		"--artifact-path", "bin/", "--artifact-path", "*.log", "--artifacts-expire-in", "1 week", "--dependency", "build", "--dependency", "12")
	if code != 0 {
		t.Fatalf("exit %d (%v): %s", code, err, out)
	}
	want := `{"name":"n","script":["true"],"artifacts":{"paths":["bin/","*.log"],"expire_in":"1 week"},"dependencies":["build",12]}`
	if string(*body) != want {
		t.Errorf("body\n got %s\nwant %s", *body, want)
	}
	if _, code, _ := drover(t, "submit", "--url", srv.URL, "--token", "tok", "--name", "n", "--script", "true", "--artifacts-expire-in", "1 week"); code != 2 {
		t.Errorf("--artifacts-expire-in without a path: exit %d, want 2", code)
	}

}
