package instance

import (
	"strings"
	"testing"

	"github.com/BurntSushi/toml"
	"github.com/google/go-cmp/cmp"
)

func where(key string) string { return "config.toml:7: runners[0].instance." + key }

func TestParseConfig(t *testing.T) {
	tests := map[string]struct {
		toml    string
		want    Config
		wantErr string
	}{
		"empty":   {toml: ``},
		"common":  {toml: `use_common_build_dir = true`, want: Config{UseCommonBuildDir: true}},
		"images":  {toml: `allowed_images = ["a", "b"]`, want: Config{AllowedImages: []string{"a", "b"}}},
		"string":  {toml: `use_common_build_dir = "yes"`, wantErr: "config.toml:7: runners[0].instance.use_common_build_dir: want true or false"},
		"image":   {toml: `allowed_images = ["a", 1]`, wantErr: "allowed_images: item 1: want a string"},
		"images2": {toml: `allowed_images = "a"`, wantErr: "allowed_images: want an array"},
		"unknown": {toml: `use_common_builds_dir = true`, wantErr: "runners[0].instance.use_common_builds_dir: unknown key"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var m map[string]any
			if _, err := toml.Decode(tc.toml, &m); err != nil {
				t.Fatal(err)
			}
			got, err := ParseConfig(m, where)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Errorf("ParseConfig(%s) = %v, want an error containing %q", tc.toml, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseConfig(%s) = %v", tc.toml, err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("ParseConfig(%s) (-want +got):\n%s", tc.toml, diff)
			}
		})
	}
}

func FuzzParseConfig(f *testing.F) {
	for _, s := range []string{"use_common_build_dir = true", `allowed_images = ["x"]`, "x = 1", "allowed_images = [[1]]"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var m map[string]any
		if _, err := toml.Decode(s, &m); err != nil {
			return
		}
		c, err := ParseConfig(m, where)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "config.toml:7: ") {
				t.Errorf("ParseConfig error %q does not name file and line", err)
			}
			return
		}
		if _, ok := m["use_common_build_dir"]; !ok && c.UseCommonBuildDir {
			t.Errorf("UseCommonBuildDir set without the key: %q", s)
		}
	})
}
