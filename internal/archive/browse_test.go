package archive

import (
	"archive/zip"
	"bytes"
	"errors"
	"fmt"
	"io"
	"testing"
)

func TestListAndOpenEntry(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	if _, err := zw.Create("dir/"); err != nil {
		t.Fatal(err)
	}
	for i := range 25 {
		w, err := zw.Create(fmt.Sprintf("dir/f%02d.txt", i))
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(w, "file %d %s", i, bytes.Repeat([]byte("x"), i*100))
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	r := bytes.NewReader(buf.Bytes())
	size := int64(buf.Len())

	page, total, err := List(r, size, 10, 5)
	if err != nil || total != 26 || len(page) != 5 || page[0].Name != "dir/f09.txt" || page[4].Name != "dir/f13.txt" {
		t.Fatalf("List(10, 5) = %v, %d, %v; want dir/f09.txt..f13.txt of 26", page, total, err)
	}
	if page[0].Size != int64(len("file 9 ")+900) {
		t.Errorf("size of %s = %d", page[0].Name, page[0].Size)
	}
	if last, _, _ := List(r, size, 24, 5); len(last) != 2 {
		t.Errorf("List(24, 5) = %d entries, want 2", len(last))
	}

	rc, e, err := OpenEntry(r, size, "dir/f03.txt")
	if err != nil {
		t.Fatalf("OpenEntry = %v", err)
	}
	b, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || string(b) != "file 3 "+string(bytes.Repeat([]byte("x"), 300)) || e.Size != int64(len(b)) {
		t.Errorf("OpenEntry read %q, %v (entry %+v)", b, err, e)
	}
	for _, name := range []string{"dir/", "nope", "../dir/f03.txt"} {
		if _, _, err := OpenEntry(r, size, name); !errors.Is(err, ErrNoEntry) {
			t.Errorf("OpenEntry(%q) = %v, want ErrNoEntry", name, err)
		}
	}
	if _, _, err := List(bytes.NewReader([]byte("not a zip")), 9, 0, 5); !errors.Is(err, ErrCorrupt) {
		t.Errorf("List of a non-zip = %v, want ErrCorrupt", err)
	}
}
