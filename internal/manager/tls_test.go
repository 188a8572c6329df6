package manager

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/drover-ci/drover/internal/config"
	"github.com/drover-ci/drover/internal/executor"
)

// TestJobTLS: a job gets the contents of its runner's tls-ca-file, and
// of tls-cert-file and tls-key-file when both are set; a file that does
// not read is left out and logged.
func TestJobTLS(t *testing.T) {
	dir := t.TempDir()
	file := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	ca, cert, key := file("ca.pem", "CA"), file("cert.pem", "CERT"), file("key.pem", "KEY")
	missing := filepath.Join(dir, "missing.pem")
	for _, tc := range []struct {
		name    string
		r       config.RunnerConfig
		want    executor.ServerTLS
		wantLog string
	}{
		{"none", config.RunnerConfig{}, executor.ServerTLS{}, ""},
		{"CA", config.RunnerConfig{TLSCAFile: ca}, executor.ServerTLS{CA: "CA"}, ""},
		{"all", config.RunnerConfig{TLSCAFile: ca, TLSCertFile: cert, TLSKeyFile: key}, executor.ServerTLS{CA: "CA", Cert: "CERT", Key: "KEY"}, ""},
		{"certificate without its key", config.RunnerConfig{TLSCertFile: cert}, executor.ServerTLS{}, ""},
		{"missing CA file", config.RunnerConfig{TLSCAFile: missing, TLSCertFile: cert, TLSKeyFile: key},
			executor.ServerTLS{Cert: "CERT", Key: "KEY"}, "missing.pem"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs bytes.Buffer
			got := jobTLS(&tc.r, slog.New(slog.NewTextHandler(&logs, nil)))
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("jobTLS (-want +got):\n%s", d)
			}
			if (tc.wantLog == "") != (logs.Len() == 0) || !strings.Contains(logs.String(), tc.wantLog) {
				t.Errorf("jobTLS logged %q, want %q", logs.String(), tc.wantLog)
			}
		})
	}
}
