package cache

import (
	"strings"
	"testing"

	"github.com/drover-ci/drover/internal/config"
)

func TestParseRunner(t *testing.T) {
	head := "[[runners]]\n  name = \"r\"\n  url = \"http://x\"\n  token = \"glrt-abc\"\n  executor = \"shell\"\n"
	for _, tc := range []struct {
		name, table string
		err         string // "" = none
		s3          bool   // a shared cache results
	}{
		{"none", "", "", false},
		{"local only", "  [runners.cache]\n    Path = \"x\"\n", "", false},
		{"s3", "  [runners.cache]\n    Type = \"s3\"\n    Shared = true\n    MaxUploadedArchiveSize = 1000\n    [runners.cache.s3]\n      ServerAddress = \"h:9000\"\n      AccessKey = \"a\"\n      SecretKey = \"s\"\n      BucketName = \"b\"\n", "", true},
		{"unknown key", "  [runners.cache]\n    Type = \"s3\"\n    Shraed = true\n", "config.toml:", false},
		{"unknown s3 key", "  [runners.cache]\n    Type = \"s3\"\n    [runners.cache.s3]\n      BucketNmae = \"b\"\n", "unknown key", false},
		{"no bucket", "  [runners.cache]\n    Type = \"s3\"\n    [runners.cache.s3]\n      ServerAddress = \"h\"\n      AccessKey = \"a\"\n      SecretKey = \"s\"\n", "BucketName: required", false},
		{"gcs not yet", "  [runners.cache]\n    Type = \"gcs\"\n", "not supported yet", false},
		{"wrong type of value", "  [runners.cache]\n    Shared = \"yes\"\n", "config.toml:", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, _, err := config.Parse("config.toml", []byte(head+tc.table))
			if err != nil {
				t.Fatal(err)
			}
			c, err := ParseRunner("config.toml", &cfg.Runners[0])
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), "runners[0].cache") {
					t.Fatalf("ParseRunner = %v, want an error on runners[0].cache with %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseRunner = %v", err)
			}
			if (c != nil) != tc.s3 {
				t.Fatalf("ParseRunner = %+v, want a shared cache: %v", c, tc.s3)
			}
			if c != nil && (!c.Shared || c.MaxUploadedArchiveSize != 1000 || c.S3.BucketName != "b") {
				t.Errorf("ParseRunner = %+v", c)
			}
		})
	}
}
