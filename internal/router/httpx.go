package router

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Body limits.
const (
	maxV1Body = 1 << 20
	maxV4Body = 1 << 20
)

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
func (r *Router) instrument(endpoint string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		sw := &statusWriter{ResponseWriter: w}
		next.ServeHTTP(sw, req)
		code := sw.code
		if code == 0 {
			code = http.StatusOK
		}
		r.metrics.requests.WithLabelValues(endpoint, strconv.Itoa(code)).Inc()
	})
}

// requireAdmin checks Authorization: Bearer <admin token>: 401 when
// missing, 403 when wrong.
func (r *Router) requireAdmin(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, req *http.Request) {
		auth := req.Header.Get("Authorization")
		tok, ok := strings.CutPrefix(auth, "Bearer ")
		if auth == "" || !ok || tok == "" {
			w.Header().Set("WWW-Authenticate", `Bearer realm="drover"`)
			writeError(w, http.StatusUnauthorized, "missing bearer token", "")
			return
		}
		if !tokenEqual(tok, r.adminToken) {
			writeError(w, http.StatusForbidden, "invalid admin token", "")
			return
		}
		next(w, req)
	}
}

// internalError answers 500, or nothing when the client went away (an
// ordinary event: logged at debug).
func (r *Router) internalError(ctx context.Context, w http.ResponseWriter, what string, err error) {
	if ctx.Err() != nil {
		r.log.Debug(what+": client went away", "err", err)
		w.WriteHeader(499)
		return
	}
	r.log.Error(what, "err", err)
	writeError(w, http.StatusInternalServerError, what+": internal error", "")
}

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

// badRequest is a decoding or validation failure.
type badRequest struct {
	code  int
	msg   string
	field string
}

func invalid(field, format string, args ...any) *badRequest {
	return &badRequest{code: http.StatusBadRequest, msg: fmt.Sprintf(format, args...), field: field}
}

func writeBad(w http.ResponseWriter, e *badRequest) { writeError(w, e.code, e.msg, e.field) }

// decodeJSON reads one JSON value (at most limit bytes) into v; strict
// rejects unknown fields (admin API).
func decodeJSON(w http.ResponseWriter, req *http.Request, v any, limit int64, strict bool) *badRequest {
	dec := json.NewDecoder(http.MaxBytesReader(w, req.Body, limit))
	if strict {
		dec.DisallowUnknownFields()
	}
	err := dec.Decode(v)
	if err == nil {
		if _, err2 := dec.Token(); err2 != io.EOF {
			return invalid("", "unexpected data after the JSON body")
		}
		return nil
	}
	var maxErr *http.MaxBytesError
	var typeErr *json.UnmarshalTypeError
	var fe *fieldError
	switch {
	case errors.As(err, &maxErr):
		return &badRequest{code: http.StatusRequestEntityTooLarge, msg: fmt.Sprintf("body larger than %d bytes", maxErr.Limit)}
	case errors.Is(err, io.EOF):
		return invalid("", "empty body, want a JSON object")
	case errors.As(err, &typeErr):
		return invalid(typeErr.Field, "field %q: cannot use JSON %s as %s", typeErr.Field, typeErr.Value, typeErr.Type)
	case errors.As(err, &fe):
		return invalid(fe.field, "%s", fe.msg)
	}
	if f, ok := strings.CutPrefix(err.Error(), `json: unknown field "`); ok {
		f = strings.TrimSuffix(f, `"`)
		return invalid(f, "unknown field %q", f)
	}
	return invalid("", "invalid JSON body: %v", err)
}

// fieldError is returned by custom UnmarshalJSON methods.
type fieldError struct{ field, msg string }

func (e *fieldError) Error() string { return e.field + ": " + e.msg }

func pathID(req *http.Request) (int64, bool) {
	id, err := strconv.ParseInt(req.PathValue("id"), 10, 64)
	return id, err == nil && id > 0
}

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
