package archive

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/bmatcuk/doublestar/v4"
)

// Entry is one path of a selection: a regular file, a directory or a
// symlink under the selection's root, with its lstat information at
// selection time. It is kept small (about 40 bytes besides the name): a
// selection holds one per path of the tree for the whole of an archive.
type Entry struct {
	// Name is the path relative to the root, with forward slashes and
	// without a trailing slash.
	Name string
	// Size is the size in bytes of a regular file (or what lstat says of
	// another kind of entry).
	Size int64
	// mtime and mnsec are the modification time as Unix seconds and
	// nanoseconds.
	mtime int64
	mnsec int32
	// Mode is the type and permission bits.
	Mode fs.FileMode
}

// newEntry is the entry named name with the information of info.
func newEntry(name string, info fs.FileInfo) Entry {
	t := info.ModTime()
	return Entry{Name: name, Size: info.Size(), mtime: t.Unix(), mnsec: int32(t.Nanosecond()), Mode: info.Mode()}
}

// ModTime is the modification time at selection time, in the local time
// zone.
func (e Entry) ModTime() time.Time { return time.Unix(e.mtime, int64(e.mnsec)) }

// PatternCount is how many paths one pattern selected or excluded, for the
// job log ("node_modules/: found 1234 matching artifact files and
// directories", "*.log: excluded 3 files").
type PatternCount struct {
	Pattern string
	Count   int
	// Kept is, of a path pattern's Count, how many no exclude pattern
	// dropped: what GitLab Runner reports as found.
	Kept int
}

// Selection is the result of [Select].
type Selection struct {
	// Entries are sorted by name (so a directory comes before what is in
	// it) and unique.
	Entries []Entry
	// Found has one element per path pattern, in the order given: the
	// number of paths it selected, before exclusion. A pattern with a zero
	// count matched nothing, which GitLab reports as a warning.
	Found []PatternCount
	// Excluded has one element per exclude pattern, in the order given:
	// the number of selected paths it dropped.
	Excluded []PatternCount
	// ExtraKept is how many of the extra paths no exclude pattern
	// dropped.
	ExtraKept int
}

// Select lists what paths and extra select under root, minus what exclude
// drops.
//
// paths and exclude are doublestar patterns relative to root (an absolute
// pattern is accepted when it lies under root). A path that matches a
// directory selects the directory and everything under it; symlinks are
// listed as symlinks and never followed. extra are plain relative paths
// selected as they are, without walking into them: the caller's list of
// git-untracked files for `untracked: true`. A missing path selects
// nothing and is not an error.
//
// A pattern or extra path that leaves root (through `..` or by being
// absolute elsewhere), or a malformed pattern, makes Select fail with an
// error that names it.
func Select(root string, paths, exclude, extra []string) (*Selection, error) {
	root, err := filepath.Abs(root)
	if err != nil {
		return nil, fmt.Errorf("archive root %q: %w", root, err)
	}
	excl := make([]string, len(exclude))
	for i, p := range exclude {
		if excl[i], err = relativePattern(root, p); err != nil {
			return nil, fmt.Errorf("exclude pattern %q: %w", p, err)
		}
	}
	sel := &Selection{Found: make([]PatternCount, len(paths)), Excluded: make([]PatternCount, len(exclude))}
	for i, p := range exclude {
		sel.Excluded[i].Pattern = p
	}
	// The entries go straight into a slice, sorted and deduplicated at
	// the end: no map of names nor fs.FileInfo is held per path.
	add := func(name string, info fs.FileInfo) bool {
		for i, ex := range excl {
			if ok, _ := doublestar.Match(ex, name); ok {
				sel.Excluded[i].Count++
				return false
			}
		}
		sel.Entries = append(sel.Entries, newEntry(name, info))
		return true
	}
	for i, p := range paths {
		sel.Found[i].Pattern = p
		if p == "" {
			continue
		}
		rel, err := relativePattern(root, p)
		if err != nil {
			return nil, fmt.Errorf("path pattern %q: %w", p, err)
		}
		n, kept, err := walkPattern(root, rel, add)
		if err != nil {
			return nil, fmt.Errorf("path pattern %q: %w", p, err)
		}
		sel.Found[i].Count, sel.Found[i].Kept = n, kept
	}
	for _, p := range extra {
		rel, err := relativeBase(root, filepath.ToSlash(p))
		if err != nil {
			return nil, fmt.Errorf("extra path %q: %w", p, err)
		}
		if rel == "." {
			continue
		}
		info, err := os.Lstat(filepath.Join(root, filepath.FromSlash(rel)))
		if missing(err) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("extra path %q: %w", p, err)
		}
		if add(rel, info) {
			sel.ExtraKept++
		}
	}
	// A path selected twice keeps its last lstat, as a map would: the
	// stable sort keeps the order of equal names, and the last of each
	// run is kept.
	slices.SortStableFunc(sel.Entries, func(a, b Entry) int { return strings.Compare(a.Name, b.Name) })
	kept := sel.Entries[:0]
	for i, e := range sel.Entries {
		if i+1 < len(sel.Entries) && sel.Entries[i+1].Name == e.Name {
			continue
		}
		kept = append(kept, e)
	}
	clear(sel.Entries[len(kept):])
	sel.Entries = slices.Clip(kept)
	return sel, nil
}

