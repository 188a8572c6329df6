package web

import (
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"path"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/drover-ci/drover/internal/archive"
	"github.com/drover-ci/drover/internal/junit"
)

// A job's artifacts on its page: the files in its archive (read from the
// zip's central directory in place, a page at a time; one file streamed
// out of it on demand) and the failures of its JUnit report (read as a
// stream, within bounds). Both read the stored file through an
// io.ReaderAt: nothing is unzipped to disk, no archive is read whole.

// ArtifactFiles opens the stored files of jobs' artifacts.
type ArtifactFiles interface {
	// OpenArtifact returns job id's artifact of type typ (archive,
	// junit, ...) and a reader of its bytes, which the caller closes;
	// ErrNotFound when the job has none, it expired, or its file is not
	// on this server.
	OpenArtifact(ctx context.Context, id int64, typ string) (Artifact, ArtifactReader, error)
}

// ArtifactReader reads a stored artifact's bytes anywhere (an *os.File).
type ArtifactReader interface {
	io.ReaderAt
	io.Closer
}

// Bounds of the artifacts shown on a job's page.
const (
	// filesPerPage is how many entries of an archive a page lists.
	filesPerPage = 100
	// filesOnJobPage is how many the job's own page lists.
	filesOnJobPage = 20
	// maxEntryName bounds a file's path in a download request.
	maxEntryName = 4096
	// junitFailures is how many failed tests the job page shows, and
	// junitLines how many lines of each one's text.
	junitFailures = 50
	junitLines    = 12
)

// junitLimits bound the read of a JUnit report for the page.
var junitLimits = junit.Limits{MaxBytes: 16 << 20, MaxFailures: junitFailures, MaxText: 4 << 10}

// artifactListing is a page of the files in a job's archive.
type artifactListing struct {
	JobID      int64
	Files      []archive.ZipEntry
	Skip       int   // index of the first
	Total      int64 // entries in the archive
	Next, Prev int   // the neighbour pages' skip; -1: none
	Error      string
}

// junitView is a JUnit report as the job page shows it.
type junitView struct {
	Report junit.Report
	Cases  []junitCase
	Error  string // the report could not be read whole
}

type junitCase struct {
	junit.Case
	Lines string // the first junitLines lines of Text
	More  bool   // Text has more lines
}

// firstLines is the first n lines of s, and whether there were more.
func firstLines(s string, n int) (string, bool) {
	at := 0
	for range n {
		i := strings.IndexByte(s[at:], '\n')
		if i < 0 {
			return s, false
		}
		at += i + 1
	}
	if at >= len(s) {
		return s, false
	}
	return strings.TrimRight(s[:at], "\n"), true
}

// jobArtifacts reads, for job j's page, the first files of its archive
// and its JUnit report, when it has them and Config.ArtifactFiles is
// set; a failure is shown on the page (and logged), not a failed page.
func (u *UI) jobArtifacts(ctx context.Context, j *Job) (*artifactListing, *junitView) {
	if u.cfg.ArtifactFiles == nil {
		return nil, nil
	}
	var files *artifactListing
	var report *junitView
	for _, a := range j.Artifacts {
		switch {
		case a.Type == "archive" && a.Format == "zip" && files == nil:
			l := u.listArtifactFiles(ctx, j.ID, 0, filesOnJobPage)
			files = &l
		case a.Type == "junit" && report == nil:
			report = u.readJUnit(ctx, j.ID)
		}
	}
	return files, report
}

// listArtifactFiles lists n entries of job id's archive from skip.
func (u *UI) listArtifactFiles(ctx context.Context, id int64, skip, n int) artifactListing {
	l := artifactListing{JobID: id, Skip: skip, Next: -1, Prev: -1}
	a, rd, err := u.cfg.ArtifactFiles.OpenArtifact(ctx, id, "archive")
	if err != nil {
		if !errors.Is(err, ErrNotFound) {
			u.log.Warn("web: open the artifacts archive", "job_id", id, "err", err)
		}
		l.Error = "The archive is not available on this server."
		return l
	}
	defer rd.Close()
	l.Files, l.Total, err = archive.List(rd, a.Size, skip, n)
	if err != nil {
		u.log.Warn("web: list the artifacts archive", "job_id", id, "err", err)
		l.Error = "The archive cannot be read: " + err.Error()
		return l
	}
	if int64(skip+len(l.Files)) < l.Total {
		l.Next = skip + len(l.Files)
	}
	if skip > 0 {
		l.Prev = max(skip-n, 0)
	}
	return l
}

// readJUnit reads the failures of job id's JUnit report.
func (u *UI) readJUnit(ctx context.Context, id int64) *junitView {
	a, rd, err := u.cfg.ArtifactFiles.OpenArtifact(ctx, id, "junit")
	if err != nil {
		if !errors.Is(err, ErrNotFound) {
			u.log.Warn("web: open the junit report", "job_id", id, "err", err)
		}
		return &junitView{Error: "The report is not available on this server."}
	}
	defer rd.Close()
	rep, err := junit.ParseArtifact(rd, a.Size, a.Format, junitLimits)
	v := &junitView{Report: rep}
	if err != nil {
		v.Error = "The report was read only in part: " + err.Error()
	}
	for _, c := range rep.Cases {
		lines, more := firstLines(c.Text, junitLines)
		v.Cases = append(v.Cases, junitCase{Case: c, Lines: lines, More: more})
	}
	return v
}

