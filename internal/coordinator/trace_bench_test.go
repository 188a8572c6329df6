package coordinator

import (
	"context"
	"fmt"
	"hash/crc32"
	"io"
	"runtime"
	rtmetrics "runtime/metrics"
	"sync"
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/pgtest"
	"github.com/drover-ci/drover/internal/store"
	"github.com/drover-ci/drover/internal/store/postgres"
)

// BenchmarkTraceRead: the memory a whole-trace read takes (GET …/trace's
// Open and read to the end, and the final PUT's Checksum) from the traces
// of a coordinator on SQLite (files) and of one on PostgreSQL, for traces
// of 10 and 100 MiB appended as 1 MiB PATCHes. B/op is what one read
// allocates in all, peak-heap-B how far the live heap rose above its level
// before the read: both stay the same whatever the trace's size.
//
//	go test -run '^$' -bench BenchmarkTraceRead -benchtime 5x ./internal/coordinator
func BenchmarkTraceRead(b *testing.B) {
	for _, backend := range []string{"files", "postgres"} {
		b.Run(backend, func(b *testing.B) {
			tr, newJob := benchTraces(b, backend)
			for _, mib := range []int{10, 100} {
				b.Run(fmt.Sprintf("%dMiB", mib), func(b *testing.B) {
					id := newJob()
					want := fillTrace(b, tr, id, mib)
					b.Run("checksum", func(b *testing.B) {
						benchPeakHeap(b, func() {
							sum, err := tr.Checksum(b.Context(), id)
							if err != nil || sum != want {
								b.Fatalf("Checksum = %s, %v; want %s", sum, err, want)
							}
						})
					})
					b.Run("open-read", func(b *testing.B) {
						buf := make([]byte, 32<<10) // as io.Copy's
						benchPeakHeap(b, func() {
							rc, err := tr.Open(b.Context(), id, 0)
							if err != nil {
								b.Fatal(err)
							}
							h := crc32.NewIEEE()
							_, err = io.CopyBuffer(h, rc, buf)
							rc.Close()
							if sum := fmt.Sprintf("crc32:%08x", h.Sum32()); err != nil || sum != want {
								b.Fatalf("read = %s, %v; want %s", sum, err, want)
							}
						})
					})
				})
			}
		})
	}
}

// benchTraces opens the traces of backend and a function making a job
// whose trace they may keep.
func benchTraces(b *testing.B, backend string) (store.Traces, func() int64) {
	if backend == "files" {
		td, err := newTraceDir(b.TempDir())
		if err != nil {
			b.Fatal(err)
		}
		var next int64
		return td, func() int64 { next++; return next }
	}
	st, err := postgres.Open(b.Context(), pgtest.NewDatabase(b))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	return st.Traces(), func() int64 {
		j, err := st.CreateJob(b.Context(), store.Job{Name: "j", Project: "p", Status: store.StatusRunning, CreatedAt: time.Now()})
		if err != nil {
			b.Fatal(err)
		}
		return j.ID
	}
}

// fillTrace appends mib PATCHes of 1 MiB to job id's trace and returns its
// checksum.
func fillTrace(b *testing.B, tr store.Traces, id int64, mib int) string {
	chunk := make([]byte, maxTracePart)
	h := crc32.NewIEEE()
	var size int64
	for i := range mib {
		for j := range chunk {
			chunk[j] = 'a' + byte((i+j)%26)
		}
		chunk[len(chunk)-1] = '\n'
		n, err := tr.Append(context.Background(), id, size, chunk)
		if err != nil {
			b.Fatalf("Append at %d = %v", size, err)
		}
		h.Write(chunk)
		size = n
	}
	return fmt.Sprintf("crc32:%08x", h.Sum32())
}

// benchPeakHeap runs op b.N times, reporting allocations and, as
// peak-heap-B, the largest rise of the live heap during one op over its
// level after a GC before it (sampled every 100µs, and at the end).
func benchPeakHeap(b *testing.B, op func()) {
	b.ReportAllocs()
	sample := []rtmetrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	heap := func() uint64 {
		rtmetrics.Read(sample)
		return sample[0].Value.Uint64()
	}
	var peak uint64
	for b.Loop() {
		b.StopTimer()
		runtime.GC()
		base := heap()
		var top uint64
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() {
			t := time.NewTicker(100 * time.Microsecond)
			defer t.Stop()
			for {
				if h := heap(); h > top {
					top = h
				}
				select {
				case <-stop:
					return
				case <-t.C:
				}
			}
		})
		b.StartTimer()
		op()
		b.StopTimer()
		close(stop)
		wg.Wait()
		if h := heap(); h > top {
			top = h
		}
		if top > base && top-base > peak {
			peak = top - base
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(peak), "peak-heap-B")
}
