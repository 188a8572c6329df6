package runnerapi

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

type target struct {
	Name  string `json:"name"`
	Count int    `json:"count"`
	Tags  tags   `json:"tags"`
}

// tags refuses anything but an array of strings, as the daemons' custom
// decoders do.
type tags []string

func (t *tags) UnmarshalJSON(b []byte) error {
	var s []string
	if err := json.Unmarshal(b, &s); err != nil {
		return NewFieldError("tags", "want an array of strings")
	}
	*t = s
	return nil
}

func TestDecodeJSON(t *testing.T) {
	for _, tc := range []struct {
		name   string
		body   string
		strict bool
		code   int // 0: decoded
		field  string
		msg    string
	}{
		{name: "ok", body: `{"name":"a","count":2}`},
		{name: "unknown field, lenient", body: `{"name":"a","extra":1}`},
		{name: "unknown field, strict", body: `{"name":"a","extra":1}`, strict: true, code: 400, field: "extra", msg: "unknown field"},
		{name: "wrong type", body: `{"count":"x"}`, code: 400, field: "count", msg: "want an integer"},
		{name: "field error", body: `{"tags":7}`, code: 400, field: "tags", msg: "array of strings"},
		{name: "empty", body: ``, code: 400, msg: "empty body"},
		{name: "truncated", body: `{"name":`, code: 400, msg: "truncated"},
		{name: "malformed", body: `{"name" 1}`, code: 400, msg: "malformed JSON"},
		{name: "trailing data", body: `{"name":"a"} {}`, code: 400, msg: "after the JSON body"},
		{name: "too large", body: `{"name":"` + strings.Repeat("x", 100) + `"}`, code: 413, msg: "larger than 64 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := httptest.NewRecorder()
			r := httptest.NewRequest("POST", "/", strings.NewReader(tc.body))
			r.ContentLength = -1 // the limit is found while reading, too
			var v target
			e := DecodeJSON(w, r, &v, 64, tc.strict)
			if tc.code == 0 {
				if e != nil {
					t.Fatalf("DecodeJSON = %v, want nil", e)
				}
				return
			}
			if e == nil {
				t.Fatalf("DecodeJSON = nil, want %d", tc.code)
			}
			if e.Code() != tc.code || e.Field() != tc.field || !strings.Contains(e.Error(), tc.msg) {
				t.Errorf("DecodeJSON = %d field %q %q, want %d field %q containing %q", e.Code(), e.Field(), e.Error(), tc.code, tc.field, tc.msg)
			}
			WriteBad(w, e)
			var ae APIError
			if err := json.Unmarshal(w.Body.Bytes(), &ae); err != nil || w.Code != tc.code || ae.Field != tc.field || ae.Error != e.Error() {
				t.Errorf("answer = %d %s (%v), want %d with the message and field", w.Code, w.Body, err, tc.code)
			}
		})
	}
}

func TestRequireAdminAndInstrument(t *testing.T) {
	reqs := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "requests"}, []string{"endpoint", "code"})
	ok := func(w http.ResponseWriter, r *http.Request) {
		WriteJSON(w, http.StatusCreated, map[string]int{"id": 1})
	}
	h := Instrument(reqs, "POST /x", RequireAdmin("s3cret-token", ok))
	for _, tc := range []struct {
		name, auth string
		code       int
	}{
		{"no header", "", 401},
		{"not bearer", "Basic abc", 401},
		{"wrong token", "Bearer nope", 403},
		{"right token", "Bearer s3cret-token", 201},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := httptest.NewRecorder()
			r := httptest.NewRequest("POST", "/x", nil)
			if tc.auth != "" {
				r.Header.Set("Authorization", tc.auth)
			}
			h.ServeHTTP(w, r)
			if w.Code != tc.code {
				t.Errorf("code = %d, want %d", w.Code, tc.code)
			}
			if tc.code == 401 && w.Header().Get("WWW-Authenticate") == "" {
				t.Error("401 without WWW-Authenticate")
			}
		})
	}
	// A client gone before the answer counts as 499.
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	gone := Instrument(reqs, "POST /gone", http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	gone.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("POST", "/gone", nil).WithContext(ctx))
	for _, c := range []struct {
		endpoint, code string
		want           float64
	}{{"POST /x", "401", 2}, {"POST /x", "403", 1}, {"POST /x", "201", 1}, {"POST /gone", "499", 1}} {
		if got := testutil.ToFloat64(reqs.WithLabelValues(c.endpoint, c.code)); got != c.want {
			t.Errorf("requests{%s,%s} = %v, want %v", c.endpoint, c.code, got, c.want)
		}
	}
}

// FuzzDecodeJSON: any body is decoded or refused with a 4xx naming what
// is wrong; nothing panics.
func FuzzDecodeJSON(f *testing.F) {
	for _, s := range []string{`{"name":"a"}`, `{"tags":[1]}`, `[]`, `{"count":1e99}`, "\x00", `{"a":{"b":[`} {
		f.Add(s, false)
		f.Add(s, true)
	}
	f.Fuzz(func(t *testing.T, body string, strict bool) {
		w := httptest.NewRecorder()
		r := httptest.NewRequest("POST", "/", strings.NewReader(body))
		var v target
		if e := DecodeJSON(w, r, &v, 1<<10, strict); e != nil && (e.Code() < 400 || e.Code() > 499 || e.Error() == "") {
			t.Fatalf("DecodeJSON(%q) = %d %q", body, e.Code(), e.Error())
		}
	})
}

// TestInternalError: 500 naming what failed, unless the client went away
// (499, no body).
func TestInternalError(t *testing.T) {
	gone, cancel := context.WithCancel(t.Context())
	cancel()
	for _, tc := range []struct {
		name string
		ctx  context.Context
		code int
		body string
	}{
		{"server fault", t.Context(), 500, "list runners: internal error"},
		{"client gone", gone, StatusClientClosed, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := httptest.NewRecorder()
			InternalError(tc.ctx, w, slog.New(slog.DiscardHandler), "list runners", errors.New("disk on fire"))
			if w.Code != tc.code || !strings.Contains(w.Body.String(), tc.body) || (tc.body == "" && w.Body.Len() != 0) {
				t.Errorf("answer = %d %q, want %d %q", w.Code, w.Body, tc.code, tc.body)
			}
		})
	}
}
