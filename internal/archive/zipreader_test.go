package archive

import (
	"archive/zip"
	"bytes"
	"encoding/binary"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// rawRecord is where a central record and its entry's local header lie
// in an archive, found by walking the records by hand.
type rawRecord struct {
	name    string
	central int // offset of the central record
	local   int // offset of the local header
}

func rawRecords(t testing.TB, data []byte) (records []rawRecord, dirStart int) {
	t.Helper()
	end := data[len(data)-endLen:]
	if binary.LittleEndian.Uint32(end) != endSig {
		t.Fatal("no end record at the end")
	}
	dirStart = int(binary.LittleEndian.Uint32(end[16:]))
	dirEnd := dirStart + int(binary.LittleEndian.Uint32(end[12:]))
	for p := dirStart; p < dirEnd; {
		h := data[p:]
		n, m, k := int(binary.LittleEndian.Uint16(h[28:])), int(binary.LittleEndian.Uint16(h[30:])), int(binary.LittleEndian.Uint16(h[32:]))
		records = append(records, rawRecord{
			name:    string(h[centralHeaderLen : centralHeaderLen+n]),
			central: p,
			local:   int(binary.LittleEndian.Uint32(h[42:])),
		})
		p += centralHeaderLen + n + m + k
	}
	return records, dirStart
}

// sampleArchive is Create's archive of sampleTree.
func sampleArchive(t testing.TB) []byte {
	t.Helper()
	src := t.TempDir()
	sampleTree(t, src, 1000)
	var buf bytes.Buffer
	if _, err := Create(t.Context(), &buf, src, []string{"."}, CreateOptions{ChunkSize: 1000}); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestExtractRefusesMalformedDirectories checks that an archive whose
// central directory is truncated or points outside the archive, or whose
// local headers disagree with it, is refused as corrupt, and that what
// the central directory alone shows to be wrong is refused before
// anything is written.
func TestExtractRefusesMalformedDirectories(t *testing.T) {
	t.Parallel()
	whole := sampleArchive(t)
	records, dirStart := rawRecords(t, whole)
	find := func(name string) rawRecord {
		for _, r := range records {
			if r.name == name {
				return r
			}
		}
		t.Fatalf("no entry %q", name)
		return rawRecord{}
	}
	big := find("sub/big.bin")
	tests := []struct {
		name        string
		edit        func(b []byte) []byte
		want        string
		nothingMade bool // refused before anything is written
	}{
		{
			name: "central directory cut in the middle of a record",
			edit: func(b []byte) []byte {
				// Keep the records up to half of big.bin's, and an end
				// record saying the directory ends there.
				cut := big.central + centralHeaderLen/2
				out := bytes.Clone(b[:cut])
				end := bytes.Clone(b[len(b)-endLen:])
				binary.LittleEndian.PutUint32(end[12:], uint32(cut-dirStart))
				binary.LittleEndian.PutUint32(end[16:], uint32(dirStart))
				return append(out, end...)
			},
			want: "truncated", nothingMade: true,
		},
		{
			name: "fewer records than the end record says",
			edit: func(b []byte) []byte {
				out := bytes.Clone(b[:big.central])
				end := bytes.Clone(b[len(b)-endLen:])
				binary.LittleEndian.PutUint32(end[12:], uint32(big.central-dirStart))
				return append(out, end...)
			},
			want: "the end record says", nothingMade: true,
		},
		{
			name: "central directory larger than the archive",
			edit: func(b []byte) []byte {
				binary.LittleEndian.PutUint32(b[len(b)-endLen+12:], uint32(len(b)))
				return b
			},
			want: "out of the archive", nothingMade: true,
		},
		{
			name: "local header offset past the end of the file",
			edit: func(b []byte) []byte {
				binary.LittleEndian.PutUint32(b[big.central+42:], uint32(len(b)+1000))
				return b
			},
			want: `"sub/big.bin": unreadable data`, nothingMade: true,
		},
		{
			name: "local header offset inside the central directory",
			edit: func(b []byte) []byte {
				binary.LittleEndian.PutUint32(b[big.central+42:], uint32(dirStart))
				return b
			},
			want: `"sub/big.bin": unreadable data`, nothingMade: true,
		},
		{
			name: "unsupported compression method",
			edit: func(b []byte) []byte {
				binary.LittleEndian.PutUint16(b[big.central+10:], 12) // bzip2
				return b
			},
			want: "unsupported compression method 12", nothingMade: true,
		},
		{
			name: "local header with another name",
			edit: func(b []byte) []byte {
				b[big.local+localHeaderLen+len("sub/")] = 'B'
				return b
			},
			want: `"sub/big.bin": open: local header names "sub/Big.bin"`,
		},
		{
			name: "local header with another name length",
			edit: func(b []byte) []byte {
				binary.LittleEndian.PutUint16(b[big.local+26:], uint16(len("sub/big.bin")-1))
				return b
			},
			want: `"sub/big.bin": open: local header's name is 10 bytes`,
		},
		{
			name: "local header with another method",
			edit: func(b []byte) []byte {
				binary.LittleEndian.PutUint16(b[big.local+8:], methodStore)
				return b
			},
			want: `"sub/big.bin": open: local header says compression method 0`,
		},
		{
			name: "local header offset to another entry",
			edit: func(b []byte) []byte {
				binary.LittleEndian.PutUint32(b[big.central+42:], uint32(find("a.txt").local))
				return b
			},
			want: `"sub/big.bin": open: local header's name is 5 bytes`,
		},
		{
			name: "wrong CRC-32",
			edit: func(b []byte) []byte {
				b[big.central+16] ^= 1
				return b
			},
			want: `"sub/big.bin": data truncated or corrupt: CRC-32`,
		},
		{
			name: "wrong size",
			edit: func(b []byte) []byte {
				binary.LittleEndian.PutUint32(b[big.central+24:], binary.LittleEndian.Uint32(b[big.central+24:])-1)
				return b
			},
			want: `"sub/big.bin": data truncated or corrupt: more data than`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := tt.edit(bytes.Clone(whole))
			dest := t.TempDir()
			_, err := Extract(t.Context(), bytes.NewReader(b), int64(len(b)), dest, ExtractOptions{})
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Extract = %v, want ErrCorrupt containing %q", err, tt.want)
			}
			got := snapshot(t, dest)
			if tt.nothingMade && len(got) != 0 {
				t.Errorf("a refused archive wrote %d entries", len(got))
			}
			for name := range got {
				if strings.Contains(name, "big.bin") {
					t.Errorf("after a failed entry, dest holds %q", name)
				}
			}
		})
	}
}

