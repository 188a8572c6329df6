package config

import (
	"strings"
	"testing"
)

// TestArtifactExtractLimits: [runners.artifact] extract_max_size and
// extract_max_entries are read (0 when absent) and checked, with their
// line, and written back by Save.
func TestArtifactExtractLimits(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name                string
		table               string
		wantSize, wantCount int64
		wantErr             string
	}{
		{"absent", "", 0, 0, ""},
		{"set", "  [runners.artifact]\n    upload_timeout = \"1h\"\n    extract_max_size = 1073741824\n    extract_max_entries = 5000\n", 1 << 30, 5000, ""},
		{"negative", "  [runners.artifact]\n    extract_max_size = -1\n", 0, 0, "config.toml:8: runners[0].artifact.extract_max_size: must be 0 (the default) or more"},
		{"not an integer", "  [runners.artifact]\n    extract_max_entries = \"many\"\n", 0, 0, "config.toml:8: runners[0].artifact.extract_max_entries: must be an integer, not a string"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, _, err := Parse("config.toml", []byte("concurrent = 1\n"+minimalRunner+tc.table))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Parse = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse = %v", err)
			}
			size, count := c.Runners[0].ArtifactExtractLimits()
			if size != tc.wantSize || count != tc.wantCount {
				t.Errorf("ArtifactExtractLimits() = %d, %d; want %d, %d", size, count, tc.wantSize, tc.wantCount)
			}
		})
	}
}
