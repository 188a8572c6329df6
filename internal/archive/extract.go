package archive

import (
	"archive/zip"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/klauspost/compress/flate"
	"golang.org/x/sync/errgroup"

	"github.com/drover-ci/drover/internal/ctxio"
)

// ErrUnsafe is wrapped by the errors of [Extract] for an entry it refuses
// because it would write outside the destination or through a symlink.
var ErrUnsafe = errors.New("unsafe archive entry")

// ErrCorrupt is wrapped by the errors of [Extract] for an archive that is
// truncated, malformed or fails its checksums.
var ErrCorrupt = errors.New("corrupt archive")

// maxLinkTarget bounds the size of a symlink entry's content.
const maxLinkTarget = 4096

// ExtractOptions tune [Extract]. The zero value is ready to use.
type ExtractOptions struct {
	// Workers is the number of files written at once; zero means
	// GOMAXPROCS, at least 4.
	Workers int
	// Logger receives warnings (an entry of a kind that is skipped, such
	// as a device); nil discards them.
	Logger *slog.Logger
}

// entryError is the error for one entry of an archive.
type entryError struct {
	name   string
	reason string
	kind   error // ErrUnsafe, ErrCorrupt or nil
	err    error // the cause, if any
}

func (e *entryError) Error() string {
	s := fmt.Sprintf("archive entry %q: %s", e.name, e.reason)
	if e.err != nil {
		s += ": " + e.err.Error()
	}
	return s
}

func (e *entryError) Unwrap() []error {
	var errs []error
	if e.kind != nil {
		errs = append(errs, e.kind)
	}
	if e.err != nil {
		errs = append(errs, e.err)
	}
	return errs
}

// plannedEntry is an archive entry that passed the checks of plan.
type plannedEntry struct {
	f    *zip.File
	name string // cleaned, relative, slash-separated
	mode fs.FileMode
	link string // symlink target
}

