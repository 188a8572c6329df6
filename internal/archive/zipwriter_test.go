package archive

import (
	"archive/zip"
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"
)

// rewriteWithArchiveZip writes again, with archive/zip's Writer and
// CreateRaw as Create did before it had its own writer, the entries of
// the archive data: same headers, same raw (compressed) data. Create's
// output must be identical byte for byte, so that the format did not
// change.
func rewriteWithArchiveZip(t testing.TB, data []byte) []byte {
	t.Helper()
	zr, err := zip.NewReader(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatalf("archive/zip cannot read the archive: %v", err)
	}
	var out bytes.Buffer
	zw := zip.NewWriter(&out)
	for _, f := range zr.File {
		fh := f.FileHeader
		fh.Extra = withoutZip64Extra(f.Extra)
		raw, err := f.OpenRaw()
		if err != nil {
			t.Fatal(err)
		}
		w, err := zw.CreateRaw(&fh)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(w, raw); err != nil {
			t.Fatal(err)
		}
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

// withoutZip64Extra is extra without its zip64 field, which archive/zip's
// Writer adds itself.
func withoutZip64Extra(extra []byte) []byte {
	var out []byte
	for len(extra) >= 4 {
		id, n := binary.LittleEndian.Uint16(extra), int(binary.LittleEndian.Uint16(extra[2:]))
		if 4+n > len(extra) {
			break
		}
		if id != zip64ExtraID {
			out = append(out, extra[:4+n]...)
		}
		extra = extra[4+n:]
	}
	return out
}

func TestCreateWritesWhatArchiveZipWrote(t *testing.T) {
	t.Parallel()
	src := t.TempDir()
	sampleTree(t, src, 1000)
	// Times out of the ranges of the MS-DOS fields and of the extended
	// timestamp.
	for p, mt := range map[string]time.Time{
		"sub/b.txt": time.Date(1975, 1, 2, 3, 4, 5, 0, time.UTC),
		"run.sh":    time.Date(2150, 1, 2, 3, 4, 5, 0, time.UTC),
	} {
		if err := os.Chtimes(filepath.Join(src, p), mt, mt); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(filepath.Join(src, "a.txt"), 0o444); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if _, err := Create(t.Context(), &buf, src, []string{"."}, CreateOptions{ChunkSize: 1000}); err != nil {
		t.Fatal(err)
	}
	if want := rewriteWithArchiveZip(t, buf.Bytes()); !bytes.Equal(buf.Bytes(), want) {
		t.Errorf("Create wrote %d bytes that differ from archive/zip's %d bytes of the same entries", buf.Len(), len(want))
	}
}

// manyEntries is an archive of n entries written by zipWriter, spooling
// its central directory in spoolDir: a directory dNNN/ per 1,000
// entries, and empty deflated files in them, every third one with a
// data descriptor.
func manyEntries(t testing.TB, n int, spoolDir string) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := newZipWriter(&buf, spoolDir)
	mtime := time.Date(2024, 5, 6, 7, 8, 10, 0, time.UTC)
	body := []byte{0x03, 0x00} // an empty deflate stream
	for i := range n {
		e := entryHeader{name: fmt.Sprintf("d%03d/f%05d", i/1000, i), method: methodDeflate, mode: 0o644, mtime: mtime, csize: 2}
		if i%1000 == 0 {
			e = entryHeader{name: fmt.Sprintf("d%03d/", i/1000), method: methodStore, mode: fs.ModeDir | 0o755, mtime: mtime}
		} else if i%3 == 0 {
			e.flags = flagDataDescriptor
		}
		if err := zw.begin(e); err != nil {
			t.Fatal(err)
		}
		if e.method == methodDeflate {
			if err := zw.write(body); err != nil {
				t.Fatal(err)
			}
		}
		if err := zw.finish(0, uint64(e.csize), 0); err != nil {
			t.Fatal(err)
		}
		if i == n/2 && zw.cd.f == nil {
			t.Fatalf("%d entries' central directory is still in memory", i)
		}
	}
	size, err := zw.close()
	if err != nil {
		t.Fatal(err)
	}
	if size != int64(buf.Len()) {
		t.Errorf("close = %d bytes, wrote %d", size, buf.Len())
	}
	return buf.Bytes()
}

// TestZipWriterManyEntries writes more entries than the end record's
// 16-bit count holds, so that the zip64 end records are needed, and more
// than the central directory's in-memory part holds, so that it is
// spooled to a file. archive/zip and Info-ZIP read the archive, which is
// what archive/zip writes of the same entries, and the spool file is gone.
func TestZipWriterManyEntries(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 70,000 entries")
	}
	t.Parallel()
	const n = 70000
	spoolDir := t.TempDir()
	data := manyEntries(t, n, spoolDir)
	if left, _ := os.ReadDir(spoolDir); len(left) != 0 {
		t.Errorf("spool files left behind: %v", left)
	}
	if got := binary.LittleEndian.Uint16(data[len(data)-endLen+8:]); got != math.MaxUint16 {
		t.Errorf("end record's entry count = %d, want 0xffff (the count in the zip64 end record)", got)
	}
	if want := rewriteWithArchiveZip(t, data); !bytes.Equal(data, want) {
		t.Errorf("zipWriter wrote %d bytes that differ from archive/zip's %d bytes of the same entries", len(data), len(want))
	}
	zr, err := zip.NewReader(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	if len(zr.File) != n {
		t.Fatalf("archive/zip reads %d entries, want %d", len(zr.File), n)
	}
	unzip := lookInfoZIP(t, "unzip")
	archive := filepath.Join(t.TempDir(), "many.zip")
	if err := os.WriteFile(archive, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.CommandContext(t.Context(), unzip, "-tq", archive).CombinedOutput(); err != nil {
		t.Fatalf("unzip -t = %v\n%s", err, out)
	}
}

// TestZipWriterZip64Sizes checks the records of entries whose sizes or
// offset do not fit in 32 bits, without writing gigabytes: the sizes are
// given, and the writer is told it starts past 4 GiB.
func TestZipWriterZip64Sizes(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	zw := newZipWriter(&buf, t.TempDir())
	mtime := time.Date(2024, 5, 6, 7, 8, 10, 0, time.UTC)
	big := uint64(5 << 30)
	if err := zw.begin(entryHeader{name: "big", method: methodDeflate, flags: flagDataDescriptor, mode: 0o644, mtime: mtime}); err != nil {
		t.Fatal(err)
	}
	if err := zw.finish(0x12345678, big+1, big); err != nil {
		t.Fatal(err)
	}
	zw.cw.n = int64(big) // as if the data had been written
	if err := zw.begin(entryHeader{name: "late", method: methodStore, mode: 0o644, mtime: mtime}); err != nil {
		t.Fatal(err)
	}
	if err := zw.finish(0, 0, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := zw.close(); err != nil {
		t.Fatal(err)
	}
	// Read the central directory with archive/zip, at the offset the
	// records claim: the archive is prefixed with the missing bytes.
	data := buf.Bytes()
	zr, err := zip.NewReader(offsetReader{data: data, offset: int64(big)}, int64(big)+int64(len(data)))
	if err != nil {
		t.Fatalf("archive/zip cannot read the central directory: %v", err)
	}
	if len(zr.File) != 2 {
		t.Fatalf("%d entries, want 2", len(zr.File))
	}
	f := zr.File[0]
	if f.CRC32 != 0x12345678 || f.CompressedSize64 != big+1 || f.UncompressedSize64 != big {
		t.Errorf("big: crc %#x, sizes %d/%d; want 0x12345678, %d/%d", f.CRC32, f.CompressedSize64, f.UncompressedSize64, big+1, big)
	}
	// The data descriptor of the big entry has 64-bit sizes.
	desc := data[localHeaderLen+len("big")+9:]
	if binary.LittleEndian.Uint32(desc) != dataDescriptorSig || binary.LittleEndian.Uint64(desc[8:]) != big+1 || binary.LittleEndian.Uint64(desc[16:]) != big {
		t.Errorf("big's data descriptor = % x, want a zip64 one", desc[:24])
	}
	if off, err := zr.File[1].DataOffset(); err != nil || off != int64(big)+localHeaderLen+3+9+24+localHeaderLen+4+9 {
		t.Errorf("late's data offset = %d, %v; want its local header past 4 GiB", off, err)
	}
}

// offsetReader reads data as if it were at offset, with zeros before.
type offsetReader struct {
	data   []byte
	offset int64
}

func (r offsetReader) ReadAt(p []byte, off int64) (int, error) {
	n := 0
	for n < len(p) && off < r.offset {
		p[n] = 0
		n++
		off++
	}
	if n == len(p) {
		return n, nil
	}
	if off-r.offset >= int64(len(r.data)) {
		return n, io.EOF
	}
	m := copy(p[n:], r.data[off-r.offset:])
	if n+m < len(p) {
		return n + m, io.EOF
	}
	return n + m, nil
}

// heapAtEnd is an io.Writer that discards an archive and records the
// live heap, after a collection, when the end of central directory
// record is written: the moment Create holds the most per entry (the
// whole selection, and the central directory).
type heapAtEnd struct{ live uint64 }

func (h *heapAtEnd) Write(p []byte) (int, error) {
	if n := len(p); n >= endLen && binary.LittleEndian.Uint32(p[n-endLen:]) == endSig {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		h.live = ms.HeapAlloc
	}
	return len(p), nil
}

// TestCreateHeapPerEntry checks that what Create keeps per entry is
// small: the live heap at the end of an archive of 25,000 empty files
// exceeds that of 5,000 by under 200 bytes per added file (about 40 on
// linux/amd64: the selection's entry and its name; the central directory
// is spooled to a file). It was about 600 when the selection held an
// fs.FileInfo per path and archive/zip's Writer a header per entry.
func TestCreateHeapPerEntry(t *testing.T) {
	if testing.Short() {
		t.Skip("makes 30,000 files")
	}
	// Not parallel: other tests' allocations would count.
	live := map[int]uint64{}
	for _, n := range []int{5000, 25000} {
		src := t.TempDir()
		for d := range n / 1000 {
			dir := filepath.Join(src, fmt.Sprintf("d%03d", d))
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			for i := range 1000 {
				if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%04d", i)), nil, 0o644); err != nil {
					t.Fatal(err)
				}
			}
		}
		var w heapAtEnd
		st, err := Create(t.Context(), &w, src, []string{"."}, CreateOptions{TempDir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		if st.Files != n || w.live == 0 {
			t.Fatalf("%d files: archived %d, end record seen: %v", n, st.Files, w.live != 0)
		}
		live[n] = w.live
	}
	perFile := (float64(live[25000]) - float64(live[5000])) / 20000
	t.Logf("live heap at the end record: %d B for 5,000 files, %d B for 25,000: %.0f B per added file", live[5000], live[25000], perFile)
	if perFile > 200 {
		t.Errorf("Create keeps %.0f bytes per file, want under 200", perFile)
	}
}
