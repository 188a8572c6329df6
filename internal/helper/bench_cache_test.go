package helper

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/archive/archivetest"
	"github.com/drover-ci/drover/internal/cache"
	"github.com/drover-ci/drover/internal/cache/s3"
	"github.com/drover-ci/drover/internal/cache/s3test"
)

// helperRSSLimit is the bound issue 12 sets on the helper's memory,
// whatever the size of the cache.
const helperRSSLimit = 64 << 20

// BenchmarkHelperCacheS3 measures the cache end to end as a job sees it:
// the drover binary, run as a subprocess, archives a tree and uploads the
// archive to a real S3 server (versitygw on 127.0.0.1) through a
// pre-signed PUT URL (`drover helper cache-archiver --url`), then, the
// tree removed, downloads it through a pre-signed GET URL and extracts it
// (`drover helper cache-extractor --url`). The trees are archivetest's:
// 20,000 small files (about 63 MB; another number, a multiple of 20, with
// DROVER_BENCH_FILES=N), and one file of 256 MiB (1 GiB with
// DROVER_BENCH_BIG=1). The object is at GitLab's layout
// (cache.ObjectName: runner/<short token>/project/<id>/<key>).
//
// Each operation reports MB/s of file data (uncompressed) and
// helper-RSS-MiB, the subprocess's peak resident set as GNU time's %M; it
// fails when that is over 64 MiB. (The rusage Go gets for a child it
// starts counts the Go parent's own peak: the child is cloned with the
// parent's memory until it execs. GNU time forks from a small process,
// so its figure is the helper's own.) The helper runs with the
// environment's GOGC, GOMEMLIMIT and GOMAXPROCS removed: what is measured
// is its own defaults.
//
// The floor, in the same run: Info-ZIP `zip -q -r --symlinks` of the same
// path (a subprocess) followed by the same upload to the same URL with
// cache.Transfer in the benchmark's process; and the same download with
// cache.Transfer to a file followed by `unzip -q` into the project
// directory. The floor's transfers are the helper's code, so the ratio
// measures the archive and extract work plus the helper's process start.
//
// Each floor reports helper-speedup, its time over the helper's (above 1:
// the helper was faster); with -v each tree's benchmark also logs a
// summary. Run with:
//
//	go test -run '^$' -bench HelperCacheS3 -benchtime 3x -v ./internal/helper
//	DROVER_BENCH_BIG=1 go test -run '^$' -bench HelperCacheS3 -benchtime 1x -timeout 1h -v ./internal/helper
//
// The sub-benchmarks depend on each other's order (each download gets
// what the upload before it put); run them all.
func BenchmarkHelperCacheS3(b *testing.B) {
	timeBin, err := exec.LookPath("time")
	if err != nil || !gnuTime(timeBin) {
		b.Skip("GNU time not installed (apt-get install time): the helper's peak RSS cannot be measured; Go's rusage of a child counts the parent's memory")
	}
	zipBin, zerr := exec.LookPath("zip")
	unzipBin, uerr := exec.LookPath("unzip")
	if zerr != nil || uerr != nil {
		b.Skip("zip/unzip not installed: no floor (scripts/test.sh installs them)")
	}
	srv := s3test.Start(b) // skips when versitygw is not installed
	drover := buildDrover(b)

	p, err := s3.New(srv.Config())
	if err != nil {
		b.Fatal(err)
	}
	transfer := &cache.Transfer{}
	files := archivetest.SmallTreeFiles
	if v := os.Getenv("DROVER_BENCH_FILES"); v != "" {
		if files, err = strconv.Atoi(v); err != nil || files < 20 || files%20 != 0 {
			b.Fatalf("DROVER_BENCH_FILES=%q: want a multiple of 20", v)
		}
	}
	small := func(tb testing.TB, dir string) int64 { return archivetest.SmallTreeOf(tb, dir, files) }
	for _, tree := range []struct {
		name string
		path string // the cache's path, relative to the project directory
		make func(testing.TB, string) int64
	}{
		{fmt.Sprintf("small-%d-files", files), archivetest.SmallTreeDir, small},
		{"large-file", archivetest.LargeFileName, archivetest.LargeFile},
	} {
		b.Run(tree.name, func(b *testing.B) {
			project := b.TempDir()
			size := tree.make(b, project)
			files, _ := countFiles(b, filepath.Join(project, tree.path))
			work := b.TempDir()
			name, err := cache.ObjectName(cache.Config{}, cache.ShortToken("glrt-benchmarkrunner"), 42, "bench-"+tree.name)
			if err != nil {
				b.Fatal(err)
			}
			putURL, header, err := p.PutURL(b.Context(), name, 2*time.Hour)
			if err != nil {
				b.Fatal(err)
			}
			getURL, err := p.GetURL(b.Context(), name, 2*time.Hour)
			if err != nil {
				b.Fatal(err)
			}
			headerArgs := []string{}
			for k, vs := range header {
				for _, v := range vs {
					headerArgs = append(headerArgs, "--header", k+": "+v)
				}
			}
			var sum summary
			// measure runs op once per b.Loop and returns its mean time
			// and the peak RSS it reported. Before each run, untimed,
			// file is removed and, with restore, so is the cached tree,
			// which is checked after each run.
			treeDir := filepath.Join(project, tree.path)
			measure := func(b *testing.B, file string, restore bool, op func() float64) (time.Duration, float64) {
				b.SetBytes(size)
				var rss float64
				n := 0
				for b.Loop() {
					b.StopTimer()
					_ = os.Remove(file)
					if restore {
						if err := os.RemoveAll(treeDir); err != nil {
							b.Fatal(err)
						}
					}
					b.StartTimer()
					rss = max(rss, op())
					if restore {
						b.StopTimer()
						checkTree(b, treeDir, files, size)
						b.StartTimer()
					}
					n++
				}
				return b.Elapsed() / time.Duration(n), rss
			}

			b.Run("archive+upload", func(b *testing.B) {
				file := filepath.Join(work, "cache.zip")
				sum.archive, sum.archiveRSS = measure(b, file, false, func() float64 {
					args := append([]string{"helper", "cache-archiver", "--root", project, "--file", file,
						"--path", tree.path, "--url", putURL.String(), "--timeout", "1h"}, headerArgs...)
					return runRSS(b, timeBin, "", drover, args...)
				})
				reportHelperRSS(b, sum.archiveRSS)
				if info, err := os.Stat(file); err == nil {
					b.ReportMetric(float64(info.Size())/float64(size), "archive/data")
				}
			})
			b.Run("download+extract", func(b *testing.B) {
				file := filepath.Join(work, "restored.zip")
				sum.extract, sum.extractRSS = measure(b, file, true, func() float64 {
					return runRSS(b, timeBin, "", drover, "helper", "cache-extractor", "--root", project,
						"--file", file, "--url", getURL.String(), "--timeout", "1h")
				})
				reportHelperRSS(b, sum.extractRSS)
			})
			b.Run("floor-zip+upload", func(b *testing.B) {
				file := filepath.Join(work, "floor.zip")
				var rss float64
				sum.floorArchive, rss = measure(b, file, false, func() float64 {
					zipRSS := runRSS(b, timeBin, project, zipBin, "-q", "-r", "--symlinks", file, tree.path)
					f, err := os.Open(file)
					if err != nil {
						b.Fatal(err)
					}
					info, err := f.Stat()
					if err != nil {
						b.Fatal(err)
					}
					if err := transfer.Upload(b.Context(), putURL.String(), header, f, info.Size()); err != nil {
						b.Fatal(err)
					}
					_ = f.Close()
					return zipRSS
				})
				b.ReportMetric(rss, "zip-RSS-MiB")
				reportSpeedup(b, sum.floorArchive, sum.archive)
			})
			b.Run("floor-download+unzip", func(b *testing.B) {
				file := filepath.Join(work, "floor-restored.zip")
				var rss float64
				sum.floorExtract, rss = measure(b, file, true, func() float64 {
					f, err := os.Create(file)
					if err != nil {
						b.Fatal(err)
					}
					if _, err := transfer.Download(b.Context(), getURL.String(), f); err != nil {
						b.Fatal(err)
					}
					if err := f.Close(); err != nil {
						b.Fatal(err)
					}
					return runRSS(b, timeBin, "", unzipBin, "-q", file, "-d", project)
				})
				b.ReportMetric(rss, "unzip-RSS-MiB")
				reportSpeedup(b, sum.floorExtract, sum.extract)
			})
			sum.log(b, size)
		})
	}
}

