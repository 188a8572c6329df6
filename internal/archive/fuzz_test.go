package archive

import (
	"bytes"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bmatcuk/doublestar/v4"
)

// FuzzExtract feeds arbitrary bytes to Extract as an archive: it must not
// panic, and whatever it accepts or refuses, nothing may appear outside
// the destination and no symlink inside it may point outside.
func FuzzExtract(f *testing.F) {
	src := f.TempDir()
	sampleTree(f, src, 100)
	var buf bytes.Buffer
	if _, err := Create(f.Context(), &buf, src, []string{"."}, CreateOptions{ChunkSize: 100}); err != nil {
		f.Fatal(err)
	}
	f.Add(buf.Bytes())
	f.Add(makeZip(f, zipEntry{name: "../evil", body: "x"}))
	f.Add(makeZip(f, zipEntry{name: "l", mode: fs.ModeSymlink | 0o777, body: "sub"}, zipEntry{name: "l/x", body: "x"}))
	f.Add(makeZip(f, zipEntry{name: "a/l", mode: fs.ModeSymlink | 0o777, body: "../.."}))
	f.Add(makeZip(f, zipEntry{name: "d/", mode: fs.ModeDir | 0o700}, zipEntry{name: "d/f", body: "hello"}))
	f.Add([]byte("PK\x05\x06"))
	f.Add(bomb(f, 1, 1<<20))
	f.Fuzz(func(t *testing.T, data []byte) {
		top := t.TempDir()
		dest := filepath.Join(top, "dest")
		if err := os.Mkdir(dest, 0o755); err != nil {
			t.Fatal(err)
		}
		// The caps hold whatever the archive, and whether it is refused
		// or not: no more file bytes, nor more files and symlinks, in dest.
		const maxBytes, maxEntries = 1 << 16, 16
		_, _ = Extract(t.Context(), bytes.NewReader(data), int64(len(data)), dest, ExtractOptions{MaxBytes: maxBytes, MaxEntries: maxEntries})
		if entries, _ := os.ReadDir(top); len(entries) != 1 {
			t.Fatalf("Extract wrote next to dest: %v", entries)
		}
		var files int
		var size int64
		_ = filepath.WalkDir(dest, func(p string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() {
				files++
				if info, err := d.Info(); err == nil && d.Type().IsRegular() {
					size += info.Size()
				}
			}
			return nil
		})
		if size > maxBytes || files > maxEntries {
			t.Fatalf("Extract with caps of %d bytes, %d entries wrote %d bytes in %d files and symlinks", maxBytes, maxEntries, size, files)
		}
		_ = filepath.WalkDir(dest, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.Type()&fs.ModeSymlink == 0 {
				return nil
			}
			target, err := os.Readlink(p)
			if err != nil {
				t.Fatal(err)
			}
			rel, _ := filepath.Rel(dest, filepath.Join(filepath.Dir(p), target))
			if filepath.IsAbs(target) || !filepath.IsLocal(rel) {
				t.Errorf("symlink %s -> %s leaves dest", p, target)
			}
			return nil
		})
		// Directories made 0o000 by an archive would stop TempDir's
		// cleanup.
		_ = filepath.WalkDir(dest, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				_ = os.Chmod(p, 0o755)
			}
			return nil
		})
	})
}

// globTree is the fixed tree FuzzGlob selects from: nested directories,
// dot files, and symlinks to files (a symlink to a directory is walked
// through by a literal path, which a listing of the tree cannot tell).
var globTree = []string{
	"a/b/c.js", "a/b/d.ts", "a/c.js", "a/.hidden", "b/a/b", "b/bb/a.js",
	"c.js", ".c", "node_modules/x/index.js", "node_modules/x/y/", "e/",
	"ln -> c.js", "a/b/ln -> ../c.js",
}

// FuzzGlob checks Select against a reference built from a plain listing
// of the tree: a path is selected when it or one of its parents matches a
// path pattern (doublestar.Match, GitLab's matcher), and no exclude
// pattern matches it. A pattern Select refuses must be one that leaves
// the root or is malformed.
func FuzzGlob(f *testing.F) {
	root := f.TempDir()
	makeTree(f, root, globTree...)
	var all []string
	_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if rel, _ := filepath.Rel(root, p); rel != "." {
			all = append(all, filepath.ToSlash(rel))
		}
		return nil
	})
	for _, seed := range [][2]string{
		{"**/*.js", ""}, {"node_modules/", "**/y"}, {"a/**/b", ""}, {"a", "a/b/**"},
		{".", "**/*.ts"}, {"**", "*"}, {"{a,b}/*", ""}, {"a/[bc]*", "a/?"},
		{"../x", ""}, {"a/../b/**", "b/a"}, {`a\/b`, ""}, {"ln", "**/ln"},
		{"/abs", ""}, {"a/b/c.js/x", ""}, {"\x00", "0"}, {strings.Repeat("0", 300), "0"},
	} {
		f.Add(seed[0], seed[1])
	}
	f.Fuzz(func(t *testing.T, pattern, exclude string) {
		var excl []string
		if exclude != "" {
			excl = []string{exclude}
		}
		sel, err := Select(root, []string{pattern}, excl, nil)
		rel, perr := relativePattern(root, pattern)
		var erel string
		var eerr error
		if exclude != "" {
			erel, eerr = relativePattern(root, exclude)
		}
		if pattern == "" {
			perr = nil
		}
		if perr != nil || eerr != nil {
			if err == nil {
				t.Fatalf("Select(%q, exclude %q) accepted a pattern relativePattern refuses (%v, %v)", pattern, exclude, perr, eerr)
			}
			return
		}
		if err != nil {
			t.Fatalf("Select(%q, exclude %q) = %v", pattern, exclude, err)
		}
		matches := func(p string) bool {
			if pattern == "" {
				return false
			}
			for a := p; ; a = path.Dir(a) {
				if ok, _ := doublestar.Match(rel, a); ok {
					return true
				}
				if a == "." {
					return false
				}
			}
		}
		var want []string
		for _, p := range all {
			if !matches(p) {
				continue
			}
			if exclude != "" {
				if ok, _ := doublestar.Match(erel, p); ok {
					continue
				}
			}
			want = append(want, p)
		}
		if got := names(sel); strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Fatalf("Select(%q (as %q), exclude %q (as %q)):\n got %q\nwant %q", pattern, rel, exclude, erel, got, want)
		}
	})
}
