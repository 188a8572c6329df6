package archive

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"math"
	"sync"
	"time"

	"github.com/klauspost/compress/flate"
)

// The reading side of the zip format (APPNOTE.TXT, sections 4.3.6 to
// 4.3.16, 4.5.3 for zip64), without archive/zip's Reader, which holds a
// *zip.File (about 0.25 KB) per entry for the whole central directory:
// zipArchive finds the central directory from the end records, and
// dirReader reads it one record at a time, as many times as needed, so
// that what is held does not grow with the number of entries.

// More record layouts and extra fields than zipwriter.go writes.
const (
	// maxEndSearch is how far from the end the end record may start: its
	// comment is at most 65,535 bytes.
	maxEndSearch       = endLen + math.MaxUint16
	ntfsExtraID        = 0x000a
	unixExtraID        = 0x000d
	infoZipUnixExtraID = 0x5855
	flagEncrypted      = 0x1
	// dirBufferSize is the buffer of a reader of the central directory.
	dirBufferSize = 32 << 10
)

// errFormat is the cause of an ErrCorrupt error for malformed records.
var errFormat = errors.New("not a valid zip archive")

// zipArchive is an archive of size bytes read from r, and where its
// central directory lies.
type zipArchive struct {
	r        io.ReaderAt
	size     int64
	records  uint64 // as the end record says
	zip64    bool   // the counts are the zip64 end record's
	dirStart int64  // offset of the first central record
	dirSize  int64  // length of the central directory in bytes
}

// openZip finds the central directory of the archive of size bytes in r
// from its end of central directory record and, when the end record says
// so, its zip64 end record.
func openZip(r io.ReaderAt, size int64) (*zipArchive, error) {
	if size < endLen {
		return nil, fmt.Errorf("%d bytes, too short for the end record: %w", size, errFormat)
	}
	n := min(size, maxEndSearch)
	buf := make([]byte, n)
	if err := readFullAt(r, buf, size-n); err != nil {
		return nil, fmt.Errorf("reading the end record: %w", err)
	}
	at := -1
	for i := len(buf) - endLen; i >= 0; i-- {
		if binary.LittleEndian.Uint32(buf[i:]) == endSig && i+endLen+int(binary.LittleEndian.Uint16(buf[i+20:])) <= len(buf) {
			at = i
			break
		}
	}
	if at < 0 {
		return nil, fmt.Errorf("no end of central directory record: %w", errFormat)
	}
	end := buf[at : at+endLen]
	endPos := size - n + int64(at)
	z := &zipArchive{
		r:        r,
		size:     size,
		records:  uint64(binary.LittleEndian.Uint16(end[10:])),
		dirSize:  int64(binary.LittleEndian.Uint32(end[12:])),
		dirStart: int64(binary.LittleEndian.Uint32(end[16:])),
	}
	dirEnd := endPos // the central directory ends where the next record starts
	if z.records == math.MaxUint16 || z.dirSize == math.MaxUint32 || z.dirStart == math.MaxUint32 {
		// A zip64 locator, if any, is right before the end record.
		if endPos >= zip64LocatorLen {
			var loc [zip64LocatorLen]byte
			if err := readFullAt(r, loc[:], endPos-zip64LocatorLen); err != nil {
				return nil, fmt.Errorf("reading the zip64 locator: %w", err)
			}
			if binary.LittleEndian.Uint32(loc[:]) == zip64LocatorSig {
				off := binary.LittleEndian.Uint64(loc[8:])
				if off > uint64(endPos-zip64LocatorLen) || uint64(endPos-zip64LocatorLen)-off < zip64EndLen {
					return nil, fmt.Errorf("zip64 end record at %d, out of the archive: %w", off, errFormat)
				}
				var rec [zip64EndLen]byte
				if err := readFullAt(r, rec[:], int64(off)); err != nil {
					return nil, fmt.Errorf("reading the zip64 end record: %w", err)
				}
				if binary.LittleEndian.Uint32(rec[:]) != zip64EndSig {
					return nil, fmt.Errorf("no zip64 end record where the locator says: %w", errFormat)
				}
				records := binary.LittleEndian.Uint64(rec[32:])
				dirSize := binary.LittleEndian.Uint64(rec[40:])
				dirStart := binary.LittleEndian.Uint64(rec[48:])
				if dirSize > math.MaxInt64 || dirStart > math.MaxInt64 {
					return nil, fmt.Errorf("zip64 end record: central directory out of the archive: %w", errFormat)
				}
				z.records, z.dirSize, z.dirStart, z.zip64 = records, int64(dirSize), int64(dirStart), true
				dirEnd = int64(off)
			}
		}
	}
	if z.dirStart > dirEnd || z.dirSize > dirEnd-z.dirStart {
		return nil, fmt.Errorf("central directory of %d bytes at %d, out of the archive's %d bytes: %w", z.dirSize, z.dirStart, dirEnd, errFormat)
	}
	if z.zip64 && z.records > uint64(z.dirSize)/centralHeaderLen {
		return nil, fmt.Errorf("%d records cannot fit in a central directory of %d bytes: %w", z.records, z.dirSize, errFormat)
	}
	return z, nil
}