// TestExtractManyEntries extracts zipWriter's 70,000 entries, past the
// end record's 16-bit count: the counts are read from the zip64 end
// record.
func TestExtractManyEntries(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 70,000 entries")
	}
	t.Parallel()
	const n = 70000
	data := manyEntries(t, n, t.TempDir())
	dest := t.TempDir()
	st, err := Extract(t.Context(), bytes.NewReader(data), int64(len(data)), dest, ExtractOptions{})
	if err != nil {
		t.Fatalf("Extract = %v", err)
	}
	if st.Dirs != n/1000 || st.Files != n-n/1000 || st.Bytes != 0 {
		t.Errorf("Extract stats = %+v, want %d dirs and %d empty files", st, n/1000, n-n/1000)
	}
	info, err := os.Stat(filepath.Join(dest, "d069", "f69999"))
	if err != nil {
		t.Fatal(err)
	}
	if want := time.Date(2024, 5, 6, 7, 8, 10, 0, time.UTC); !info.ModTime().Equal(want) || info.Mode().Perm() != 0o644 {
		t.Errorf("d069/f69999: mode %v, time %v; want 0644 and %v", info.Mode(), info.ModTime(), want)
	}
}

// TestExtractReadsArchiveZipDataDescriptors extracts what archive/zip's
// Writer makes with CreateHeader: data descriptors after the data, the
// local header's sizes and CRC-32 zero. Stored and deflated entries, and
// a wrong descriptor refused.
func TestExtractReadsArchiveZipDataDescriptors(t *testing.T) {
	t.Parallel()
	mtime := time.Date(2023, 4, 5, 6, 7, 8, 0, time.UTC)
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	bodies := map[string]string{
		"d/stored.txt":   "stored, not compressed",
		"d/deflated.txt": strings.Repeat("deflated and compressed ", 1000),
		"empty":          "",
	}
	for _, name := range []string{"d/stored.txt", "d/deflated.txt", "empty"} {
		fh := &zip.FileHeader{Name: name, Method: zip.Deflate, Modified: mtime}
		if name == "d/stored.txt" {
			fh.Method = zip.Store
		}
		fh.SetMode(0o640)
		w, err := zw.CreateHeader(fh)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write([]byte(bodies[name])); err != nil {
			t.Fatal(err)
		}
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	data := buf.Bytes()
	records, _ := rawRecords(t, data)
	for _, r := range records {
		if flags := binary.LittleEndian.Uint16(data[r.local+6:]); flags&flagDataDescriptor == 0 {
			t.Fatalf("%s: archive/zip wrote no data descriptor (flags %#x)", r.name, flags)
		}
	}
	dest := t.TempDir()
	st, err := Extract(t.Context(), bytes.NewReader(data), int64(len(data)), dest, ExtractOptions{})
	if err != nil {
		t.Fatalf("Extract = %v", err)
	}
	if st.Files != 3 {
		t.Errorf("Extract stats = %+v, want 3 files", st)
	}
	for name, body := range bodies {
		p := filepath.Join(dest, name)
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		info, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if string(b) != body || info.Mode().Perm() != 0o640 || !info.ModTime().Equal(mtime) {
			t.Errorf("%s: %d bytes, mode %v, time %v; want %d bytes, 0640, %v", name, len(b), info.Mode(), info.ModTime(), len(body), mtime)
		}
	}

	// A descriptor whose CRC-32 is not the central directory's.
	bad := bytes.Clone(data)
	var stored rawRecord
	for _, r := range records {
		if r.name == "d/stored.txt" {
			stored = r
		}
	}
	desc := stored.local + localHeaderLen + int(binary.LittleEndian.Uint16(data[stored.local+26:])) +
		int(binary.LittleEndian.Uint16(data[stored.local+28:])) + len(bodies[stored.name])
	if binary.LittleEndian.Uint32(bad[desc:]) != dataDescriptorSig {
		t.Fatalf("no data descriptor at %d", desc)
	}
	bad[desc+4] ^= 1
	_, err = Extract(t.Context(), bytes.NewReader(bad), int64(len(bad)), t.TempDir(), ExtractOptions{})
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), `"d/stored.txt": data truncated or corrupt: data descriptor's CRC-32`) {
		t.Errorf("Extract(bad descriptor) = %v, want ErrCorrupt for d/stored.txt's data descriptor", err)
	}
}

