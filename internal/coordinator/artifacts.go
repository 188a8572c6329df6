package coordinator

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"mime"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/drover-ci/drover/internal/runnerapi"
	"github.com/drover-ci/drover/internal/store"
)

// Artifacts (facts §1.6).
//
//	POST /api/v4/jobs/{id}/artifacts?artifact_format=zip&artifact_type=archive&expire_in=1+week
//	     JOB-TOKEN: <the job's token>, multipart/form-data, the file in field "file"
//	GET  /api/v4/jobs/{id}/artifacts   JOB-TOKEN: <a dependent job's token>, or the admin token
//	GET  /api/v1/jobs/{id}/artifacts[?artifact_type=junit]   admin
//
// An upload is streamed to a temporary file in DataDir/artifacts, hashed
// (SHA-256) on the way, fsynced and renamed to its name: a file is visible
// under its name only complete, and recorded in the store only then. An
// upload cut off, or over MaxArtifactSize, leaves nothing. A job has one
// artifact of each type (archive, junit, ...), written once, as in
// GitLab: a second upload of a type with the same bytes (SHA-256) is
// answered 201 with the first (a runner retrying an upload whose answer
// it lost succeeds), one with other bytes 400 "another artifact of the
// same type already exists", and the first stays. Leftover temporary files (a coordinator killed mid-upload)
// are removed at start when the store is not shared; files no record
// names, by the reaper's sweep (orphans.go).
//
// Who may: the upload needs the token of the job's current assignment
// while the job runs (running or canceling); a token of an earlier
// assignment is 409 with Job-Status, as for PUT and PATCH; the job's token
// after it finished is 403 (canceled: 409, Job-Status canceled), and any
// other token 403. The download needs the token of a running job that
// lists the job among its dependencies (GitLab's payload gives the
// dependent job's own token for it), or the admin token as a bearer; no
// credentials at all is 401, wrong ones 403. A job without that artifact,
// or whose artifact expired, is 404.
//
// Expiry: an artifact's expire_at is the upload's expire_in, else the job
// spec's artifacts.expire_in, else DefaultArtifactExpireIn; "never" keeps
// it. Expired artifacts are not served, and the reaper deletes their
// files, retiring their records (store.Store.RetireArtifact): a job that
// depends on one fails at hand-out with missing_dependency_failure (see
// checkDependencies), while a dependency that never had artifacts is no
// obstacle, as in GitLab.
//
// The files live on this coordinator's disk. Coordinators sharing a
// PostgreSQL store share the records: they need DataDir/artifacts on a
// shared file system (the records name files relative to it), or a
// download through another coordinator is 404.

// DefaultMaxArtifactSize is Config.MaxArtifactSize's default: GitLab's
// default maximum artifacts size, 100 MiB.
const DefaultMaxArtifactSize = 100 << 20

// multipartSlack is what a multipart body may carry besides the file
// (boundaries, part headers, small form fields) before its
// Content-Length alone says it is too large.
const multipartSlack = 64 << 10

// copyBufferSize is the buffer of an upload's copy to disk.
const copyBufferSize = 256 << 10

var artifactTypeRE = regexp.MustCompile(`^[a-z][a-z0-9_]{0,63}$`)

// artifactContentTypes are the Content-Type of a download by format.
var artifactContentTypes = map[string]string{
	"zip":  "application/zip",
	"gzip": "application/gzip",
	"raw":  "application/octet-stream",
}

// artifactDir keeps artifact files: DataDir/artifacts/<name>, written
// through temporary files ".upload-*" in the same directory.
type artifactDir struct{ dir string }

const uploadPrefix = ".upload-"

// newArtifactDir creates dir and, with removeTemps, removes the
// temporary files uploads cut off by a crash left in it: only for a
// directory no other coordinator writes to, before serving.
func newArtifactDir(dir string, removeTemps bool) (*artifactDir, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("coordinator: artifacts dir: %w", err)
	}
	if !removeTemps {
		return &artifactDir{dir: dir}, nil
	}
	leftovers, err := filepath.Glob(filepath.Join(dir, uploadPrefix+"*"))
	if err != nil {
		return nil, fmt.Errorf("coordinator: artifacts dir: %w", err)
	}
	for _, p := range leftovers {
		os.Remove(p)
	}
	return &artifactDir{dir: dir}, nil
}