type artifactFilesPage struct {
	base
	Job     Job
	Listing artifactListing
}

// handleArtifactFiles is GET /jobs/{id}/artifacts/files?skip=N: a page
// of the files in the job's artifacts archive.
func (u *UI) handleArtifactFiles(w http.ResponseWriter, r *http.Request, cr credentials) {
	j, ok := u.loadJob(w, r, cr)
	if !ok {
		return
	}
	skip := 0
	if s := r.URL.Query().Get("skip"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			u.errorPage(w, r, cr, http.StatusBadRequest, "skip must be a number of files.")
			return
		}
		skip = n
	}
	if u.cfg.ArtifactFiles == nil {
		u.errorPage(w, r, cr, http.StatusNotFound, "This server shows no artifacts' files.")
		return
	}
	l := u.listArtifactFiles(r.Context(), j.ID, skip, filesPerPage)
	u.render(w, r, http.StatusOK, "artifact-files", artifactFilesPage{
		base: u.base(fmt.Sprintf("Artifacts of #%d %s", j.ID, j.Name), cr), Job: j, Listing: l,
	})
}

// validEntryName reports whether name is a file's path as an archive
// should hold it: relative, slash-separated, clean, no NUL, UTF-8.
func validEntryName(name string) bool {
	if name == "" || len(name) > maxEntryName || !utf8.ValidString(name) || strings.ContainsAny(name, "\x00\\") ||
		strings.HasPrefix(name, "/") || strings.HasSuffix(name, "/") {
		return false
	}
	for seg := range strings.SplitSeq(name, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return false
		}
	}
	return true
}

// downloadTypes are the Content-Types a file from an archive is sent
// with, by extension; anything else is application/octet-stream. No
// type a browser would run (HTML, SVG, JavaScript) is in it: the files
// are the jobs', and the answer is an attachment besides.
var downloadTypes = map[string]string{
	".txt": "text/plain; charset=utf-8", ".log": "text/plain; charset=utf-8", ".md": "text/plain; charset=utf-8",
	".json": "application/json", ".csv": "text/csv; charset=utf-8", ".pdf": "application/pdf",
	".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".gif": "image/gif",
	".zip": "application/zip", ".gz": "application/gzip", ".tar": "application/x-tar",
}

// handleArtifactFile is GET /jobs/{id}/artifacts/file?path=P: file P of
// the job's artifacts archive, streamed out of it as an attachment.
func (u *UI) handleArtifactFile(w http.ResponseWriter, r *http.Request, cr credentials) {
	j, ok := u.loadJob(w, r, cr)
	if !ok {
		return
	}
	name := r.URL.Query().Get("path")
	if !validEntryName(name) {
		u.errorPage(w, r, cr, http.StatusBadRequest, "path must be a file's relative path in the archive.")
		return
	}
	if u.cfg.ArtifactFiles == nil {
		u.errorPage(w, r, cr, http.StatusNotFound, "This server shows no artifacts' files.")
		return
	}
	a, rd, err := u.cfg.ArtifactFiles.OpenArtifact(r.Context(), j.ID, "archive")
	if errors.Is(err, ErrNotFound) {
		u.errorPage(w, r, cr, http.StatusNotFound, fmt.Sprintf("Job %d has no artifacts archive here.", j.ID))
		return
	}
	if err != nil {
		u.fail(w, r, "open artifacts", err)
		return
	}
	defer rd.Close()
	if a.Format != "zip" {
		u.errorPage(w, r, cr, http.StatusNotFound, fmt.Sprintf("Job %d's archive is not a zip archive.", j.ID))
		return
	}
	rc, e, err := archive.OpenEntry(rd, a.Size, name)
	switch {
	case errors.Is(err, archive.ErrNoEntry):
		u.errorPage(w, r, cr, http.StatusNotFound, "The archive has no such file.")
		return
	case errors.Is(err, archive.ErrCorrupt):
		u.errorPage(w, r, cr, http.StatusUnprocessableEntity, "The archive cannot be read: "+err.Error())
		return
	case err != nil:
		u.fail(w, r, "open a file of the artifacts", err)
		return
	}
	defer rc.Close()
	h := w.Header()
	ct := downloadTypes[strings.ToLower(path.Ext(name))]
	if ct == "" {
		ct = "application/octet-stream"
	}
	h.Set("Content-Type", ct)
	cd := mime.FormatMediaType("attachment", map[string]string{"filename": path.Base(name)})
	if cd == "" {
		cd = "attachment"
	}
	h.Set("Content-Disposition", cd)
	h.Set("Content-Length", strconv.FormatInt(e.Size, 10))
	// Whatever a browser makes of it, it runs nothing of it.
	h.Set("Content-Security-Policy", "sandbox; default-src 'none'")
	if !e.Modified.IsZero() {
		h.Set("Last-Modified", e.Modified.UTC().Format(http.TimeFormat))
	}
	if n, err := io.Copy(w, rc); err != nil && r.Context().Err() == nil {
		// The status is sent; the short body tells the client.
		u.log.Warn("web: a file of the artifacts cut off", "job_id", j.ID, "path", name, "sent", n, "err", err)
	}
}

// entryTime is for the listing: t in UTC to the minute, "" when unset.
func entryTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format("2006-01-02 15:04")
}
