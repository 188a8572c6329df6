package trace

import (
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"sync"
)

// ErrFinished is returned by Write after Finish or Close.
var ErrFinished = errors.New("trace: write after Finish")

// errNegativeOffset is returned by ReadAt for a negative offset.
var errNegativeOffset = errors.New("trace: negative offset")

// chunkSize is how much of a Write is masked and stored at a time, which
// bounds the memory a Buffer uses whatever the size of the writes.
const chunkSize = 64 << 10

// memSize is how many stored bytes a Buffer collects in memory before it
// writes them to its file, to save system calls on small writes. Readers
// see them at once all the same.
const memSize = 64 << 10

// limitNotice is appended once when the log reaches Options.Limit.
const limitNotice = "\nJob's log exceeded limit of %d bytes.\nJob execution will continue but no more output will be collected.\n"

// Options configure a Buffer.
type Options struct {
	// Masked are values replaced by "[MASKED]"; empty strings are ignored.
	Masked []string
	// TokenPrefixes are prefixes of tokens such as "glpat-": the token
	// characters [A-Za-z0-9_-] that follow a prefix are masked, the prefix
	// stays visible ("glpat-[MASKED]").
	TokenPrefixes []string
	// Limit is the most bytes stored, not counting the notice appended when
	// it is reached; 0 means unlimited.
	Limit int64
	// Dir is where the backing temporary file is created; "" means
	// os.TempDir().
	Dir string
	// Base is the log offset of the first byte this Buffer stores: a job
	// resumed after a manager restart continues a log whose first Base
	// bytes the coordinator already has. Size counts them; ReadAt cannot
	// read them; Checksum is then unknown ("").
	Base int64
	// Skip drops the first Skip bytes of masked output: a resumed job
	// regenerates output from its last checkpoint, and the part of it the
	// coordinator already acknowledged must not be sent twice.
	Skip int64
}

// Buffer is a job log: an io.Writer that masks what is written to it and
// stores the result in a temporary file, and an io.ReaderAt over the stored
// bytes. All its methods are safe for concurrent use. Readers never wait for
// a Write to finish; they see the bytes stored so far.
type Buffer struct {
	f     *os.File
	limit int64
	base  int64 // log offset of the file's first byte

	// mu serialises writers and guards the fields below it.
	mu       sync.Mutex
	m        *matcher
	pending  []byte // written but not yet stored (held back or in process)
	scratch  []byte // masked output of the chunk in process
	finished bool
	err      error  // sticky error of the backing file
	written  int64  // == size, for writers
	crc      uint32 // == state's crc, for writers
	skip     int64  // masked output still to drop (Options.Skip)

	// state guards what readers look at; it is held only briefly. Writers
	// hold mu too when they change it.
	state struct {
		sync.Mutex
		size      int64  // bytes stored
		crc       uint32 // CRC-32 of the stored bytes
		fileSize  int64  // bytes of them in the file, which never change
		mem       []byte // the others: stored bytes [fileSize, size)
		truncated bool
		closed    bool
	}
}

// New creates a Buffer and its backing file.
func New(opts Options) (*Buffer, error) {
	if opts.Limit < 0 {
		return nil, fmt.Errorf("trace: negative limit %d", opts.Limit)
	}
	if opts.Base < 0 || opts.Skip < 0 {
		return nil, fmt.Errorf("trace: negative base %d or skip %d", opts.Base, opts.Skip)
	}
	f, err := os.CreateTemp(opts.Dir, "drover-trace-*.log")
	if err != nil {
		return nil, fmt.Errorf("trace: %w", err)
	}
	b := &Buffer{
		f:       f,
		limit:   opts.Limit,
		base:    opts.Base,
		written: opts.Base,
		skip:    opts.Skip,
		m:       newMatcher(opts.Masked, opts.TokenPrefixes),
	}
	b.state.size, b.state.fileSize = opts.Base, opts.Base
	return b, nil
}

// SetMasked adds values to mask. They apply to the data not stored yet,
// including any held back tail.
func (b *Buffer) SetMasked(values []string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.m.add(values, nil)
}

// Write masks p and stores it, except for a tail that may still turn into
// a match, which is held back until the next Write or Finish. It reports
// len(p) consumed even when the data is dropped because the log reached its
// limit. After Finish or Close it fails with ErrFinished. An error of the
// backing file is returned by this and every later Write.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.finished {
		return 0, ErrFinished
	}
	n := len(p)
	if b.err != nil {
		return n, b.err
	}
	for len(p) > 0 && !b.isTruncated() {
		k := min(len(p), chunkSize)
		b.pending = append(b.pending, p[:k]...)
		p = p[k:]
		if err := b.process(false); err != nil {
			return n, err
		}
	}
	return n, nil
}

// Finish stores the held back tail; later Writes fail. It is idempotent.
func (b *Buffer) Finish() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.finished {
		return
	}
	b.finished = true
	if b.err == nil && !b.isTruncated() {
		b.err = b.process(true)
	}
	if b.err == nil {
		b.err = b.flush()
	}
	b.pending, b.scratch = nil, nil
}

// process masks and stores what of b.pending can be decided. b.mu is held.
func (b *Buffer) process(final bool) error {
	out, used := b.m.mask(b.scratch[:0], b.pending, final)
	b.scratch = out[:0]
	b.pending = b.pending[:copy(b.pending, b.pending[used:])]
	return b.store(out)
}