// summary is one tree's mean times per operation, for the log.
type summary struct {
	archive, extract, floorArchive, floorExtract time.Duration
	archiveRSS, extractRSS                       float64
}

func (s summary) log(b *testing.B, size int64) {
	if s.archive == 0 || s.extract == 0 || s.floorArchive == 0 || s.floorExtract == 0 {
		return // a sub-benchmark was filtered out
	}
	mbps := func(d time.Duration) float64 { return float64(size) / 1e6 / d.Seconds() }
	b.Logf("%.1f MB of file data; archive+upload %.2f s (%.1f MB/s, helper RSS %.1f MiB), floor zip+upload %.2f s (%.1f MB/s): helper/floor time %.2f",
		float64(size)/1e6, s.archive.Seconds(), mbps(s.archive), s.archiveRSS, s.floorArchive.Seconds(), mbps(s.floorArchive), s.archive.Seconds()/s.floorArchive.Seconds())
	b.Logf("download+extract %.2f s (%.1f MB/s, helper RSS %.1f MiB), floor download+unzip %.2f s (%.1f MB/s): helper/floor time %.2f",
		s.extract.Seconds(), mbps(s.extract), s.extractRSS, s.floorExtract.Seconds(), mbps(s.floorExtract), s.extract.Seconds()/s.floorExtract.Seconds())
}

