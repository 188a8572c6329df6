package trace

import (
	"io"
	"strings"
	"testing"
)

// A resumed log: the coordinator has the first 10 bytes, the resumed job
// regenerates output from byte 6 (its checkpoint), so 4 bytes are skipped
// and what is stored continues the log exactly.
func TestBaseAndSkip(t *testing.T) {
	whole := "line-1\nline-2\nline-3\nsecret\n"
	const base, checkpoint = 10, 6
	b, err := New(Options{Masked: []string{"secret"}, Base: base, Skip: base - checkpoint})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if got, ok := b.Settled(); got != base || ok {
		t.Fatalf("Settled before the skip = %d, %v; want %d, false", got, ok, base)
	}
	if _, err := b.Write([]byte(whole[checkpoint:])); err != nil {
		t.Fatal(err)
	}
	b.Finish()
	want := strings.Replace(whole, "secret", "[MASKED]", 1)
	if got := b.Size(); got != int64(len(want)) {
		t.Fatalf("Size = %d, want %d", got, len(want))
	}
	p := make([]byte, len(want)-base)
	if _, err := b.ReadAt(p, base); err != nil && err != io.EOF {
		t.Fatal(err)
	}
	if string(p) != want[base:] {
		t.Fatalf("stored %q, want %q", p, want[base:])
	}
	if _, err := b.ReadAt(make([]byte, 1), base-1); err == nil {
		t.Fatal("ReadAt before the base succeeded")
	}
	if b.Base() != base {
		t.Fatalf("Base = %d, want %d", b.Base(), base)
	}
	if b.Checksum() != "" {
		t.Fatalf("Checksum of a partial log = %q, want empty", b.Checksum())
	}
	if got, ok := b.Settled(); !ok || got != int64(len(want)) {
		t.Fatalf("Settled = %d, %v", got, ok)
	}
}

func TestSettledHoldsBackMaskPrefix(t *testing.T) {
	b, err := New(Options{Masked: []string{"topsecret"}})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	_, _ = b.Write([]byte("hello top"))
	if _, ok := b.Settled(); ok {
		t.Fatal("a held back prefix of a secret must not be settled")
	}
	_, _ = b.Write([]byte("ic\n"))
	if n, ok := b.Settled(); !ok || n != int64(len("hello topic\n")) {
		t.Fatalf("Settled = %d, %v", n, ok)
	}
}
