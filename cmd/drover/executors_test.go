package main

import (
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/drover-ci/drover/internal/config"
)

// config.Executors is what config.toml may name; providers is what runs
// them. They must be the same set.
func TestProvidersAreConfigExecutors(t *testing.T) {
	got := slices.Sorted(maps.Keys(providers(nil, nil, nil, nil)))
	if want := config.Executors(); !slices.Equal(got, want) {
		t.Errorf("providers() = %q, config.Executors() = %q: keep them in step", got, want)
	}
}

// drover run reports every problem of config.toml at once, with its line,
// as a configuration error.
func TestRunReportsEveryConfigError(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config.toml")
	src := `concurrent = 0
[[runners]]
  url = "https://gitlab.example.com"
  token = "t"
  executor = "docker-windows"
`
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	_, code, err := drover(t, "run", "-c", path)
	if code != 2 || err == nil {
		t.Fatalf("drover run = exit %d, %v; want exit 2", code, err)
	}
	want := []string{
		path + ":1: concurrent: must be at least 1",
		path + `:5: runners[0].executor: "docker-windows" is not available in this build of drover (available: ` + strings.Join(config.Executors(), ", ") + ")",
	}
	if got := strings.Split(err.Error(), "\n"); !slices.Equal(got, want) {
		t.Errorf("drover run error =\n%s\nwant\n%s", err, strings.Join(want, "\n"))
	}
}
