package archive

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"sync"

	"github.com/klauspost/compress/flate"
	"golang.org/x/sync/errgroup"
	"golang.org/x/sync/semaphore"
)

// Level is a compression level, named as GitLab's CACHE_COMPRESSION_LEVEL
// and ARTIFACT_COMPRESSION_LEVEL values are.
type Level int

// The levels, as levels of github.com/klauspost/compress/flate (a faster
// deflate than compress/flate, writing the same format). The zero value
// is LevelDefault.
const (
	LevelDefault Level = iota // flate.DefaultCompression
	LevelFastest              // level 1
	LevelFast                 // level 3
	LevelSlow                 // level 7
	LevelSlowest              // level 9
)

// ParseLevel reads a level name: fastest, fast, default, slow, slowest, or
// the empty string for default.
func ParseLevel(s string) (Level, error) {
	switch s {
	case "", "default":
		return LevelDefault, nil
	case "fastest":
		return LevelFastest, nil
	case "fast":
		return LevelFast, nil
	case "slow":
		return LevelSlow, nil
	case "slowest":
		return LevelSlowest, nil
	}
	return 0, fmt.Errorf("compression level %q: want fastest, fast, default, slow or slowest", s)
}

func (l Level) flate() int {
	switch l {
	case LevelFastest:
		return flate.BestSpeed
	case LevelFast:
		return 3
	case LevelSlow:
		return 7
	case LevelSlowest:
		return flate.BestCompression
	}
	return flate.DefaultCompression
}

// CreateOptions tune [Create]. The zero value is ready to use.
type CreateOptions struct {
	// Exclude are doublestar patterns of paths to leave out (see [Select]).
	Exclude []string
	// Extra are relative paths taken as they are, for `untracked`: the
	// caller lists the git-untracked files.
	Extra []string
	// Level is the compression level.
	Level Level
	// Workers is the number of files or chunks compressed at once; zero
	// means GOMAXPROCS.
	Workers int
	// MemoryLimit bounds the bytes of file data and compressed output held
	// in memory at once; zero means 32 MiB. It is raised to what the
	// workers need for one chunk each.
	MemoryLimit int64
	// ChunkSize is how much of a file one worker compresses at a time;
	// zero means 1 MiB. Smaller chunks spread a large file over more
	// workers and cost a little compression ratio.
	ChunkSize int
	// TempDir is where the central directory of an archive of many
	// entries is spooled until the end (the system's temporary
	// directory when empty); what is held in memory does not grow with
	// the number of entries.
	TempDir string
	// Logger receives warnings (a file that vanished between selection
	// and reading, a pattern that matched nothing); nil discards them.
	Logger *slog.Logger
}

// Stats describe an archive made by [Create] or restored by [Extract].
type Stats struct {
	Files    int // regular files
	Dirs     int // directories
	Symlinks int // symlinks
	// Bytes is the uncompressed size of the regular files.
	Bytes int64
	// ArchiveBytes is the size of the archive written or read.
	ArchiveBytes int64
	// Found and Excluded are the per-pattern counts of the selection
	// (Create only; see [Selection]).
	Found, Excluded []PatternCount
	// ExtraKept is how many of the extra paths were kept (Create only).
	ExtraKept int
}

// Entries is the number of entries, whatever their kind.
func (s Stats) Entries() int { return s.Files + s.Dirs + s.Symlinks }

// chunk is one unit of the pipeline: an entry header, or a piece of a
// regular file to compress. The writer takes chunks in order and waits
// for done.
type chunk struct {
	entry *Entry
	first bool // first chunk of its entry: the writer starts a zip entry
	last  bool // last chunk: crc and size are final
	raw   []byte
	out   bytes.Buffer
	crc   uint32 // CRC-32 of the whole file so far (final when last)
	size  int64  // bytes of the whole file so far (final when last)
	link  string // symlink target
	gone  bool   // the file vanished before it could be read: skip it
	grew  bool   // the file grew after selection: only its first size bytes are kept
	path  string // a small file the worker reads itself
	cost  int64  // weight held on the memory semaphore
	done  chan struct{}
}

