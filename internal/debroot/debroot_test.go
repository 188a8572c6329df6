package debroot

import "testing"

func TestUnescapeMountinfo(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"/a/b", "/a/b"},
		{`/a\040b`, "/a b"},
		{`/tab\011x`, "/tab\tx"},
		{`/back\134slash`, `/back\slash`},
		{`/not\99`, `/not\99`},
	} {
		if got := unescapeMountinfo(tc.in); got != tc.want {
			t.Errorf("unescapeMountinfo(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestKeyChangesWithEveryPart(t *testing.T) {
	base := Key("bookworm", "http://deb.debian.org/debian", "v1", "a", "b")
	if len(base) != 8 {
		t.Fatalf("Key = %q, want 8 hex digits", base)
	}
	for _, other := range [][]string{
		{"trixie", "http://deb.debian.org/debian", "v1", "a", "b"},
		{"bookworm", "http://deb.debian.org/debian", "v2", "a", "b"},
		{"bookworm", "http://deb.debian.org/debian", "v1", "a", "c"},
	} {
		if Key(other...) == base {
			t.Errorf("Key(%q) = Key of the base recipe", other)
		}
	}
}
