package cache_test

import (
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/drover-ci/drover/internal/cache"
)

func TestFilesKey(t *testing.T) {
	dir := t.TempDir()
	write := func(name, data string) {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.sum", "a v1\n")
	write("web/package-lock.json", "{}\n")
	var opened []string
	open := func(name string) (io.ReadCloser, error) {
		opened = append(opened, name)
		return os.Open(filepath.Join(dir, filepath.FromSlash(name)))
	}
	key := func(prefix string, files ...string) string {
		t.Helper()
		k, err := cache.FilesKey(prefix, files, open)
		if err != nil {
			t.Fatalf("FilesKey(%q, %q) = %v", prefix, files, err)
		}
		return k
	}

	k1 := key("go", "go.sum")
	if !strings.HasPrefix(k1, "go-") || len(k1) != len("go-")+40 {
		t.Errorf("key = %q, want go-<40 hex digits>", k1)
	}
	if k := key("go", "./go.sum"); k != k1 {
		t.Errorf("./go.sum gave %q, go.sum %q: the same file must give the same key", k, k1)
	}
	if k := key("", "go.sum"); k != strings.TrimPrefix(k1, "go-") {
		t.Errorf("no prefix: %q, want the digest alone", k)
	}
	if k := key("go", "go.sum", "missing.lock"); k != k1 {
		t.Errorf("a missing file changed the key: %q vs %q", k, k1)
	}
	both := key("go", "go.sum", "web/package-lock.json")
	if both == k1 {
		t.Error("a second file did not change the key")
	}
	if k := key("go", "web/package-lock.json", "go.sum", "go.sum"); k != both {
		t.Errorf("order or repetition of the files changed the key: %q vs %q", k, both)
	}
	write("go.sum", "a v2\n")
	if k := key("go", "go.sum"); k == k1 {
		t.Error("changed content kept the key")
	}
	if k := key("go", "none.lock"); k != "go-default" {
		t.Errorf("no file exists: key = %q, want go-default", k)
	}
	if k := key("", "none.lock"); k != "default" {
		t.Errorf("no file, no prefix: key = %q, want default", k)
	}

	opened = nil
	for _, bad := range []string{"../outside", "/etc/passwd", "a/../../b", "", "."} {
		if _, err := cache.FilesKey("p", []string{bad}, open); err == nil {
			t.Errorf("FilesKey(%q) = nil error, want a refusal", bad)
		}
	}
	if len(opened) != 0 {
		t.Errorf("refused names were opened: %q", opened)
	}
	failing := func(string) (io.ReadCloser, error) { return nil, fs.ErrPermission }
	if _, err := cache.FilesKey("p", []string{"x"}, failing); err == nil || !strings.Contains(err.Error(), `"x"`) {
		t.Errorf("unreadable file: err = %v, want one naming it", err)
	}
}
