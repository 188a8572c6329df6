package storetest

import (
	"bytes"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"runtime"
	"sync"
	"testing"

	"github.com/drover-ci/drover/internal/store"
)

// TraceHarness opens trace stores for RunTraces.
type TraceHarness interface {
	// OpenTraces returns an empty trace store and a function that makes a
	// job whose trace it may keep (stores keeping traces in the database
	// need the job's row), returning its id.
	OpenTraces(t *testing.T) (store.Traces, func(t *testing.T) int64)
}

// RunTraces runs the conformance tests of store.Traces against h.
func RunTraces(t *testing.T, h TraceHarness) {
	tests := []struct {
		name string
		fn   func(t *testing.T, tr store.Traces, newJob func(t *testing.T) int64)
	}{
		{"AppendAndRead", testTraceAppend},
		{"Offsets", testTraceOffsets},
		{"Truncate", testTraceTruncate},
		{"Archive", testTraceArchive},
		{"ConcurrentAppend", testTraceConcurrentAppend},
		{"LongTrace", testTraceLong},
		{"BoundedReads", testTraceBoundedReads},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr, newJob := h.OpenTraces(t)
			tt.fn(t, tr, newJob)
		})
	}
}

// readTrace returns the trace of id from offset, and checks that the
// checksum matches it when offset is 0.
func readTrace(t *testing.T, tr store.Traces, id, offset int64) string {
	t.Helper()
	rc, err := tr.Open(t.Context(), id, offset)
	if err != nil {
		t.Fatalf("Open(%d, %d) = %v", id, offset, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatalf("read trace %d: %v", id, err)
	}
	if offset == 0 {
		sum, err := tr.Checksum(t.Context(), id)
		if err != nil {
			t.Fatalf("Checksum(%d) = %v", id, err)
		}
		if want := fmt.Sprintf("crc32:%08x", crc32.ChecksumIEEE(b)); sum != want {
			t.Errorf("Checksum(%d) = %s, want %s (of %q)", id, sum, want, b)
		}
	}
	return string(b)
}

func size(t *testing.T, tr store.Traces, id int64) int64 {
	t.Helper()
	n, err := tr.Size(t.Context(), id)
	if err != nil {
		t.Fatalf("Size(%d) = %v", id, err)
	}
	return n
}

func mustAppend(t *testing.T, tr store.Traces, id, start int64, s string) int64 {
	t.Helper()
	n, err := tr.Append(t.Context(), id, start, []byte(s))
	if err != nil {
		t.Fatalf("Append(%d, %d, %q) = %v", id, start, s, err)
	}
	if n != start+int64(len(s)) {
		t.Fatalf("Append(%d, %d, %q) = size %d, want %d", id, start, s, n, start+int64(len(s)))
	}
	return n
}

func testTraceAppend(t *testing.T, tr store.Traces, newJob func(t *testing.T) int64) {
	a, b := newJob(t), newJob(t)
	if n := size(t, tr, a); n != 0 {
		t.Fatalf("Size of a new job's trace = %d, want 0", n)
	}
	if got := readTrace(t, tr, a, 0); got != "" {
		t.Fatalf("new trace reads %q", got)
	}
	n := mustAppend(t, tr, a, 0, "hello ")
	n = mustAppend(t, tr, a, n, "world\n")
	mustAppend(t, tr, b, 0, "other job\n")
	// Bytes that are not UTF-8, and NULs, survive.
	bin := "\x00\xff\xfe\x1b[31mred\x1b[0m\n"
	n = mustAppend(t, tr, a, n, bin)
	if got, want := readTrace(t, tr, a, 0), "hello world\n"+bin; got != want {
		t.Fatalf("trace = %q, want %q", got, want)
	}
	if size(t, tr, a) != n {
		t.Fatalf("Size = %d, want %d", size(t, tr, a), n)
	}
	if got := readTrace(t, tr, b, 0); got != "other job\n" {
		t.Fatalf("trace of b = %q", got)
	}
	// An empty append at the end changes nothing.
	if m, err := tr.Append(t.Context(), a, n, nil); err != nil || m != n {
		t.Fatalf("empty Append = %d, %v; want %d, nil", m, err, n)
	}
}

func testTraceOffsets(t *testing.T, tr store.Traces, newJob func(t *testing.T) int64) {
	id := newJob(t)
	n := mustAppend(t, tr, id, 0, "0123")
	n = mustAppend(t, tr, id, n, "4567")
	for _, off := range []int64{0, 1, 4, 5, 7, 8} {
		if got, want := readTrace(t, tr, id, off), "01234567"[off:]; got != want {
			t.Errorf("read from %d = %q, want %q", off, got, want)
		}
	}
	for _, start := range []int64{0, 3, 7, 9, 100} {
		_, err := tr.Append(t.Context(), id, start, []byte("x"))
		var off *store.TraceOffsetError
		if !errors.As(err, &off) || off.Size != n || off.Start != start {
			t.Errorf("Append at %d of an %d-byte trace = %v, want a TraceOffsetError with size %d", start, n, err, n)
		}
	}
	if got := readTrace(t, tr, id, 0); got != "01234567" {
		t.Fatalf("after refused appends, trace = %q", got)
	}
	other := newJob(t)
	if _, err := tr.Append(t.Context(), other, 5, []byte("x")); err == nil {
		t.Fatalf("Append at 5 of an empty trace succeeded")
	}
}

func testTraceTruncate(t *testing.T, tr store.Traces, newJob func(t *testing.T) int64) {
	ctx := t.Context()
	id := newJob(t)
	n := mustAppend(t, tr, id, 0, "abc")
	n = mustAppend(t, tr, id, n, "def")
	n = mustAppend(t, tr, id, n, "ghi")
	// A condition that does not hold: nothing happens.
	if err := tr.Truncate(ctx, id, n-1, 3); err != nil {
		t.Fatal(err)
	}
	if got := readTrace(t, tr, id, 0); got != "abcdefghi" {
		t.Fatalf("truncate with a stale size changed the trace to %q", got)
	}
	// Undo of the last append (as the reaper does).
	if err := tr.Truncate(ctx, id, n, 6); err != nil {
		t.Fatal(err)
	}
	if got := readTrace(t, tr, id, 0); got != "abcdef" || size(t, tr, id) != 6 {
		t.Fatalf("after truncate to 6: %q (size %d)", got, size(t, tr, id))
	}
	// Into the middle of a chunk.
	if err := tr.Truncate(ctx, id, -1, 4); err != nil {
		t.Fatal(err)
	}
	if got := readTrace(t, tr, id, 0); got != "abcd" || size(t, tr, id) != 4 {
		t.Fatalf("after truncate to 4: %q (size %d)", got, size(t, tr, id))
	}
	n = mustAppend(t, tr, id, 4, "XY")
	if got := readTrace(t, tr, id, 2); got != "cdXY" {
		t.Fatalf("append after truncate, read from 2 = %q", got)
	}
	// Reset (a 412): appends start at 0 again.
	if err := tr.Truncate(ctx, id, -1, 0); err != nil {
		t.Fatal(err)
	}
	if size(t, tr, id) != 0 {
		t.Fatalf("size after reset = %d", size(t, tr, id))
	}
	mustAppend(t, tr, id, 0, "again")
	if got := readTrace(t, tr, id, 0); got != "again" {
		t.Fatalf("after reset and append: %q", got)
	}
	// Growing is not truncating.
	if err := tr.Truncate(ctx, id, -1, 100); err != nil {
		t.Fatal(err)
	}
	if size(t, tr, id) != 5 {
		t.Fatalf("Truncate to more than the size changed it to %d", size(t, tr, id))
	}
	_ = n
}

func testTraceArchive(t *testing.T, tr store.Traces, newJob func(t *testing.T) int64) {
	ctx := t.Context()
	id := newJob(t)
	mustAppend(t, tr, id, 0, "attempt one\n")
	if err := tr.Archive(ctx, id, 1); err != nil {
		t.Fatal(err)
	}
	if size(t, tr, id) != 0 || readTrace(t, tr, id, 0) != "" {
		t.Fatalf("after Archive the trace is not empty")
	}
	mustAppend(t, tr, id, 0, "attempt two\n")
	if err := tr.Archive(ctx, id, 2); err != nil {
		t.Fatal(err)
	}
	mustAppend(t, tr, id, 0, "three")
	if got := readTrace(t, tr, id, 0); got != "three" {
		t.Fatalf("trace = %q", got)
	}
	// Archiving a job with no trace is nothing.
	if err := tr.Archive(ctx, newJob(t), 1); err != nil {
		t.Fatalf("Archive of an empty trace = %v", err)
	}
}

// testTraceConcurrentAppend: writers racing at the same offset, as two
// coordinators' reapers or a reaper and a runner's PATCH may; exactly one
// wins each round and the trace is the winners' bytes in order.
func testTraceConcurrentAppend(t *testing.T, tr store.Traces, newJob func(t *testing.T) int64) {
	id := newJob(t)
	var want bytes.Buffer
	var n int64
	for round := range 20 {
		var wg sync.WaitGroup
		var mu sync.Mutex
		var winners []string
		for w := range 6 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				s := fmt.Sprintf("[r%d w%d]", round, w)
				_, err := tr.Append(t.Context(), id, n, []byte(s))
				var off *store.TraceOffsetError
				switch {
				case err == nil:
					mu.Lock()
					winners = append(winners, s)
					mu.Unlock()
				case errors.As(err, &off):
				default:
					t.Errorf("Append = %v", err)
				}
			}()
		}
		wg.Wait()
		if len(winners) != 1 {
			t.Fatalf("round %d: %d appends at offset %d succeeded (%q), want exactly 1", round, len(winners), n, winners)
		}
		want.WriteString(winners[0])
		n += int64(len(winners[0]))
	}
	if got := readTrace(t, tr, id, 0); got != want.String() {
		t.Fatalf("trace = %q, want %q", got, want.String())
	}
}

