package cache

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode"
)

func TestSanitizeKey(t *testing.T) {
	t.Parallel()
	// The cases of gitlab-runner's cache/cachekey/cachekey_test.go, plus
	// the trailing-blank traversal it lets through.
	tests := []struct {
		raw, want string
		wantErr   bool
	}{
		{raw: ""},
		{raw: "fallback_key", want: "fallback_key"},
		{raw: "some-job/some-ref", want: "some-job/some-ref"},
		{raw: ".../....", want: ".../...."},
		{raw: "fallback_key/", want: "fallback_key"},
		{raw: "fallback_key ", want: "fallback_key"},
		{raw: `fallback_key\`, want: "fallback_key"},
		{raw: `fallback_key/ / \  \`, want: "fallback_key"},
		{raw: `fallback_key / \o`, want: "fallback_key / /o"},
		{raw: "\t foo bar \t\r", want: "\t foo bar"},
		{raw: " foo / bar ", want: " foo / bar"},
		{raw: `\`, wantErr: true},
		{raw: "/", wantErr: true},
		{raw: " ", wantErr: true},
		{raw: ".", wantErr: true},
		{raw: "..", wantErr: true},
		{raw: "//", wantErr: true},
		{raw: "foo/bar/../..", wantErr: true},
		{raw: `foo\bar\..\..`, wantErr: true},
		{raw: "something %2F something", want: "something / something"},
		{raw: "some%2f../job/some/ref/.", want: "job/some/ref"},
		{raw: "%2E%2E", wantErr: true},
		{raw: "%2E%2e%2E", want: "..."},
		{raw: "%5C", want: "%5C"},
		{raw: "foo/blipp/../bar", want: "foo/bar"},
		{raw: "/foo/bar", want: "foo/bar"},
		{raw: "../foo/bar", want: "foo/bar"},
		{raw: "foo/bar/../../../.././blerp", want: "blerp"},
		{raw: `job\name/git\ref`, want: "job/name/git/ref"},
		{raw: `..\foo\bar`, want: "foo/bar"},
		{raw: "foo/ /bar", want: "foo/ /bar"},
		{raw: "foo/ / /", want: "foo"},
		// GitLab Runner returns "foo/.." here; drover resolves it.
		{raw: "foo/.. ", wantErr: true},
		{raw: "a/b/.. ", want: "a"},
	}
	for _, tt := range tests {
		got, warning, err := SanitizeKey(tt.raw)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("SanitizeKey(%q) = %q, %v; want %q, error %v", tt.raw, got, err, tt.want, tt.wantErr)
		}
		if wantWarn := err == nil && got != tt.raw; (warning != "") != wantWarn {
			t.Errorf("SanitizeKey(%q) warning = %q, want one: %v", tt.raw, warning, wantWarn)
		}
		if err != nil && !strings.Contains(err.Error(), "could not be sanitized") {
			t.Errorf("SanitizeKey(%q) error = %v, want it to say could not be sanitized", tt.raw, err)
		}
	}
}

func FuzzSanitizeKey(f *testing.F) {
	for _, s := range []string{"a/../b", `a\..\b`, "%2e%2e/x", "foo/.. ", " / ", "a//b/ "} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		key, _, err := SanitizeKey(raw)
		if err != nil || key == "" {
			return
		}
		for seg := range strings.SplitSeq(key, "/") {
			if seg == "" || seg == "." || seg == ".." {
				t.Fatalf("SanitizeKey(%q) = %q, with segment %q", raw, key, seg)
			}
		}
		if strings.Contains(key, `\`) || strings.TrimRightFunc(key, unicode.IsSpace) != key {
			t.Fatalf("SanitizeKey(%q) = %q: backslash or trailing blank left", raw, key)
		}
		if again, _, err := SanitizeKey(key); err != nil || again != key {
			t.Fatalf("SanitizeKey(SanitizeKey(%q)) = %q, %v; want %q (idempotent)", raw, again, err, key)
		}
		if name, err := ObjectName(Config{Shared: true}, "", 1, key); err != nil || !strings.HasPrefix(name, "project/1/") {
			t.Fatalf("ObjectName of sanitized %q = %q, %v", key, name, err)
		}
	})
}

func TestShortToken(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"glrt-abcdefghijkl":    "abcdefghi",
		"glrt-t2_abcdefghijkl": "abcdefghi",
		"t3_abcdefghijkl":      "abcdefghi",
		"glrtr-abcdefghijkl":   "abcdefghi",
		"glcbt-abcdefghijkl":   "abcdefghi",
		"GR1348941abcdefghijk": "abcdefghi",
		"0123456789abcdef":     "012345678",
		"short":                "short",
	} {
		if got := ShortToken(in); got != want {
			t.Errorf("ShortToken(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestObjectName(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cfg     Config
		key     string
		want    string
		wantErr bool
	}{
		{Config{}, "key", "runner/abcdefghi/project/42/key", false},
		{Config{Path: "prefix"}, "a/b", "prefix/runner/abcdefghi/project/42/a/b", false},
		{Config{Path: "/prefix/", Shared: true}, "key", "/prefix/project/42/key", false},
		{Config{Shared: true}, "key", "project/42/key", false},
		{Config{}, "../key", "", true},
		{Config{}, "..", "", true},
		{Config{}, "", "", true},
	} {
		got, err := ObjectName(tc.cfg, "abcdefghi", 42, tc.key)
		if got != tc.want || (err != nil) != tc.wantErr {
			t.Errorf("ObjectName(%+v, %q) = %q, %v; want %q, error %v", tc.cfg, tc.key, got, err, tc.want, tc.wantErr)
		}
	}
	if _, err := ObjectName(Config{}, "", 1, "k"); err == nil {
		t.Error("ObjectName without a runner token and Shared = false succeeded")
	}
}

func TestLocalPath(t *testing.T) {
	t.Parallel()
	got, err := LocalPath("/cache", "group/project", "main/deps")
	if want := "/cache/group/project/main/deps/cache.zip"; got != want || err != nil {
		t.Errorf("LocalPath = %q, %v; want %q", got, err, want)
	}
	for _, bad := range [][2]string{{"group/project", "../../x"}, {"../x", "k"}, {"p", ""}} {
		if got, err := LocalPath("/cache", bad[0], bad[1]); err == nil {
			t.Errorf("LocalPath(%q, %q) = %q, want an error", bad[0], bad[1], got)
		}
	}
}

func TestDirStore(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	c := New(nil, Config{MaxUploadedArchiveSize: 10}, "tok", DirStore{Dir: dir})
	name, _, err := c.Name(3, "k")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Restore(t.Context(), name, io.Discard); !errors.Is(err, ErrNotFound) {
		t.Errorf("Restore(missing) = %v, want ErrNotFound", err)
	}
	if err := c.Save(t.Context(), name, strings.NewReader("0123456789"), 10); err != nil {
		t.Fatalf("Save = %v", err)
	}
	if err := c.Save(t.Context(), name, strings.NewReader("0123456789x"), 11); !errors.Is(err, ErrTooLarge) {
		t.Errorf("Save(11 bytes, cap 10) = %v, want ErrTooLarge", err)
	}
	// A short reader fails the upload and leaves the old archive.
	if err := c.Save(t.Context(), name, strings.NewReader("abc"), 5); err == nil {
		t.Error("Save of a reader shorter than its size succeeded")
	}
	var got bytes.Buffer
	if _, err := c.Restore(t.Context(), name, &got); err != nil || got.String() != "0123456789" {
		t.Errorf("Restore = %q, %v; want the first archive", got.String(), err)
	}
	var files []string
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(dir, p)
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	})
	if want := path.Join("runner/tok/project/3/k"); len(files) != 1 || files[0] != want {
		t.Errorf("store files = %q, want only %q (no temporaries left)", files, want)
	}
	if _, err := (DirStore{Dir: dir}).Download(t.Context(), "../x", io.Discard); err == nil {
		t.Error("DirStore.Download(../x) succeeded")
	}
}

// TestTransferRetries drives the retry policy against a server that fails
// on purpose: 503s, and a download cut off mid-body that resumes.
func TestTransferRetries(t *testing.T) {
	t.Parallel()
	data := bytes.Repeat([]byte("0123456789"), 10_000)
	var gets, puts atomic.Int32
	var stored []byte
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case http.MethodPut:
			if puts.Add(1) == 1 {
				w.WriteHeader(http.StatusServiceUnavailable)
				return
			}
			stored, _ = io.ReadAll(r.Body)
		case http.MethodGet:
			switch gets.Add(1) {
			case 1:
				w.WriteHeader(http.StatusInternalServerError)
			case 2: // announce everything, send half, cut the connection
				w.Header().Set("ETag", `"v1"`)
				w.Header().Set("Content-Length", fmt.Sprint(len(data)))
				_, _ = w.Write(data[:len(data)/2])
				w.(http.Flusher).Flush()
				conn, _, _ := w.(http.Hijacker).Hijack()
				_ = conn.Close()
			default:
				if r.Header.Get("If-Match") != `"v1"` || r.Header.Get("Range") != fmt.Sprintf("bytes=%d-", len(data)/2) {
					w.WriteHeader(http.StatusPreconditionFailed)
					return
				}
				w.WriteHeader(http.StatusPartialContent)
				_, _ = w.Write(data[len(data)/2:])
			}
		}
	}))
	defer srv.Close()
	tr := &Transfer{Attempts: 3, Backoff: time.Millisecond}
	if err := tr.Upload(t.Context(), srv.URL+"/o?X-Amz-Signature=secret", nil, bytes.NewReader(data), int64(len(data))); err != nil {
		t.Fatalf("Upload = %v", err)
	}
	if puts.Load() != 2 || !bytes.Equal(stored, data) {
		t.Errorf("Upload made %d PUTs and stored %d bytes, want 2 and %d", puts.Load(), len(stored), len(data))
	}
	var got bytes.Buffer
	n, err := tr.Download(t.Context(), srv.URL+"/o", &got)
	if err != nil || n != int64(len(data)) || !bytes.Equal(got.Bytes(), data) {
		t.Errorf("Download = %d bytes, %v; want %d intact bytes", n, err, len(data))
	}
	if gets.Load() != 3 {
		t.Errorf("Download made %d GETs, want 3 (500, cut, resumed)", gets.Load())
	}

	// Not retried: a 400 ends the call at once, without the signature in
	// the error.
	var bad atomic.Int32
	srv400 := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		bad.Add(1)
		w.WriteHeader(http.StatusBadRequest)
		_, _ = io.WriteString(w, "<Error><Code>InvalidRequest</Code><Message>nope</Message></Error>")
	}))
	defer srv400.Close()
	_, err = tr.Download(t.Context(), srv400.URL+"/o?X-Amz-Signature=secret", io.Discard)
	if err == nil || bad.Load() != 1 || !strings.Contains(err.Error(), "InvalidRequest: nope") || strings.Contains(err.Error(), "secret") {
		t.Errorf("Download from a 400 = %v after %d requests, want one request and the S3 code without the signature", err, bad.Load())
	}
}

// TestTransferRequestTimeout: RequestTimeout (CACHE_REQUEST_TIMEOUT)
// bounds each request, its body included: a request that stalls is cut
// and counts as a network error, retried (a download resumes where the
// cut one stopped); when the attempts run out the error says the request
// timeout was exceeded.
func TestTransferRequestTimeout(t *testing.T) {
	t.Parallel()
	data := bytes.Repeat([]byte("abcdefghij"), 1000)
	var gets, puts, gone atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		stall := func() {
			<-r.Context().Done() // until the client gives up
			gone.Add(1)
		}
		switch r.Method {
		case http.MethodGet:
			if gets.Add(1) == 1 { // half the body, then nothing
				w.Header().Set("ETag", `"v1"`)
				w.Header().Set("Content-Length", fmt.Sprint(len(data)))
				_, _ = w.Write(data[:len(data)/2])
				w.(http.Flusher).Flush()
				stall()
				return
			}
			if r.Header.Get("Range") != fmt.Sprintf("bytes=%d-", len(data)/2) {
				w.WriteHeader(http.StatusPreconditionFailed)
				return
			}
			w.WriteHeader(http.StatusPartialContent)
			_, _ = w.Write(data[len(data)/2:])
		case http.MethodPut:
			puts.Add(1)
			_, _ = io.Copy(io.Discard, r.Body)
			stall() // never answers
		}
	}))
	defer srv.Close()
	tr := &Transfer{Attempts: 2, Backoff: time.Millisecond, RequestTimeout: 200 * time.Millisecond}
	var got bytes.Buffer
	if n, err := tr.Download(t.Context(), srv.URL+"/o", &got); err != nil || n != int64(len(data)) || !bytes.Equal(got.Bytes(), data) {
		t.Errorf("Download = %d bytes, %v; want %d intact bytes after the stalled request was cut", n, err, len(data))
	}
	err := tr.Upload(t.Context(), srv.URL+"/o", nil, bytes.NewReader(data), int64(len(data)))
	if err == nil || !strings.Contains(err.Error(), "request timeout of 200ms exceeded") {
		t.Errorf("Upload to a server that never answers = %v, want the request timeout", err)
	}
	if gets.Load() != 2 || puts.Load() != 2 {
		t.Errorf("%d GETs and %d PUTs, want 2 of each (a stalled one retried)", gets.Load(), puts.Load())
	}
	srv.Close() // waits for the handlers: every stalled request was given up by the client
	if gone.Load() != 3 {
		t.Errorf("%d stalled requests given up by the client, want 3", gone.Load())
	}
}