// Extract restores the zip archive of size bytes read from r under dest,
// which must exist.
//
// Before writing anything, it checks every entry and refuses the archive,
// with an error naming the entry and wrapping [ErrUnsafe], when an entry
// is absolute, leaves dest through `..`, is a symlink whose target is
// absolute or resolves outside dest, or lies under a symlink of the
// archive. While writing, it refuses an entry whose parent directory in
// dest is a symlink, so that nothing is written through a symlink,
// whether the archive or dest put it there. A truncated, malformed or
// corrupt archive is refused with an error wrapping [ErrCorrupt]: when
// the corruption is found in an entry's data, the entries before it are
// in place, that one is not.
//
// Each file and symlink is written under a temporary name in its
// directory and renamed over its real name once complete, so an existing
// file is replaced atomically and no half-written file is visible.
// Modes (permission bits) and modification times are restored;
// directories get theirs once all their content is written. Entries that
// are neither files, directories nor symlinks are skipped with a warning.
func Extract(ctx context.Context, r io.ReaderAt, size int64, dest string, opts ExtractOptions) (Stats, error) {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	zr, err := zip.NewReader(r, size)
	if err != nil {
		return Stats{}, fmt.Errorf("%w: reading the central directory (truncated or not a zip archive?): %w", ErrCorrupt, err)
	}
	// klauspost's inflate reads the same streams as compress/flate,
	// about twice as fast.
	zr.RegisterDecompressor(zip.Deflate, func(r io.Reader) io.ReadCloser { return flate.NewReader(r) })
	names, links, err := plan(zr, log)
	if err != nil {
		return Stats{}, err
	}
	root, err := os.OpenRoot(dest)
	if err != nil {
		return Stats{}, fmt.Errorf("extract: destination: %w", err)
	}
	defer root.Close()

	st := Stats{ArchiveBytes: size}
	type dirTime struct {
		name  string
		mode  fs.FileMode
		mtime time.Time
	}
	var dirs []dirTime
	var mu sync.Mutex // guards st while file writers run
	// known are the directories seen to be real directories (checked or
	// made by us): their checks are not repeated for every file in them.
	// Neither a file nor a symlink can be renamed over a directory, so
	// they stay directories.
	known := map[string]bool{".": true}
	g, gctx := errgroup.WithContext(ctx)
	workers := opts.Workers
	if workers <= 0 {
		workers = max(4, runtime.GOMAXPROCS(0))
	}
	g.SetLimit(workers)
	defer func() { _ = g.Wait() }() // on an early return, let writers finish
	for i, f := range zr.File {
		if gctx.Err() != nil {
			break // a writer failed, or ctx ended: g.Wait says which
		}
		if names[i] == "" {
			continue
		}
		e := plannedEntry{f: f, name: names[i], mode: f.Mode(), link: links[i]}
		// What is done with is left to the collector as extraction goes.
		zr.File[i], names[i] = nil, ""
		if err := checkParents(root, e.name, known); err != nil {
			_ = g.Wait()
			return st, err
		}
		switch {
		case e.mode.IsDir():
			if err := mkdir(root, e.name, known); err != nil {
				_ = g.Wait()
				return st, err
			}
			dirs = append(dirs, dirTime{e.name, e.mode, e.f.Modified})
			st.Dirs++
		case e.mode&fs.ModeSymlink != 0:
			if err := mkdir(root, path.Dir(e.name), known); err != nil {
				return st, err
			}
			if err := placeSymlink(root, e); err != nil {
				return st, err
			}
			st.Symlinks++
		default:
			if err := mkdir(root, path.Dir(e.name), known); err != nil {
				return st, err
			}
			// Files are written concurrently: with many small files the
			// time goes to system calls, which overlap. plan left one
			// entry per name, so no two writers share a path.
			g.Go(func() error {
				n, err := placeFile(gctx, root, e)
				if err != nil {
					return err
				}
				mu.Lock()
				st.Files++
				st.Bytes += n
				mu.Unlock()
				return nil
			})
		}
	}
	if err := g.Wait(); err != nil {
		return st, err
	}
	if err := ctx.Err(); err != nil {
		return st, err
	}
	// Deepest first, so that setting a directory's time is not undone by
	// setting its children's.
	for _, d := range slices.Backward(dirs) {
		if err := root.Chmod(d.name, d.mode.Perm()); err != nil {
			return st, fmt.Errorf("archive entry %q: set mode: %w", d.name+"/", err)
		}
		if !d.mtime.IsZero() {
			if err := root.Chtimes(d.name, d.mtime, d.mtime); err != nil {
				return st, fmt.Errorf("archive entry %q: set time: %w", d.name+"/", err)
			}
		}
	}
	return st, nil
}

// plan checks every entry of zr and says which to extract, in archive
// order: names[i] is the cleaned name of zr.File[i], or "" for an entry
// to skip (the archive's root, a kind that is not extracted, or a name
// that a later entry replaces); links holds the targets of the symlinks.
// It keeps about 20 bytes per entry besides zr's own: a string header
// per name (the names are zr's own strings when already clean) and an
// index while sorting.
func plan(zr *zip.Reader, log *slog.Logger) (names []string, links map[int]string, err error) {
	names = make([]string, len(zr.File))
	links = map[int]string{}
	linkNames := map[string]bool{} // symlinks of the archive so far
	for i, f := range zr.File {
		name, err := entryName(f.Name)
		if err != nil {
			return nil, nil, err
		}
		if name == "." {
			continue // the archive's root: dest itself
		}
		mode := f.Mode()
		link := ""
		switch {
		case mode.IsDir(), mode.IsRegular():
		case mode&fs.ModeSymlink != 0:
			if link, err = readLink(f); err != nil {
				return nil, nil, err
			}
			if err := checkLink(name, link); err != nil {
				return nil, nil, err
			}
		default:
			log.Warn("archive entry of an unsupported kind skipped", "entry", f.Name, "mode", mode.String())
			continue
		}
		for dir := path.Dir(name); dir != "."; dir = path.Dir(dir) {
			if linkNames[dir] {
				return nil, nil, &entryError{name: f.Name, reason: fmt.Sprintf("would be written through the symlink %q of the archive", dir), kind: ErrUnsafe}
			}
		}
		if link != "" {
			linkNames[name] = true
			links[i] = link
		} else {
			delete(linkNames, name)
		}
		names[i] = name
	}
	// A later entry of the same name replaces an earlier one, as it
	// would when written in order: keep only the last. The indices
	// sorted by name (stably: in archive order within one name) put
	// the entries of one name together, the last one last.
	order := make([]int32, 0, len(names))
	for i, n := range names {
		if n != "" {
			order = append(order, int32(i))
		}
	}
	slices.SortStableFunc(order, func(a, b int32) int { return strings.Compare(names[a], names[b]) })
	for k := 0; k+1 < len(order); k++ {
		if i := order[k]; names[i] == names[order[k+1]] {
			names[i] = ""
			delete(links, int(i))
		}
	}
	return names, links, nil
}