// TestExtractReadsStreamedZipArchives restores what Info-ZIP's zip
// writes to a pipe, where it cannot seek back: data descriptors, and
// local headers without sizes.
func TestExtractReadsStreamedZipArchives(t *testing.T) {
	t.Parallel()
	zipBin := lookInfoZIP(t, "zip")
	// Not sampleTree: to a pipe, zip refuses to write entries it would
	// store (empty, incompressible, symlinks).
	src := t.TempDir()
	makeTree(t, src, "d/e/")
	for name, body := range map[string]string{
		"d/a.txt": strings.Repeat("text to compress ", 5000),
		"b.txt":   strings.Repeat("other\n", 300),
	} {
		if err := os.WriteFile(filepath.Join(src, name), []byte(body), 0o640); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.CommandContext(t.Context(), zipBin, "-q", "-r", "-", ".")
	cmd.Dir = src
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	data, err := cmd.Output()
	if err != nil {
		t.Fatalf("zip = %v\n%s", err, stderr.Bytes())
	}
	records, _ := rawRecords(t, data)
	descriptors := 0
	for _, r := range records {
		if binary.LittleEndian.Uint16(data[r.local+6:])&flagDataDescriptor != 0 {
			descriptors++
		}
	}
	if descriptors == 0 {
		t.Fatal("zip wrote no data descriptors to a pipe")
	}
	dest := t.TempDir()
	if _, err := Extract(t.Context(), bytes.NewReader(data), int64(len(data)), dest, ExtractOptions{}); err != nil {
		t.Fatalf("Extract = %v", err)
	}
	if diff := cmp.Diff(snapshot(t, src), snapshot(t, dest)); diff != "" {
		t.Errorf("tree extracted from zip's streamed archive differs (-src +dest):\n%s", diff)
	}
}

// TestExtractDuplicates checks that of entries of the same (cleaned)
// name the last is extracted, whatever kinds they are, and that a
// symlink replaced by a directory does not refuse what is under it.
func TestExtractDuplicates(t *testing.T) {
	t.Parallel()
	b := makeZip(t,
		zipEntry{name: "a", body: "first"},
		zipEntry{name: "b/", mode: fs.ModeDir | 0o755},
		zipEntry{name: "./a", body: "second"},
		zipEntry{name: "l", mode: fs.ModeSymlink | 0o777, body: "b"},
		zipEntry{name: "l/", mode: fs.ModeDir | 0o750},
		zipEntry{name: "l/x", body: "under l"},
		zipEntry{name: "b", body: "b is a file"},
		zipEntry{name: "c/../a", body: "third"},
	)
	dest := t.TempDir()
	st, err := Extract(t.Context(), bytes.NewReader(b), int64(len(b)), dest, ExtractOptions{})
	if err != nil {
		t.Fatalf("Extract = %v", err)
	}
	got := map[string]string{}
	_ = filepath.WalkDir(dest, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(dest, p)
		info, err := d.Info()
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case rel == ".":
		case d.IsDir():
			got[filepath.ToSlash(rel)] = "dir " + info.Mode().Perm().String()
		case d.Type().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			got[filepath.ToSlash(rel)] = "file " + string(b)
		default:
			got[filepath.ToSlash(rel)] = info.Mode().Type().String()
		}
		return nil
	})
	want := map[string]string{
		"a":   "file third",
		"b":   "file b is a file",
		"l":   "dir -rwxr-x---",
		"l/x": "file under l",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("extracted tree (-want +got):\n%s", diff)
	}
	if st.Files != 3 || st.Dirs != 1 || st.Symlinks != 0 {
		t.Errorf("Extract stats = %+v, want 3 files and 1 directory", st)
	}
}

