package s3_test

import (
	"bufio"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/drover-ci/drover/internal/cache"
	"github.com/drover-ci/drover/internal/cache/s3"
	"github.com/drover-ci/drover/internal/cache/s3test"
)

// BenchmarkTransfer uploads and downloads a 256 MiB archive (random
// bytes, as compressed data is) to versitygw on 127.0.0.1 through
// pre-signed URLs, from and to files, as the helper does. Run with:
//
//	go test -run '^$' -bench Transfer -benchtime 3x ./internal/cache/s3
func BenchmarkTransfer(b *testing.B) {
	const size = 256 << 20
	srv := s3test.Start(b)
	dir := b.TempDir()
	src := filepath.Join(dir, "archive.zip")
	f, err := os.Create(src)
	if err != nil {
		b.Fatal(err)
	}
	w := bufio.NewWriterSize(f, 1<<20)
	rng := rand.New(rand.NewPCG(5, 6))
	for range size / 8 {
		v := rng.Uint64()
		_, _ = w.Write([]byte{byte(v), byte(v >> 8), byte(v >> 16), byte(v >> 24), byte(v >> 32), byte(v >> 40), byte(v >> 48), byte(v >> 56)})
	}
	if err := w.Flush(); err != nil {
		b.Fatal(err)
	}
	p, err := s3.New(srv.Config())
	if err != nil {
		b.Fatal(err)
	}
	store := &cache.SignedStore{Signer: p, Transfer: &cache.Transfer{}}
	name := "runner/abcdefghi/project/1/bench"

	b.Run("upload", func(b *testing.B) {
		b.SetBytes(size)
		for b.Loop() {
			if err := store.Upload(b.Context(), name, f, size); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("download", func(b *testing.B) {
		b.SetBytes(size)
		for b.Loop() {
			out, err := os.Create(filepath.Join(dir, "restored.zip"))
			if err != nil {
				b.Fatal(err)
			}
			if n, err := store.Download(b.Context(), name, out); err != nil || n != size {
				b.Fatalf("Download = %d, %v", n, err)
			}
			_ = out.Close()
		}
	})
	_ = f.Close()
}
