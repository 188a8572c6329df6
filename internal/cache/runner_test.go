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
		shared      bool   // a shared cache results
	}{
		{"none", "", "", false},
		{"local only", "  [runners.cache]\n    Path = \"x\"\n", "", false},
		{"s3", "  [runners.cache]\n    Type = \"s3\"\n    Shared = true\n    MaxUploadedArchiveSize = 1000\n    [runners.cache.s3]\n      ServerAddress = \"h:9000\"\n      AccessKey = \"a\"\n      SecretKey = \"s\"\n      BucketName = \"b\"\n", "", true},
		{"unknown key", "  [runners.cache]\n    Type = \"s3\"\n    Shraed = true\n", "config.toml:", false},
		{"unknown s3 key", "  [runners.cache]\n    Type = \"s3\"\n    [runners.cache.s3]\n      BucketNmae = \"b\"\n", "unknown key", false},
		{"no bucket", "  [runners.cache]\n    Type = \"s3\"\n    [runners.cache.s3]\n      ServerAddress = \"h\"\n      AccessKey = \"a\"\n      SecretKey = \"s\"\n", "BucketName: required", false},
		{"gcs without section", "  [runners.cache]\n    Type = \"gcs\"\n", "needs a [runners.cache.gcs] section", false},
		{"gcs", "  [runners.cache]\n    Type = \"gcs\"\n    [runners.cache.gcs]\n      CredentialsFile = \"/etc/gcs.json\"\n      BucketName = \"b\"\n", "", true},
		{"gcs metadata server", "  [runners.cache]\n    Type = \"gcs\"\n    [runners.cache.gcs]\n      BucketName = \"b\"\n", "metadata server", false},
		{"azure", "  [runners.cache]\n    Type = \"azure\"\n    [runners.cache.azure]\n      AccountName = \"a\"\n      AccountKey = \"a2V5\"\n      ContainerName = \"c\"\n      StorageDomain = \"blob.core.chinacloudapi.cn\"\n", "", true},
		{"unknown azure key", "  [runners.cache]\n    Type = \"azure\"\n    [runners.cache.azure]\n      Endpoint = \"x\"\n", "unknown key", false},
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
			if (c != nil) != tc.shared {
				t.Fatalf("ParseRunner = %+v, want a shared cache: %v", c, tc.shared)
			}
			if c != nil && c.S3 != nil && (!c.Shared || c.MaxUploadedArchiveSize != 1000 || c.S3.BucketName != "b") {
				t.Errorf("ParseRunner = %+v", c)
			}
			if c != nil && c.S3 == nil && c.GCS == nil && c.Azure == nil {
				t.Errorf("ParseRunner = %+v: no section", c)
			}
		})
	}
}