// readFullAt reads len(p) bytes at off, or fails saying the archive is
// truncated.
func readFullAt(r io.ReaderAt, p []byte, off int64) error {
	n, err := r.ReadAt(p, off)
	if n == len(p) {
		return nil
	}
	if err == nil || errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	return fmt.Errorf("truncated: %w", err)
}

// centralRecord is one record of the central directory: what Extract
// needs of an entry.
type centralRecord struct {
	index    uint32 // position in the central directory, from 0
	name     string // as in the archive
	creator  uint16 // "version made by"
	flags    uint16
	method   uint16
	modified time.Time
	crc      uint32
	csize    uint64
	usize    uint64
	offset   uint64 // of the local header
	attrs    uint32 // external attributes
}

// mode is the entry's type and permission bits, from the external
// attributes as the system that made the archive put them there (as
// archive/zip's FileHeader.Mode reads them).
func (c *centralRecord) mode() fs.FileMode {
	var mode fs.FileMode
	switch c.creator >> 8 {
	case 3, 19: // Unix, OS X: a Unix mode in the high 16 bits
		m := c.attrs >> 16
		mode = fs.FileMode(m & 0o777)
		switch m & 0o170000 {
		case 0o060000:
			mode |= fs.ModeDevice
		case 0o020000:
			mode |= fs.ModeDevice | fs.ModeCharDevice
		case 0o040000:
			mode |= fs.ModeDir
		case 0o010000:
			mode |= fs.ModeNamedPipe
		case 0o120000:
			mode |= fs.ModeSymlink
		case 0o140000:
			mode |= fs.ModeSocket
		}
		if m&0o4000 != 0 {
			mode |= fs.ModeSetuid
		}
		if m&0o2000 != 0 {
			mode |= fs.ModeSetgid
		}
		if m&0o1000 != 0 {
			mode |= fs.ModeSticky
		}
	case 0, 11, 14: // MS-DOS, NTFS, VFAT: MS-DOS attributes
		mode = 0o666
		if c.attrs&0x10 != 0 {
			mode = fs.ModeDir | 0o777
		}
		if c.attrs&0x01 != 0 {
			mode &^= 0o222
		}
	}
	if len(c.name) > 0 && c.name[len(c.name)-1] == '/' {
		mode |= fs.ModeDir
	}
	return mode
}

// dirReader reads the central directory of a zipArchive record by
// record, from the start.
type dirReader struct {
	z    *zipArchive
	br   *bufio.Reader
	read uint64 // records read so far
	buf  []byte // scratch for a record
}

func (z *zipArchive) directory() *dirReader {
	return &dirReader{z: z, br: bufio.NewReaderSize(io.NewSectionReader(z.r, z.dirStart, z.dirSize), dirBufferSize)}
}

