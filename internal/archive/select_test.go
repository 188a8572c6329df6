package archive

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// makeTree creates the paths under dir: a trailing slash makes a
// directory, "name -> target" a symlink, anything else a file whose
// content is its name.
func makeTree(t testing.TB, dir string, paths ...string) {
	t.Helper()
	for _, p := range paths {
		full := filepath.Join(dir, filepath.FromSlash(strings.TrimSuffix(p, "/")))
		if name, target, ok := strings.Cut(p, " -> "); ok {
			full = filepath.Join(dir, filepath.FromSlash(name))
			if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(target, full); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if strings.HasSuffix(p, "/") {
			if err := os.MkdirAll(full, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(p), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func names(sel *Selection) []string {
	var out []string
	for _, e := range sel.Entries {
		out = append(out, e.Name)
	}
	return out
}

func TestSelect(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	makeTree(t, dir,
		"app.js", "lib/util.js", "lib/util.ts", "lib/deep/x.js",
		"node_modules/a/index.js", "node_modules/a/README", "node_modules/.cache/big",
		"a/b", "a/x/b", "a/x/y/b/c", "a/bb",
		"build/out.log", "build/out.bin", "empty/",
		"link -> lib", "outside -> ../../etc",
	)
	tests := []struct {
		name           string
		paths, exclude []string
		extra          []string
		want           []string
		found          []int
		excluded       []int
	}{
		{
			name:  "**/*.js matches at every depth, not under a symlink",
			paths: []string{"**/*.js"},
			want:  []string{"app.js", "lib/deep/x.js", "lib/util.js", "node_modules/a/index.js"},
			found: []int{4},
		},
		{
			name:  "a directory with a trailing slash takes its whole tree",
			paths: []string{"node_modules/"},
			want:  []string{"node_modules", "node_modules/.cache", "node_modules/.cache/big", "node_modules/a", "node_modules/a/README", "node_modules/a/index.js"},
			found: []int{6},
		},
		{
			name:  "a/**/b matches b at any depth below a, zero included",
			paths: []string{"a/**/b"},
			want:  []string{"a/b", "a/x/b", "a/x/y/b", "a/x/y/b/c"},
			found: []int{4},
		},
		{
			name:     "exclude drops matched paths; dir/** takes the directory too",
			paths:    []string{"node_modules"},
			exclude:  []string{"node_modules/.cache/**", "**/README"},
			want:     []string{"node_modules", "node_modules/a", "node_modules/a/index.js"},
			found:    []int{6},
			excluded: []int{2, 1},
		},
		{
			name:     "exclude of a directory name alone keeps what is in it",
			paths:    []string{"node_modules"},
			exclude:  []string{"node_modules/.cache"},
			want:     []string{"node_modules", "node_modules/.cache/big", "node_modules/a", "node_modules/a/README", "node_modules/a/index.js"},
			found:    []int{6},
			excluded: []int{1},
		},
		{
			name:  "a symlink is selected as itself and not followed",
			paths: []string{"link", "outside"},
			want:  []string{"link", "outside"},
			found: []int{1, 1},
		},
		{
			name:  "alternatives and character classes",
			paths: []string{"build/*.{log,txt}", "lib/util.[jt]s"},
			want:  []string{"build/out.log", "lib/util.js", "lib/util.ts"},
			found: []int{1, 2},
		},
		{
			name:  "a missing path or a pattern that matches nothing is no error",
			paths: []string{"missing", "**/*.none", ""},
			found: []int{0, 0, 0},
		},
		{
			name:  "overlapping patterns select a path once; empty directory kept",
			paths: []string{"lib", "lib/*.js", "empty"},
			want:  []string{"empty", "lib", "lib/deep", "lib/deep/x.js", "lib/util.js", "lib/util.ts"},
			found: []int{5, 1, 1},
		},
		{
			name:  "an absolute path under root and ./ prefixes",
			paths: []string{filepath.Join(dir, "app.js"), "./build/../build/out.bin"},
			want:  []string{"app.js", "build/out.bin"},
			found: []int{1, 1},
		},
		{
			name:     "extra paths are taken as they are, exclude applies",
			extra:    []string{"app.js", "build/out.log", "missing", "lib"},
			exclude:  []string{"*.log", "**/*.log"},
			want:     []string{"app.js", "lib"},
			excluded: []int{0, 1},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			sel, err := Select(dir, tt.paths, tt.exclude, tt.extra)
			if err != nil {
				t.Fatalf("Select = %v", err)
			}
			if diff := cmp.Diff(tt.want, names(sel)); diff != "" {
				t.Errorf("Select entries (-want +got):\n%s", diff)
			}
			var found, excluded []int
			for _, f := range sel.Found {
				found = append(found, f.Count)
			}
			for _, f := range sel.Excluded {
				excluded = append(excluded, f.Count)
			}
			if diff := cmp.Diff(tt.found, found); diff != "" {
				t.Errorf("Select found counts (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.excluded, excluded); diff != "" {
				t.Errorf("Select excluded counts (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSelectRefusesPathsOutsideRoot(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, tc := range []struct {
		paths, exclude, extra []string
		want                  string
	}{
		{paths: []string{"../x"}, want: `path pattern "../x"`},
		{paths: []string{"a/../../x/**"}, want: `path pattern "a/../../x/**"`},
		{paths: []string{"/etc/passwd"}, want: `path pattern "/etc/passwd"`},
		{paths: []string{"../*"}, want: `path pattern "../*"`},
		{exclude: []string{"../x"}, want: `exclude pattern "../x"`},
		{extra: []string{"../../x"}, want: `extra path "../../x"`},
		{paths: []string{"a/[b"}, want: `path pattern "a/[b": malformed`},
	} {
		_, err := Select(dir, tc.paths, tc.exclude, tc.extra)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Select(%q, %q, %q) = %v, want an error containing %q", tc.paths, tc.exclude, tc.extra, err, tc.want)
		}
	}
}
