package archive

import (
	"archive/zip"
	"bytes"
	"compress/flate"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// bomb is a zip of files entries of size zero bytes each, deflated: a zip
// bomb, a few KiB a file whatever the size.
func bomb(t testing.TB, files int, size int64) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	zw.RegisterCompressor(zip.Deflate, func(w io.Writer) (io.WriteCloser, error) {
		return flate.NewWriter(w, flate.BestSpeed)
	})
	zeros := make([]byte, 1<<20)
	for i := range files {
		w, err := zw.CreateHeader(&zip.FileHeader{Name: fmt.Sprintf("zeros-%d.bin", i), Method: zip.Deflate})
		if err != nil {
			t.Fatal(err)
		}
		for n := size; n > 0; n -= int64(len(zeros)) {
			if _, err := w.Write(zeros[:min(n, int64(len(zeros)))]); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// treeSize is the number of entries under dir and the bytes of its
// files.
func treeSize(t testing.TB, dir string) (entries int, bytes int64) {
	t.Helper()
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		entries++
		if d.Type().IsRegular() {
			info, err := d.Info()
			if err != nil {
				return err
			}
			bytes += info.Size()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return entries, bytes
}

// TestExtractLimits: an archive over MaxBytes or MaxEntries is refused
// with ErrTooLarge before a byte is written; one at the caps is
// extracted.
func TestExtractLimits(t *testing.T) {
	t.Parallel()
	const mib = 1 << 20
	big := bomb(t, 2, 8*mib) // 16 MiB of zeros
	t.Logf("zip bomb: %d bytes expand to %d (%.0f:1)", len(big), 16*mib, float64(16*mib)/float64(len(big)))
	var many []zipEntry
	for i := range 1000 {
		many = append(many, zipEntry{name: fmt.Sprintf("d%d/f%d", i%10, i), body: "x"})
	}
	for _, tc := range []struct {
		name    string
		zip     []byte
		opts    ExtractOptions
		wantErr string // "" for success
	}{
		{"bomb over MaxBytes", big, ExtractOptions{MaxBytes: 12 * mib}, `archive over the extraction limits: expands to more than 12582912 bytes (12.0 MiB) by entry "zeros-1.bin"`},
		{"bomb at MaxBytes", big, ExtractOptions{MaxBytes: 16 * mib}, ""},
		{"no caps", big, ExtractOptions{}, ""},
		{"entries over MaxEntries", makeZip(t, many...), ExtractOptions{MaxEntries: 999}, "archive over the extraction limits: more than 999 entries"},
		{"entries at MaxEntries", makeZip(t, many...), ExtractOptions{MaxEntries: 1000}, ""},
		{"symlinks count as bytes", makeZip(t, zipEntry{name: "f", body: "0123456789"}, zipEntry{name: "l", mode: fs.ModeSymlink | 0o777, body: "f"}), ExtractOptions{MaxBytes: 10}, `by entry "l"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dest := t.TempDir()
			_, err := Extract(t.Context(), bytes.NewReader(tc.zip), int64(len(tc.zip)), dest, tc.opts)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("Extract = %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Extract = %v, want ErrTooLarge saying %q", err, tc.wantErr)
			}
			if n, size := treeSize(t, dest); n != 0 {
				t.Errorf("a refused archive left %d entries, %d bytes in dest", n, size)
			}
		})
	}
}

// TestExtractSizesAreBinding: a central directory that understates an
// entry's size cannot slip it under MaxBytes: its data is cut at the
// size declared, and the entry refused as corrupt.
func TestExtractSizesAreBinding(t *testing.T) {
	t.Parallel()
	real := bytes.Repeat([]byte{0}, 1<<20)
	var comp bytes.Buffer
	fw, _ := flate.NewWriter(&comp, flate.BestCompression)
	fw.Write(real)
	fw.Close()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	w, err := zw.CreateRaw(&zip.FileHeader{
		Name: "liar.bin", Method: zip.Deflate, CRC32: crc32.ChecksumIEEE(real[:100]),
		CompressedSize64: uint64(comp.Len()), UncompressedSize64: 100,
	})
	if err != nil {
		t.Fatal(err)
	}
	w.Write(comp.Bytes())
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	dest := t.TempDir()
	_, err = Extract(t.Context(), bytes.NewReader(buf.Bytes()), int64(buf.Len()), dest, ExtractOptions{MaxBytes: 1000})
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "liar.bin") {
		t.Errorf("Extract(understated size) = %v, want ErrCorrupt naming liar.bin", err)
	}
	if _, size := treeSize(t, dest); size > 1000 {
		t.Errorf("dest holds %d bytes, over MaxBytes 1000", size)
	}
	if _, err := os.Stat(filepath.Join(dest, "liar.bin")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("liar.bin is in dest: %v", err)
	}
}