// next reads the next record into c, or returns io.EOF after the last
// one once the central directory is read to its end and held as many
// records as the end record says.
func (d *dirReader) next(c *centralRecord) error {
	if _, err := d.br.Peek(1); err == io.EOF {
		// archive/zip's check: writers that do not write zip64 records
		// past 65,535 entries let the 16-bit count wrap.
		if d.read != d.z.records && (d.z.zip64 || uint16(d.read) != uint16(d.z.records)) {
			return fmt.Errorf("central directory holds %d records, the end record says %d: %w", d.read, d.z.records, errFormat)
		}
		return io.EOF
	}
	if d.read >= math.MaxUint32 {
		return fmt.Errorf("more than %d records: %w", uint32(math.MaxUint32), errFormat)
	}
	d.buf = d.buf[:0]
	if cap(d.buf) < centralHeaderLen {
		d.buf = make([]byte, centralHeaderLen, 512)
	}
	h := d.buf[:centralHeaderLen]
	if _, err := io.ReadFull(d.br, h); err != nil {
		return fmt.Errorf("record %d: truncated: %w", d.read, noEOF(err))
	}
	if binary.LittleEndian.Uint32(h) != centralHeaderSig {
		return fmt.Errorf("record %d: bad signature: %w", d.read, errFormat)
	}
	*c = centralRecord{
		index:   uint32(d.read),
		creator: binary.LittleEndian.Uint16(h[4:]),
		flags:   binary.LittleEndian.Uint16(h[8:]),
		method:  binary.LittleEndian.Uint16(h[10:]),
		crc:     binary.LittleEndian.Uint32(h[16:]),
		csize:   uint64(binary.LittleEndian.Uint32(h[20:])),
		usize:   uint64(binary.LittleEndian.Uint32(h[24:])),
		attrs:   binary.LittleEndian.Uint32(h[38:]),
		offset:  uint64(binary.LittleEndian.Uint32(h[42:])),
	}
	dosTime, dosDate := binary.LittleEndian.Uint16(h[12:]), binary.LittleEndian.Uint16(h[14:])
	nameLen := int(binary.LittleEndian.Uint16(h[28:]))
	extraLen := int(binary.LittleEndian.Uint16(h[30:]))
	commentLen := int(binary.LittleEndian.Uint16(h[32:]))
	rest := nameLen + extraLen + commentLen
	if cap(d.buf) < rest {
		d.buf = make([]byte, rest)
	}
	b := d.buf[:rest]
	if _, err := io.ReadFull(d.br, b); err != nil {
		return fmt.Errorf("record %d: truncated: %w", d.read, noEOF(err))
	}
	c.name = string(b[:nameLen])
	if err := c.readExtra(b[nameLen : nameLen+extraLen]); err != nil {
		return fmt.Errorf("entry %q: %w", c.name, err)
	}
	if c.modified.IsZero() {
		c.modified = dosToTime(dosDate, dosTime)
	}
	d.read++
	return nil
}

