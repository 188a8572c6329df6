package archive

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"io/fs"
	"log/slog"
	"math"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/drover-ci/drover/internal/ctxio"
)

// ErrUnsafe is wrapped by the errors of [Extract] for an entry it refuses
// because it would write outside the destination or through a symlink.
var ErrUnsafe = errors.New("unsafe archive entry")

// ErrCorrupt is wrapped by the errors of [Extract] for an archive that is
// truncated, malformed or fails its checksums.
var ErrCorrupt = errors.New("corrupt archive")

// ErrTooLarge is wrapped by the errors of [Extract] for an archive over
// [ExtractOptions.MaxBytes] or [ExtractOptions.MaxEntries]: a zip bomb, or
// more than the machine was meant to take.
var ErrTooLarge = errors.New("archive over the extraction limits")

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
	// MaxBytes caps the bytes the archive's files and symlinks expand
	// to, and MaxEntries the number of its entries (of every kind); zero
	// means no cap. Both are checked against the central directory before
	// anything is written, and the sizes it declares are the most an
	// entry's data may expand to (more is corrupt), so an archive over a
	// cap is refused whole, with an error wrapping [ErrTooLarge], without
	// a byte written.
	MaxBytes   int64
	MaxEntries int
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

// Kinds of archive entries, as Extract treats them.
const (
	kindSkip    = iota // the archive's root, or a kind that is not extracted
	kindDir            // a directory
	kindFile           // a regular file
	kindSymlink        // a symlink
)

// maxKnownDirs bounds the cache of directories known to be real ones
// during an extraction; past it, the cache starts over.
const maxKnownDirs = 4096

// extraction is the state of one Extract, which reads the central
// directory of the archive three times, one record at a time: to check
// every entry before anything is written, to write the entries, and to
// give the directories their modes and times. What it holds per entry
// between the passes is skip; during the first, 16 bytes per entry (a
// hash of its name and its position) to find the names that repeat.
type extraction struct {
	z     *zipArchive
	log   *slog.Logger
	opts  ExtractOptions
	seed  maphash.Seed
	flate inflaters
	// skip holds, in increasing order, the positions of the entries that
	// a later entry of the same name replaces, as it would when written
	// in order: they are not extracted.
	skip []uint32
}

// dirError is a malformed or truncated central directory.
func dirError(err error) error {
	return fmt.Errorf("%w: reading the central directory (truncated or not a zip archive?): %w", ErrCorrupt, err)
}

// classify checks the name of the entry of c and says what is done with
// it: its cleaned name and mode, and its kind (kindSkip for the
// archive's root and for kinds that are not extracted).
func classify(c *centralRecord) (name string, mode fs.FileMode, kind int, err error) {
	name, err = entryName(c.name)
	if err != nil {
		return "", 0, kindSkip, err
	}
	mode = c.mode()
	switch {
	case name == ".":
		return name, mode, kindSkip, nil // the archive's root: dest itself
	case mode.IsDir():
		return name, mode, kindDir, nil
	case mode.IsRegular():
		return name, mode, kindFile, nil
	case mode&fs.ModeSymlink != 0:
		return name, mode, kindSymlink, nil
	}
	return name, mode, kindSkip, nil
}

// hash is the hash of a cleaned name, for finding the names that repeat.
func (x *extraction) hash(name string) uint64 { return maphash.String(x.seed, name) }

// checkData refuses, before any I/O, a file or symlink entry whose data
// cannot be read: encrypted, compressed by an unsupported method, or out
// of the archive.
func (x *extraction) checkData(c *centralRecord) error {
	if err := x.z.checkData(c); err != nil {
		return &entryError{name: c.name, reason: "unreadable data", kind: ErrCorrupt, err: err}
	}
	return nil
}

