package archive

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"time"
)

// The zip records written by zipWriter (APPNOTE.TXT, sections 4.3.7 to
// 4.3.16).
const (
	localHeaderSig     = 0x04034b50
	centralHeaderSig   = 0x02014b50
	dataDescriptorSig  = 0x08074b50
	endSig             = 0x06054b50
	zip64EndSig        = 0x06064b50
	zip64LocatorSig    = 0x07064b50
	localHeaderLen     = 30
	centralHeaderLen   = 46
	endLen             = 22
	zip64EndLen        = 56
	zip64LocatorLen    = 20
	zip64ExtraID       = 0x0001
	extTimeExtraID     = 0x5455
	flagDataDescriptor = 0x8
	methodStore        = 0
	methodDeflate      = 8
	// creatorUnix in the high byte of "version made by": the external
	// attributes hold a Unix mode.
	creatorUnix = 3 << 8
	// spoolMemory is how much of the central directory zipWriter keeps in
	// memory (about 11,000 entries) before it moves it to a temporary
	// file.
	spoolMemory = 1 << 20
)

// entryHeader is what zipWriter needs to know of an entry to write its
// headers.
type entryHeader struct {
	name   string // with a trailing slash for a directory
	method uint16
	flags  uint16
	mode   fs.FileMode
	mtime  time.Time
	// crc, csize and usize are known up front unless flags has
	// flagDataDescriptor; then finish gives them.
	crc          uint32
	csize, usize uint64
}

// zipWriter writes a zip archive entry by entry, as archive/zip's Writer
// with CreateRaw does, byte for byte, but without keeping a header per
// entry until the end: each entry's central directory record is
// serialized as soon as the entry is complete, into a buffer that moves
// to a temporary file once it is over spoolMemory. What it holds in
// memory does not grow with the number of entries past that.
type zipWriter struct {
	w       *bufio.Writer
	cw      *countingWriter
	cd      spool
	entries uint64
	cur     entryHeader
	curOff  uint64 // offset of cur's local header
	open    bool   // cur is started and not finished
	rec     []byte // scratch for one record
}

func newZipWriter(w io.Writer, tempDir string) *zipWriter {
	cw := &countingWriter{w: w}
	return &zipWriter{cw: cw, w: bufio.NewWriterSize(cw, 64<<10), cd: spool{dir: tempDir}}
}

// offset is the number of bytes of the archive written so far, buffered
// or not.
func (z *zipWriter) offset() uint64 { return uint64(z.cw.n) + uint64(z.w.Buffered()) }

// dosTime is t as an MS-DOS date and time, or zeros when t's year is out
// of their range (1980 to 2107).
func dosTime(t time.Time) (date, tm uint16) {
	y := t.Year()
	if y < 1980 || y > 2107 {
		return 0, 0
	}
	return uint16(t.Day() + int(t.Month())<<5 + (y-1980)<<9), uint16(t.Second()/2 + t.Minute()<<5 + t.Hour()<<11)
}

// appendExtTime appends the extended timestamp extra field (0x5455,
// mtime in Unix seconds) that Info-ZIP, GitLab Runner and archive/zip
// read first, when t fits in its 32 bits.
func appendExtTime(b []byte, t time.Time) []byte {
	secs := t.Unix()
	if secs < 0 || secs > math.MaxUint32 {
		return b
	}
	b = binary.LittleEndian.AppendUint16(b, extTimeExtraID)
	b = binary.LittleEndian.AppendUint16(b, 5) // size of what follows
	b = append(b, 1)                           // flags: mtime only
	return binary.LittleEndian.AppendUint32(b, uint32(secs))
}

// unixAttrs is the external attributes of an entry of mode: the Unix
// mode in the high 16 bits, and the MS-DOS directory and read-only bits.
func unixAttrs(mode fs.FileMode) uint32 {
	var m uint32
	switch mode & fs.ModeType {
	case fs.ModeDir:
		m = 0o040000
	case fs.ModeSymlink:
		m = 0o120000
	case fs.ModeNamedPipe:
		m = 0o010000
	case fs.ModeSocket:
		m = 0o140000
	case fs.ModeDevice:
		m = 0o060000
	case fs.ModeDevice | fs.ModeCharDevice:
		m = 0o020000
	default:
		m = 0o100000
	}
	if mode&fs.ModeSetuid != 0 {
		m |= 0o4000
	}
	if mode&fs.ModeSetgid != 0 {
		m |= 0o2000
	}
	if mode&fs.ModeSticky != 0 {
		m |= 0o1000
	}
	a := (m | uint32(mode&0o777)) << 16
	if mode&fs.ModeDir != 0 {
		a |= 0x10 // MS-DOS directory
	}
	if mode&0o200 == 0 {
		a |= 0x01 // MS-DOS read-only
	}
	return a
}

