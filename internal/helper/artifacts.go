package helper

import (
	"archive/zip"
	"compress/gzip"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/url"
	"os"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/archive"
)

// ArtifactsUploadOptions are `drover helper artifacts-uploader`'s: a job's
// artifacts and where they go (the coordinator's API v4).
type ArtifactsUploadOptions struct {
	// URL is the coordinator's base URL; ID and Token the job's id and
	// job token.
	URL   string
	ID    int64
	Token string
	// Root is the directory the paths are relative to (the project
	// directory); "" is the working directory.
	Root string
	// Paths, Exclude and Untracked select the files, as the cache's.
	Paths, Exclude []string
	Untracked      bool
	// Name is the archive's name (default "artifacts"); Type its
	// artifact_type (default "archive"); Format its artifact_format
	// (zip, the default; gzip: each file a gzip member, named in its
	// header, one after the other, as GitLab wants reports; raw: the one
	// file as it is); ExpireIn its expire_in ("": the job's).
	Name, Type, Format, ExpireIn string
	// TempDir holds the archive while it is uploaded ("": the system's).
	TempDir string
	// Client makes the requests (nil: a default one); Backoff is the wait
	// before the second attempt (0: 1 s), doubled for each later one.
	Client  *http.Client
	Backoff time.Duration
}

// ErrArtifactsTooLarge is returned (wrapped) when the coordinator refuses
// the archive as too large (413).
var ErrArtifactsTooLarge = errors.New("artifacts too large")

