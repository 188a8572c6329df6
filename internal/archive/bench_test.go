package archive

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/metrics"
	"sync"
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/archive/archivetest"
)

// The benchmarks archive and extract two trees (see archivetest), each
// also with Info-ZIP's zip and unzip as the floor, in the same run:
//
//   - small: 20,000 files of 200 B to 6 KiB of JavaScript-like text in a
//     node_modules-like tree (1,000 packages of 20 files);
//   - large: one file of 256 MiB (1 GiB with DROVER_BENCH_BIG=1), a
//     quarter random bytes and the rest compressible text.
//
// Each reports MB/s of file data, and peak-heap-MiB (the Go heap's high
// water mark during the operation, sampled) or, for zip/unzip,
// peak-rss-MiB of the child. Run with:
//
//	go test -run '^$' -bench . -benchtime 3x ./internal/archive

// heapPeak samples the Go heap until stop is called, and returns the
// highest value seen in MiB.
func heapPeak() (stop func() float64) {
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	var peak uint64
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(2 * time.Millisecond)
		defer t.Stop()
		for {
			metrics.Read(sample)
			peak = max(peak, sample[0].Value.Uint64())
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	})
	return func() float64 {
		close(done)
		wg.Wait()
		return float64(peak) / (1 << 20)
	}
}

func BenchmarkArchive(b *testing.B) {
	for _, tree := range []struct {
		name string
		make func(testing.TB, string) int64
	}{
		{"small-20000-files", archivetest.SmallTree},
		{"large-file", archivetest.LargeFile},
	} {
		b.Run(tree.name, func(b *testing.B) {
			src := b.TempDir()
			size := tree.make(b, src)
			work := b.TempDir()
			archive := filepath.Join(work, "drover.zip")

			b.Run("create", func(b *testing.B) {
				b.SetBytes(size)
				stop := heapPeak()
				for b.Loop() {
					f, err := os.Create(archive)
					if err != nil {
						b.Fatal(err)
					}
					w := bufio.NewWriterSize(f, 1<<20)
					st, err := Create(b.Context(), w, src, []string{"."}, CreateOptions{})
					if err == nil {
						err = w.Flush()
					}
					if err != nil {
						b.Fatal(err)
					}
					_ = f.Close()
					b.ReportMetric(float64(st.ArchiveBytes)/float64(size), "ratio")
				}
				b.ReportMetric(stop(), "peak-heap-MiB")
			})
			b.Run("extract", func(b *testing.B) {
				b.SetBytes(size)
				stop := heapPeak()
				for b.Loop() {
					b.StopTimer()
					dest := filepath.Join(work, "dest")
					_ = os.RemoveAll(dest)
					if err := os.Mkdir(dest, 0o755); err != nil {
						b.Fatal(err)
					}
					f, err := os.Open(archive)
					if err != nil {
						b.Fatal(err)
					}
					info, _ := f.Stat()
					b.StartTimer()
					if _, err := Extract(b.Context(), f, info.Size(), dest, ExtractOptions{}); err != nil {
						b.Fatal(err)
					}
					_ = f.Close()
				}
				b.ReportMetric(stop(), "peak-heap-MiB")
			})
			zipBin, zerr := exec.LookPath("zip")
			unzipBin, uerr := exec.LookPath("unzip")
			if zerr != nil || uerr != nil {
				b.Log("zip/unzip not installed: no baseline (scripts/test.sh installs them)")
				return
			}
			zipArchive := filepath.Join(work, "info-zip.zip")
			b.Run("zip", func(b *testing.B) {
				b.SetBytes(size)
				for b.Loop() {
					_ = os.Remove(zipArchive)
					reportRSS(b, runMeasured(b, src, zipBin, "-q", "-r", "--symlinks", zipArchive, "."))
				}
			})
			b.Run("unzip", func(b *testing.B) {
				b.SetBytes(size)
				for b.Loop() {
					b.StopTimer()
					dest := filepath.Join(work, "dest-unzip")
					_ = os.RemoveAll(dest)
					b.StartTimer()
					reportRSS(b, runMeasured(b, "", unzipBin, "-q", zipArchive, "-d", dest))
				}
			})
		})
	}
}

// runMeasured runs a command in dir and returns its peak resident set in
// MiB, measured by GNU time when installed (the rusage Go gets for a
// child counts the memory of the Go process it was cloned from), else 0.
func runMeasured(b *testing.B, dir, bin string, args ...string) float64 {
	rss := filepath.Join(b.TempDir(), "rss")
	timeBin, terr := exec.LookPath("time")
	var cmd *exec.Cmd
	if terr == nil {
		cmd = exec.CommandContext(b.Context(), timeBin, append([]string{"-f", "%M", "-o", rss, bin}, args...)...)
	} else {
		cmd = exec.CommandContext(b.Context(), bin, args...)
	}
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("%s: %v\n%s", bin, err, out)
	}
	data, err := os.ReadFile(rss)
	if err != nil {
		return 0
	}
	var kib float64
	if _, err := fmt.Sscan(string(data), &kib); err != nil {
		return 0
	}
	return kib / 1024
}

func reportRSS(b *testing.B, mib float64) {
	if mib > 0 {
		b.ReportMetric(mib, "peak-rss-MiB")
	}
}