// begin writes e's local header; the entry's data follows with write.
func (z *zipWriter) begin(e entryHeader) error {
	if z.open {
		return errors.New("zip: entry begun before the previous one was finished")
	}
	if len(e.name) > math.MaxUint16 {
		return errors.New("zip: name too long")
	}
	z.cur, z.curOff, z.open = e, z.offset(), true
	date, tm := dosTime(e.mtime)
	b := z.rec[:0]
	b = binary.LittleEndian.AppendUint32(b, localHeaderSig)
	b = binary.LittleEndian.AppendUint16(b, 0) // version needed, as archive/zip's CreateRaw writes it
	b = binary.LittleEndian.AppendUint16(b, e.flags)
	b = binary.LittleEndian.AppendUint16(b, e.method)
	b = binary.LittleEndian.AppendUint16(b, tm)
	b = binary.LittleEndian.AppendUint16(b, date)
	if e.flags&flagDataDescriptor != 0 {
		b = append(b, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0) // in the data descriptor
	} else {
		b = binary.LittleEndian.AppendUint32(b, e.crc)
		b = binary.LittleEndian.AppendUint32(b, uint32(min(e.csize, math.MaxUint32)))
		b = binary.LittleEndian.AppendUint32(b, uint32(min(e.usize, math.MaxUint32)))
	}
	b = binary.LittleEndian.AppendUint16(b, uint16(len(e.name)))
	extraAt := len(b)
	b = binary.LittleEndian.AppendUint16(b, 0)
	b = append(b, e.name...)
	n := len(b)
	b = appendExtTime(b, e.mtime)
	binary.LittleEndian.PutUint16(b[extraAt:], uint16(len(b)-n))
	z.rec = b
	_, err := z.w.Write(b)
	return err
}

// write writes data of the current entry, as it is to be stored.
func (z *zipWriter) write(p []byte) error {
	_, err := z.w.Write(p)
	return err
}

// writeString is write for a string.
func (z *zipWriter) writeString(s string) error {
	_, err := z.w.WriteString(s)
	return err
}

// finish ends the current entry: for one with a data descriptor, crc and
// the sizes are final and written after its data; the others ignore them.
// Its central directory record is then added to the spool.
func (z *zipWriter) finish(crc uint32, csize, usize uint64) error {
	if !z.open {
		return errors.New("zip: entry finished before it was begun")
	}
	z.open = false
	e := &z.cur
	zip64 := false
	if e.flags&flagDataDescriptor != 0 {
		e.crc, e.csize, e.usize = crc, csize, usize
		zip64 = csize >= math.MaxUint32 || usize >= math.MaxUint32
		b := binary.LittleEndian.AppendUint32(z.rec[:0], dataDescriptorSig)
		b = binary.LittleEndian.AppendUint32(b, crc)
		if zip64 {
			b = binary.LittleEndian.AppendUint64(b, csize)
			b = binary.LittleEndian.AppendUint64(b, usize)
		} else {
			b = binary.LittleEndian.AppendUint32(b, uint32(csize))
			b = binary.LittleEndian.AppendUint32(b, uint32(usize))
		}
		z.rec = b
		if _, err := z.w.Write(b); err != nil {
			return err
		}
	}
	zip64 = zip64 || e.csize >= math.MaxUint32 || e.usize >= math.MaxUint32
	date, tm := dosTime(e.mtime)
	b := binary.LittleEndian.AppendUint32(z.rec[:0], centralHeaderSig)
	b = binary.LittleEndian.AppendUint16(b, creatorUnix)
	b = binary.LittleEndian.AppendUint16(b, 0) // version needed, as in the local header
	b = binary.LittleEndian.AppendUint16(b, e.flags)
	b = binary.LittleEndian.AppendUint16(b, e.method)
	b = binary.LittleEndian.AppendUint16(b, tm)
	b = binary.LittleEndian.AppendUint16(b, date)
	b = binary.LittleEndian.AppendUint32(b, e.crc)
	zip64 = zip64 || z.curOff >= math.MaxUint32
	if zip64 {
		// The sizes, and the offset, are in the zip64 extra field.
		b = binary.LittleEndian.AppendUint32(b, math.MaxUint32)
		b = binary.LittleEndian.AppendUint32(b, math.MaxUint32)
	} else {
		b = binary.LittleEndian.AppendUint32(b, uint32(e.csize))
		b = binary.LittleEndian.AppendUint32(b, uint32(e.usize))
	}
	b = binary.LittleEndian.AppendUint16(b, uint16(len(e.name)))
	extraAt := len(b)
	b = binary.LittleEndian.AppendUint16(b, 0) // extra length, below
	b = binary.LittleEndian.AppendUint16(b, 0) // comment length
	b = binary.LittleEndian.AppendUint16(b, 0) // disk number
	b = binary.LittleEndian.AppendUint16(b, 0) // internal attributes
	b = binary.LittleEndian.AppendUint32(b, unixAttrs(e.mode))
	b = binary.LittleEndian.AppendUint32(b, uint32(min(z.curOff, math.MaxUint32)))
	b = append(b, e.name...)
	n := len(b)
	b = appendExtTime(b, e.mtime)
	if zip64 {
		b = binary.LittleEndian.AppendUint16(b, zip64ExtraID)
		b = binary.LittleEndian.AppendUint16(b, 24)
		b = binary.LittleEndian.AppendUint64(b, e.usize)
		b = binary.LittleEndian.AppendUint64(b, e.csize)
		b = binary.LittleEndian.AppendUint64(b, z.curOff)
	}
	binary.LittleEndian.PutUint16(b[extraAt:], uint16(len(b)-n))
	z.rec = b
	z.entries++
	z.cur = entryHeader{}
	if err := z.cd.write(b); err != nil {
		return fmt.Errorf("zip: central directory: %w", err)
	}
	return nil
}

