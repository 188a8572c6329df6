package archive

import (
	"archive/zip"
	"bytes"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"
)

// A file whose name is as long as the file system allows (255 bytes) is
// extracted: the temporary name it is written under first stays within
// that limit too.
func TestExtractLongName(t *testing.T) {
	name := strings.Repeat("x", 255)
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	w, err := zw.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write([]byte("long")); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	if got := len(path.Base(tempName("dir/" + name))); got > 255 {
		t.Fatalf("tempName of a 255-byte name is %d bytes", got)
	}
	dst := t.TempDir()
	if _, err := Extract(t.Context(), bytes.NewReader(buf.Bytes()), int64(buf.Len()), dst, ExtractOptions{}); err != nil {
		t.Fatalf("extract: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(dst, name)); err != nil || string(b) != "long" {
		t.Errorf("extracted file = %q, %v", b, err)
	}
}
