package archive

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"time"
)

// Browsing an archive in place: List reads a page of its central
// directory and OpenEntry one entry's data, both straight from an
// io.ReaderAt over the stored file. Nothing is extracted, and what is
// held does not grow with the number of entries: the central directory
// is read record by record (dirReader), as Extract reads it.

// ZipEntry is one entry of a zip archive, as List and OpenEntry tell it.
type ZipEntry struct {
	// Name is the entry's name as the archive has it (slash-separated;
	// a directory's ends in "/"). It is not checked: a caller that
	// turns it into a path validates it.
	Name     string
	Size     int64 // uncompressed
	Mode     fs.FileMode
	Modified time.Time
}

// IsDir reports whether e is a directory.
func (e ZipEntry) IsDir() bool { return e.Mode.IsDir() }

// ErrNoEntry is OpenEntry's error for a name the archive does not hold
// (it wraps fs.ErrNotExist).
var ErrNoEntry = fmt.Errorf("no such entry in the archive: %w", fs.ErrNotExist)

func zipEntryOf(c *centralRecord) ZipEntry {
	return ZipEntry{Name: c.name, Size: int64(min(c.usize, 1<<62)), Mode: c.mode(), Modified: c.modified}
}

func corrupt(err error) error {
	return fmt.Errorf("%w: %w", ErrCorrupt, err)
}

// List returns the entries skip to skip+limit-1 of the zip archive of
// size bytes in r, in the central directory's order, and how many
// entries the archive has. It reads the central directory up to the
// last entry returned.
func List(r io.ReaderAt, size int64, skip, limit int) (entries []ZipEntry, total int64, err error) {
	z, err := openZip(r, size)
	if err != nil {
		return nil, 0, corrupt(err)
	}
	total = int64(min(z.records, 1<<62))
	if skip < 0 || limit <= 0 || int64(skip) >= total {
		return nil, total, nil
	}
	d := z.directory()
	var c centralRecord
	for i := 0; len(entries) < limit; i++ {
		if err := d.next(&c); err == io.EOF {
			break
		} else if err != nil {
			return nil, total, corrupt(err)
		}
		if i >= skip {
			entries = append(entries, zipEntryOf(&c))
		}
	}
	return entries, total, nil
}

// OpenEntry returns a reader of the data of the first entry of the zip
// archive of size bytes in r named name, decompressed; the reader fails
// at the end when the data's size or CRC-32 is not the central
// directory's. ErrNoEntry when there is no such entry (or it is a
// directory), an error wrapping ErrCorrupt when the archive is not
// readable. The caller closes the reader.
func OpenEntry(r io.ReaderAt, size int64, name string) (io.ReadCloser, ZipEntry, error) {
	z, err := openZip(r, size)
	if err != nil {
		return nil, ZipEntry{}, corrupt(err)
	}
	d := z.directory()
	var c centralRecord
	for {
		err := d.next(&c)
		if err == io.EOF {
			return nil, ZipEntry{}, ErrNoEntry
		}
		if err != nil {
			return nil, ZipEntry{}, corrupt(err)
		}
		if c.name == name {
			break
		}
	}
	e := zipEntryOf(&c)
	if e.IsDir() || e.Mode&fs.ModeSymlink != 0 {
		return nil, e, ErrNoEntry
	}
	rc, err := z.openEntry(&c, &inflaters{})
	if err != nil {
		if errors.Is(err, errFormat) {
			return nil, e, corrupt(err)
		}
		return nil, e, err
	}
	return rc, e, nil
}
