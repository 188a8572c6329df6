// Package archivetest makes the file trees the archive and cache
// benchmarks work on, the same in every package that uses them:
//
//   - [SmallTree]: 20,000 files of 200 B to 6 KiB of JavaScript-like text
//     in a node_modules-like tree (1,000 packages of 20 files), about
//     63 MB;
//   - [LargeFile]: one file of 256 MiB (1 GiB with DROVER_BENCH_BIG=1), a
//     quarter random bytes and the rest compressible text.
//
// Both are deterministic (seeded) and written through a 1 MiB buffer, so
// making them does not raise the calling process's memory.
package archivetest

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
)

const (
	// SmallTreeDir is the directory SmallTree makes under its dir.
	SmallTreeDir = "node_modules"
	// SmallTreeFiles is the number of files in it.
	SmallTreeFiles = 20000
	// LargeFileName is the file LargeFile makes in its dir.
	LargeFileName = "large.bin"
)

// LargeFileSize is the size of the file LargeFile makes: 256 MiB, or
// 1 GiB when the environment has DROVER_BENCH_BIG=1.
func LargeFileSize() int64 {
	if os.Getenv("DROVER_BENCH_BIG") == "1" {
		return 1 << 30
	}
	return 256 << 20
}

var words = []string{"function", "return", "const", "module", "exports", "require", "this", "value", "undefined", "=>", "{", "}", "(", ")", ";", "\n", "  ", "if", "else", "for", "let", "async", "await", "Promise"}

// writeText writes n bytes of JavaScript-like text to w.
func writeText(w *bufio.Writer, rng *rand.Rand, n int) {
	for n > 0 {
		word := words[rng.IntN(len(words))]
		if len(word) > n {
			word = word[:n]
		}
		_, _ = w.WriteString(word)
		n -= len(word)
		if n > 0 {
			_ = w.WriteByte(' ')
			n--
		}
	}
}

func writeFile(tb testing.TB, p string, fill func(*bufio.Writer)) {
	tb.Helper()
	f, err := os.Create(p)
	if err != nil {
		tb.Fatal(err)
	}
	w := bufio.NewWriterSize(f, 1<<20)
	fill(w)
	if err := w.Flush(); err != nil {
		tb.Fatal(err)
	}
	if err := f.Close(); err != nil {
		tb.Fatal(err)
	}
}

// SmallTree makes the node_modules-like tree under dir (in
// dir/node_modules) and returns its data size.
func SmallTree(tb testing.TB, dir string) int64 {
	tb.Helper()
	return SmallTreeOf(tb, dir, SmallTreeFiles)
}

// SmallTreeOf is SmallTree with files files (a multiple of 20) in
// packages of 20.
func SmallTreeOf(tb testing.TB, dir string, files int) int64 {
	tb.Helper()
	rng := rand.New(rand.NewPCG(1, 2))
	var total int64
	pkgs := files / 20
	for pkg := range pkgs {
		pdir := filepath.Join(dir, SmallTreeDir, fmt.Sprintf("pkg-%04d", pkg), "lib")
		if err := os.MkdirAll(pdir, 0o755); err != nil {
			tb.Fatal(err)
		}
		for i := range 20 {
			n := 200 + rng.IntN(6*1024-200)
			total += int64(n)
			writeFile(tb, filepath.Join(pdir, fmt.Sprintf("file-%02d.js", i)), func(w *bufio.Writer) { writeText(w, rng, n) })
		}
	}
	return total
}

// LargeFile makes dir/large.bin, of LargeFileSize bytes in 1 MiB pieces,
// every fourth random and the others text, and returns its size.
func LargeFile(tb testing.TB, dir string) int64 {
	tb.Helper()
	size := LargeFileSize()
	rng := rand.New(rand.NewPCG(3, 4))
	writeFile(tb, filepath.Join(dir, LargeFileName), func(w *bufio.Writer) {
		buf := make([]byte, 1<<20)
		for off := int64(0); off < size; off += int64(len(buf)) {
			if (off>>20)%4 == 0 {
				for i := range buf {
					buf[i] = byte(rng.Uint32())
				}
				_, _ = w.Write(buf)
			} else {
				writeText(w, rng, len(buf))
			}
		}
	})
	return size
}
