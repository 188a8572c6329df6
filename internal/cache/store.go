package cache

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/drover-ci/drover/internal/ctxio"
)

// Errors callers branch on; the errors of this package and of its stores
// wrap them.
var (
	// ErrNotFound is a cache miss: no archive under that name.
	ErrNotFound = errors.New("cache archive not found")
	// ErrTooLarge is an archive over a size cap, refused before any byte
	// is sent.
	ErrTooLarge = errors.New("cache archive too large")
	// ErrAuth is a store refusing the credentials or the signature.
	ErrAuth = errors.New("cache storage refused the credentials (authentication/authorization failed)")
)

// Store keeps cache archives by object name.
//
// Download writes the whole archive named name to w and returns its size;
// a missing archive is an error wrapping ErrNotFound, with nothing written
// to w. Upload stores size bytes read from r under name, replacing what
// was there; the new archive becomes visible to Download only once
// complete, and a failed upload leaves the old one (or none) in place.
// Both stop when ctx is cancelled. Stores do their own retries.
type Store interface {
	Download(ctx context.Context, name string, w io.Writer) (int64, error)
	Upload(ctx context.Context, name string, r io.ReaderAt, size int64) error
}

// DirStore keeps archives as files under a directory: the object name is
// a slash-separated path below it (see [LocalPath] for the layout GitLab
// Runner uses there).
type DirStore struct {
	Dir string
}

var _ Store = DirStore{}

func (s DirStore) path(name string) (string, error) {
	p := filepath.FromSlash(name)
	if !filepath.IsLocal(p) {
		return "", fmt.Errorf("cache object %q: not a relative path below the cache directory", name)
	}
	return filepath.Join(s.Dir, p), nil
}

// Download copies the file of name to w.
func (s DirStore) Download(ctx context.Context, name string, w io.Writer) (int64, error) {
	p, err := s.path(name)
	if err != nil {
		return 0, err
	}
	f, err := os.Open(p)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, fmt.Errorf("cache object %q: %w", name, ErrNotFound)
	}
	if err != nil {
		return 0, fmt.Errorf("cache object %q: %w", name, err)
	}
	defer f.Close()
	n, err := io.Copy(w, ctxio.Reader(ctx, f))
	if err != nil {
		return n, fmt.Errorf("cache object %q: read: %w", name, err)
	}
	return n, nil
}

// Upload writes size bytes of r to a temporary file next to name's and
// renames it into place.
func (s DirStore) Upload(ctx context.Context, name string, r io.ReaderAt, size int64) (err error) {
	p, err := s.path(name)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return fmt.Errorf("cache object %q: %w", name, err)
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	tmp := filepath.Join(filepath.Dir(p), ".tmp-"+hex.EncodeToString(b[:])+"-"+filepath.Base(p))
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return fmt.Errorf("cache object %q: %w", name, err)
	}
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = os.Remove(tmp)
		}
	}()
	n, err := io.Copy(f, ctxio.Reader(ctx, io.NewSectionReader(r, 0, size)))
	if err != nil {
		return fmt.Errorf("cache object %q: write: %w", name, err)
	}
	if n != size {
		return fmt.Errorf("cache object %q: archive has %d bytes, not the %d announced", name, n, size)
	}
	if err = f.Close(); err != nil {
		return fmt.Errorf("cache object %q: write: %w", name, err)
	}
	if err = os.Rename(tmp, p); err != nil {
		return fmt.Errorf("cache object %q: %w", name, err)
	}
	return nil
}

// Cache is the portable cache that callers use over any [Store]: it
// names objects as GitLab Runner does, enforces the upload size cap and
// logs what it does.
type Cache struct {
	log        *slog.Logger
	store      Store
	config     Config
	shortToken string
}

// New returns a Cache over store for the runner whose token is
// runnerToken (only its short form is used, in object names). cfg is
// [runners.cache]; its Type is not looked at: store is the backend.
func New(log *slog.Logger, cfg Config, runnerToken string, store Store) *Cache {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Cache{log: log, store: store, config: cfg, shortToken: ShortToken(runnerToken)}
}

// Name returns the object name of rawKey for the project, after
// sanitizing the key; warning is for the job log (see [SanitizeKey]).
func (c *Cache) Name(projectID int64, rawKey string) (name, warning string, err error) {
	key, warning, err := SanitizeKey(rawKey)
	if err != nil {
		return "", warning, err
	}
	name, err = ObjectName(c.config, c.shortToken, projectID, key)
	return name, warning, err
}

// Restore downloads the archive named name into w. A miss is an error
// wrapping ErrNotFound.
func (c *Cache) Restore(ctx context.Context, name string, w io.Writer) (int64, error) {
	n, err := c.store.Download(ctx, name, w)
	if err != nil {
		return n, err
	}
	c.log.Debug("cache restored", "object", name, "bytes", n)
	return n, nil
}

// Save uploads size bytes of r as the archive named name, or refuses with
// an error wrapping ErrTooLarge, before sending anything, when size is
// over MaxUploadedArchiveSize.
func (c *Cache) Save(ctx context.Context, name string, r io.ReaderAt, size int64) error {
	if limit := c.config.MaxUploadedArchiveSize; limit > 0 && size > limit {
		return fmt.Errorf("cache object %q: %d bytes over MaxUploadedArchiveSize %d: %w", name, size, limit, ErrTooLarge)
	}
	if err := c.store.Upload(ctx, name, r, size); err != nil {
		return err
	}
	c.log.Debug("cache saved", "object", name, "bytes", size)
	return nil
}