func (d *artifactDir) path(name string) string { return filepath.Join(d.dir, name) }

// write streams src (at most max bytes) into a new file and returns its
// name (under d), size and hex SHA-256. The file appears under its name
// only complete and synced; on any error nothing is left. More than max
// bytes is errTooLarge.
func (d *artifactDir) write(ctx context.Context, src io.Reader, max int64, name string) (size int64, sum string, err error) {
	tmp, err := os.CreateTemp(d.dir, uploadPrefix+"*")
	if err != nil {
		return 0, "", fmt.Errorf("create temporary file: %w", err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	n, sum, err := copyHashed(tmp, &ctxReader{ctx: ctx, r: io.LimitReader(src, max+1)})
	if err != nil {
		return n, "", err
	}
	if n > max {
		return n, "", errTooLarge
	}
	if err := tmp.Sync(); err != nil {
		return n, "", fmt.Errorf("sync %s: %w", tmp.Name(), err)
	}
	if err := tmp.Close(); err != nil {
		return n, "", fmt.Errorf("close %s: %w", tmp.Name(), err)
	}
	if err := os.Rename(tmp.Name(), d.path(name)); err != nil {
		return n, "", fmt.Errorf("rename %s: %w", tmp.Name(), err)
	}
	// The rename is durable once the directory is synced.
	if df, err := os.Open(d.dir); err == nil {
		df.Sync()
		df.Close()
	}
	return n, sum, nil
}

// copyHashed copies src to dst and returns the count and hex SHA-256 of
// the bytes. Reading (the network) and writing plus hashing run side by
// side on blocks of copyBufferSize: the upload is as fast as the slower
// of the two, not their sum. At most copyBlocks blocks are in memory.
func copyHashed(dst io.Writer, src io.Reader) (int64, string, error) {
	const copyBlocks = 4
	free := make(chan []byte, copyBlocks)
	for range copyBlocks {
		free <- make([]byte, copyBufferSize)
	}
	full := make(chan []byte, copyBlocks)
	werr := make(chan error, 1)
	failed := make(chan struct{}) // closed when a write fails: stop reading
	h := sha256.New()
	go func() {
		var err error
		for b := range full {
			if err == nil {
				h.Write(b)
				if _, err = dst.Write(b); err != nil {
					close(failed)
				}
			}
			free <- b[:cap(b)]
		}
		werr <- err
	}()
	var n int64
	var rerr error
	for {
		var b []byte
		select {
		case b = <-free:
		case <-failed:
		}
		if b == nil {
			break
		}
		k, err := io.ReadFull(src, b)
		n += int64(k)
		if k > 0 {
			full <- b[:k]
		}
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			break
		}
		if err != nil {
			rerr = err
			break
		}
	}
	close(full)
	if err := <-werr; err != nil {
		return n, "", fmt.Errorf("write: %w", err)
	}
	if rerr != nil {
		return n, "", rerr
	}
	return n, hex.EncodeToString(h.Sum(nil)), nil
}

// remove deletes file name; a missing one is fine.
func (d *artifactDir) remove(name string) error {
	if err := os.Remove(d.path(name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

var errTooLarge = errors.New("artifact too large")

// ctxReader stops reading once ctx is done (the client went away, the
// server shuts down).
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c *ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// mayUpload answers for job j, whose current token the caller holds, when
// it is not running: 403 before it started or after it finished, 409
// (Job-Status canceled) when it was canceled.
func (c *Coordinator) mayUpload(w http.ResponseWriter, j *store.Job) bool {
	switch {
	case isActive(j.Status):
		return true
	case j.Status == store.StatusCanceled:
		writeGone(w, j.Status)
	default:
		setJobHeaders(w, j.Status)
		runnerapi.WriteError(w, http.StatusForbidden, "403 Forbidden: job is "+string(j.Status)+", not running", "")
	}
	return false
}

// uploadParams are the query parameters of an upload.
type uploadParams struct {
	typ, format string
	expireAt    time.Time // zero: never
}

func (c *Coordinator) parseUploadParams(q map[string][]string, j *store.Job, now time.Time) (uploadParams, *runnerapi.BadRequest) {
	get := func(k string) string {
		if v := q[k]; len(v) > 0 {
			return strings.TrimSpace(v[0])
		}
		return ""
	}
	p := uploadParams{typ: get("artifact_type"), format: get("artifact_format")}
	if p.typ == "" {
		p.typ = artifactTypeArchive
	}
	if !artifactTypeRE.MatchString(p.typ) {
		return p, runnerapi.Invalid("artifact_type", "artifact_type must be archive or a report kind (junit, dotenv, ...)")
	}
	if p.format == "" {
		p.format = "zip"
	}
	if _, ok := artifactContentTypes[p.format]; !ok {
		return p, runnerapi.Invalid("artifact_format", "artifact_format must be zip, gzip or raw, not %q", p.format)
	}
	if p.typ == artifactTypeArchive && p.format != "zip" {
		return p, runnerapi.Invalid("artifact_format", "an archive must be zip, not %q", p.format)
	}
	expireIn := get("expire_in")
	if expireIn == "" && j.Spec.Artifacts != nil {
		expireIn = j.Spec.Artifacts.ExpireIn
	}
	if expireIn == "" {
		p.expireAt = now.Add(DefaultArtifactExpireIn)
		return p, nil
	}
	d, never, err := parseExpireIn(expireIn)
	if err != nil {
		return p, runnerapi.Invalid("expire_in", "%v", err)
	}
	if !never {
		p.expireAt = now.Add(d)
	}
	return p, nil
}

// artifactFilename is the name the runner gave the file, reduced to a safe
// base name; defaultName when it gave none.
func artifactFilename(name, format string) string {
	name = filepath.Base(strings.ReplaceAll(name, `\`, "/"))
	if name == "." || name == ".." || name == "/" || name == "" || len(name) > 255 || runnerapi.HasControl(name) || strings.ContainsAny(name, `"`) {
		switch format {
		case "zip":
			return "artifacts.zip"
		case "gzip":
			return "artifacts.gz"
		}
		return "artifacts"
	}
	return name
}

// artifactView is the answer of an upload.
type artifactView struct {
	JobID    int64   `json:"job_id"`
	Type     string  `json:"artifact_type"`
	Format   string  `json:"artifact_format"`
	Filename string  `json:"filename"`
	Size     int64   `json:"size"`
	SHA256   string  `json:"sha256"`
	ExpireAt *string `json:"expire_at"`
}

// handleUploadArtifacts is POST /api/v4/jobs/{id}/artifacts: 201 with the
// artifact; 400 for bad parameters, a body without a "file" part, or a
// second artifact of a type (see the package doc); 403,
// 404, 409 as the package doc says; 413 over MaxArtifactSize, from
// Content-Length before anything is read or while streaming; 507 while
// the data directory is under MinFreeDisk.
func (c *Coordinator) handleUploadArtifacts(w http.ResponseWriter, r *http.Request) {
	j, hash, ok := c.jobForRunner(w, r, "")
	if !ok || !c.mayUpload(w, &j) {
		return
	}
	ctx := r.Context()
	now := c.clock.Now()
	p, e := c.parseUploadParams(r.URL.Query(), &j, now)
	if e != nil {
		setJobHeaders(w, j.Status)
		runnerapi.WriteBad(w, e)
		return
	}
	if c.refuseOnLowDisk(w, j.ID, j.Status, writeArtifact) {
		return
	}
	limit := c.cfg.MaxArtifactSize
	log := c.log.With("job_id", j.ID, "artifact_type", p.typ)
	tooLarge := func(got string) {
		c.metrics.artifactsTooLarge.Inc()
		log.Warn("artifact refused: too large", "size", got, "max", limit)
		setJobHeaders(w, j.Status)
		// The rest of the body is not read: close the connection rather
		// than drain it.
		w.Header().Set("Connection", "close")
		runnerapi.WriteError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("artifact larger than %d bytes (--max-artifact-size)", limit), "file")
	}
	if r.ContentLength > limit+multipartSlack {
		tooLarge(strconv.FormatInt(r.ContentLength, 10) + " (Content-Length)")
		return
	}
	runnerapi.AllowSlowBody(w, r, limit+multipartSlack)
	r.Body = http.MaxBytesReader(w, r.Body, limit+multipartSlack)
	mr, err := r.MultipartReader()
	if err != nil {
		setJobHeaders(w, j.Status)
		runnerapi.WriteError(w, http.StatusBadRequest, "want a multipart/form-data body with the file in field \"file\": "+err.Error(), "file")
		return
	}
	var part io.Reader
	var filename string
	for {
		pt, err := mr.NextPart()
		if err != nil {
			c.badBody(w, &j, err, tooLarge)
			return
		}
		if pt.FormName() == "file" {
			part, filename = pt, pt.FileName()
			break
		}
		// Other fields are not read: parameters come in the query.
	}
	name := fmt.Sprintf("%d.%s.%s", j.ID, p.typ, runnerapi.RandomToken("", 9))
	size, sum, err := c.artifacts.write(ctx, part, limit, name)
	if err != nil {
		c.badBody(w, &j, err, tooLarge)
		return
	}
	c.metrics.artifactsUploaded.Add(float64(size))
	a := store.Artifact{
		JobID: j.ID, Type: p.typ, Format: p.format, Filename: artifactFilename(filename, p.format),
		File: name, Size: size, SHA256: sum, CreatedAt: now, ExpireAt: p.expireAt,
	}
	// The job may have ended, or gone to another runner, while the body
	// came: answer as if the upload had started now.
	cur, err := c.st.GetJob(ctx, j.ID)
	if err == nil && (cur.TokenHash == "" || !runnerapi.TokenEqual(cur.TokenHash, hash)) {
		c.artifacts.remove(name)
		writeGone(w, cur.Status)
		return
	}
	if err == nil && !c.mayUpload(w, &cur) {
		c.artifacts.remove(name)
		return
	}
	var existing *store.Artifact
	if err == nil {
		existing, err = c.st.PutArtifact(ctx, a)
	}
	if errors.Is(err, store.ErrExists) {
		c.artifacts.remove(name)
		setJobHeaders(w, cur.Status)
		if existing.SHA256 == sum && !existing.Retired() {
			// The same bytes again: a retry whose answer was lost.
			log.Info("artifact upload repeated: the same bytes", "size", size)
			runnerapi.WriteJSON(w, http.StatusCreated, viewArtifact(existing))
			return
		}
		log.Warn("artifact refused: the job has one of this type already", "size", size, "sha256", sum, "existing_sha256", existing.SHA256)
		runnerapi.WriteJSON(w, http.StatusBadRequest, duplicateArtifact{Message: msgArtifactExists, Error: msgArtifactExists, Field: "artifact_type"})
		return
	}
	if err != nil {
		c.artifacts.remove(name)
		c.internalError(ctx, w, "record artifact", err)
		return
	}
	log.Info("artifact uploaded", "size", size, "format", p.format, "filename", a.Filename, "expire_at", a.ExpireAt)
	setJobHeaders(w, cur.Status)
	runnerapi.WriteJSON(w, http.StatusCreated, viewArtifact(&a))
}

// msgArtifactExists is GitLab's answer (400) to a second upload of a
// type with other bytes (Ci::JobArtifacts::CreateService).
const msgArtifactExists = "another artifact of the same type already exists"

// duplicateArtifact is the 400 of a second upload: GitLab's "message"
// and drover's "error" and "field".
type duplicateArtifact struct {
	Message string `json:"message"`
	Error   string `json:"error"`
	Field   string `json:"field"`
}

func viewArtifact(a *store.Artifact) artifactView {
	return artifactView{
		JobID: a.JobID, Type: a.Type, Format: a.Format, Filename: a.Filename,
		Size: a.Size, SHA256: a.SHA256, ExpireAt: runnerapi.RFC3339(a.ExpireAt),
	}
}

// badBody answers an upload whose body could not be read whole: 413 when
// it was too large, else 400 (a client gone meanwhile hears nothing).
func (c *Coordinator) badBody(w http.ResponseWriter, j *store.Job, err error, tooLarge func(string)) {
	var maxErr *http.MaxBytesError
	switch {
	case errors.Is(err, errTooLarge) || errors.As(err, &maxErr):
		tooLarge("over the limit, while streaming")
	case errors.Is(err, io.EOF):
		setJobHeaders(w, j.Status)
		runnerapi.WriteError(w, http.StatusBadRequest, `multipart body has no field "file"`, "file")
	default:
		c.log.Info("artifact upload cut off", "job_id", j.ID, "err", err)
		setJobHeaders(w, j.Status)
		runnerapi.WriteError(w, http.StatusBadRequest, "read artifact: "+err.Error(), "file")
	}
}

// handleDownloadArtifacts is GET /api/v4/jobs/{id}/artifacts: the job's
// archive, for a running job that depends on it, or the admin.
func (c *Coordinator) handleDownloadArtifacts(w http.ResponseWriter, r *http.Request) {
	id, ok := runnerapi.PathID(r)
	if !ok {
		runnerapi.WriteError(w, http.StatusNotFound, "404 Job Not Found", "id")
		return
	}
	if !c.mayDownload(w, r, id) {
		return
	}
	c.serveArtifact(w, r, id, artifactTypeArchive)
}

// mayDownload checks the credentials of a download of job id's artifacts
// (see the package doc) and answers 401/403 when they do not do.
func (c *Coordinator) mayDownload(w http.ResponseWriter, r *http.Request, id int64) bool {
	if auth := r.Header.Get("Authorization"); auth != "" {
		tok, ok := strings.CutPrefix(auth, "Bearer ")
		if !ok || !runnerapi.TokenEqual(tok, c.adminToken) {
			runnerapi.WriteError(w, http.StatusForbidden, "invalid admin token", "")
			return false
		}
		return true
	}
	tok := runnerapi.JobToken(r, "")
	if tok == "" {
		w.Header().Set("WWW-Authenticate", `Bearer realm="drover"`)
		runnerapi.WriteError(w, http.StatusUnauthorized, "401 Unauthorized: JOB-TOKEN (or the admin token) required", "token")
		return false
	}
	dep, err := c.st.JobByTokenHash(r.Context(), store.HashToken(tok))
	if errors.Is(err, store.ErrNotFound) {
		runnerapi.WriteError(w, http.StatusForbidden, "403 Forbidden: invalid job token", "token")
		return false
	}
	if err != nil {
		c.internalError(r.Context(), w, "look up job token", err)
		return false
	}
	if !isActive(dep.Status) {
		runnerapi.WriteError(w, http.StatusForbidden, fmt.Sprintf("403 Forbidden: job %d is %s, not running", dep.ID, dep.Status), "token")
		return false
	}
	specs, err := c.jobDependencies(r.Context(), &dep)
	if err != nil {
		c.internalError(r.Context(), w, "job dependencies", err)
		return false
	}
	for _, d := range specs {
		if d.ID == id {
			return true
		}
	}
	runnerapi.WriteError(w, http.StatusForbidden, fmt.Sprintf("403 Forbidden: job %d does not depend on job %d", dep.ID, id), "token")
	return false
}

// handleAdminArtifacts is GET /api/v1/jobs/{id}/artifacts?artifact_type=T
// (default archive): the artifact, or 404.
func (c *Coordinator) handleAdminArtifacts(w http.ResponseWriter, r *http.Request) {
	j, ok := c.loadJob(w, r)
	if !ok {
		return
	}
	typ := r.URL.Query().Get("artifact_type")
	if typ == "" {
		typ = artifactTypeArchive
	}
	if !artifactTypeRE.MatchString(typ) {
		runnerapi.WriteError(w, http.StatusBadRequest, "artifact_type must be archive or a report kind (junit, dotenv, ...)", "artifact_type")
		return
	}
	c.serveArtifact(w, r, j.ID, typ)
}

// serveArtifact streams job id's artifact of type typ, with
// Content-Disposition naming the file, its SHA-256 (X-Drover-Sha256 and
// the ETag) and Range support; 404 when there is none or it expired.
func (c *Coordinator) serveArtifact(w http.ResponseWriter, r *http.Request, id int64, typ string) {
	ctx := r.Context()
	a, err := c.st.GetArtifact(ctx, id, typ)
	if errors.Is(err, store.ErrNotFound) || (err == nil && a.Expired(c.clock.Now())) {
		runnerapi.WriteError(w, http.StatusNotFound, fmt.Sprintf("404 Not Found: job %d has no %s artifact", id, typ), "")
		return
	}
	if err != nil {
		c.internalError(ctx, w, "get artifact", err)
		return
	}
	f, err := os.Open(c.artifacts.path(a.File))
	if errors.Is(err, fs.ErrNotExist) {
		c.log.Warn("artifact recorded but its file is missing (a shared store without a shared artifacts directory?)", "job_id", id, "file", a.File)
		runnerapi.WriteError(w, http.StatusNotFound, fmt.Sprintf("404 Not Found: job %d has no %s artifact here", id, typ), "")
		return
	}
	if err != nil {
		c.internalError(ctx, w, "open artifact", err)
		return
	}
	defer f.Close()
	h := w.Header()
	h.Set("Content-Type", artifactContentTypes[a.Format])
	h.Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": a.Filename}))
	h.Set("X-Drover-Sha256", a.SHA256)
	h.Set("ETag", `"`+a.SHA256+`"`)
	cw := &countingWriter{ResponseWriter: w}
	http.ServeContent(cw, r, "", a.CreatedAt, f)
	c.metrics.artifactsDownloaded.Add(float64(cw.n))
}

// countingWriter counts the body bytes written, keeping the
// ResponseWriter's io.ReaderFrom (sendfile) path.
type countingWriter struct {
	http.ResponseWriter
	n int64
}

func (w *countingWriter) Write(b []byte) (int, error) {
	n, err := w.ResponseWriter.Write(b)
	w.n += int64(n)
	return n, err
}

func (w *countingWriter) ReadFrom(r io.Reader) (int64, error) {
	n, err := io.Copy(w.ResponseWriter, r)
	w.n += n
	return n, err
}

func (w *countingWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// expireArtifacts deletes the artifacts expired at now: the record is
// retired first (from then on it is not served, and it stays as the mark
// that fails the jobs that depend on it), then the file goes.
func (c *Coordinator) expireArtifacts(ctx context.Context, now time.Time) {
	const batch = 100
	for {
		as, err := c.st.ExpiredArtifacts(ctx, now, batch)
		if err != nil {
			if ctx.Err() == nil {
				c.log.Error("reaper: list expired artifacts", "err", err)
			}
			return
		}
		for _, a := range as {
			err := c.st.RetireArtifact(ctx, a)
			if errors.Is(err, store.ErrNotFound) {
				continue // retired meanwhile (another coordinator): not ours to remove
			}
			if err != nil {
				if ctx.Err() == nil {
					c.log.Error("reaper: delete expired artifact", "job_id", a.JobID, "artifact_type", a.Type, "err", err)
				}
				return
			}
			if err := c.artifacts.remove(a.File); err != nil {
				c.log.Warn("reaper: remove expired artifact file", "job_id", a.JobID, "file", a.File, "err", err)
			}
			c.metrics.artifactsExpired.Inc()
			c.log.Info("artifact expired", "job_id", a.JobID, "artifact_type", a.Type, "size", a.Size)
		}
		if len(as) < batch {
			return
		}
	}
}
