package secretbox

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
)

// ReadKeyFile returns the key in the file at path (its text, see
// ParseKey). A file group or others may access is refused: the key may
// have been read, and the error says to chmod 600 it.
func ReadKeyFile(path string) (*Key, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("secret key file: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("secret key file: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("secret key file %s is not a regular file", path)
	}
	// Windows has no such mode bits; its ACLs are the operator's.
	if perm := fi.Mode().Perm(); perm&0o077 != 0 && runtime.GOOS != "windows" {
		return nil, fmt.Errorf("secret key file %s may be read by group or others (mode %04o): chmod 600 %s, and make a new key if someone else may have read it", path, perm, path)
	}
	b, err := io.ReadAll(io.LimitReader(f, 4096)) // a key's text is 44 or 64 characters
	if err != nil {
		return nil, fmt.Errorf("secret key file %s: %w", path, err)
	}
	k, err := ParseKey(string(b))
	if err != nil {
		return nil, fmt.Errorf("secret key file %s: %w", path, err)
	}
	return k, nil
}

// LoadOrCreateKeyFile returns the key in the file at path or, when there
// is no such file, creates it (mode 0600) with a new random key; created
// says which. The file appears whole or not at all: it is written under
// another name and linked into place, so a crash never leaves half a key
// and of two processes creating it at once, both end up with the one that
// was linked first.
func LoadOrCreateKeyFile(path string) (k *Key, created bool, err error) {
	k, err = ReadKeyFile(path)
	if err == nil || !errors.Is(err, fs.ErrNotExist) {
		return k, false, err
	}
	k, text := NewRandomKey()
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*") // mode 0600
	if err != nil {
		return nil, false, fmt.Errorf("create secret key file: %w", err)
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.WriteString(text + "\n")
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, false, fmt.Errorf("create secret key file %s: %w", path, err)
	}
	if err := os.Link(tmp.Name(), path); err != nil {
		if errors.Is(err, fs.ErrExist) {
			// Another process made it first: use its key.
			k, err := ReadKeyFile(path)
			return k, false, err
		}
		return nil, false, fmt.Errorf("create secret key file %s: %w", path, err)
	}
	return k, true, nil
}