// noEOF is err, with io.EOF (nothing read of a record that should be
// there) as io.ErrUnexpectedEOF.
func noEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// readExtra takes from a central record's extra fields the 64-bit sizes
// and offset (zip64) where the 32-bit fields say to look there, and the
// modification time where one is given.
func (c *centralRecord) readExtra(extra []byte) error {
	needUsize := c.usize == math.MaxUint32
	needCsize := c.csize == math.MaxUint32
	needOffset := c.offset == math.MaxUint32
	for len(extra) >= 4 {
		id, n := binary.LittleEndian.Uint16(extra), int(binary.LittleEndian.Uint16(extra[2:]))
		if 4+n > len(extra) {
			break // as archive/zip: a truncated last field is ignored
		}
		field := extra[4 : 4+n]
		extra = extra[4+n:]
		switch id {
		case zip64ExtraID:
			// In this order, only those whose 32-bit field is maxed out.
			for _, v := range []*struct {
				need *bool
				val  *uint64
			}{{&needUsize, &c.usize}, {&needCsize, &c.csize}, {&needOffset, &c.offset}} {
				if !*v.need {
					continue
				}
				if len(field) < 8 {
					return fmt.Errorf("zip64 extra field too short: %w", errFormat)
				}
				*v.val, *v.need, field = binary.LittleEndian.Uint64(field), false, field[8:]
			}
		case extTimeExtraID:
			if len(field) >= 5 && field[0]&1 != 0 {
				c.modified = time.Unix(int64(binary.LittleEndian.Uint32(field[1:])), 0)
			}
		case ntfsExtraID:
			// Reserved 4 bytes, then attributes; tag 1 holds the
			// modification, access and creation times in 100 ns since
			// 1601.
			for a := field[min(4, len(field)):]; len(a) >= 4; {
				tag, size := binary.LittleEndian.Uint16(a), int(binary.LittleEndian.Uint16(a[2:]))
				if 4+size > len(a) {
					break
				}
				if tag == 1 && size >= 8 {
					const epochDiff = 11644473600 // seconds from 1601 to 1970
					ticks := binary.LittleEndian.Uint64(a[4:])
					c.modified = time.Unix(int64(ticks/1e7)-epochDiff, int64(ticks%1e7)*100)
				}
				a = a[4+size:]
			}
		case unixExtraID, infoZipUnixExtraID:
			if len(field) >= 8 {
				c.modified = time.Unix(int64(binary.LittleEndian.Uint32(field[4:])), 0)
			}
		}
	}
	// An uncompressed size of exactly 4 GiB - 1 without a zip64 field is
	// possible in a plain archive; the others are not.
	if needCsize || needOffset {
		return fmt.Errorf("no zip64 extra field for its size or offset: %w", errFormat)
	}
	return nil
}

// dosToTime is an MS-DOS date and time as a time in UTC, as archive/zip
// reads it.
func dosToTime(date, tm uint16) time.Time {
	return time.Date(int(date>>9)+1980, time.Month(date>>5&0xf), int(date&0x1f),
		int(tm>>11), int(tm>>5&0x3f), int(tm&0x1f)*2, 0, time.UTC)
}

// flateReader is a reusable inflater and its input buffer.
type flateReader struct {
	br *bufio.Reader
	fr io.ReadCloser
}

// inflaters hands out flateReaders, and takes them back when done, for
// one extraction.
type inflaters struct{ pool sync.Pool }

func (p *inflaters) get(r io.Reader) *flateReader {
	if f, ok := p.pool.Get().(*flateReader); ok {
		f.br.Reset(r)
		_ = f.fr.(flate.Resetter).Reset(f.br, nil) // Reset only fails on a bad dictionary
		return f
	}
	br := bufio.NewReaderSize(r, 16<<10)
	return &flateReader{br: br, fr: flate.NewReader(br)}
}

func (p *inflaters) put(f *flateReader) {
	f.br.Reset(nil)
	p.pool.Put(f)
}

// entryReader reads an entry's data, decompressed, and checks its size
// and CRC-32 against the central record at the end.
type entryReader struct {
	z      *zipArchive
	c      *centralRecord
	src    io.Reader
	fl     *flateReader // to give back, when deflated
	pool   *inflaters
	crc    uint32
	n      uint64
	descAt int64 // where a data descriptor would follow the data
	err    error // sticky: the first error or io.EOF
}

// checkData refuses an entry whose data cannot be read, from its central
// record alone: encrypted, compressed by a method other than store and
// deflate, or not before the central directory.
func (z *zipArchive) checkData(c *centralRecord) error {
	if c.flags&flagEncrypted != 0 {
		return fmt.Errorf("encrypted: %w", errFormat)
	}
	if c.method != methodStore && c.method != methodDeflate {
		return fmt.Errorf("unsupported compression method %d: %w", c.method, errFormat)
	}
	// Data lies before the central directory.
	limit := uint64(z.dirStart)
	if c.offset > limit || limit-c.offset < localHeaderLen || limit-c.offset-localHeaderLen < c.csize {
		return fmt.Errorf("local header at %d with %d bytes of data, out of the archive's first %d: %w", c.offset, c.csize, limit, errFormat)
	}
	return nil
}