// close writes the central directory and the end records, flushes, and
// removes the spool's temporary file. It returns the archive's size.
func (z *zipWriter) close() (int64, error) {
	defer z.cd.discard()
	if z.open {
		return 0, errors.New("zip: closed with an entry not finished")
	}
	start := z.offset()
	if err := z.cd.copyTo(z.w); err != nil {
		return 0, fmt.Errorf("zip: central directory: %w", err)
	}
	end := z.offset()
	records, size, offset := z.entries, end-start, start
	b := z.rec[:0]
	if records >= math.MaxUint16 || size >= math.MaxUint32 || offset >= math.MaxUint32 {
		b = binary.LittleEndian.AppendUint32(b, zip64EndSig)
		b = binary.LittleEndian.AppendUint64(b, zip64EndLen-12) // what follows the size field
		b = binary.LittleEndian.AppendUint16(b, 45)             // version made by: 4.5, zip64
		b = binary.LittleEndian.AppendUint16(b, 45)             // version needed
		b = binary.LittleEndian.AppendUint32(b, 0)              // this disk
		b = binary.LittleEndian.AppendUint32(b, 0)              // the central directory's disk
		b = binary.LittleEndian.AppendUint64(b, records)        // on this disk
		b = binary.LittleEndian.AppendUint64(b, records)        // in all
		b = binary.LittleEndian.AppendUint64(b, size)
		b = binary.LittleEndian.AppendUint64(b, offset)
		b = binary.LittleEndian.AppendUint32(b, zip64LocatorSig)
		b = binary.LittleEndian.AppendUint32(b, 0) // the zip64 end record's disk
		b = binary.LittleEndian.AppendUint64(b, end)
		b = binary.LittleEndian.AppendUint32(b, 1) // disks
		records, size, offset = math.MaxUint16, math.MaxUint32, math.MaxUint32
	}
	b = binary.LittleEndian.AppendUint32(b, endSig)
	b = binary.LittleEndian.AppendUint32(b, 0) // disk numbers
	b = binary.LittleEndian.AppendUint16(b, uint16(records))
	b = binary.LittleEndian.AppendUint16(b, uint16(records))
	b = binary.LittleEndian.AppendUint32(b, uint32(size))
	b = binary.LittleEndian.AppendUint32(b, uint32(offset))
	b = binary.LittleEndian.AppendUint16(b, 0) // comment length
	if _, err := z.w.Write(b); err != nil {
		return 0, err
	}
	if err := z.w.Flush(); err != nil {
		return 0, err
	}
	return z.cw.n, nil
}

// spool holds bytes written in order and copied out once: in memory up
// to spoolMemory, then in a temporary file in dir (the system's when
// empty).
type spool struct {
	dir string
	mem bytes.Buffer
	f   *os.File
	bw  *bufio.Writer
}

func (s *spool) write(p []byte) error {
	if s.f == nil && s.mem.Len()+len(p) > spoolMemory {
		f, err := os.CreateTemp(s.dir, "drover-zipdir-*")
		if err != nil {
			return fmt.Errorf("spool file: %w", err)
		}
		s.f, s.bw = f, bufio.NewWriterSize(f, 64<<10)
		if _, err := s.mem.WriteTo(s.bw); err != nil {
			return fmt.Errorf("spool file: %w", err)
		}
		s.mem = bytes.Buffer{}
	}
	if s.f == nil {
		s.mem.Write(p)
		return nil
	}
	if _, err := s.bw.Write(p); err != nil {
		return fmt.Errorf("spool file: %w", err)
	}
	return nil
}

// copyTo writes what was spooled to w.
func (s *spool) copyTo(w io.Writer) error {
	if s.f == nil {
		_, err := s.mem.WriteTo(w)
		return err
	}
	if err := s.bw.Flush(); err != nil {
		return fmt.Errorf("spool file: %w", err)
	}
	if _, err := s.f.Seek(0, io.SeekStart); err != nil {
		return fmt.Errorf("spool file: %w", err)
	}
	if _, err := io.Copy(w, s.f); err != nil {
		return fmt.Errorf("spool file: %w", err)
	}
	return nil
}

// discard removes the temporary file, if any.
func (s *spool) discard() {
	if s.f != nil {
		_ = s.f.Close()
		_ = os.Remove(s.f.Name())
		s.f, s.bw = nil, nil
	}
	s.mem = bytes.Buffer{}
}
