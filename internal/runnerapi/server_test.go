package runnerapi

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestVersions(t *testing.T) {
	k := ManagerKey{RunnerID: 1, SystemID: "s_a"}
	other := ManagerKey{RunnerID: 1, SystemID: "s_b"}
	for _, tc := range []struct {
		name   string
		prefix string
		run    func(v *Versions) (got, want bool)
	}{
		{"empty echo is never current", "", func(v *Versions) (bool, bool) { v.Get(k); return v.Current(k, ""), false }},
		{"echo of the current version", "", func(v *Versions) (bool, bool) { return v.Current(k, v.Get(k)), true }},
		{"unknown manager, no prefix", "", func(v *Versions) (bool, bool) { return v.Current(k, "abc"), false }},
		{"another manager's version", "", func(v *Versions) (bool, bool) { return v.Current(k, v.Get(other)), false }},
		{"after a bump the old version is stale", "", func(v *Versions) (bool, bool) {
			old := v.Get(k)
			if v.Bump(k) == old {
				t.Error("Bump returned the old version")
			}
			return v.Current(k, old), false
		}},
		{"bump is current", "", func(v *Versions) (bool, bool) { return v.Current(k, v.Bump(k)), true }},
		{"a version of the prefix is adopted", "c1.", func(v *Versions) (bool, bool) {
			ok := v.Current(k, "c1.zzz")
			if v.Get(k) != "c1.zzz" {
				t.Errorf("Get after adopt = %q", v.Get(k))
			}
			return ok, true
		}},
		{"a version of another prefix is not", "c1.", func(v *Versions) (bool, bool) { return v.Current(k, "c2.zzz"), false }},
		{"the bare prefix is not a version", "c1.", func(v *Versions) (bool, bool) { return v.Current(k, "c1."), false }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := NewVersions(tc.prefix)
			if got, want := tc.run(v); got != want {
				t.Errorf("Current = %v, want %v", got, want)
			}
			if s := v.Get(k); !strings.HasPrefix(s, tc.prefix) {
				t.Errorf("version %q lacks prefix %q", s, tc.prefix)
			}
		})
	}
}

func TestOrDefault(t *testing.T) {
	for _, tc := range []struct{ v, def, want time.Duration }{
		{0, time.Second, time.Second},
		{-1, time.Second, time.Second},
		{2 * time.Second, time.Second, 2 * time.Second},
	} {
		if got := OrDefault(tc.v, tc.def); got != tc.want {
			t.Errorf("OrDefault(%v, %v) = %v, want %v", tc.v, tc.def, got, tc.want)
		}
	}
}

func TestReadOrCreateToken(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "token")
	tok, err := ReadOrCreateToken(path, "p-")
	if err != nil || !strings.HasPrefix(tok, "p-") || len(tok) < 20 {
		t.Fatalf("ReadOrCreateToken = %q, %v", tok, err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("token file: %v, %v; want mode 0600", fi, err)
	}
	again, err := ReadOrCreateToken(path, "p-")
	if err != nil || again != tok {
		t.Errorf("second read = %q, %v; want %q", again, err, tok)
	}
	if err := os.WriteFile(path, []byte("  \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if fresh, err := ReadOrCreateToken(path, "p-"); err != nil || fresh == tok || !strings.HasPrefix(fresh, "p-") {
		t.Errorf("empty file: got %q, %v; want a new token", fresh, err)
	}
	if _, err := ReadOrCreateToken(filepath.Join(dir, "missing", "token"), "p-"); err == nil {
		t.Error("a token in a missing directory: no error")
	}
}

func TestRunnerSpecValidate(t *testing.T) {
	for _, tc := range []struct {
		name  string
		spec  RunnerSpec
		field string
		tags  []string
	}{
		{"tags trimmed and de-duplicated", RunnerSpec{Tags: []string{" a", "b", "a "}}, "", []string{"a", "b"}},
		{"empty tag", RunnerSpec{Tags: []string{" "}}, "tag_list", nil},
		{"long tag", RunnerSpec{Tags: []string{strings.Repeat("t", 256)}}, "tag_list", nil},
		{"control character in the description", RunnerSpec{Description: "a\x00"}, "description", nil},
		{"negative maximum_timeout", RunnerSpec{MaximumTimeout: -1}, "maximum_timeout", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.spec
			e := s.Validate()
			switch {
			case tc.field == "" && e != nil:
				t.Fatalf("Validate = %v", e)
			case tc.field != "" && (e == nil || e.Field() != tc.field):
				t.Fatalf("Validate = %v, want an error on %s", e, tc.field)
			}
			if tc.field == "" && strings.Join(s.Tags, ",") != strings.Join(tc.tags, ",") {
				t.Errorf("tags = %q, want %q", s.Tags, tc.tags)
			}
		})
	}
}
