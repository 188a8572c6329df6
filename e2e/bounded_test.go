package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/pgtest"
)

// The coordinator's memory while it serves stored data of any size: what
// one request holds is bounded by what it sends, not by what is stored
// (issue 36: one viewer of a 52 MB log's live stream took the coordinator
// from 69 MB to 934 MB).

// boundedStored is a coordinator holding one job with a log and an
// artifact of a given size, and many jobs to list.
type boundedStored struct {
	c     *coordinator
	jobID int64
}

// storeLarge starts a coordinator (on PostgreSQL when pgURL is set) and
// gives it a running job whose log is logSize bytes of 100-byte lines
// (sent as a runner sends it, 1 MiB PATCHes) and whose archive artifact
// is artifactSize bytes, plus jobs more jobs.
func storeLarge(t testing.TB, pgURL string, logSize, artifactSize int64, jobs int) *boundedStored {
	t.Helper()
	dir := t.TempDir()
	extra := []string{
		"--max-trace-size", strconv.FormatInt(logSize+1<<20, 10),
		"--max-artifact-size", strconv.FormatInt(artifactSize+1<<20, 10),
	}
	if pgURL != "" {
		extra = append(extra, "--database-url", pgURL)
	}
	c := startCoordinator(t, filepath.Join(dir, "data"), extra...)
	runner := c.runnerToken(t)
	for i := range jobs {
		submitJSON(t, c, map[string]any{"name": fmt.Sprintf("listed-%d", i), "script": []string{"echo " + strings.Repeat("s", 200)}})
	}
	id := submitJSON(t, c, map[string]any{"name": "large", "script": []string{"true"}})
	// Take the jobs until the large one comes (the oldest first).
	var jr api.JobResponse
	for jr.ID != id {
		body, _ := json.Marshal(api.JobRequest{Token: runner, SystemID: "s_bounded", Info: api.VersionInfo{Name: "gitlab-runner", Version: "19.4.0", Executor: "shell"}})
		resp, b := httpDo(t, "POST", c.url+"/api/v4/jobs/request", map[string]string{"Content-Type": "application/json"}, bytes.NewReader(body))
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("jobs/request = %d %s", resp.StatusCode, b)
		}
		jr = api.JobResponse{}
		if err := json.Unmarshal(b, &jr); err != nil {
			t.Fatal(err)
		}
	}
	line := strings.Repeat("L", 99) + "\n"
	chunk := []byte(strings.Repeat(line, (1<<20)/len(line)))
	for off := int64(0); off < logSize; {
		n := min(int64(len(chunk)), logSize-off)
		resp, b := httpDo(t, "PATCH", fmt.Sprintf("%s/api/v4/jobs/%d/trace", c.url, id), map[string]string{
			"JOB-TOKEN": jr.Token, "Content-Type": "text/plain", "Content-Range": fmt.Sprintf("%d-%d", off, off+n-1),
		}, bytes.NewReader(chunk[:n]))
		if resp.StatusCode != http.StatusAccepted {
			t.Fatalf("PATCH trace at %d = %d %s", off, resp.StatusCode, b)
		}
		off += n
	}
	if artifactSize > 0 {
		uploadArtifact(t, c.url, id, jr.Token, artifactSize)
	}
	return &boundedStored{c: c, jobID: id}
}

// uploadArtifact uploads size bytes as job id's archive artifact, the body
// streamed (the test holds none of it).
func uploadArtifact(t testing.TB, url string, id int64, token string, size int64) {
	t.Helper()
	pr, pw := io.Pipe()
	mw := multipart.NewWriter(pw)
	go func() {
		fw, err := mw.CreateFormFile("file", "artifacts.zip")
		if err == nil {
			_, err = io.CopyN(fw, zeroes{}, size)
		}
		if err == nil {
			err = mw.Close()
		}
		pw.CloseWithError(err)
	}()
	resp, b := httpDo(t, "POST", fmt.Sprintf("%s/api/v4/jobs/%d/artifacts?artifact_format=zip&artifact_type=archive", url, id),
		map[string]string{"JOB-TOKEN": token, "Content-Type": mw.FormDataContentType()}, pr)
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("upload artifact = %d %s", resp.StatusCode, b)
	}
}

type zeroes struct{}

func (zeroes) Read(p []byte) (int, error) { clear(p); return len(p), nil }

func httpDo(t testing.TB, method, url string, hdr map[string]string, body io.Reader) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

// boundedReads are the requests that answer with stored data of unbounded
// size: each read to its end (a live log until it says tail or done).
var boundedReads = []struct{ name, path string }{
	{"live log", "/jobs/%d/log"},
	{"raw log", "/jobs/%d/raw"},
	{"job page", "/jobs/%d"},
	{"trace GET", "/api/v1/jobs/%d/trace"},
	{"artifact", "/api/v1/jobs/%d/artifacts"},
	{"job list", "/api/v1/jobs?limit=1000"},
	{"jobs page", "/jobs"},
}