// Create writes to w a zip archive of what paths and opts.Exclude and
// opts.Extra select under root (see [Select]) and returns what it wrote.
// It fails on the first error, after which w holds a partial archive the
// caller must discard; it stops when ctx is cancelled.
func Create(ctx context.Context, w io.Writer, root string, paths []string, opts CreateOptions) (Stats, error) {
	sel, err := Select(root, paths, opts.Exclude, opts.Extra)
	if err != nil {
		return Stats{}, err
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	for _, f := range sel.Found {
		if f.Count == 0 && f.Pattern != "" {
			log.Warn("no matching files", "pattern", f.Pattern)
		}
	}
	st, err := write(ctx, w, root, sel.Entries, opts, log)
	st.Found, st.Excluded, st.ExtraKept = sel.Found, sel.Excluded, sel.ExtraKept
	return st, err
}

func write(ctx context.Context, w io.Writer, root string, entries []Entry, opts CreateOptions, log *slog.Logger) (Stats, error) {
	workers := opts.Workers
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	chunkSize := opts.ChunkSize
	if chunkSize <= 0 {
		chunkSize = 1 << 20
	}
	limit := opts.MemoryLimit
	if limit <= 0 {
		limit = 32 << 20
	}
	limit = max(limit, int64(workers+1)*chunkCost(int64(chunkSize)))
	mem := semaphore.NewWeighted(limit)

	g, ctx := errgroup.WithContext(ctx)
	work := make(chan *chunk, workers)
	order := make(chan *chunk, 256)

	// Reader: walks the entries in order, reads files chunk by chunk.
	g.Go(func() error {
		defer close(work)
		defer close(order)
		for i := range entries {
			if err := readEntry(ctx, root, &entries[i], chunkSize, mem, order, work); err != nil {
				return err
			}
		}
		return nil
	})
	// Workers: compress chunks.
	var comps sync.Pool
	for range workers {
		g.Go(func() error {
			for c := range work {
				if c.path != "" {
					if err := readSmall(c); err != nil {
						return err
					}
				}
				if !c.gone {
					if err := compress(c, opts.Level.flate(), &comps); err != nil {
						return err
					}
				}
				close(c.done)
			}
			return nil
		})
	}
	// Writer: the zip, in order.
	var st Stats
	g.Go(func() error {
		zw := newZipWriter(w, opts.TempDir)
		defer zw.cd.discard()
		var compressed int64
		for c := range order {
			select {
			case <-c.done:
			case <-ctx.Done():
				return ctx.Err()
			}
			if c.gone {
				log.Warn("file vanished before it could be archived", "path", c.entry.Name)
				mem.Release(c.cost)
				continue
			}
			if c.grew {
				log.Warn("file grew while being archived: only its size at selection time is kept", "path", c.entry.Name, "bytes", c.size)
			}
			var err error
			mode := c.entry.Mode
			if c.first {
				if err = zw.begin(header(c)); err != nil {
					mem.Release(c.cost)
					return fmt.Errorf("archive entry %q: %w", c.entry.Name, err)
				}
				compressed = 0
				countEntry(&st, mode)
			}
			if c.link != "" {
				err = zw.writeString(c.link)
			} else if mode.IsRegular() {
				compressed += int64(c.out.Len())
				err = zw.write(c.out.Bytes())
			}
			mem.Release(c.cost)
			if err == nil && c.last {
				// The data descriptor of a file of several chunks, and
				// the central directory record, take the final values.
				err = zw.finish(c.crc, uint64(compressed), uint64(c.size))
				if mode.IsRegular() {
					st.Bytes += c.size
				}
			}
			if err != nil {
				return fmt.Errorf("archive entry %q: %w", c.entry.Name, err)
			}
		}
		n, err := zw.close()
		if err != nil {
			return fmt.Errorf("archive: finish: %w", err)
		}
		st.ArchiveBytes = n
		return nil
	})
	err := g.Wait()
	return st, err
}

func countEntry(st *Stats, mode fs.FileMode) {
	switch {
	case mode.IsDir():
		st.Dirs++
	case mode&fs.ModeSymlink != 0:
		st.Symlinks++
	default:
		st.Files++
	}
}

// header is the zip header of c's entry. A regular file whose content
// fits in one chunk gets its sizes and CRC up front; a longer one gets
// them in a data descriptor after its data. The modification time is
// written as zip.Writer.CreateHeader does: as an MS-DOS date and time for
// old readers and as an extended timestamp extra field (0x5455, Unix
// seconds) which Info-ZIP, GitLab Runner and archive/zip read first.
func header(c *chunk) entryHeader {
	e := c.entry
	h := entryHeader{name: e.Name, mode: e.Mode, mtime: e.ModTime()}
	switch {
	case e.Mode.IsDir():
		h.name += "/"
		h.method = methodStore
	case e.Mode&fs.ModeSymlink != 0:
		h.method = methodStore
		h.crc = crc32.ChecksumIEEE([]byte(c.link))
		h.usize = uint64(len(c.link))
		h.csize = h.usize
	default:
		h.method = methodDeflate
		if c.last {
			h.crc = c.crc
			h.usize = uint64(c.size)
			h.csize = uint64(c.out.Len())
		} else {
			h.flags |= flagDataDescriptor
		}
	}
	return h
}

// readEntry queues the chunks of one entry: a single one for a directory
// or symlink, one per chunkSize bytes (at least one) for a regular file.
// Each chunk is put on order before work so that the writer sees chunks
// in entry order whatever order the workers finish them in.
func readEntry(ctx context.Context, root string, e *Entry, chunkSize int, mem *semaphore.Weighted, order, work chan<- *chunk) error {
	send := func(c *chunk, compress bool) error {
		select {
		case order <- c:
		case <-ctx.Done():
			return ctx.Err()
		}
		if !compress {
			close(c.done)
			return nil
		}
		select {
		case work <- c:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	p := filepath.Join(root, filepath.FromSlash(e.Name))
	mode := e.Mode
	switch {
	case mode.IsDir():
		return send(&chunk{entry: e, first: true, last: true, done: make(chan struct{})}, false)
	case mode&fs.ModeSymlink != 0:
		target, err := os.Readlink(p)
		c := &chunk{entry: e, first: true, last: true, link: target, done: make(chan struct{})}
		if errors.Is(err, fs.ErrNotExist) {
			c.gone = true
		} else if err != nil {
			return fmt.Errorf("archive entry %q: %w", e.Name, err)
		}
		return send(c, false)
	case !mode.IsRegular():
		// Sockets, devices, FIFOs: GitLab's archiver skips them too.
		return nil
	}
	if size := e.Size; size < int64(chunkSize) {
		// A small file is read by the worker that compresses it, so
		// that the opens and reads of many small files overlap.
		cost := chunkCost(size + 1)
		if err := mem.Acquire(ctx, cost); err != nil {
			return err
		}
		return send(&chunk{entry: e, first: true, last: true, path: p, cost: cost, done: make(chan struct{})}, true)
	}
	f, err := os.Open(p)
	if errors.Is(err, fs.ErrNotExist) {
		return send(&chunk{entry: e, first: true, last: true, gone: true, done: make(chan struct{})}, false)
	}
	if err != nil {
		return fmt.Errorf("archive entry %q: %w", e.Name, err)
	}
	defer f.Close()
	var crc uint32
	var size int64
	for first := true; ; first = false {
		// A buffer just over the size seen at selection time finds the
		// end of a small file with one read.
		n := int64(chunkSize)
		if rest := e.Size - size + 1; rest > 0 && rest < n {
			n = rest
		}
		cost := chunkCost(n)
		if err := mem.Acquire(ctx, cost); err != nil {
			return err
		}
		buf := make([]byte, n)
		got, err := io.ReadFull(f, buf)
		last := errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
		if err != nil && !last {
			mem.Release(cost)
			return fmt.Errorf("archive entry %q: read: %w", e.Name, err)
		}
		crc = crc32.Update(crc, crc32.IEEETable, buf[:got])
		size += int64(got)
		c := &chunk{entry: e, first: first, last: last, raw: buf[:got], crc: crc, size: size, cost: cost, done: make(chan struct{})}
		if err := send(c, true); err != nil {
			return err
		}
		if last {
			return nil
		}
	}
}

// readSmall reads the small file of c, up to its size at selection time.
func readSmall(c *chunk) error {
	f, err := os.Open(c.path)
	if errors.Is(err, fs.ErrNotExist) {
		c.gone = true
		return nil
	}
	if err != nil {
		return fmt.Errorf("archive entry %q: %w", c.entry.Name, err)
	}
	defer f.Close()
	want := c.entry.Size
	buf := make([]byte, want+1)
	got, err := io.ReadFull(f, buf)
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("archive entry %q: read: %w", c.entry.Name, err)
	}
	if int64(got) > want {
		got, c.grew = int(want), true
	}
	c.raw = buf[:got]
	c.crc = crc32.ChecksumIEEE(c.raw)
	c.size = int64(got)
	return nil
}

// compress deflates c.raw into c.out: a complete stream for a file's last
// chunk, a sync-flushed one otherwise, so that the chunks of one file
// concatenate into one valid deflate stream.
func compress(c *chunk, level int, pool *sync.Pool) error {
	fw, _ := pool.Get().(*flate.Writer)
	if fw == nil {
		var err error
		if fw, err = flate.NewWriter(&c.out, level); err != nil {
			return fmt.Errorf("archive: compressor: %w", err)
		}
	} else {
		fw.Reset(&c.out)
	}
	defer pool.Put(fw)
	c.out.Grow(deflateBound(len(c.raw)))
	if _, err := fw.Write(c.raw); err != nil {
		return fmt.Errorf("archive entry %q: compress: %w", c.entry.Name, err)
	}
	var err error
	if c.last {
		err = fw.Close()
	} else {
		err = fw.Flush()
	}
	if err != nil {
		return fmt.Errorf("archive entry %q: compress: %w", c.entry.Name, err)
	}
	c.raw = nil // the memory is accounted until the writer releases it
	return nil
}

// deflateBound is the most a deflate stream of n bytes takes, flushed or
// closed: incompressible data goes into stored blocks of at most 65,535
// bytes with 5 bytes of header each, and the flush or final block adds a
// few bytes. compress makes room for that much up front, so the output
// buffer is allocated once, at the size chunkCost accounts for (growing it
// by doubling would allocate up to twice the data for a random chunk and
// hold more than the memory limit allows).
func deflateBound(n int) int {
	return n + n/8192 + 64
}

// chunkCost is the weight a chunk of n bytes of file data holds on the
// memory semaphore: its data, its compressed output at the most, and its
// bookkeeping.
func chunkCost(n int64) int64 {
	return n + int64(deflateBound(int(n))) + 1024
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