// reportSpeedup reports on a floor's sub-benchmark how many times faster
// the helper was than the floor (the floor's time over the helper's),
// when the helper's sub-benchmark ran.
func reportSpeedup(b *testing.B, floor, helper time.Duration) {
	if helper > 0 {
		b.ReportMetric(floor.Seconds()/helper.Seconds(), "helper-speedup")
	}
}

// buildDrover builds the drover binary once for the benchmark.
func buildDrover(b *testing.B) string {
	b.Helper()
	bin := filepath.Join(b.TempDir(), "drover")
	cmd := exec.CommandContext(b.Context(), "go", "build", "-o", bin, "github.com/drover-ci/drover/cmd/drover")
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// gnuTime reports whether bin is GNU time (which has -f and -o), not
// another program of that name.
func gnuTime(bin string) bool {
	out, err := exec.Command(bin, "--version").CombinedOutput()
	return err == nil && bytes.Contains(out, []byte("GNU"))
}

// runRSS runs bin with args in dir (the working directory when "")
// under GNU time and returns the child's peak resident set in MiB. The
// environment's Go runtime settings are not passed on.
func runRSS(b *testing.B, timeBin, dir, bin string, args ...string) float64 {
	b.Helper()
	rssFile := filepath.Join(b.TempDir(), "rss")
	cmd := exec.CommandContext(b.Context(), timeBin, append([]string{"-f", "%M", "-o", rssFile, bin}, args...)...)
	cmd.Dir = dir
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GOGC=") && !strings.HasPrefix(kv, "GOMEMLIMIT=") && !strings.HasPrefix(kv, "GOMAXPROCS=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("%s %s: %v\n%s", filepath.Base(bin), strings.Join(args[:min(2, len(args))], " "), err, out)
	}
	data, err := os.ReadFile(rssFile)
	if err != nil {
		b.Fatal(err)
	}
	kib, err := strconv.ParseFloat(strings.TrimSpace(string(data)), 64)
	if err != nil {
		b.Fatalf("GNU time's %%M: %q: %v", data, err)
	}
	return kib / 1024
}

// reportHelperRSS reports the helper's peak RSS and fails b when it is
// over the bound.
func reportHelperRSS(b *testing.B, mib float64) {
	b.ReportMetric(mib, "helper-RSS-MiB")
	if mib > helperRSSLimit>>20 {
		b.Errorf("the helper's peak RSS was %.1f MiB, over the bound of %d MiB", mib, helperRSSLimit>>20)
	}
}

// countFiles returns the number of regular files under root and their
// total size.
func countFiles(b *testing.B, root string) (int, int64) {
	b.Helper()
	var n int
	var size int64
	err := filepath.WalkDir(root, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		n++
		size += info.Size()
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	return n, size
}

// checkTree fails b unless root has files regular files of size bytes in
// all: what was archived came back.
func checkTree(b *testing.B, root string, files int, size int64) {
	b.Helper()
	if n, s := countFiles(b, root); n != files || s != size {
		b.Fatalf("restored %s: %d files, %d bytes; want %d files, %d bytes", root, n, s, files, size)
	}
}