// entryName validates an entry's name and returns it cleaned.
func entryName(raw string) (string, error) {
	fail := func(reason string) (string, error) {
		return "", &entryError{name: raw, reason: reason, kind: ErrUnsafe}
	}
	n := strings.TrimSuffix(raw, "/")
	switch {
	case raw == "":
		return fail("empty name")
	case strings.ContainsRune(raw, 0):
		return fail("NUL byte in name")
	case strings.HasPrefix(raw, "/") || filepath.IsAbs(n) || filepath.VolumeName(n) != "":
		return fail("absolute path")
	}
	clean := path.Clean(n)
	if !filepath.IsLocal(filepath.FromSlash(clean)) && clean != "." {
		return fail("path leaves the destination")
	}
	return clean, nil
}

// readLink reads the target of a symlink entry.
func readLink(f *zip.File) (string, error) {
	if f.UncompressedSize64 > maxLinkTarget {
		return "", &entryError{name: f.Name, reason: fmt.Sprintf("symlink target longer than %d bytes", maxLinkTarget), kind: ErrCorrupt}
	}
	rc, err := f.Open()
	if err != nil {
		return "", &entryError{name: f.Name, reason: "reading symlink target", kind: ErrCorrupt, err: err}
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, maxLinkTarget+1))
	if err != nil {
		return "", &entryError{name: f.Name, reason: "reading symlink target", kind: ErrCorrupt, err: err}
	}
	if len(b) == 0 || len(b) > maxLinkTarget {
		return "", &entryError{name: f.Name, reason: "symlink target empty or too long", kind: ErrCorrupt}
	}
	return string(b), nil
}

// checkLink refuses a symlink named name (relative to the destination)
// whose target is absolute or resolves outside the destination.
func checkLink(name, target string) error {
	fail := func(reason string) error {
		return &entryError{name: name, reason: fmt.Sprintf("symlink to %q %s", target, reason), kind: ErrUnsafe}
	}
	if strings.ContainsRune(target, 0) {
		return fail("has a NUL byte")
	}
	if path.IsAbs(target) || filepath.IsAbs(target) {
		return fail("is absolute")
	}
	if !filepath.IsLocal(filepath.FromSlash(path.Join(path.Dir(name), target))) {
		return fail("leaves the destination")
	}
	return nil
}

// checkParents refuses name when one of its parent directories in the
// destination is a symlink (or not a directory).
func checkParents(root *os.Root, name string, known map[string]bool) error {
	var parents []string
	for dir := path.Dir(name); !known[dir]; dir = path.Dir(dir) {
		parents = append(parents, dir)
	}
	for _, dir := range slices.Backward(parents) {
		info, err := root.Lstat(dir)
		if errors.Is(err, fs.ErrNotExist) {
			return nil // neither it nor anything under it exists yet
		}
		if err != nil {
			return fmt.Errorf("archive entry %q: %w", name, err)
		}
		if info.Mode()&fs.ModeSymlink != 0 {
			return &entryError{name: name, reason: fmt.Sprintf("would be written through the symlink %q", dir), kind: ErrUnsafe}
		}
		if !info.IsDir() {
			return &entryError{name: name, reason: fmt.Sprintf("parent %q is not a directory", dir)}
		}
		known[dir] = true
	}
	return nil
}

