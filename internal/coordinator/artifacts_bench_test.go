package coordinator

import (
	"crypto/sha256"
	"fmt"
	"io"
	"math/rand/v2"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	rtmetrics "runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// benchArtifactSize is the artifact of BenchmarkArtifactUploadDownload.
const benchArtifactSize = 256 << 20

// patternReader yields n bytes of a 1 MiB random block repeated: an
// artifact that is never in memory whole, on either side.
type patternReader struct {
	block []byte
	n     int64
	off   int64
}

func newPatternReader(n int64) *patternReader {
	block := make([]byte, 1<<20)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range block {
		block[i] = byte(r.Uint32())
	}
	return &patternReader{block: block, n: n}
}

func (p *patternReader) Read(b []byte) (int, error) {
	if p.off >= p.n {
		return 0, io.EOF
	}
	i := p.off % int64(len(p.block))
	n := copy(b, p.block[i:min(int64(len(p.block)), i+p.n-p.off)])
	p.off += int64(n)
	return n, nil
}

// multipartUpload posts size pattern bytes to url as a streamed
// multipart body (chunked, as GitLab Runner sends an archive it zips on
// the fly) with hdr, and returns the status.
func multipartUpload(b *testing.B, url string, hdr map[string]string, size int64) int {
	b.Helper()
	pr, pw := io.Pipe()
	mw := multipart.NewWriter(pw)
	go func() {
		fw, err := mw.CreateFormFile("file", "artifacts.zip")
		if err == nil {
			_, err = io.CopyBuffer(fw, newPatternReader(size), make([]byte, 256<<10))
		}
		if err == nil {
			err = mw.Close()
		}
		pw.CloseWithError(err)
	}()
	req, _ := http.NewRequest(http.MethodPost, url, pr)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		b.Fatalf("upload: %v", err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// download reads url with hdr to the end and returns the byte count.
func benchDownload(b *testing.B, url string, hdr map[string]string) int64 {
	b.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		b.Fatalf("download: %v", err)
	}
	defer resp.Body.Close()
	h := sha256.New() // the runner checks what it got; so does the baseline
	n, err := io.CopyBuffer(h, resp.Body, make([]byte, 256<<10))
	if err != nil || resp.StatusCode != http.StatusOK {
		b.Fatalf("download = %d, %v", resp.StatusCode, err)
	}
	return n
}

// memWatch samples the process's heap in use and resident set while a
// transfer runs, and keeps the peaks.
type memWatch struct {
	stop     chan struct{}
	done     sync.WaitGroup
	heapPeak uint64
	rssPeak  uint64
}

func watchMemory() *memWatch {
	runtime.GC()
	m := &memWatch{stop: make(chan struct{})}
	sample := []rtmetrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	m.done.Add(1)
	go func() {
		defer m.done.Done()
		t := time.NewTicker(5 * time.Millisecond)
		defer t.Stop()
		for {
			rtmetrics.Read(sample)
			m.heapPeak = max(m.heapPeak, sample[0].Value.Uint64())
			m.rssPeak = max(m.rssPeak, rss())
			select {
			case <-m.stop:
				return
			case <-t.C:
			}
		}
	}()
	return m
}

func (m *memWatch) end() (heapMiB, rssMiB float64) {
	close(m.stop)
	m.done.Wait()
	return float64(m.heapPeak) / (1 << 20), float64(m.rssPeak) / (1 << 20)
}

// rss is the process's resident set (VmRSS), 0 where /proc is missing.
func rss() uint64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for l := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, _ := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// BenchmarkArtifactUploadDownload uploads a 256 MiB artifact to a real
// coordinator over loopback (multipart, chunked, to disk with fsync and a
// SHA-256) and downloads it as a dependent job does, and, in the same
// run, moves the same bytes the same way through a loopback server that
// only io.Copies them (the floor: HTTP and the client's own work), and
// writes them to a file in the artifacts directory with an fsync (the
// disk's floor: an upload is kept only once synced). It reports MB/s of
// each, the ratios, and the peak heap and RSS of the
// process (coordinator and client together) during the coordinator's
// transfers: they stay bounded whatever the artifact's size.
func BenchmarkArtifactUploadDownload(b *testing.B) {
	e := newEnv(b, func(c *Config) { c.MaxArtifactSize = benchArtifactSize })
	_, tok := e.runner(nil)
	base := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			mr, err := r.MultipartReader()
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			p, err := mr.NextPart()
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			io.CopyBuffer(io.Discard, p, make([]byte, 256<<10))
			w.WriteHeader(http.StatusCreated)
			return
		}
		w.Header().Set("Content-Length", strconv.Itoa(benchArtifactSize))
		io.Copy(w, newPatternReader(benchArtifactSize))
	}))
	defer base.Close()

	var up, down, baseUp, baseDown, disk time.Duration
	var heap, rssPeak float64
	for i := 0; b.Loop(); i++ {
		build := e.running(tok, map[string]any{"name": fmt.Sprintf("build-%d", i)})
		m := watchMemory()
		t0 := time.Now()
		if code := multipartUpload(b, fmt.Sprintf("%s/api/v4/jobs/%d/artifacts", e.srv.URL, build.ID), map[string]string{hdrJobToken: build.Token}, benchArtifactSize); code != http.StatusCreated {
			b.Fatalf("upload = %d", code)
		}
		up += time.Since(t0)
		e.succeed(build)
		test := e.running(tok, map[string]any{"name": "test", "dependencies": []any{build.ID}})
		t0 = time.Now()
		if n := benchDownload(b, fmt.Sprintf("%s/api/v4/jobs/%d/artifacts", e.srv.URL, build.ID), map[string]string{hdrJobToken: test.Token}); n != benchArtifactSize {
			b.Fatalf("downloaded %d bytes", n)
		}
		down += time.Since(t0)
		h, r := m.end()
		heap, rssPeak = max(heap, h), max(rssPeak, r)
		e.succeed(test)

		t0 = time.Now()
		if code := multipartUpload(b, base.URL, nil, benchArtifactSize); code != http.StatusCreated {
			b.Fatalf("baseline upload = %d", code)
		}
		baseUp += time.Since(t0)
		t0 = time.Now()
		benchDownload(b, base.URL, nil)
		baseDown += time.Since(t0)

		// The disk's floor: the same bytes written and fsynced beside
		// the artifacts, as dd conv=fsync would.
		t0 = time.Now()
		f, err := os.CreateTemp(e.c.artifacts.dir, "floor-*")
		if err != nil {
			b.Fatal(err)
		}
		if _, err := io.CopyBuffer(f, newPatternReader(benchArtifactSize), make([]byte, 256<<10)); err != nil {
			b.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			b.Fatal(err)
		}
		f.Close()
		disk += time.Since(t0)
		os.Remove(f.Name())
	}
	mbps := func(d time.Duration) float64 { return float64(b.N) * benchArtifactSize / 1e6 / d.Seconds() }
	b.ReportMetric(mbps(up), "upload-MB/s")
	b.ReportMetric(mbps(down), "download-MB/s")
	b.ReportMetric(mbps(baseUp), "baseline-upload-MB/s")
	b.ReportMetric(mbps(baseDown), "baseline-download-MB/s")
	b.ReportMetric(mbps(disk), "disk-fsync-MB/s")
	b.ReportMetric(baseUp.Seconds()/up.Seconds(), "upload/baseline")
	b.ReportMetric(disk.Seconds()/up.Seconds(), "upload/disk")
	b.ReportMetric(baseDown.Seconds()/down.Seconds(), "download/baseline")
	b.ReportMetric(heap, "peak-heap-MiB")
	b.ReportMetric(rssPeak, "peak-RSS-MiB")
}