// relativePattern makes pattern relative to root, cleaned, with forward
// slashes: "." for root itself. It fails when the pattern's literal part
// leaves root or the pattern is malformed. The wildcard part is kept as
// written: it can only match names that exist under root.
func relativePattern(root, pattern string) (string, error) {
	if strings.ContainsRune(pattern, 0) {
		return "", errors.New("NUL byte in pattern")
	}
	p := filepath.ToSlash(pattern)
	base, rest := p, ""
	if strings.ContainsAny(p, "*?[{\\") {
		base, rest = doublestar.SplitPattern(p)
	}
	base, err := relativeBase(root, base)
	if err != nil {
		return "", err
	}
	full := base
	if rest != "" {
		full = path.Join(base, rest)
		if base == "." {
			full = rest
		}
		if !doublestar.ValidatePattern(full) {
			return "", errors.New("malformed pattern")
		}
	}
	return full, nil
}

// relativeBase makes the slash-separated path p relative to root and
// cleans it: "." for root itself. It fails when p leaves root.
func relativeBase(root, p string) (string, error) {
	if strings.ContainsRune(p, 0) {
		return "", errors.New("NUL byte in path")
	}
	if filepath.IsAbs(p) {
		r, err := filepath.Rel(root, filepath.Clean(p))
		if err != nil {
			return "", fmt.Errorf("not under the build directory %s", root)
		}
		p = filepath.ToSlash(r)
	}
	p = path.Clean(p)
	if p == ".." || strings.HasPrefix(p, "../") || path.IsAbs(p) {
		return "", fmt.Errorf("leaves the build directory %s", root)
	}
	return p, nil
}

// walkPattern calls add for every path under root that the relative
// pattern selects, and returns how many there were and how many of them
// add kept.
func walkPattern(root, pattern string, add func(string, fs.FileInfo) bool) (found, kept int, err error) {
	base, rest := pattern, ""
	if strings.ContainsAny(pattern, "*?[{\\") {
		base, rest = doublestar.SplitPattern(pattern)
	}
	start := filepath.Join(root, filepath.FromSlash(unescape(base)))
	err = filepath.WalkDir(start, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if missing(err) {
				return nil
			}
			return err
		}
		r, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		name := filepath.ToSlash(r)
		if rest != "" && !doublestar.MatchUnvalidated(pattern, name) {
			return nil
		}
		// Selected: take it and, when it is a directory, everything
		// under it, matched or not.
		return walkAll(p, name, d, func(n string, info fs.FileInfo) {
			found++
			if n == "." || add(n, info) {
				kept++
			}
		})
	})
	return found, kept, err
}

// missing reports whether err says a path does not exist, including
// through a parent that is a file or by a name too long to exist.
func missing(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) || errors.Is(err, syscall.ENAMETOOLONG)
}

// unescape drops the backslashes that escape characters of a pattern's
// literal part.
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) {
			i++
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// walkAll calls add for p (named name) and, when it is a directory, for
// everything under it, without following symlinks. It returns
// filepath.SkipDir for a directory so that the caller's walk does not
// visit its content again.
func walkAll(p, name string, d fs.DirEntry, add func(string, fs.FileInfo)) error {
	if !d.IsDir() {
		info, err := d.Info()
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		add(name, info)
		return nil
	}
	err := filepath.WalkDir(p, func(q string, e fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		info, err := e.Info()
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		r, err := filepath.Rel(p, q)
		if err != nil {
			return err
		}
		add(path.Join(name, filepath.ToSlash(r)), info)
		return nil
	})
	if err != nil {
		return err
	}
	return filepath.SkipDir
}
