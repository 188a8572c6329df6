package trace_test

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/drover-ci/drover/internal/trace"
)

// gitlabTokenPrefixes are token prefixes GitLab masks.
var gitlabTokenPrefixes = []string{
	"glpat-", "gloas-", "gldt-", "glrt-", "glrtr-", "glcbt-", "glptt-", "glft-",
	"glimt-", "glagent-", "glsoat-", "glffct-", "gltst-",
}

// logCorpus returns size bytes of log-like text in which the two secrets
// and a token appear now and then.
func logCorpus(size int) []byte {
	var b bytes.Buffer
	for i := 0; b.Len() < size; i++ {
		switch i % 50 {
		case 7:
			fmt.Fprintf(&b, "$ curl -H 'PRIVATE-TOKEN: glpat-%08dAbCdEfGhIj' https://gitlab.example.com/api/v4/projects\n", i)
		case 23:
			fmt.Fprintf(&b, "export DB_PASSWORD=Sup3rS3cr3tP4ssw0rd # step %d\n", i)
		case 41:
			fmt.Fprintf(&b, "Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.deploy-key-%d\n", i)
		default:
			fmt.Fprintf(&b, "[%06d] Compiling github.com/example/project/internal/pkg%d (%d%%)...\n", i, i%17, i%100)
		}
	}
	return b.Bytes()[:size]
}

var benchMasked = []string{"Sup3rS3cr3tP4ssw0rd", "eyJhbGciOiJIUzI1NiJ9"}

// BenchmarkWrite measures Write throughput with 4 KiB writes and two masked
// values, without and with GitLab's token prefixes.
func BenchmarkWrite(b *testing.B) {
	const writeSize = 4 << 10
	corpus := logCorpus(1 << 20)
	for _, bc := range []struct {
		name     string
		prefixes []string
	}{
		{"masked=2", nil},
		{"masked=2/prefixes=13", gitlabTokenPrefixes},
	} {
		b.Run(bc.name, func(b *testing.B) {
			dir := b.TempDir()
			opts := trace.Options{Masked: benchMasked, TokenPrefixes: bc.prefixes, Dir: dir}
			buf, err := trace.New(opts)
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(writeSize)
			b.ReportAllocs()
			off := 0
			i := 0
			for b.Loop() {
				if off+writeSize > len(corpus) {
					off = 0
				}
				if _, err := buf.Write(corpus[off : off+writeSize]); err != nil {
					b.Fatal(err)
				}
				off += writeSize
				i++
				if i%(64<<20/writeSize) == 0 { // a fresh file every 64 MiB
					b.StopTimer()
					buf.Close()
					if buf, err = trace.New(opts); err != nil {
						b.Fatal(err)
					}
					b.StartTimer()
				}
			}
			b.StopTimer()
			buf.Close()
		})
	}
}

// BenchmarkWrite1GiB writes 1 GiB in 4 KiB writes and reports how much the
// process' peak resident set grew (rss-MiB, from VmHWM in /proc/self/status,
// reset through /proc/self/clear_refs where allowed) and the heap the Go
// runtime obtained (heap-sys-MiB). Run it alone:
//
//	go test -run '^$' -bench 'Write1GiB' -benchtime 1x ./internal/trace/
func BenchmarkWrite1GiB(b *testing.B) {
	const (
		total     = 1 << 30
		writeSize = 4 << 10
	)
	corpus := logCorpus(1 << 20)
	dir := b.TempDir()
	b.SetBytes(total)
	for b.Loop() {
		b.StopTimer()
		runtime.GC()
		var before runtime.MemStats
		runtime.ReadMemStats(&before)
		resetPeakRSS()
		rssBefore := procStatusKiB(b, "VmRSS")
		buf, err := trace.New(trace.Options{Masked: benchMasked, TokenPrefixes: gitlabTokenPrefixes, Dir: dir})
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		for written := 0; written < total; written += writeSize {
			off := written % len(corpus)
			if _, err := buf.Write(corpus[off : off+writeSize]); err != nil {
				b.Fatal(err)
			}
		}
		buf.Finish()
		b.StopTimer()
		peak := procStatusKiB(b, "VmHWM")
		var after runtime.MemStats
		runtime.ReadMemStats(&after)
		if buf.Size() < total/2 {
			b.Fatalf("stored only %d bytes", buf.Size())
		}
		if err := buf.Close(); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(peak-rssBefore)/1024, "rss-MiB")
		b.ReportMetric((float64(after.HeapSys)-float64(before.HeapSys))/(1<<20), "heap-sys-MiB")
		b.StartTimer()
	}
}

// resetPeakRSS resets VmHWM to the current RSS (Linux 4.0+); where that is
// not allowed, VmHWM keeps the peak of the whole process, which can only
// overstate the growth.
func resetPeakRSS() {
	_ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0)
}

// procStatusKiB returns a "kB" field of /proc/self/status.
func procStatusKiB(b *testing.B, field string) int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		b.Skipf("no /proc: %v", err)
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		name, value, ok := strings.Cut(s.Text(), ":")
		if !ok || name != field {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(value), " kB"), 10, 64)
		if err != nil {
			b.Fatalf("%s: %v", field, err)
		}
		return n
	}
	b.Skipf("no %s in /proc/self/status", field)
	return 0
}