// mkdir makes the directory name and its parents, which checkParents has
// found to be directories or missing.
func mkdir(root *os.Root, name string, known map[string]bool) error {
	if known[name] {
		return nil
	}
	if err := root.MkdirAll(name, 0o755); err != nil {
		return fmt.Errorf("archive entry %q: create directory: %w", name+"/", err)
	}
	for d := name; !known[d]; d = path.Dir(d) {
		known[d] = true
	}
	return nil
}

// tempName is a fresh name next to name for writing it before the rename.
func tempName(name string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return path.Join(path.Dir(name), ".drover-extract-"+hex.EncodeToString(b[:])+"-"+path.Base(name))
}

func placeSymlink(root *os.Root, e plannedEntry) error {
	tmp := tempName(e.name)
	if err := root.Symlink(e.link, tmp); err != nil {
		return fmt.Errorf("archive entry %q: create symlink: %w", e.f.Name, err)
	}
	if err := root.Rename(tmp, e.name); err != nil {
		_ = root.Remove(tmp)
		return fmt.Errorf("archive entry %q: create symlink: %w", e.f.Name, err)
	}
	return nil
}

// placeFile writes a regular file entry under a temporary name and
// renames it into place, and returns its size.
func placeFile(ctx context.Context, root *os.Root, e plannedEntry) (n int64, err error) {
	rc, err := e.f.Open()
	if err != nil {
		return 0, &entryError{name: e.f.Name, reason: "open", kind: ErrCorrupt, err: err}
	}
	defer rc.Close()
	tmp := tempName(e.name)
	out, err := root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return 0, fmt.Errorf("archive entry %q: create: %w", e.f.Name, err)
	}
	defer func() {
		if err != nil {
			_ = out.Close()
			_ = root.Remove(tmp)
		}
	}()
	n, err = io.Copy(out, ctxio.Reader(ctx, rc))
	if err != nil {
		if ctx.Err() != nil {
			return n, ctx.Err()
		}
		var pe *fs.PathError
		if errors.As(err, &pe) {
			return n, fmt.Errorf("archive entry %q: write: %w", e.f.Name, err)
		}
		return n, &entryError{name: e.f.Name, reason: "data truncated or corrupt", kind: ErrCorrupt, err: err}
	}
	if err = out.Chmod(e.mode.Perm()); err != nil {
		return n, fmt.Errorf("archive entry %q: set mode: %w", e.f.Name, err)
	}
	if !e.f.Modified.IsZero() {
		if err = setTimes(out, e.f.Modified); err != nil {
			return n, fmt.Errorf("archive entry %q: set time: %w", e.f.Name, err)
		}
	}
	if err = out.Close(); err != nil {
		return n, fmt.Errorf("archive entry %q: write: %w", e.f.Name, err)
	}
	if err = root.Rename(tmp, e.name); err != nil {
		return n, fmt.Errorf("archive entry %q: rename into place: %w", e.f.Name, err)
	}
	return n, nil
}

// setTimes sets the access and modification times of an open file, on
// its descriptor: no second walk of its path.
func setTimes(f *os.File, t time.Time) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	tv := syscall.NsecToTimeval(t.UnixNano())
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = syscall.Futimes(int(fd), []syscall.Timeval{tv, tv})
	}); err != nil {
		return err
	}
	return serr
}

// ExtractReader is [Extract] for a stream that cannot be read at random:
// it spools r to a temporary file in tempDir (the system's when empty),
// which it removes before returning.
func ExtractReader(ctx context.Context, r io.Reader, tempDir, dest string, opts ExtractOptions) (Stats, error) {
	f, err := os.CreateTemp(tempDir, "drover-archive-*.zip")
	if err != nil {
		return Stats{}, fmt.Errorf("extract: spool file: %w", err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	size, err := io.Copy(f, ctxio.Reader(ctx, r))
	if err != nil {
		return Stats{}, fmt.Errorf("extract: spooling the archive: %w", err)
	}
	return Extract(ctx, f, size, dest, opts)
}
