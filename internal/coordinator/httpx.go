package coordinator

import (
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/drover-ci/drover/internal/coordinator/store"
)

// Header names of the runner API v4.
const (
	hdrRunnerToken    = "RUNNER-TOKEN"
	hdrJobToken       = "JOB-TOKEN"
	hdrJobStatus      = "Job-Status"
	hdrUpdateInterval = "X-GitLab-Trace-Update-Interval"
	hdrLastUpdate     = "X-GitLab-Last-Update"
	// hdrAckTimeout (drover's own) tells a two-phase runner, on the 201 of
	// jobs/request and on keep-alive answers, the ack timeout in seconds.
	hdrAckTimeout = "X-Drover-Ack-Timeout"
	// hdrJobWatch (drover's own) says the coordinator serves jobs/watch,
	// holding one at most this many seconds.
	hdrJobWatch = "X-Drover-Job-Watch"
)

// Body limits.
const (
	maxV1Body    = 4 << 20 // admin API requests
	maxV4Body    = 1 << 20 // runner JSON requests
	maxTracePart = 1 << 20 // one trace PATCH
)

func (c *Coordinator) routes() http.Handler {
	mux := http.NewServeMux()
	h := func(pattern string, fn http.HandlerFunc) {
		mux.Handle(pattern, c.instrument(pattern, fn))
	}
	admin := func(pattern string, fn http.HandlerFunc) {
		mux.Handle(pattern, c.instrument(pattern, c.requireAdmin(fn)))
	}

	// Runner API v4.
	h("POST /api/v4/runners/verify", c.handleVerify)
	h("POST /api/v4/runners", c.handleRegister)
	h("DELETE /api/v4/runners", c.handleUnregister)
	h("DELETE /api/v4/runners/managers", c.handleUnregisterManager)
	h("POST /api/v4/runners/reset_authentication_token", c.handleResetToken)
	// The job answers tell a runner that this coordinator serves
	// jobs/watch (see watch.go).
	jobs := func(pattern string, fn http.HandlerFunc) {
		h(pattern, c.advertiseWatch(fn))
	}
	jobs("POST /api/v4/jobs/request", c.handleJobRequest)
	jobs("PUT /api/v4/jobs/{id}", c.handleUpdateJob)
	jobs("PATCH /api/v4/jobs/{id}/trace", c.handlePatchTrace)
	jobs("POST /api/v4/jobs/{id}/runner_provisioning", c.handleProvisioning)
	jobs("POST /api/v4/jobs/watch", c.handleWatchJobs)

	// Admin API v1.
	admin("POST /api/v1/runners", c.handleCreateRunner)
	admin("GET /api/v1/runners", c.handleListRunners)
	admin("GET /api/v1/runners/{id}", c.handleGetRunner)
	admin("DELETE /api/v1/runners/{id}", c.handleDeleteRunner)
	admin("POST /api/v1/jobs", c.handleSubmitJob)
	admin("GET /api/v1/jobs", c.handleListJobs)
	admin("GET /api/v1/jobs/{id}", c.handleGetJob)
	admin("GET /api/v1/jobs/{id}/trace", c.handleGetTrace)
	admin("POST /api/v1/jobs/{id}/cancel", c.handleCancelJob)

	mux.Handle("GET /metrics", c.metrics.handler)
	mux.HandleFunc("GET /health/live", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("GET /health/ready", func(w http.ResponseWriter, r *http.Request) {
		desc := "store: sqlite"
		if d, ok := c.st.(interface{ Describe() string }); ok {
			desc = "store: " + d.Describe()
		}
		if err := c.st.Ping(r.Context()); err != nil {
			http.Error(w, desc+": "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		if c.shared == nil {
			// The database and the job logs are files in the data
			// directory: a full disk or a read-only one fails every
			// submission and trace, so the coordinator is not ready.
			if err := store.CheckWritable(c.cfg.DataDir); err != nil {
				http.Error(w, "data directory: "+err.Error(), http.StatusServiceUnavailable)
				return
			}
		}
		io.WriteString(w, "ok\n"+desc+"\n")
	})
	return mux
}

// statusWriter remembers the status code for metrics.
type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// instrument counts requests by endpoint pattern and status code.
func (c *Coordinator) instrument(endpoint string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sw := &statusWriter{ResponseWriter: w}
		next.ServeHTTP(sw, r)
		code := sw.code
		switch {
		case code == 0 && r.Context().Err() != nil:
			code = statusClientClosed
		case code == 0:
			code = http.StatusOK
		}
		c.metrics.requests.WithLabelValues(endpoint, strconv.Itoa(code)).Inc()
	})
}

// requireAdmin checks Authorization: Bearer <admin token>: 401 when
// missing, 403 when wrong.
func (c *Coordinator) requireAdmin(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		auth := r.Header.Get("Authorization")
		tok, ok := strings.CutPrefix(auth, "Bearer ")
		if auth == "" || !ok || tok == "" {
			w.Header().Set("WWW-Authenticate", `Bearer realm="drover"`)
			writeError(w, http.StatusUnauthorized, "missing bearer token", "")
			return
		}
		if subtle.ConstantTimeCompare([]byte(tok), []byte(c.adminToken)) != 1 {
			writeError(w, http.StatusForbidden, "invalid admin token", "")
			return
		}
		next(w, r)
	}
}

