package httpserver

import (
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path"
	"strings"
)

// ReadTokenFile reads a bearer token from path: the file's content,
// surrounding space trimmed. A missing or empty file is an error: a token
// flag given must protect something.
func ReadTokenFile(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("token file: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", fmt.Errorf("token file %s: empty", path)
	}
	if strings.ContainsAny(tok, "\r\n") {
		return "", errors.New("token file " + path + ": more than one line")
	}
	return tok, nil
}

// MetricsPath is the path of a daemon's Prometheus metrics.
const MetricsPath = "/metrics"

// RequireMetricsToken passes requests to h, except that one for
// MetricsPath must carry "Authorization: Bearer token" or is answered 401.
// Every other path (the health endpoints among them) is h's to answer.
// With an empty token it is h.
func RequireMetricsToken(h http.Handler, token string) http.Handler {
	if token == "" {
		return h
	}
	want := []byte("Bearer " + token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The cleaned path: whatever h would route (or redirect) to
		// /metrics is guarded, //metrics and /./metrics included.
		if path.Clean("/"+r.URL.Path) == MetricsPath &&
			subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="metrics"`)
			http.Error(w, "401 Unauthorized: /metrics needs the metrics bearer token", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
}
