package difftest

import (
	"archive/zip"
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// recorder serves the coordinator and notes what runners send it: the
// state of each job update (and of drover's runner_provisioning reports,
// as provisioning:STATUS) and each artifacts upload.
type recorder struct {
	next http.Handler
	mu   sync.Mutex
	// states are the states of job updates by job, repeats dropped.
	states map[int64][]string
	ups    map[int64][]ArtifactUpload
}

func newRecorder(next http.Handler) *recorder {
	return &recorder{next: next, states: map[int64][]string{}, ups: map[int64][]ArtifactUpload{}}
}

// maxRecordedUpload bounds what the recorder reads of an upload to list
// it; the fixtures' archives are small.
const maxRecordedUpload = 64 << 20

func (rc *recorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rest, ok := strings.CutPrefix(r.URL.Path, "/api/v4/jobs/")
	if !ok {
		rc.next.ServeHTTP(w, r)
		return
	}
	idText, what, _ := strings.Cut(rest, "/")
	id, err := strconv.ParseInt(idText, 10, 64)
	if err != nil {
		rc.next.ServeHTTP(w, r)
		return
	}
	switch {
	case r.Method == http.MethodPut && what == "":
		body, _ := io.ReadAll(io.LimitReader(r.Body, maxRecordedUpload))
		r.Body = io.NopCloser(bytes.NewReader(body))
		var u struct {
			State string `json:"state"`
		}
		if json.Unmarshal(body, &u) == nil && u.State != "" {
			rc.note(id, u.State)
		}
		rc.next.ServeHTTP(w, r)
	case r.Method == http.MethodPost && what == "runner_provisioning":
		// drover's two-phase start: pending keep-alives, then accepted.
		body, _ := io.ReadAll(io.LimitReader(r.Body, maxRecordedUpload))
		r.Body = io.NopCloser(bytes.NewReader(body))
		var p struct {
			Status string `json:"status"`
		}
		if json.Unmarshal(body, &p) == nil && p.Status != "" {
			rc.note(id, "provisioning:"+p.Status)
		}
		rc.next.ServeHTTP(w, r)
	case r.Method == http.MethodPost && what == "artifacts":
		body, _ := io.ReadAll(io.LimitReader(r.Body, maxRecordedUpload))
		r.Body = io.NopCloser(bytes.NewReader(body))
		up := describeUpload(r, body)
		sw := httptest.NewRecorder()
		rc.next.ServeHTTP(sw, r)
		up.Status = sw.Code
		for k, v := range sw.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(sw.Code)
		_, _ = w.Write(sw.Body.Bytes())
		rc.mu.Lock()
		rc.ups[id] = append(rc.ups[id], up)
		rc.mu.Unlock()
	default:
		rc.next.ServeHTTP(w, r)
	}
}

// note adds a state to job id's updates unless it repeats the last.
func (rc *recorder) note(id int64, state string) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if s := rc.states[id]; len(s) == 0 || s[len(s)-1] != state {
		rc.states[id] = append(s, state)
	}
}

func (rc *recorder) updates(id int64) []string {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return slices.Clone(rc.states[id])
}

func (rc *recorder) uploads(id int64) []ArtifactUpload {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return slices.Clone(rc.ups[id])
}

// describeUpload reads an artifacts upload: its type, format and expiry
// (query or form fields, as runners send either), the file part's name
// and the archive's members.
func describeUpload(r *http.Request, body []byte) ArtifactUpload {
	q := r.URL.Query()
	up := ArtifactUpload{Type: q.Get("artifact_type"), Format: q.Get("artifact_format"), ExpireIn: q.Get("expire_in")}
	_, params, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil {
		return up
	}
	mr := multipart.NewReader(bytes.NewReader(body), params["boundary"])
	for {
		p, err := mr.NextPart()
		if err != nil {
			break
		}
		data, _ := io.ReadAll(p)
		switch p.FormName() {
		case "file":
			up.FileName = p.FileName()
			up.Files = listArchive(up.Format, data)
		case "artifact_type":
			up.Type = string(data)
		case "artifact_format":
			up.Format = string(data)
		case "expire_in":
			up.ExpireIn = string(data)
		}
	}
	return up
}

// listArchive lists the members of an uploaded archive by its format:
// zip, gzip (GitLab's: one gzip member per file, named in its header), or
// raw (the file itself: no listing).
func listArchive(format string, data []byte) []string {
	var names []string
	switch format {
	case "", "zip":
		zr, err := zip.NewReader(bytes.NewReader(data), int64(len(data)))
		if err != nil {
			return []string{"(not a zip: " + err.Error() + ")"}
		}
		for _, f := range zr.File {
			names = append(names, f.Name)
		}
	case "gzip":
		br := bufio.NewReader(bytes.NewReader(data))
		zr, err := gzip.NewReader(br)
		if err != nil {
			return []string{"(not gzip: " + err.Error() + ")"}
		}
		for {
			zr.Multistream(false)
			names = append(names, zr.Name)
			if _, err := io.Copy(io.Discard, zr); err != nil {
				names = append(names, "(broken gzip: "+err.Error()+")")
				break
			}
			if err := zr.Reset(br); err != nil {
				break // io.EOF: no more members
			}
		}
	default:
		return nil
	}
	slices.Sort(names)
	return names
}
