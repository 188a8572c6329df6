package helper

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/drover-ci/drover/internal/archive"
	"github.com/drover-ci/drover/internal/cache"
)

// CacheArchiveOptions are `drover helper cache-archiver`'s: what to put
// in a job's cache archive and where the archive goes.
type CacheArchiveOptions struct {
	// Root is the directory the paths are relative to (the project
	// directory); "" is the working directory.
	Root string
	// File is the local archive, written whole or not at all (a
	// temporary file renamed into place).
	File string
	// Paths and Exclude are the cache's paths and exclude patterns
	// (doublestar, as GitLab's).
	Paths, Exclude []string
	// Untracked adds the files git does not track (ignored ones too).
	Untracked bool
	// Key, when set, is the cache's key as the job named it: it is
	// written beside the local archive (metadata.json, {"cachekey": Key}),
	// as GitLab Runner's helper does.
	Key string
	// URL, if set, is a pre-signed PUT URL the archive is uploaded to,
	// with Header (the headers the URL was signed with).
	URL    string
	Header http.Header
	// MaxSize refuses an upload over this many bytes (0: no cap).
	MaxSize int64
	// Transfer uploads; nil is a default one.
	Transfer *cache.Transfer
}

// ArchiveCache makes the cache archive of o and uploads it when o.URL is
// set, writing GitLab Runner's progress lines to out. An archive with
// nothing in it is neither kept nor uploaded.
func ArchiveCache(ctx context.Context, o CacheArchiveOptions, out io.Writer) error {
	if o.File == "" {
		return errors.New("cache-archiver: --file is required")
	}
	root, err := rootDir(o.Root)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(o.File), 0o755); err != nil {
		return fmt.Errorf("cache-archiver: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(o.File), filepath.Base(o.File)+".tmp-*")
	if err != nil {
		return fmt.Errorf("cache-archiver: %w", err)
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	st, err := makeArchive(ctx, tmp, filepath.Dir(o.File), root, selection{o.Paths, o.Exclude, o.Untracked}, out)
	if err != nil {
		return fmt.Errorf("cache-archiver: %w", err)
	}
	if st.Entries() == 0 {
		fmt.Fprintln(out, "WARNING: no files to cache; the cache is not saved")
		return nil
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("cache-archiver: %w", err)
	}
	if err := os.Rename(tmp.Name(), o.File); err != nil {
		return fmt.Errorf("cache-archiver: %w", err)
	}
	if o.Key != "" {
		meta, _ := json.Marshal(map[string]string{"cachekey": o.Key}) // a map of strings always encodes
		if err := os.WriteFile(filepath.Join(filepath.Dir(o.File), "metadata.json"), meta, 0o640); err != nil {
			return fmt.Errorf("cache-archiver: metadata: %w", err)
		}
	}
	fmt.Fprintf(out, "Archive is %d bytes (%d files, %d bytes uncompressed)\n", st.ArchiveBytes, st.Files, st.Bytes)
	if o.URL == "" {
		fmt.Fprintln(out, "No URL provided, cache will not be uploaded to shared cache server. Cache will be stored only locally.")
		return nil
	}
	if o.MaxSize > 0 && st.ArchiveBytes > o.MaxSize {
		return fmt.Errorf("cache-archiver: the archive is %d bytes, over the cap of %d (MaxUploadedArchiveSize): not uploaded: %w", st.ArchiveBytes, o.MaxSize, cache.ErrTooLarge)
	}
	fmt.Fprintf(out, "Uploading %s to %s\n", filepath.Base(o.File), redactURL(o.URL))
	if err := transfer(o.Transfer).Upload(ctx, o.URL, o.Header, tmp, st.ArchiveBytes); err != nil {
		return fmt.Errorf("cache-archiver: %w", err)
	}
	return nil
}

// CacheExtractOptions are `drover helper cache-extractor`'s.
type CacheExtractOptions struct {
	// Root is where the archive is extracted (the project directory); ""
	// is the working directory.
	Root string
	// File is the local archive: the download goes there (whole or not
	// at all), and without URL it is the archive extracted.
	File string
	// URL, if set, is a pre-signed GET URL of the shared cache.
	URL string
	// Transfer downloads; nil is a default one.
	Transfer *cache.Transfer
	// MaxSize and MaxEntries cap what the archive may expand to, as for
	// artifacts (zero or less: DefaultExtractMaxSize and
	// DefaultExtractMaxEntries).
	MaxSize    int64
	MaxEntries int
}

// ExtractCache restores the cache of o: downloaded from o.URL when set
// (a miss there falls back to a local archive), then extracted into the
// project directory, writing GitLab Runner's progress lines to out. A
// cache that exists nowhere is an error wrapping cache.ErrNotFound.
func ExtractCache(ctx context.Context, o CacheExtractOptions, out io.Writer) error {
	if o.File == "" {
		return errors.New("cache-extractor: --file is required")
	}
	root, err := rootDir(o.Root)
	if err != nil {
		return err
	}
	if o.URL != "" {
		fmt.Fprintf(out, "Downloading %s from %s\n", filepath.Base(o.File), redactURL(o.URL))
		err := download(ctx, transfer(o.Transfer), o.URL, o.File)
		switch {
		case errors.Is(err, cache.ErrNotFound):
			fmt.Fprintf(out, "WARNING: %s is not in the shared cache; looking for a local one\n", filepath.Base(o.File))
		case err != nil:
			return fmt.Errorf("cache-extractor: %w", err)
		}
	} else {
		fmt.Fprintln(out, "No URL provided, cache will not be downloaded from shared cache server. Instead a local version of cache will be extracted.")
	}
	f, err := os.Open(o.File)
	if errors.Is(err, os.ErrNotExist) {
		fmt.Fprintln(out, ansiYellow+"WARNING: Cache file does not exist"+ansiReset)
		return fmt.Errorf("cache-extractor: %s: %w", o.File, cache.ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("cache-extractor: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("cache-extractor: %w", err)
	}
	// The stage says "Successfully extracted cache", as GitLab Runner's.
	_, err = archive.Extract(ctx, f, fi.Size(), root, extractOptions(o.MaxSize, o.MaxEntries))
	if errors.Is(err, archive.ErrTooLarge) {
		return fmt.Errorf("cache-extractor: %s (%d bytes) refused: %w; %s", filepath.Base(o.File), fi.Size(), err, limitHint)
	}
	if err != nil {
		return fmt.Errorf("cache-extractor: %w", err)
	}
	return nil
}

// selection is what goes into an archive: paths and exclude patterns
// (doublestar, as GitLab's) relative to the project directory, and
// whether the files git does not track go too.
type selection struct {
	paths, exclude []string
	untracked      bool
}

// makeArchive writes the archive of sel under root to w and GitLab's
// lines about what it found to out. The central directory of a large
// archive is spooled in tempDir, next to the archive.
func makeArchive(ctx context.Context, w io.Writer, tempDir, root string, sel selection, out io.Writer) (archive.Stats, error) {
	var extra []string
	if sel.untracked {
		var err error
		if extra, err = untracked(ctx, root); err != nil {
			return archive.Stats{}, fmt.Errorf("untracked files: %w", err)
		}
	}
	st, err := archive.Create(ctx, w, root, sel.paths, archive.CreateOptions{
		Exclude: sel.exclude, Extra: extra, TempDir: tempDir,
		Workers: archiveWorkers(), MemoryLimit: archiveMemory,
	})
	if err != nil {
		return st, err
	}
	// GitLab Runner's words, in its order and colours, which users
	// search for.
	for _, p := range st.Found {
		if p.Count == 0 {
			fmt.Fprintf(out, ansiYellow+"WARNING: %s: no matching files. Ensure that the artifact path is relative to the working directory (%s)"+ansiReset+"\n", p.Pattern, root)
			continue
		}
		fmt.Fprintf(out, "%s: found %d matching artifact files and directories\n", p.Pattern, p.Kept)
	}
	if sel.untracked {
		fmt.Fprintf(out, "untracked: found %d files\n", st.ExtraKept)
	}
	for _, p := range st.Excluded {
		fmt.Fprintf(out, "%s: excluded %d files\n", p.Pattern, p.Count)
	}
	return st, nil
}

// download writes the object at u to file through a temporary file, so a
// broken download leaves the old archive (if any) in place.
func download(ctx context.Context, t *cache.Transfer, u, file string) error {
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(file), filepath.Base(file)+".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	if _, err := t.Download(ctx, u, tmp); err != nil {
		return err
	}
	if err := tmp.Sync(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), file)
}

func transfer(t *cache.Transfer) *cache.Transfer {
	if t == nil {
		return &cache.Transfer{}
	}
	return t
}

func rootDir(root string) (string, error) {
	if root != "" {
		return root, nil
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("working directory: %w", err)
	}
	return wd, nil
}

// untracked lists the files under root that git does not track, ignored
// ones included (GitLab's untracked: true).
func untracked(ctx context.Context, root string) ([]string, error) {
	cmd := exec.CommandContext(ctx, "git", "ls-files", "--others", "-z")
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	b, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("git ls-files: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	var files []string
	for f := range strings.SplitSeq(string(b), "\x00") {
		if f != "" {
			files = append(files, f)
		}
	}
	return files, nil
}

// redactURL drops the query (a pre-signed URL's signature) for the log.
func redactURL(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return "(an invalid URL)"
	}
	p.RawQuery, p.User = "", nil
	return p.String()
}
