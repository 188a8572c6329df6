// Package configtest writes and parses small config.toml files for the
// tests of the packages that read a runner's tables.
package configtest

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/drover-ci/drover/internal/config"
)

// Runner writes dir/config.toml holding one runner with the given
// executor and lines after its executor key (tables of the runner, such
// as "  [runners.ssh]\n    user = \"u\"\n"), parses it, and returns the
// file and the runner. The executor key is on line 4.
func Runner(t testing.TB, dir, executor, lines string) (string, *config.RunnerConfig) {
	t.Helper()
	file := filepath.Join(dir, "config.toml")
	src := "[[runners]]\n  url = \"https://g.example\"\n  token = \"glrt-abcdefghijk\"\n  executor = \"" + executor + "\"\n" + lines
	if err := os.WriteFile(file, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, _, err := config.Parse(file, []byte(src))
	if err != nil {
		t.Fatalf("config.Parse: %v", err)
	}
	return file, &cfg.Runners[0]
}