// openEntry checks c's local header against c and returns a reader of
// its data; the caller closes it.
func (z *zipArchive) openEntry(c *centralRecord, pool *inflaters) (*entryReader, error) {
	if err := z.checkData(c); err != nil {
		return nil, err
	}
	limit := uint64(z.dirStart)
	var h [localHeaderLen]byte
	if err := readFullAt(z.r, h[:], int64(c.offset)); err != nil {
		return nil, fmt.Errorf("local header: %w", err)
	}
	if binary.LittleEndian.Uint32(h[:]) != localHeaderSig {
		return nil, fmt.Errorf("no local header at %d: %w", c.offset, errFormat)
	}
	if m := binary.LittleEndian.Uint16(h[8:]); m != c.method {
		return nil, fmt.Errorf("local header says compression method %d, the central directory %d: %w", m, c.method, errFormat)
	}
	nameLen := uint64(binary.LittleEndian.Uint16(h[26:]))
	extraLen := uint64(binary.LittleEndian.Uint16(h[28:]))
	if nameLen != uint64(len(c.name)) {
		return nil, fmt.Errorf("local header's name is %d bytes, the central directory's %d: %w", nameLen, len(c.name), errFormat)
	}
	data := c.offset + localHeaderLen + nameLen + extraLen
	if data > limit || limit-data < c.csize {
		return nil, fmt.Errorf("%d bytes of data at %d, out of the archive: %w", c.csize, data, errFormat)
	}
	name := make([]byte, nameLen)
	if err := readFullAt(z.r, name, int64(c.offset+localHeaderLen)); err != nil {
		return nil, fmt.Errorf("local header: %w", err)
	}
	if string(name) != c.name {
		return nil, fmt.Errorf("local header names %q: %w", name, errFormat)
	}
	e := &entryReader{z: z, c: c, pool: pool, descAt: int64(data + c.csize)}
	sr := io.NewSectionReader(z.r, int64(data), int64(c.csize))
	if c.method == methodDeflate {
		e.fl = pool.get(sr)
		e.src = e.fl.fr
	} else {
		e.src = sr
	}
	return e, nil
}

func (e *entryReader) Read(p []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	n, err := e.src.Read(p)
	e.crc = crc32.Update(e.crc, crc32.IEEETable, p[:n])
	e.n += uint64(n)
	if e.n > e.c.usize {
		e.err = fmt.Errorf("more data than the %d bytes the central directory says: %w", e.c.usize, errFormat)
		return n, e.err
	}
	switch {
	case err == io.EOF:
		err = e.finish()
	case err != nil:
		err = noEOF(err) // a truncated deflate stream
	}
	e.err = err
	return n, err
}

// finish checks what was read, at its end, and returns io.EOF if right.
func (e *entryReader) finish() error {
	if e.n != e.c.usize {
		return fmt.Errorf("%d bytes of data, the central directory says %d: %w", e.n, e.c.usize, io.ErrUnexpectedEOF)
	}
	if e.crc != e.c.crc {
		return fmt.Errorf("CRC-32 %08x, the central directory says %08x: %w", e.crc, e.c.crc, errFormat)
	}
	if e.c.flags&flagDataDescriptor != 0 {
		// Signature (optional) and CRC-32; the sizes that follow are
		// those of the central record, which is what counts.
		var b [8]byte
		n := min(int64(len(b)), e.z.dirStart-e.descAt)
		if n < 4 {
			return fmt.Errorf("no room for the data descriptor: %w", errFormat)
		}
		if err := readFullAt(e.z.r, b[:n], e.descAt); err != nil {
			return fmt.Errorf("data descriptor: %w", err)
		}
		crc := binary.LittleEndian.Uint32(b[:])
		if crc != e.c.crc && !(crc == dataDescriptorSig && n == 8 && binary.LittleEndian.Uint32(b[4:]) == e.c.crc) {
			return fmt.Errorf("data descriptor's CRC-32 differs from the central directory's: %w", errFormat)
		}
	}
	return io.EOF
}

// Close gives the inflater back.
func (e *entryReader) Close() error {
	if e.fl != nil {
		e.pool.put(e.fl)
		e.fl, e.src = nil, nil
		if e.err == nil {
			e.err = errors.New("read after close")
		}
	}
	return nil
}