// UploadArtifacts archives the job's artifacts and uploads them as GitLab
// Runner does: POST jobs/:id/artifacts with JOB-TOKEN, the archive in a
// multipart field "file", expire_in, artifact_format and artifact_type in
// the query. 201 is done; 403 and 413 are not retried; 503 is retried up
// to 6 times and other failures up to 3. The archive is spooled to a
// temporary file first, so a retry sends the same bytes and the size is
// known (a coordinator refuses an archive over its cap before reading
// it). An archive with nothing in it is not uploaded.
func UploadArtifacts(ctx context.Context, o ArtifactsUploadOptions, out io.Writer) error {
	if o.URL == "" || o.ID <= 0 || o.Token == "" {
		return errors.New("artifacts-uploader: --url, --id and --token are required")
	}
	root, err := rootDir(o.Root)
	if err != nil {
		return err
	}
	f, err := os.CreateTemp(o.TempDir, "drover-artifacts-*.zip")
	if err != nil {
		return fmt.Errorf("artifacts-uploader: %w", err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	st, err := makeArchive(ctx, f, o.TempDir, root, selection{o.Paths, o.Exclude, o.Untracked}, out)
	if err != nil {
		return fmt.Errorf("artifacts-uploader: %w", err)
	}
	if st.Entries() == 0 {
		// GitLab Runner's words; the job goes on, as with it.
		fmt.Fprintln(out, ansiBoldRed+"ERROR: No files to upload"+ansiReset)
		return nil
	}
	name := o.Name
	if name == "" {
		name = "artifacts"
	}
	typ := o.Type
	if typ == "" {
		typ = "archive"
	}
	format := o.Format
	if format == "" {
		format = "zip"
	}
	upload, filename, size := f, name+".zip", st.ArchiveBytes
	switch format {
	case "zip":
	case "gzip", "raw":
		conv, err := os.CreateTemp(o.TempDir, "drover-artifacts-*."+format)
		if err != nil {
			return fmt.Errorf("artifacts-uploader: %w", err)
		}
		defer os.Remove(conv.Name())
		defer conv.Close()
		base, err := convertArchive(f, st.ArchiveBytes, conv, format)
		if err != nil {
			return fmt.Errorf("artifacts-uploader: %s format: %w", format, err)
		}
		fi, err := conv.Stat()
		if err != nil {
			return fmt.Errorf("artifacts-uploader: %w", err)
		}
		upload, size = conv, fi.Size()
		if filename = name + ".gz"; format == "raw" {
			filename = base
		}
	default:
		return fmt.Errorf("artifacts-uploader: artifact format %q: zip, gzip or raw", format)
	}
	q := url.Values{"artifact_format": {format}, "artifact_type": {typ}}
	if o.ExpireIn != "" {
		q.Set("expire_in", o.ExpireIn)
	}
	target := strings.TrimSuffix(o.URL, "/") + "/api/v4/jobs/" + strconv.FormatInt(o.ID, 10) + "/artifacts?" + q.Encode()
	fmt.Fprintf(out, "Uploading artifacts as %q to coordinator... (%d files, %d bytes)\n", typ, st.Files, size)
	return retryHTTP(ctx, o.Backoff, func() (retry bool, err error) {
		code, msg, err := postArchive(ctx, httpClient(o.Client), target, o.Token, filename, upload, size)
		switch {
		case err != nil:
			return true, fmt.Errorf("artifacts-uploader: %w", err)
		case code == http.StatusCreated:
			fmt.Fprintf(out, "Uploading artifacts as %q to coordinator... 201 Created\n", typ)
			return false, nil
		case code == http.StatusRequestEntityTooLarge:
			fmt.Fprintf(out, "ERROR: Uploading artifacts as %q to coordinator... 413 Request Entity Too Large  id=%d: %s\n", typ, o.ID, msg)
			return false, fmt.Errorf("artifacts-uploader: the coordinator refused %d bytes: %s: %w", st.ArchiveBytes, msg, ErrArtifactsTooLarge)
		case code == http.StatusForbidden || code == http.StatusNotFound || code == http.StatusConflict:
			return false, fmt.Errorf("artifacts-uploader: %d: %s", code, msg)
		case code == http.StatusServiceUnavailable:
			return true, errRetry6{fmt.Errorf("artifacts-uploader: %d: %s", code, msg)}
		}
		return true, fmt.Errorf("artifacts-uploader: %d: %s", code, msg)
	})
}

// errRetry6 marks a failure retried up to 6 times (503), not 3.
type errRetry6 struct{ error }

func (e errRetry6) Unwrap() error { return e.error }

// retryHTTP runs attempt until it succeeds or fails for good: 3 attempts
// in all, 6 while the failures are 503s.
func retryHTTP(ctx context.Context, backoff time.Duration, attempt func() (bool, error)) error {
	if backoff <= 0 {
		backoff = time.Second
	}
	for n := 1; ; n++ {
		again, err := attempt()
		limit := 3
		if errors.As(err, new(errRetry6)) {
			limit = 6
		}
		if err == nil || !again || n >= limit {
			return err
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w (after %w)", ctx.Err(), err)
		case <-t.C:
		}
		backoff *= 2
	}
}

// postArchive sends size bytes of f as the multipart field "file" and
// returns the status code and the answer's message.
func postArchive(ctx context.Context, c *http.Client, target, token, filename string, f *os.File, size int64) (int, string, error) {
	pr, pw := io.Pipe()
	mw := multipart.NewWriter(pw)
	head := &strings.Builder{}
	hw := multipart.NewWriter(head)
	if err := hw.SetBoundary(mw.Boundary()); err != nil {
		return 0, "", err
	}
	if _, err := hw.CreateFormFile("file", filename); err != nil {
		return 0, "", err
	}
	// The body's length: the part header, the file and the closing
	// boundary, so the coordinator knows the size before reading.
	length := int64(head.Len()) + size + int64(len("\r\n--"+mw.Boundary()+"--\r\n"))
	go func() {
		part, err := mw.CreateFormFile("file", filename)
		if err == nil {
			_, err = io.Copy(part, io.NewSectionReader(f, 0, size))
		}
		if err == nil {
			err = mw.Close()
		}
		pw.CloseWithError(err)
	}()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target, pr)
	if err != nil {
		pr.Close()
		return 0, "", err
	}
	req.ContentLength = length
	req.Header.Set("Content-Type", mw.FormDataContentType())
	req.Header.Set(api.HeaderJobToken, token)
	resp, err := c.Do(req)
	pr.Close()
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	return resp.StatusCode, answerMessage(b), nil
}

// answerMessage is the message of an error answer: its JSON "error" or
// "message" (drover's and GitLab's shapes), else its text.
func answerMessage(b []byte) string {
	var e struct {
		Error   string `json:"error"`
		Message any    `json:"message"`
	}
	if json.Unmarshal(b, &e) == nil {
		if e.Error != "" {
			return e.Error
		}
		if m, ok := e.Message.(string); ok && m != "" {
			return m
		}
	}
	return strings.TrimSpace(string(b))
}

// ArtifactsDownloadOptions are `drover helper artifacts-downloader`'s: one
// dependency's artifacts, fetched with the job's token and extracted into
// the project directory.
type ArtifactsDownloadOptions struct {
	URL   string // the coordinator's base URL
	ID    int64  // the dependency's job id
	Name  string // the dependency's job name, for messages ("" if unknown)
	Token string // the token the payload gave for it (the running job's)
	// MaxSize and MaxEntries cap what the archive may expand to (bytes)
	// and hold (entries); zero or less is DefaultExtractMaxSize and
	// DefaultExtractMaxEntries.
	MaxSize    int64
	MaxEntries int
	// Root is where the archive is extracted; "" is the working
	// directory. TempDir holds the download ("": the system's).
	Root, TempDir string
	Client        *http.Client
	Backoff       time.Duration
}

// Default caps of an archive the helper extracts into the build directory
// (a dependency's artifacts, a cache), against zip bombs: GitLab Runner
// has none, and a 2 MB archive of zeros expands to 2 GiB. 5 GiB is 50
// times GitLab's default maximum artifacts size (100 MiB, drover's too),
// while build output compresses 2 to 10 times; a million entries is
// twice a large node_modules. Runner admins change them in
// [runners.artifact] (extract_max_size, extract_max_entries).
const (
	DefaultExtractMaxSize    = 5 << 30
	DefaultExtractMaxEntries = 1_000_000
)

// extractOptions are the archive options of an extraction with caps
// maxSize and maxEntries (zero or less: the defaults).
func extractOptions(maxSize int64, maxEntries int) archive.ExtractOptions {
	if maxSize <= 0 {
		maxSize = DefaultExtractMaxSize
	}
	if maxEntries <= 0 {
		maxEntries = DefaultExtractMaxEntries
	}
	return archive.ExtractOptions{Workers: extractWorkers, MaxBytes: maxSize, MaxEntries: maxEntries}
}

// limitHint says where the caps of an extraction are set, after an
// error wrapping archive.ErrTooLarge.
const limitHint = "the runner's caps are [runners.artifact] extract_max_size and extract_max_entries in its config.toml"

// ErrArtifactsDenied is returned (wrapped) for a 401, 403 or 404 answer:
// not retried, the job fails.
var ErrArtifactsDenied = errors.New("artifacts not available")

// DownloadArtifacts fetches GET jobs/:id/artifacts with JOB-TOKEN and
// extracts it safely; 401, 403 and 404 are not retried, other failures up
// to 3 times.
func DownloadArtifacts(ctx context.Context, o ArtifactsDownloadOptions, out io.Writer) error {
	if o.URL == "" || o.ID <= 0 || o.Token == "" {
		return errors.New("artifacts-downloader: --url, --id and --token are required")
	}
	root, err := rootDir(o.Root)
	if err != nil {
		return err
	}
	target := strings.TrimSuffix(o.URL, "/") + "/api/v4/jobs/" + strconv.FormatInt(o.ID, 10) + "/artifacts"
	f, err := os.CreateTemp(o.TempDir, "drover-artifacts-*.zip")
	if err != nil {
		return fmt.Errorf("artifacts-downloader: %w", err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	var size int64
	filename := "artifacts.zip"
	err = retryHTTP(ctx, o.Backoff, func() (bool, error) {
		if err := f.Truncate(0); err != nil {
			return false, err
		}
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return false, err
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
		if err != nil {
			return false, err
		}
		req.Header.Set(api.HeaderJobToken, o.Token)
		resp, err := httpClient(o.Client).Do(req)
		if err != nil {
			return true, fmt.Errorf("artifacts-downloader: %w", err)
		}
		defer resp.Body.Close()
		switch resp.StatusCode {
		case http.StatusOK:
		case http.StatusUnauthorized, http.StatusForbidden, http.StatusNotFound:
			b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			return false, fmt.Errorf("artifacts-downloader: job %d: %d: %s: %w", o.ID, resp.StatusCode, strings.TrimSpace(string(b)), ErrArtifactsDenied)
		default:
			return true, fmt.Errorf("artifacts-downloader: job %d: %s", o.ID, resp.Status)
		}
		if size, err = io.Copy(f, resp.Body); err != nil {
			return true, fmt.Errorf("artifacts-downloader: job %d: after %d bytes: %w", o.ID, size, err)
		}
		if resp.ContentLength >= 0 && size != resp.ContentLength {
			return true, fmt.Errorf("artifacts-downloader: job %d: %d of %d bytes", o.ID, size, resp.ContentLength)
		}
		if _, p, err := mime.ParseMediaType(resp.Header.Get("Content-Disposition")); err == nil && p["filename"] != "" {
			filename = p["filename"]
		}
		return false, nil
	})
	if err != nil {
		return err
	}
	st, err := archive.Extract(ctx, f, size, root, extractOptions(o.MaxSize, o.MaxEntries))
	if err != nil {
		dep := fmt.Sprintf("job %d", o.ID)
		if o.Name != "" {
			dep = fmt.Sprintf("job %d (%s)", o.ID, o.Name)
		}
		if errors.Is(err, archive.ErrTooLarge) {
			return fmt.Errorf("artifacts-downloader: the artifacts of %s, %s (%d bytes), refused: %w; %s", dep, filename, size, err, limitHint)
		}
		return fmt.Errorf("artifacts-downloader: %s, %s: %w", dep, filename, err)
	}
	fmt.Fprintf(out, "Downloading artifacts from coordinator... ok (%d files, %d bytes)\n", st.Files, st.Bytes)
	return nil
}

func httpClient(c *http.Client) *http.Client {
	if c == nil {
		return newHTTPClient(nil)
	}
	return c
}

// newHTTPClient is the client of the artifact transfers, with tlsCfg
// (api.ClientTLS; nil: the system's CAs).
func newHTTPClient(tlsCfg *tls.Config) *http.Client {
	return &http.Client{Transport: &http.Transport{Proxy: http.ProxyFromEnvironment, ResponseHeaderTimeout: 10 * time.Minute, TLSClientConfig: tlsCfg}}
}

// convertArchive writes the regular files of the zip archive src (size
// bytes) to dst in format: gzip, each file a gzip member whose header
// names it, one after the other (GitLab Runner's gzip artifacts); raw,
// the content of the only file. It returns the base name of the last file.
func convertArchive(src io.ReaderAt, size int64, dst io.Writer, format string) (string, error) {
	zr, err := zip.NewReader(src, size)
	if err != nil {
		return "", err
	}
	var files []*zip.File
	for _, zf := range zr.File {
		if zf.Mode().IsRegular() {
			files = append(files, zf)
		}
	}
	if format == "raw" && len(files) != 1 {
		return "", fmt.Errorf("takes exactly one file, the paths matched %d", len(files))
	}
	base := ""
	for _, zf := range files {
		rc, err := zf.Open()
		if err != nil {
			return "", err
		}
		base = path.Base(zf.Name)
		if format == "raw" {
			_, err = io.Copy(dst, rc)
		} else {
			gw := gzip.NewWriter(dst)
			gw.Name, gw.ModTime = zf.Name, zf.Modified
			if _, err = io.Copy(gw, rc); err == nil {
				err = gw.Close()
			}
		}
		rc.Close()
		if err != nil {
			return "", err
		}
	}
	return base, nil
}
