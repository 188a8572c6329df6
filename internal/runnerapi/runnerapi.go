// Package runnerapi is the server side of GitLab's runner API v4 and of
// drover's admin runner API, shared by the two daemons that serve runners:
// the coordinator and the router ("a coordinator to its runners").
//
// It holds everything a server of runners does whatever its jobs are:
//
//   - Runners: runner tokens and runner managers over a small Registry
//     (the coordinator's job database, the router's own): runners/verify,
//     legacy registration, unregister (runner and manager),
//     reset_authentication_token, POST/GET /api/v1/runners and
//     GET/DELETE /api/v1/runners/{id}; Auth for a runner token, Touch for
//     a manager's contact, Hooks telling the daemon what changed.
//   - Mux: the routes, with request instrumentation (endpoint × status
//     code, a client gone counted as 499), admin endpoints behind the
//     admin token (constant-time compare), /metrics, /health/live and
//     /health/ready from a list of Checks; Metrics builds the registry.
//   - Decoding with body limits and field errors (DecodeJSON, BadRequest),
//     the JSON error shape (APIError, WriteError), InternalError.
//   - Long-poll plumbing: Versions, the X-GitLab-Last-Update of each
//     runner manager.
//   - Tokens: RandomToken, ReadOrCreateToken, WriteToken; and the daemons'
//     start-up (PrepareDataDir, OrDefault).
//
// Each daemon plugs in what differs through JobHandlers — where jobs come
// from (jobs/request) and what a runner's report does (PUT jobs/:id,
// PATCH trace, runner_provisioning) — and through Hooks and the Fail
// function of RunnersConfig. Neither keeps a copy of the rest. The
// contract test (contract_test.go) runs one table of requests, status
// codes, error fields and headers against both.
package runnerapi

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// StatusClientClosed is recorded for a request whose client went away
// before it was answered (nginx's 499).
const StatusClientClosed = 499

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

// Instrument counts requests in requests (labels: endpoint, code) by
// endpoint pattern and status code; a request whose client went away
// unanswered counts as StatusClientClosed.
func Instrument(requests *prometheus.CounterVec, endpoint string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sw := &statusWriter{ResponseWriter: w}
		next.ServeHTTP(sw, r)
		code := sw.code
		switch {
		case code == 0 && r.Context().Err() != nil:
			code = StatusClientClosed
		case code == 0:
			code = http.StatusOK
		}
		requests.WithLabelValues(endpoint, strconv.Itoa(code)).Inc()
	})
}

// InternalError answers a failure of the server's own: 500 naming what
// failed, logged as an error. A client that went away meanwhile (a runner
// stopping, a held long poll it gave up on) is an ordinary event, not a
// server error: nobody reads the answer, it is logged at debug level and
// Instrument counts it as StatusClientClosed.
func InternalError(ctx context.Context, w http.ResponseWriter, log *slog.Logger, what string, err error) {
	if ctx.Err() != nil {
		log.Debug(what+": client went away", "err", err)
		w.WriteHeader(StatusClientClosed)
		return
	}
	log.Error(what, "err", err)
	WriteError(w, http.StatusInternalServerError, what+": internal error", "")
}

// RequireAdmin checks Authorization: Bearer <token>: 401 when missing, 403
// when wrong.
func RequireAdmin(token string, next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		auth := r.Header.Get("Authorization")
		tok, ok := strings.CutPrefix(auth, "Bearer ")
		if auth == "" || !ok || tok == "" {
			w.Header().Set("WWW-Authenticate", `Bearer realm="drover"`)
			WriteError(w, http.StatusUnauthorized, "missing bearer token", "")
			return
		}
		if !TokenEqual(tok, token) {
			WriteError(w, http.StatusForbidden, "invalid admin token", "")
			return
		}
		next(w, r)
	}
}

// APIError is the error body of both APIs (runner v4 and admin v1).
type APIError struct {
	Error string `json:"error"`
	Field string `json:"field,omitempty"`
}