// apiError is the error body of both APIs.
type apiError struct {
	Error string `json:"error"`
	Field string `json:"field,omitempty"`
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, "encode response: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)+1))
	w.WriteHeader(code)
	w.Write(append(b, '\n'))
}

func writeError(w http.ResponseWriter, code int, msg, field string) {
	writeJSON(w, code, apiError{Error: msg, Field: field})
}

// badRequest is a decoding or validation failure: a 4xx with a message and
// the offending field.
type badRequest struct {
	code  int
	msg   string
	field string
}

func (e *badRequest) Error() string { return e.msg }

func invalid(field, format string, args ...any) *badRequest {
	return &badRequest{code: http.StatusBadRequest, msg: fmt.Sprintf(format, args...), field: field}
}

func writeBad(w http.ResponseWriter, e *badRequest) {
	writeError(w, e.code, e.msg, e.field)
}

// decodeJSON reads one JSON value from r's body (at most limit bytes) into
// v. strict rejects unknown fields (admin API); the runner API ignores them
// because runners send more than drover reads.
func decodeJSON(w http.ResponseWriter, r *http.Request, v any, limit int64, strict bool) *badRequest {
	if r.ContentLength > limit {
		return &badRequest{code: http.StatusRequestEntityTooLarge, msg: fmt.Sprintf("body larger than %d bytes", limit)}
	}
	body := http.MaxBytesReader(w, r.Body, limit)
	dec := json.NewDecoder(body)
	if strict {
		dec.DisallowUnknownFields()
	}
	err := dec.Decode(v)
	if err == nil {
		// Exactly one value: anything but whitespace after it is an error.
		if _, err2 := dec.Token(); err2 != io.EOF {
			var maxErr *http.MaxBytesError
			if errors.As(err2, &maxErr) {
				return jsonError(err2)
			}
			return invalid("", "unexpected data after the JSON body")
		}
		return nil
	}
	return jsonError(err)
}

func jsonError(err error) *badRequest {
	var maxErr *http.MaxBytesError
	var synErr *json.SyntaxError
	var typeErr *json.UnmarshalTypeError
	switch {
	case errors.As(err, &maxErr):
		return &badRequest{code: http.StatusRequestEntityTooLarge, msg: fmt.Sprintf("body larger than %d bytes", maxErr.Limit)}
	case errors.Is(err, io.EOF):
		return invalid("", "empty body, want a JSON object")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return invalid("", "truncated JSON body")
	case errors.As(err, &synErr):
		return invalid("", "malformed JSON at byte %d: %v", synErr.Offset, synErr)
	case errors.As(err, &typeErr):
		return invalid(typeErr.Field, "field %q: want %s, not JSON %s", typeErr.Field, jsonKind(typeErr.Type), typeErr.Value)
	}
	msg := err.Error()
	if f, ok := strings.CutPrefix(msg, `json: unknown field "`); ok {
		f = strings.TrimSuffix(f, `"`)
		return invalid(f, "unknown field %q", f)
	}
	var fe *fieldError
	if errors.As(err, &fe) {
		return invalid(fe.field, "%s", fe.msg)
	}
	return invalid("", "invalid JSON body: %v", err)
}

// jsonKind names what JSON a Go type takes, for error messages.
func jsonKind(t reflect.Type) string {
	if t == nil {
		return "another value"
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Struct, reflect.Map:
		return "an object"
	}
	return "another value"
}

// fieldError is returned by custom UnmarshalJSON methods.
type fieldError struct{ field, msg string }

func (e *fieldError) Error() string { return e.field + ": " + e.msg }

// pathID parses the {id} wildcard; ok is false for anything but a positive
// integer.
func pathID(r *http.Request) (int64, bool) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	return id, err == nil && id > 0
}

// rfc3339 formats t for the admin API, or nil when unset.
func rfc3339(t time.Time) *string {
	if t.IsZero() {
		return nil
	}
	s := t.UTC().Format("2006-01-02T15:04:05.000Z07:00")
	return &s
}

func tokenEqual(a, b string) bool {
	return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1
}