// pattern is n bytes that differ from those of any other seed and offset
// (a byte in the wrong place shows).
func pattern(seed, n int) []byte {
	b := make([]byte, n)
	x := uint32(seed)*2654435761 + 1
	for i := range b {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		b[i] = byte(x)
	}
	return b
}

// testTraceLong: a trace of a few MiB in chunks of uneven sizes (a backend
// may read it in windows) reads back whole and from offsets inside, at and
// across chunk bounds.
func testTraceLong(t *testing.T, tr store.Traces, newJob func(t *testing.T) int64) {
	id := newJob(t)
	var want []byte
	for i, n := range []int{1, 700 << 10, 1 << 20, 3, 1<<20 - 1, 65537, 900 << 10, 1 << 20, 12345} {
		b := pattern(i, n)
		if _, err := tr.Append(t.Context(), id, int64(len(want)), b); err != nil {
			t.Fatalf("Append of %d bytes at %d = %v", n, len(want), err)
		}
		want = append(want, b...)
	}
	for _, off := range []int64{0, 1, 2, 700 << 10, 700<<10 + 1, 1 << 20, 2<<20 + 5, int64(len(want)) - 12345, int64(len(want)) - 1, int64(len(want))} {
		got := readTrace(t, tr, id, off)
		if got != string(want[off:]) {
			t.Errorf("read from %d: %d bytes, want %d; first difference at %d", off, len(got), int64(len(want))-off, firstDiff([]byte(got), want[off:]))
		}
	}
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// testTraceBoundedReads: reading a trace whole (Open to the end, and
// Checksum) takes memory bounded by a few chunks, not by the trace: a
// trace of 32 MiB allocates less than 8 MiB in all per read. (It counts
// the allocations of the whole process: the tests of RunTraces run one at
// a time.) Under the race detector, whose sync.Pool drops a quarter of
// what is put back, a driver's pooled read buffers are often allocated
// again: the bound is then twice the trace, still well under the three
// times of a backend that gathers the trace in one buffer.
func testTraceBoundedReads(t *testing.T, tr store.Traces, newJob func(t *testing.T) int64) {
	const chunks = 32
	var bound uint64 = 8 << 20
	if raceDetector {
		bound = 2 * chunks << 20
	}
	id := newJob(t)
	h := crc32.NewIEEE()
	var size int64
	for i := range chunks {
		b := pattern(i, 1<<20)
		if _, err := tr.Append(t.Context(), id, size, b); err != nil {
			t.Fatalf("Append at %d = %v", size, err)
		}
		h.Write(b)
		size += int64(len(b))
	}
	want := fmt.Sprintf("crc32:%08x", h.Sum32())
	allocated := func(f func()) uint64 {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		f()
		runtime.ReadMemStats(&after)
		return after.TotalAlloc - before.TotalAlloc
	}
	var sum string
	var err error
	if n := allocated(func() { sum, err = tr.Checksum(t.Context(), id) }); err != nil || sum != want {
		t.Errorf("Checksum = %q, %v; want %s", sum, err, want)
	} else if n > bound {
		t.Errorf("Checksum of a %d-byte trace allocated %d bytes, want at most %d", size, n, bound)
	}
	var read int64
	n := allocated(func() {
		var rc io.ReadCloser
		if rc, err = tr.Open(t.Context(), id, 0); err != nil {
			return
		}
		defer rc.Close()
		h := crc32.NewIEEE()
		read, err = io.CopyBuffer(h, rc, make([]byte, 32<<10))
		sum = fmt.Sprintf("crc32:%08x", h.Sum32())
	})
	switch {
	case err != nil || read != size || sum != want:
		t.Errorf("Open and read = %d bytes (%s), %v; want %d (%s)", read, sum, err, size, want)
	case n > bound:
		t.Errorf("Open and read of a %d-byte trace allocated %d bytes, want at most %d", size, n, bound)
	}
}
