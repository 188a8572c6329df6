package config

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestWriteKeepsOwner: run as root (sudo drover register into a
// service's config directory), a rewritten file keeps its owner and a new
// one takes its directory's, so the service's user can still read them.
func TestWriteKeepsOwner(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: it gives files to other users")
	}
	owner := func(path string) (uint32, uint32) {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		st := fi.Sys().(*syscall.Stat_t)
		return st.Uid, st.Gid
	}
	dir := filepath.Join(t.TempDir(), "etc")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, 4242, 4343); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "config.toml")
	// A new file, then the system ID next to it: the directory's owner.
	if err := writeFileAtomic(path, []byte("concurrent = 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if uid, gid := owner(path); uid != 4242 || gid != 4343 {
		t.Errorf("new config.toml owned by %d:%d, want the directory's 4242:4343", uid, gid)
	}
	if _, err := LoadOrCreateSystemID(path); err != nil {
		t.Fatal(err)
	}
	if uid, gid := owner(filepath.Join(dir, SystemIDFile)); uid != 4242 || gid != 4343 {
		t.Errorf("new %s owned by %d:%d, want 4242:4343", SystemIDFile, uid, gid)
	}
	// A file of another owner than the directory keeps its own.
	if err := os.Chown(path, 5151, 5252); err != nil {
		t.Fatal(err)
	}
	e, err := EditFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.SetConcurrent(3); err != nil {
		t.Fatal(err)
	}
	if err := e.Write(); err != nil {
		t.Fatal(err)
	}
	if uid, gid := owner(path); uid != 5151 || gid != 5252 {
		t.Errorf("edited config.toml owned by %d:%d, want its own 5151:5252", uid, gid)
	}
	// Root's directory: root's file.
	rootDir := t.TempDir()
	p2 := filepath.Join(rootDir, "config.toml")
	if err := writeFileAtomic(p2, []byte("concurrent = 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if uid, gid := owner(p2); uid != 0 || gid != 0 {
		t.Errorf("config.toml in root's directory owned by %d:%d, want 0:0", uid, gid)
	}
}