// readAll has clients clients read path (with the admin token) to its end
// at once; it returns the bytes each received.
func (s *boundedStored) readAll(t testing.TB, path string, clients int) int64 {
	t.Helper()
	url := s.c.url + path
	if strings.Contains(path, "%d") {
		url = s.c.url + fmt.Sprintf(path, s.jobID)
	}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		got  int64
		errs []error
	)
	for range clients {
		wg.Go(func() {
			n, err := readToEnd(t.Context(), url, s.c.token)
			mu.Lock()
			defer mu.Unlock()
			got = n
			if err != nil {
				errs = append(errs, err)
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		t.Errorf("GET %s: %v", path, err)
	}
	return got
}

// readToEnd reads url to its end; an event stream until its tail or done
// event.
func readToEnd(ctx context.Context, url, token string) (int64, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", url, nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return 0, fmt.Errorf("%d %s", resp.StatusCode, b)
	}
	if resp.Header.Get("Content-Type") != "text/event-stream" {
		return io.Copy(io.Discard, resp.Body)
	}
	var n int64
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 4<<20)
	for sc.Scan() {
		n += int64(len(sc.Bytes())) + 1
		if l := sc.Text(); l == "event: tail" || l == "event: done" {
			return n, nil
		}
	}
	return n, fmt.Errorf("the event stream ended without tail or done (%d bytes): %v", n, sc.Err())
}

// peakRSS returns process pid's peak resident set size (VmHWM) in bytes;
// with reset, it first starts the peak over at the current size.
func peakRSS(t testing.TB, pid int, reset bool) int64 {
	t.Helper()
	if reset {
		// 5: reset the peak RSS to the current RSS (proc(5)).
		if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0); err != nil {
			t.Fatalf("reset the peak RSS of %d: %v", pid, err)
		}
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for l := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Fatalf("VmHWM %q: %v", v, err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no VmHWM in /proc/%d/status", pid)
	return 0
}

// maxGrowth is how much the coordinator's RSS may grow while it serves a
// request of boundedReads to ten clients at once, whatever the size of
// what is stored.
const maxGrowth = 64 << 20

// TestCoordinatorMemoryBounded: a 200 MB log and a 200 MB artifact, each
// request of boundedReads from 10 clients at once: the coordinator's peak
// RSS grows by less than maxGrowth over what it was before.
func TestCoordinatorMemoryBounded(t *testing.T) {
	s := storeLarge(t, "", 200<<20, 200<<20, 1000)
	pid := s.c.cmd.Process.Pid
	for _, r := range boundedReads {
		before := peakRSS(t, pid, true)
		got := s.readAll(t, r.path, 10)
		grew := peakRSS(t, pid, false) - before
		t.Logf("%-10s 10 clients, %9d bytes each: peak RSS +%.1f MiB (from %.1f MiB)", r.name, got, float64(grew)/(1<<20), float64(before)/(1<<20))
		if grew > maxGrowth {
			t.Errorf("%s: 10 clients took the coordinator's peak RSS up by %.1f MiB, want under %d MiB", r.name, float64(grew)/(1<<20), maxGrowth>>20)
		}
	}
}

// BenchmarkCoordinatorMemory reports the coordinator's peak RSS growth
// (rss-growth-MiB) while 10 clients read each request of boundedReads, for
// stored data of 10 MB and 200 MB, on SQLite and PostgreSQL: the same
// bound for both sizes shows the work does not follow the stored size.
//
//	go test ./e2e -run '^$' -bench BenchmarkCoordinatorMemory -benchtime 1x
func BenchmarkCoordinatorMemory(b *testing.B) {
	for _, db := range []string{"sqlite", "postgres"} {
		for _, size := range []int64{10 << 20, 200 << 20} {
			b.Run(fmt.Sprintf("%s/%dMB", db, size>>20), func(b *testing.B) {
				url := ""
				if db == "postgres" {
					url = pgtest.NewDatabase(b)
				}
				s := storeLarge(b, url, size, size, 1000)
				pid := s.c.cmd.Process.Pid
				for _, r := range boundedReads {
					b.Run(strings.ReplaceAll(r.name, " ", "-"), func(b *testing.B) {
						var grew int64
						for b.Loop() {
							before := peakRSS(b, pid, true)
							s.readAll(b, r.path, 10)
							grew = max(grew, peakRSS(b, pid, false)-before)
						}
						b.ReportMetric(float64(grew)/(1<<20), "rss-growth-MiB")
					})
				}
			})
		}
	}
}