// WriteJSON answers code with v as JSON.
func WriteJSON(w http.ResponseWriter, code int, v any) {
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

// WriteError answers code with an APIError.
func WriteError(w http.ResponseWriter, code int, msg, field string) {
	WriteJSON(w, code, APIError{Error: msg, Field: field})
}

// BadRequest is a decoding or validation failure: a 4xx with a message and
// the offending field.
type BadRequest struct {
	code  int
	msg   string
	field string
}

// Field is the offending field ("" for the body as a whole).
func (e *BadRequest) Field() string { return e.field }

// Code is the HTTP status code of the answer.
func (e *BadRequest) Code() int { return e.code }

func (e *BadRequest) Error() string { return e.msg }

// Invalid is a 400 for field.
func Invalid(field, format string, args ...any) *BadRequest {
	return &BadRequest{code: http.StatusBadRequest, msg: fmt.Sprintf(format, args...), field: field}
}

// WriteBad answers e.
func WriteBad(w http.ResponseWriter, e *BadRequest) {
	WriteError(w, e.code, e.msg, e.field)
}

// DecodeJSON reads one JSON value from r's body (at most limit bytes) into
// v. strict rejects unknown fields (admin API); the runner API ignores them
// because runners send more than drover reads.
func DecodeJSON(w http.ResponseWriter, r *http.Request, v any, limit int64, strict bool) *BadRequest {
	if r.ContentLength > limit {
		return &BadRequest{code: http.StatusRequestEntityTooLarge, msg: fmt.Sprintf("body larger than %d bytes", limit)}
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
			return Invalid("", "unexpected data after the JSON body")
		}
		return nil
	}
	return jsonError(err)
}

func jsonError(err error) *BadRequest {
	var maxErr *http.MaxBytesError
	var synErr *json.SyntaxError
	var typeErr *json.UnmarshalTypeError
	switch {
	case errors.As(err, &maxErr):
		return &BadRequest{code: http.StatusRequestEntityTooLarge, msg: fmt.Sprintf("body larger than %d bytes", maxErr.Limit)}
	case errors.Is(err, io.EOF):
		return Invalid("", "empty body, want a JSON object")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return Invalid("", "truncated JSON body")
	case errors.As(err, &synErr):
		return Invalid("", "malformed JSON at byte %d: %v", synErr.Offset, synErr)
	case errors.As(err, &typeErr):
		return Invalid(typeErr.Field, "field %q: want %s, not JSON %s", typeErr.Field, JSONKind(typeErr.Type), typeErr.Value)
	}
	msg := err.Error()
	if f, ok := strings.CutPrefix(msg, `json: unknown field "`); ok {
		f = strings.TrimSuffix(f, `"`)
		return Invalid(f, "unknown field %q", f)
	}
	var fe *FieldError
	if errors.As(err, &fe) {
		return Invalid(fe.field, "%s", fe.msg)
	}
	return Invalid("", "invalid JSON body: %v", err)
}

// JSONKind names what JSON a Go type takes, for error messages.
func JSONKind(t reflect.Type) string {
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

// FieldError is what custom UnmarshalJSON methods return: DecodeJSON
// reports it as a 400 naming the field.
type FieldError struct{ field, msg string }

// NewFieldError is a FieldError for field.
func NewFieldError(field, msg string) *FieldError { return &FieldError{field: field, msg: msg} }

func (e *FieldError) Error() string { return e.field + ": " + e.msg }

// PathID parses the {id} wildcard; ok is false for anything but a positive
// integer.
func PathID(r *http.Request) (int64, bool) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	return id, err == nil && id > 0
}

// RFC3339 formats t for the admin API, or nil when unset.
func RFC3339(t time.Time) *string {
	if t.IsZero() {
		return nil
	}
	s := t.UTC().Format("2006-01-02T15:04:05.000Z07:00")
	return &s
}

// TokenEqual compares two tokens in constant time.
func TokenEqual(a, b string) bool {
	return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1
}
