package archive

import (
	"archive/zip"
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// snapshot describes a tree: per path its kind, permission bits, content
// or symlink target, and modification time for files and directories.
func snapshot(t testing.TB, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if rel == "." {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		mt := info.ModTime().Unix()
		switch {
		case info.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			out[filepath.ToSlash(rel)] = "link " + target
		case info.IsDir():
			out[filepath.ToSlash(rel)] = "dir " + info.Mode().Perm().String() + " " + time.Unix(mt, 0).UTC().String()
		default:
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			out[filepath.ToSlash(rel)] = "file " + info.Mode().Perm().String() + " " + time.Unix(mt, 0).UTC().String() + " " + string(b)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// sampleTree makes a tree with every kind of entry, odd modes and times,
// and one file spanning several chunks of chunkSize.
func sampleTree(t testing.TB, dir string, chunkSize int) {
	t.Helper()
	makeTree(t, dir, "a.txt", "sub/b.txt", "sub/deep/c.txt", "empty/", "sub/link -> deep/c.txt", "dirlink -> sub")
	if err := os.WriteFile(filepath.Join(dir, "run.sh"), []byte("#!/bin/sh\necho hi\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "zero"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	big := make([]byte, 3*chunkSize+17)
	_, _ = rand.Read(big[:chunkSize]) // incompressible part
	for i := chunkSize; i < len(big); i++ {
		big[i] = byte(i % 7)
	}
	if err := os.WriteFile(filepath.Join(dir, "sub/big.bin"), big, 0o640); err != nil {
		t.Fatal(err)
	}
	old := time.Date(2021, 3, 4, 5, 6, 7, 0, time.UTC)
	for _, p := range []string{"a.txt", "sub/deep/c.txt", "sub/big.bin", "sub/deep", "empty"} {
		if err := os.Chtimes(filepath.Join(dir, p), old, old); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(filepath.Join(dir, "empty"), 0o700); err != nil {
		t.Fatal(err)
	}
}

func TestCreateExtractRoundTrip(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		opts CreateOptions
	}{
		{"defaults", CreateOptions{}},
		{"small chunks one worker", CreateOptions{ChunkSize: 1000, Workers: 1, MemoryLimit: 1}},
		{"small chunks many workers", CreateOptions{ChunkSize: 1000, Workers: 8, Level: LevelFastest}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			src := t.TempDir()
			chunk := tc.opts.ChunkSize
			if chunk == 0 {
				chunk = 1 << 20
			}
			sampleTree(t, src, chunk)
			var buf bytes.Buffer
			st, err := Create(t.Context(), &buf, src, []string{"."}, tc.opts)
			if err != nil {
				t.Fatalf("Create = %v", err)
			}
			want := Stats{Files: 6, Dirs: 3, Symlinks: 2, Bytes: int64(3*chunk + 17 + 5 + 9 + 14 + 18), ArchiveBytes: int64(buf.Len())}
			if diff := cmp.Diff(want, st, cmp.FilterPath(func(p cmp.Path) bool {
				return p.String() == "Found" || p.String() == "Excluded"
			}, cmp.Ignore())); diff != "" {
				t.Errorf("Create stats (-want +got):\n%s", diff)
			}

			dest := t.TempDir()
			xst, err := Extract(t.Context(), bytes.NewReader(buf.Bytes()), int64(buf.Len()), dest, ExtractOptions{})
			if err != nil {
				t.Fatalf("Extract = %v", err)
			}
			if xst.Entries() != st.Entries() || xst.Bytes != st.Bytes {
				t.Errorf("Extract stats = %+v, want the counts of Create %+v", xst, st)
			}
			if diff := cmp.Diff(snapshot(t, src), snapshot(t, dest)); diff != "" {
				t.Errorf("extracted tree differs (-src +dest):\n%s", diff)
			}
			// Extracting again over the same tree replaces it in place.
			if _, err := Extract(t.Context(), bytes.NewReader(buf.Bytes()), int64(buf.Len()), dest, ExtractOptions{}); err != nil {
				t.Fatalf("Extract over an existing tree = %v", err)
			}
			if diff := cmp.Diff(snapshot(t, src), snapshot(t, dest)); diff != "" {
				t.Errorf("tree extracted twice differs (-src +dest):\n%s", diff)
			}
		})
	}
}

func TestCreateIsDeterministic(t *testing.T) {
	t.Parallel()
	src := t.TempDir()
	sampleTree(t, src, 1000)
	var a, b bytes.Buffer
	if _, err := Create(t.Context(), &a, src, []string{"."}, CreateOptions{ChunkSize: 1000, Workers: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := Create(t.Context(), &b, src, []string{"."}, CreateOptions{ChunkSize: 1000, Workers: 7}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Errorf("Create with 1 and 7 workers wrote different archives (%d and %d bytes)", a.Len(), b.Len())
	}
}

func TestCreateCancelled(t *testing.T) {
	t.Parallel()
	src := t.TempDir()
	sampleTree(t, src, 1000)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := Create(ctx, new(bytes.Buffer), src, []string{"."}, CreateOptions{}); !errors.Is(err, context.Canceled) {
		t.Errorf("Create(cancelled ctx) = %v, want context.Canceled", err)
	}
}

// lookInfoZIP returns the path of Info-ZIP's program name (zip or
// unzip), skipping t when it is not installed.
func lookInfoZIP(t *testing.T, name string) string {
	t.Helper()
	bin, err := exec.LookPath(name)
	if err != nil {
		t.Skip(name + " not installed (scripts/test.sh installs it)")
	}
	return bin
}

// TestUnzipReadsOurArchives checks the format with Info-ZIP's unzip, the
// reference most zip readers follow: CRCs, sizes, data descriptors.
func TestUnzipReadsOurArchives(t *testing.T) {
	t.Parallel()
	unzip := lookInfoZIP(t, "unzip")
	src := t.TempDir()
	sampleTree(t, src, 1000)
	archive := filepath.Join(t.TempDir(), "a.zip")
	f, err := os.Create(archive)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Create(t.Context(), f, src, []string{"."}, CreateOptions{ChunkSize: 1000}); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.CommandContext(t.Context(), unzip, "-t", archive).CombinedOutput(); err != nil {
		t.Fatalf("unzip -t = %v\n%s", err, out)
	}
	dest := t.TempDir()
	if out, err := exec.CommandContext(t.Context(), unzip, "-q", archive, "-d", dest).CombinedOutput(); err != nil {
		t.Fatalf("unzip = %v\n%s", err, out)
	}
	if diff := cmp.Diff(snapshot(t, src), snapshot(t, dest)); diff != "" {
		t.Errorf("tree extracted by unzip differs (-src +dest):\n%s", diff)
	}
}

// TestExtractReadsZipArchives restores what Info-ZIP's zip made, symlinks
// included, as GitLab-made archives use the same conventions.
func TestExtractReadsZipArchives(t *testing.T) {
	t.Parallel()
	zipBin := lookInfoZIP(t, "zip")
	src := t.TempDir()
	sampleTree(t, src, 1000)
	archive := filepath.Join(t.TempDir(), "a.zip")
	cmd := exec.CommandContext(t.Context(), zipBin, "-q", "-r", "--symlinks", archive, ".")
	cmd.Dir = src
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("zip = %v\n%s", err, out)
	}
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dest := t.TempDir()
	if _, err := ExtractReader(t.Context(), f, t.TempDir(), dest, ExtractOptions{}); err != nil {
		t.Fatalf("ExtractReader = %v", err)
	}
	if diff := cmp.Diff(snapshot(t, src), snapshot(t, dest)); diff != "" {
		t.Errorf("tree extracted from zip's archive differs (-src +dest):\n%s", diff)
	}
}

// zipEntry describes one entry of a hand-made archive.
type zipEntry struct {
	name string
	mode fs.FileMode
	body string
}

func makeZip(t testing.TB, entries ...zipEntry) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, e := range entries {
		fh := &zip.FileHeader{Name: e.name, Method: zip.Deflate}
		mode := e.mode
		if mode == 0 {
			mode = 0o644
		}
		fh.SetMode(mode)
		w, err := zw.CreateHeader(fh)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write([]byte(e.body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestExtractRefuses(t *testing.T) {
	t.Parallel()
	good := zipEntry{name: "ok.txt", body: "ok"}
	tests := []struct {
		name    string
		entries []zipEntry
		setup   func(t *testing.T, dest string) // prepares dest
		kind    error
		want    string
	}{
		{
			name:    "zip slip with ..",
			entries: []zipEntry{good, {name: "../evil", body: "x"}},
			kind:    ErrUnsafe, want: `archive entry "../evil": path leaves the destination`,
		},
		{
			name:    "zip slip deeper",
			entries: []zipEntry{{name: "a/b/../../../evil", body: "x"}},
			kind:    ErrUnsafe, want: `"a/b/../../../evil": path leaves the destination`,
		},
		{
			name:    "absolute path",
			entries: []zipEntry{{name: "/tmp/evil", body: "x"}},
			kind:    ErrUnsafe, want: `"/tmp/evil": absolute path`,
		},
		{
			name:    "symlink to an absolute path",
			entries: []zipEntry{{name: "l", mode: fs.ModeSymlink | 0o777, body: "/etc"}},
			kind:    ErrUnsafe, want: `"l": symlink to "/etc" is absolute`,
		},
		{
			name:    "symlink leaving dest",
			entries: []zipEntry{{name: "a/l", mode: fs.ModeSymlink | 0o777, body: "../../x"}},
			kind:    ErrUnsafe, want: `"a/l": symlink to "../../x" leaves the destination`,
		},
		{
			name: "writing through a symlink of the archive",
			entries: []zipEntry{
				{name: "l", mode: fs.ModeSymlink | 0o777, body: "sub"},
				{name: "l/x", body: "x"},
			},
			kind: ErrUnsafe, want: `"l/x": would be written through the symlink "l" of the archive`,
		},
		{
			name:    "writing through a symlink already in dest",
			entries: []zipEntry{{name: "sub/x", body: "x"}},
			setup: func(t *testing.T, dest string) {
				if err := os.Symlink(t.TempDir(), filepath.Join(dest, "sub")); err != nil {
					t.Fatal(err)
				}
			},
			kind: ErrUnsafe, want: `"sub/x": would be written through the symlink "sub"`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dest := t.TempDir()
			if tt.setup != nil {
				tt.setup(t, dest)
			}
			before := snapshot(t, dest)
			b := makeZip(t, tt.entries...)
			_, err := Extract(t.Context(), bytes.NewReader(b), int64(len(b)), dest, ExtractOptions{})
			if !errors.Is(err, tt.kind) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Extract = %v, want %v containing %q", err, tt.kind, tt.want)
			}
			if diff := cmp.Diff(before, snapshot(t, dest)); diff != "" {
				t.Errorf("a refused archive changed dest (-before +after):\n%s", diff)
			}
		})
	}
}

func TestExtractRefusesCorruptArchives(t *testing.T) {
	t.Parallel()
	src := t.TempDir()
	sampleTree(t, src, 1000)
	var buf bytes.Buffer
	if _, err := Create(t.Context(), &buf, src, []string{"."}, CreateOptions{ChunkSize: 1000}); err != nil {
		t.Fatal(err)
	}
	whole := buf.Bytes()

	t.Run("truncated", func(t *testing.T) {
		t.Parallel()
		for _, n := range []int{0, 10, len(whole) / 2, len(whole) - 1} {
			dest := t.TempDir()
			_, err := Extract(t.Context(), bytes.NewReader(whole[:n]), int64(n), dest, ExtractOptions{})
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "truncated") {
				t.Errorf("Extract(first %d of %d bytes) = %v, want ErrCorrupt saying truncated", n, len(whole), err)
			}
		}
	})
	t.Run("flipped data byte", func(t *testing.T) {
		t.Parallel()
		// Corrupt the data of sub/big.bin, found through the reader.
		zr, err := zip.NewReader(bytes.NewReader(whole), int64(len(whole)))
		if err != nil {
			t.Fatal(err)
		}
		var off int64
		for _, f := range zr.File {
			if f.Name == "sub/big.bin" {
				if off, err = f.DataOffset(); err != nil {
					t.Fatal(err)
				}
				off += int64(f.CompressedSize64 / 2)
			}
		}
		bad := bytes.Clone(whole)
		bad[off] ^= 0xff
		dest := t.TempDir()
		_, err = Extract(t.Context(), bytes.NewReader(bad), int64(len(bad)), dest, ExtractOptions{})
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), `"sub/big.bin"`) {
			t.Fatalf("Extract(corrupt sub/big.bin) = %v, want ErrCorrupt naming the entry", err)
		}
		// Nothing half-written: no big.bin, no temporary left behind.
		got := snapshot(t, dest)
		for name := range got {
			if strings.Contains(name, "big.bin") {
				t.Errorf("after a failed entry, dest holds %q", name)
			}
		}
	})
}

func TestExtractReaderSpoolsAndCleansUp(t *testing.T) {
	t.Parallel()
	b := makeZip(t, zipEntry{name: "d/", mode: fs.ModeDir | 0o755}, zipEntry{name: "d/f", body: "hello"})
	spool := t.TempDir()
	dest := t.TempDir()
	st, err := ExtractReader(t.Context(), bytes.NewReader(b), spool, dest, ExtractOptions{})
	if err != nil {
		t.Fatalf("ExtractReader = %v", err)
	}
	if st.Files != 1 || st.Dirs != 1 || st.Bytes != 5 {
		t.Errorf("ExtractReader stats = %+v, want 1 file, 1 dir, 5 bytes", st)
	}
	if left, _ := os.ReadDir(spool); len(left) != 0 {
		t.Errorf("spool directory holds %d files after ExtractReader, want none", len(left))
	}
}

// TestCompressFitsDeflateBound checks that no chunk's compressed output
// outgrows deflateBound, the room compress makes for it up front and what
// the memory semaphore accounts, so its buffer is never reallocated:
// incompressible data, text and zeros, whole files (closed) and inner
// chunks (flushed), at every level.
func TestCompressFitsDeflateBound(t *testing.T) {
	random := make([]byte, 1<<20)
	_, _ = rand.Read(random)
	text := bytes.Repeat([]byte("module.exports = function () { return this.value }\n"), 1<<20/52)
	for _, data := range []struct {
		name string
		b    []byte
	}{
		{"empty", nil},
		{"one byte", random[:1]},
		{"random 1000", random[:1000]},
		{"random 65535", random[:65535]},
		{"random 65536", random[:65536]},
		{"random 1 MiB", random},
		{"text", text},
		{"zeros", make([]byte, 1<<20)},
	} {
		for _, level := range []Level{LevelDefault, LevelFastest, LevelFast, LevelSlow, LevelSlowest} {
			for _, last := range []bool{true, false} {
				var pool sync.Pool
				c := &chunk{entry: &Entry{Name: "f"}, raw: data.b, last: last}
				if err := compress(c, level.flate(), &pool); err != nil {
					t.Fatal(err)
				}
				if got, bound := c.out.Len(), deflateBound(len(data.b)); got > bound {
					t.Errorf("%s, level %d, last %v: %d bytes compressed, over the bound of %d", data.name, level, last, got, bound)
				}
				var once bytes.Buffer
				once.Grow(deflateBound(len(data.b)))
				if c.out.Cap() != once.Cap() {
					t.Errorf("%s, level %d, last %v: the output buffer was reallocated: capacity %d, want %d", data.name, level, last, c.out.Cap(), once.Cap())
				}
			}
		}
	}
}