// store appends p to the log, cutting it at the limit. b.mu is held.
func (b *Buffer) store(p []byte) error {
	if b.skip > 0 {
		k := min(b.skip, int64(len(p)))
		p, b.skip = p[k:], b.skip-k
	}
	if len(p) == 0 {
		return nil
	}
	truncated := false
	if b.limit > 0 && b.written+int64(len(p)) > b.limit {
		p = p[:max(0, b.limit-b.written)]
		p = fmt.Appendf(p[:len(p):len(p)], limitNotice, b.limit)
		truncated = true
		b.pending = nil
	}
	for len(p) > 0 {
		if len(b.state.mem) == memSize {
			if err := b.flush(); err != nil {
				return err
			}
		}
		k := min(len(p), memSize-len(b.state.mem))
		b.written += int64(k)
		b.crc = crc32.Update(b.crc, crc32.IEEETable, p[:k])
		b.state.Lock()
		if b.state.mem == nil {
			b.state.mem = make([]byte, 0, memSize)
		}
		b.state.mem = append(b.state.mem, p[:k]...)
		b.state.size, b.state.crc = b.written, b.crc
		b.state.Unlock()
		p = p[k:]
	}
	if truncated {
		b.state.Lock()
		b.state.truncated = true
		b.state.Unlock()
	}
	return nil
}

// flush writes the stored bytes held in memory to the file. b.mu is held,
// so b.state.mem may be read without b.state.
func (b *Buffer) flush() error {
	if len(b.state.mem) == 0 {
		return nil
	}
	if _, err := b.f.WriteAt(b.state.mem, b.state.fileSize-b.base); err != nil {
		b.err = fmt.Errorf("trace: %w", err)
		return b.err
	}
	b.state.Lock()
	b.state.fileSize += int64(len(b.state.mem))
	b.state.mem = b.state.mem[:0]
	b.state.Unlock()
	return nil
}

// isTruncated is Truncated for writers, who hold b.mu: only they set it.
func (b *Buffer) isTruncated() bool {
	b.state.Lock()
	defer b.state.Unlock()
	return b.state.truncated
}

// Size returns how many bytes are stored: the masked log without the held
// back tail, including the limit notice.
func (b *Buffer) Size() int64 {
	b.state.Lock()
	defer b.state.Unlock()
	return b.state.size
}

// Checksum returns "crc32:" and the IEEE CRC-32 of the stored bytes in
// eight hex digits, or "" when the Buffer does not hold the whole log
// (Options.Base > 0).
func (b *Buffer) Checksum() string {
	if b.base > 0 {
		return ""
	}
	b.state.Lock()
	defer b.state.Unlock()
	return fmt.Sprintf("crc32:%08x", b.state.crc)
}

// Base returns the log offset of the first byte this Buffer holds
// (Options.Base): ReadAt cannot read before it.
func (b *Buffer) Base() int64 { return b.base }

// Settled returns the log size and whether every byte written so far is
// stored (none is held back by masking or still to be skipped): only then
// does the size correspond exactly to what was written, which is what a
// resume checkpoint needs.
func (b *Buffer) Settled() (int64, bool) {
	b.mu.Lock()
	ok := len(b.pending) == 0 && b.skip == 0
	b.mu.Unlock()
	return b.Size(), ok
}

// Truncated reports whether the log reached its limit.
func (b *Buffer) Truncated() bool {
	b.state.Lock()
	defer b.state.Unlock()
	return b.state.truncated
}

// ReadAt reads stored bytes at off, as io.ReaderAt does: it returns io.EOF
// when fewer than len(p) bytes are stored from off on.
func (b *Buffer) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, errNegativeOffset
	}
	if off < b.base {
		return 0, fmt.Errorf("trace: offset %d is before this buffer's base %d", off, b.base)
	}
	b.state.Lock()
	if b.state.closed {
		b.state.Unlock()
		return 0, os.ErrClosed
	}
	size, fileSize := b.state.size, b.state.fileSize
	if off >= size {
		b.state.Unlock()
		return 0, io.EOF
	}
	var eof error
	if int64(len(p)) > size-off {
		p, eof = p[:size-off], io.EOF
	}
	// The part still in memory is copied under the lock, the part in the
	// file (which never changes) is read without it.
	if end := off + int64(len(p)); end > fileSize {
		from := max(off, fileSize)
		copy(p[from-off:], b.state.mem[from-fileSize:end-fileSize])
	}
	b.state.Unlock()
	if off < fileSize {
		k := min(int64(len(p)), fileSize-off)
		if n, err := b.f.ReadAt(p[:k], off-b.base); err != nil {
			return n, err
		}
	}
	return len(p), eof
}

// Close removes the backing file. Written data that was held back is lost
// unless Finish was called. Later Writes fail with ErrFinished, reads with
// os.ErrClosed.
func (b *Buffer) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.state.Lock()
	if b.state.closed {
		b.state.Unlock()
		return nil
	}
	b.state.closed = true
	b.state.mem = nil
	b.state.Unlock()
	b.finished = true
	b.pending, b.scratch = nil, nil
	return errors.Join(b.f.Close(), os.Remove(b.f.Name()))
}