// validate is the first pass: it checks every entry, refusing the
// archive on the first that is unsafe or unreadable, and sets x.skip.
func (x *extraction) validate() error {
	type named struct {
		hash  uint64
		index uint32
	}
	var all []named
	// links holds the hashes of the names of the symlinks of the archive
	// so far. A collision of two names' hashes (about 2⁻⁶⁴ a pair, the
	// seed being random) could refuse an archive that is safe; an unsafe
	// one is also refused by checkParents while writing.
	links := map[uint64]struct{}{}
	var entries int
	var expanded uint64 // saturates: an archive may declare up to 2⁶⁴-1 bytes an entry
	d := x.z.directory()
	var c centralRecord
	for {
		err := d.next(&c)
		if err == io.EOF {
			break
		}
		if err != nil {
			return dirError(err)
		}
		entries++
		if max := x.opts.MaxEntries; max > 0 && entries > max {
			return fmt.Errorf("%w: more than %d entries", ErrTooLarge, max)
		}
		name, mode, kind, err := classify(&c)
		if err != nil {
			return err
		}
		switch kind {
		case kindSkip:
			if name != "." {
				x.log.Warn("archive entry of an unsupported kind skipped", "entry", c.name, "mode", mode.String())
			}
			continue
		case kindFile:
			if err := x.checkData(&c); err != nil {
				return err
			}
			if expanded += c.usize; expanded < c.usize {
				expanded = math.MaxUint64
			}
			if max := x.opts.MaxBytes; max > 0 && expanded > uint64(max) {
				return fmt.Errorf("%w: expands to more than %d bytes (%s) by entry %q", ErrTooLarge, max, humanBytes(uint64(max)), c.name)
			}
		case kindSymlink:
			link, err := x.readLink(&c)
			if err != nil {
				return err
			}
			if err := checkLink(name, link); err != nil {
				return err
			}
			expanded += uint64(len(link)) // at most maxLinkTarget: no overflow before the cap
			if max := x.opts.MaxBytes; max > 0 && expanded > uint64(max) {
				return fmt.Errorf("%w: expands to more than %d bytes (%s) by entry %q", ErrTooLarge, max, humanBytes(uint64(max)), c.name)
			}
		}
		if len(links) > 0 {
			for dir := path.Dir(name); dir != "."; dir = path.Dir(dir) {
				if _, ok := links[x.hash(dir)]; ok {
					return &entryError{name: c.name, reason: fmt.Sprintf("would be written through the symlink %q of the archive", dir), kind: ErrUnsafe}
				}
			}
		}
		h := x.hash(name)
		if kind == kindSymlink {
			links[h] = struct{}{}
		} else {
			delete(links, h)
		}
		all = append(all, named{h, c.index})
	}
	// The entries whose hash is another's: sorted by hash, they are
	// together.
	slices.SortFunc(all, func(a, b named) int { return cmp.Compare(a.hash, b.hash) })
	var dups []uint32
	for i := 0; i < len(all); {
		j := i + 1
		for j < len(all) && all[j].hash == all[i].hash {
			j++
		}
		if j-i > 1 {
			for _, e := range all[i:j] {
				dups = append(dups, e.index)
			}
		}
		i = j
	}
	if len(dups) == 0 {
		return nil
	}
	// Their names, exactly: of each name, the last entry is extracted.
	slices.Sort(dups)
	names := make([]string, 0, len(dups))
	last := map[string]uint32{}
	d = x.z.directory()
	for len(names) < len(dups) {
		if err := d.next(&c); err != nil {
			return dirError(noEOF(err))
		}
		if c.index != dups[len(names)] {
			continue
		}
		name, _, _, err := classify(&c)
		if err != nil {
			return err
		}
		names = append(names, name)
		last[name] = c.index
	}
	for i, name := range names {
		if last[name] != dups[i] {
			x.skip = append(x.skip, dups[i])
		}
	}
	return nil
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
//
// The central directory is read as a stream, one record at a time, so
// the memory Extract needs does not grow with the number of entries but
// for 16 bytes per entry while it checks them, and 4 per entry that a
// later one of the same name replaces.
func Extract(ctx context.Context, r io.ReaderAt, size int64, dest string, opts ExtractOptions) (Stats, error) {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	z, err := openZip(r, size)
	if err != nil {
		return Stats{}, dirError(err)
	}
	x := &extraction{z: z, log: log, opts: opts, seed: maphash.MakeSeed()}
	if err := x.validate(); err != nil {
		return Stats{}, err
	}
	root, err := os.OpenRoot(dest)
	if err != nil {
		return Stats{}, fmt.Errorf("extract: destination: %w", err)
	}
	defer root.Close()
	st, err := x.write(ctx, root, opts.Workers)
	if err != nil {
		return st, err
	}
	if err := ctx.Err(); err != nil {
		return st, err
	}
	return st, x.finishDirs(ctx, root)
}

// fileEntry is a file for a writer.
type fileEntry struct {
	c    centralRecord
	name string // cleaned, relative, slash-separated
	mode fs.FileMode
}

// write is the second pass: it makes the directories and symlinks and
// has workers write the files.
func (x *extraction) write(ctx context.Context, root *os.Root, workers int) (Stats, error) {
	st := Stats{ArchiveBytes: x.z.size}
	var mu sync.Mutex // guards st while file writers run
	// known are the directories seen to be real directories (checked or
	// made by us): their checks are not repeated for every file in them.
	// Neither a file nor a symlink can be renamed over a directory, so
	// they stay directories.
	known := map[string]bool{".": true}
	g, gctx := errgroup.WithContext(ctx)
	if workers <= 0 {
		workers = max(4, runtime.GOMAXPROCS(0))
	}
	g.SetLimit(workers)
	defer func() { _ = g.Wait() }() // on an early return, let writers finish
	skip := x.skip
	d := x.z.directory()
	var c centralRecord
	for gctx.Err() == nil { // else a writer failed, or ctx ended: g.Wait says which
		err := d.next(&c)
		if err == io.EOF {
			break
		}
		if err != nil {
			_ = g.Wait()
			return st, dirError(err)
		}
		if len(skip) > 0 && skip[0] == c.index {
			skip = skip[1:]
			continue
		}
		name, mode, kind, err := classify(&c)
		if err != nil {
			_ = g.Wait()
			return st, err
		}
		if kind == kindSkip {
			continue
		}
		if len(known) > maxKnownDirs {
			clear(known)
			known["."] = true
		}
		if err := checkParents(root, name, known); err != nil {
			_ = g.Wait()
			return st, err
		}
		switch kind {
		case kindDir:
			if err := mkdir(root, name, known); err != nil {
				_ = g.Wait()
				return st, err
			}
			st.Dirs++
		case kindSymlink:
			link, err := x.readLink(&c)
			if err == nil {
				err = checkLink(name, link)
			}
			if err != nil {
				_ = g.Wait()
				return st, err
			}
			if err := mkdir(root, path.Dir(name), known); err != nil {
				return st, err
			}
			if err := placeSymlink(root, c.name, name, link); err != nil {
				return st, err
			}
			st.Symlinks++
		default:
			if err := mkdir(root, path.Dir(name), known); err != nil {
				return st, err
			}
			// Files are written concurrently: with many small files the
			// time goes to system calls, which overlap. validate left one
			// entry per name, so no two writers share a path.
			e := fileEntry{c: c, name: name, mode: mode}
			g.Go(func() error {
				n, err := x.placeFile(gctx, root, &e)
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
	return st, g.Wait()
}

// finishDirs is the third pass: it gives the directories their modes and
// times, once all their content is written. Those whose mode keeps their
// owner from entering them are done last, deepest first, so that their
// subdirectories can be reached before.
func (x *extraction) finishDirs(ctx context.Context, root *os.Root) error {
	type dirMeta struct {
		name  string
		mode  fs.FileMode
		mtime time.Time
	}
	set := func(d dirMeta) error {
		if err := root.Chmod(d.name, d.mode.Perm()); err != nil {
			return fmt.Errorf("archive entry %q: set mode: %w", d.name+"/", err)
		}
		if !d.mtime.IsZero() {
			if err := root.Chtimes(d.name, d.mtime, d.mtime); err != nil {
				return fmt.Errorf("archive entry %q: set time: %w", d.name+"/", err)
			}
		}
		return nil
	}
	var closed []dirMeta
	skip := x.skip
	d := x.z.directory()
	var c centralRecord
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		err := d.next(&c)
		if err == io.EOF {
			break
		}
		if err != nil {
			return dirError(err)
		}
		if len(skip) > 0 && skip[0] == c.index {
			skip = skip[1:]
			continue
		}
		name, mode, kind, err := classify(&c)
		if err != nil {
			return err
		}
		if kind != kindDir {
			continue
		}
		if mode&0o100 == 0 {
			closed = append(closed, dirMeta{name, mode, c.modified})
			continue
		}
		if err := set(dirMeta{name, mode, c.modified}); err != nil {
			return err
		}
	}
	slices.SortStableFunc(closed, func(a, b dirMeta) int {
		return cmp.Compare(strings.Count(b.name, "/"), strings.Count(a.name, "/"))
	})
	for _, d := range closed {
		if err := set(d); err != nil {
			return err
		}
	}
	return nil
}

// humanBytes is n in binary units, for messages: "5.0 GiB".
func humanBytes(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := uint64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
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
func (x *extraction) readLink(c *centralRecord) (string, error) {
	if c.usize > maxLinkTarget {
		return "", &entryError{name: c.name, reason: fmt.Sprintf("symlink target longer than %d bytes", maxLinkTarget), kind: ErrCorrupt}
	}
	rc, err := x.z.openEntry(c, &x.flate)
	if err != nil {
		return "", &entryError{name: c.name, reason: "reading symlink target", kind: ErrCorrupt, err: err}
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, maxLinkTarget+1))
	if err != nil {
		return "", &entryError{name: c.name, reason: "reading symlink target", kind: ErrCorrupt, err: err}
	}
	if len(b) == 0 || len(b) > maxLinkTarget {
		return "", &entryError{name: c.name, reason: "symlink target empty or too long", kind: ErrCorrupt}
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

// tempName is a fresh name next to name for writing it before the rename:
// at most 255 bytes (a file system's limit for one name), however long
// name's own is.
func tempName(name string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	prefix := ".drover-extract-" + hex.EncodeToString(b[:]) + "-"
	base := path.Base(name)
	if len(prefix)+len(base) > maxNameLen {
		base = base[:maxNameLen-len(prefix)]
	}
	return path.Join(path.Dir(name), prefix+base)
}

// maxNameLen is the longest name of one path element most file systems
// take (NAME_MAX).
const maxNameLen = 255

// placeSymlink makes the symlink name (cleaned) of the entry raw, to
// link.
func placeSymlink(root *os.Root, raw, name, link string) error {
	tmp := tempName(name)
	if err := root.Symlink(link, tmp); err != nil {
		return fmt.Errorf("archive entry %q: create symlink: %w", raw, err)
	}
	if err := root.Rename(tmp, name); err != nil {
		_ = root.Remove(tmp)
		return fmt.Errorf("archive entry %q: create symlink: %w", raw, err)
	}
	return nil
}

// placeFile writes a regular file entry under a temporary name and
// renames it into place, and returns its size.
func (x *extraction) placeFile(ctx context.Context, root *os.Root, e *fileEntry) (n int64, err error) {
	rc, err := x.z.openEntry(&e.c, &x.flate)
	if err != nil {
		return 0, &entryError{name: e.c.name, reason: "open", kind: ErrCorrupt, err: err}
	}
	defer rc.Close()
	tmp := tempName(e.name)
	out, err := root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return 0, fmt.Errorf("archive entry %q: create: %w", e.c.name, err)
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
			return n, fmt.Errorf("archive entry %q: write: %w", e.c.name, err)
		}
		return n, &entryError{name: e.c.name, reason: "data truncated or corrupt", kind: ErrCorrupt, err: err}
	}
	if err = out.Chmod(e.mode.Perm()); err != nil {
		return n, fmt.Errorf("archive entry %q: set mode: %w", e.c.name, err)
	}
	if !e.c.modified.IsZero() {
		if err = setTimes(out, e.c.modified); err != nil {
			return n, fmt.Errorf("archive entry %q: set time: %w", e.c.name, err)
		}
	}
	if err = out.Close(); err != nil {
		return n, fmt.Errorf("archive entry %q: write: %w", e.c.name, err)
	}
	if err = root.Rename(tmp, e.name); err != nil {
		return n, fmt.Errorf("archive entry %q: rename into place: %w", e.c.name, err)
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
