package config

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"
)

// These tests replace machineIDFiles, so they do not run in parallel.

func TestSystemIDFromMachineID(t *testing.T) {
	dir := t.TempDir()
	mid := filepath.Join(dir, "machine-id")
	if err := os.WriteFile(mid, []byte("0123456789abcdef0123456789abcdef\n"), 0o444); err != nil {
		t.Fatal(err)
	}
	old := machineIDFiles
	machineIDFiles = []string{filepath.Join(dir, "missing"), mid}
	t.Cleanup(func() { machineIDFiles = old })

	cfgPath := filepath.Join(dir, "config.toml")
	// HMAC-SHA256(key=machine id, "gitlab-runner"), computed with
	// `openssl dgst -sha256 -hmac`.
	const want = "s_ee3af03959fe"
	for i := range 2 {
		got, err := LoadOrCreateSystemID(cfgPath)
		if err != nil || got != want {
			t.Fatalf("LoadOrCreateSystemID() call %d = %q, %v; want %q", i, got, err, want)
		}
	}
	checkSystemIDFile(t, dir, want)
}

func TestSystemIDRandomFallbackIsStable(t *testing.T) {
	dir := t.TempDir()
	old := machineIDFiles
	machineIDFiles = []string{filepath.Join(dir, "missing")}
	t.Cleanup(func() { machineIDFiles = old })

	cfgPath := filepath.Join(dir, "config.toml")
	first, err := LoadOrCreateSystemID(cfgPath)
	if err != nil {
		t.Fatalf("LoadOrCreateSystemID() error = %v", err)
	}
	if !regexp.MustCompile(`^r_[a-zA-Z0-9]{12}$`).MatchString(first) {
		t.Errorf("LoadOrCreateSystemID() = %q, want r_ + 12 alphanumerics", first)
	}
	second, err := LoadOrCreateSystemID(cfgPath)
	if err != nil || second != first {
		t.Errorf("second LoadOrCreateSystemID() = %q, %v; want %q", second, err, first)
	}
	checkSystemIDFile(t, dir, first)
}

func TestSystemIDExistingFileIsTrimmed(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, SystemIDFile), []byte("  s_000000000000\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := LoadOrCreateSystemID(filepath.Join(dir, "config.toml"))
	if err != nil || got != "s_000000000000" {
		t.Errorf("LoadOrCreateSystemID() = %q, %v; want s_000000000000", got, err)
	}
}

func checkSystemIDFile(t *testing.T, dir, want string) {
	t.Helper()
	path := filepath.Join(dir, SystemIDFile)
	data, err := os.ReadFile(path)
	if err != nil || string(data) != want {
		t.Errorf("%s = %q, %v; want %q", path, data, err, want)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("%s mode = %v, %v; want 0600", path, fi.Mode().Perm(), err)
	}
}
