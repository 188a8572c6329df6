package httpserver

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRequireMetricsToken: /metrics, however its path is spelt, answers
// 401 without the bearer token and serves it with; other paths (health)
// stay open.
func TestRequireMetricsToken(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "metrics") })
	mux.HandleFunc("GET /health/live", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") })
	addr := serve(t, RequireMetricsToken(mux, "s3cret"), Options{})
	get := func(path, auth string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest("GET", "http://"+addr+path, nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		// Redirects are not followed: a redirect to /metrics is the
		// client's next request, guarded in turn.
		c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, tc := range []struct {
		path, auth string
		want       int
	}{
		{"/metrics", "", http.StatusUnauthorized},
		{"/metrics", "Bearer wrong", http.StatusUnauthorized},
		{"/metrics", "s3cret", http.StatusUnauthorized},
		{"/metrics", "Bearer s3cret", http.StatusOK},
		{"/metrics?x=1", "", http.StatusUnauthorized},
		{"//metrics", "", http.StatusUnauthorized},
		{"/./metrics", "", http.StatusUnauthorized},
		{"/%6detrics", "", http.StatusUnauthorized},
		{"/health/live", "", http.StatusOK},
	} {
		if code, body := get(tc.path, tc.auth); code != tc.want || code == http.StatusOK && body == "" {
			t.Errorf("GET %s (Authorization %q) = %d %q, want %d", tc.path, tc.auth, code, body, tc.want)
		}
	}
	if code, _ := get("/metrics", ""); code == http.StatusUnauthorized {
		// The 401 says how to authenticate.
		req, _ := http.NewRequest("GET", "http://"+addr+"/metrics", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if h := resp.Header.Get("WWW-Authenticate"); !strings.HasPrefix(h, "Bearer") {
			t.Errorf("WWW-Authenticate = %q, want Bearer", h)
		}
	}
}

// TestReadTokenFile: the token is the file's content trimmed; an empty or
// missing file is an error.
func TestReadTokenFile(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	if tok, err := ReadTokenFile(write("ok", "  tok\n")); err != nil || tok != "tok" {
		t.Errorf("ReadTokenFile = %q, %v; want tok", tok, err)
	}
	for _, p := range []string{write("empty", " \n"), write("two", "a\nb\n"), filepath.Join(dir, "missing")} {
		if tok, err := ReadTokenFile(p); err == nil {
			t.Errorf("ReadTokenFile(%s) = %q, want an error", p, tok)
		}
	}
}