// TestExtractClosedDirectories checks that directories their owner
// cannot enter get their modes after their subdirectories.
func TestExtractClosedDirectories(t *testing.T) {
	t.Parallel()
	b := makeZip(t,
		zipEntry{name: "x/", mode: fs.ModeDir | 0o600},
		zipEntry{name: "x/y/", mode: fs.ModeDir | 0o500},
		zipEntry{name: "x/y/z/", mode: fs.ModeDir | 0o400},
		zipEntry{name: "x/y/z/f", body: "f"},
	)
	dest := t.TempDir()
	t.Cleanup(func() {
		for _, d := range []string{"x", "x/y", "x/y/z"} {
			_ = os.Chmod(filepath.Join(dest, d), 0o755)
		}
	})
	if _, err := Extract(t.Context(), bytes.NewReader(b), int64(len(b)), dest, ExtractOptions{}); err != nil {
		t.Fatalf("Extract = %v", err)
	}
	// Each checked, then opened to reach the next.
	for _, d := range []struct {
		name string
		want fs.FileMode
	}{{"x", 0o600}, {"x/y", 0o500}, {"x/y/z", 0o400}} {
		p := filepath.Join(dest, d.name)
		info, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if info.Mode().Perm() != d.want {
			t.Errorf("%s: mode %v, want %v", d.name, info.Mode().Perm(), d.want)
		}
		if err := os.Chmod(p, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if b, err := os.ReadFile(filepath.Join(dest, "x/y/z/f")); err != nil || string(b) != "f" {
		t.Errorf("x/y/z/f = %q, %v; want \"f\"", b, err)
	}
}
