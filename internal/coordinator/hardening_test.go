package coordinator

import (
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestDataIsPrivate: a data directory others could read is made 0700,
// and the database, its -wal and -shm files, the tokens and the secret key
// are 0600.
func TestDataIsPrivate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil { // whatever the umask
		t.Fatal(err)
	}
	e := openEnv(t, dir, nil)
	e.runner(nil)
	e.submit(map[string]any{"variables": []map[string]any{{"key": "SECRET", "value": "s3cr3t-value", "masked": true}}})
	want := map[string]os.FileMode{
		dir: 0o700, "coordinator.db": 0o600, "coordinator.db-wal": 0o600, "coordinator.db-shm": 0o600,
		"admin-token": 0o600, "registration-token": 0o600, "secret-key": 0o600,
	}
	for name, mode := range want {
		p := name
		if name != dir {
			p = filepath.Join(dir, name)
		}
		fi, err := os.Stat(p)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if got := fi.Mode().Perm(); got != mode {
			t.Errorf("%s: mode %o, want %o", name, got, mode)
		}
	}
}

// TestInputLimits: what a client sends that would reach other runners or
// the logs unchecked is refused with 400 naming the field.
func TestInputLimits(t *testing.T) {
	e := newEnv(t, nil)
	_, tok := e.runner(nil)
	for _, project := range []string{"../etc", "a/../b", "a/./b", "./a", "a/..", "/a/b", "a//b"} {
		resp, b := e.admin("POST", "/api/v1/jobs", map[string]any{"name": "j", "script": []string{"true"}, "project": project})
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), `"field":"project"`) {
			t.Errorf("project %q: %d %s, want 400 on project", project, resp.StatusCode, b)
		}
	}
	long := strings.Repeat("s", 65)
	for _, c := range []struct{ path, sys string }{
		{"/api/v4/jobs/request", long}, {"/api/v4/runners/verify", long}, {"/api/v4/jobs/request", "s_a\nb"},
	} {
		resp, b := e.do("POST", c.path, map[string]string{hdrRunnerToken: tok}, map[string]any{"token": tok, "system_id": c.sys})
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), `"field":"system_id"`) {
			t.Errorf("%s with system_id %q: %d %s, want 400 on system_id", c.path, c.sys, resp.StatusCode, b)
		}
	}
	if resp, _ := e.do("POST", "/api/v4/jobs/request", map[string]string{hdrRunnerToken: tok},
		map[string]any{"token": tok, "system_id": strings.Repeat("s", 64)}); resp.StatusCode != http.StatusNoContent {
		t.Errorf("a 64-character system_id = %d, want 204", resp.StatusCode)
	}

	// A Content-Range whose length overflows int64 is too large, not a
	// negative length.
	e.submit(nil)
	jr := e.take(tok)
	resp := e.patch(jr.ID, jr.Token, "0-9223372036854775807", []byte("x"))
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("PATCH 0-MaxInt64 = %d, want 413", resp.StatusCode)
	}
}

// TestReadyFailsOnFullDisk: /health/ready says 503, naming the cause,
// while the data directory's disk is full (every submission would fail),
// and 200 again once there is room. A small tmpfs is the disk.
func TestReadyFailsOnFullDisk(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs to fill (needs root): %v %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", "-l", dir).Run() })
	// The free-space guard stays on, with a floor this small disk has
	// room for: the test is about a disk that is full.
	e := openEnv(t, dir, func(c *Config) { c.MinFreeDisk = 64 << 10 })
	ready := func() (int, string) {
		resp, b := e.do("GET", "/health/ready", nil, nil)
		return resp.StatusCode, string(b)
	}
	if code, body := ready(); code != http.StatusOK {
		t.Fatalf("ready = %d %s, want 200", code, body)
	}
	filler := filepath.Join(dir, "filler")
	f, err := os.Create(filler)
	if err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 64<<10)
	for {
		if _, err := f.Write(chunk); err != nil {
			break // full
		}
	}
	f.Close()
	if code, body := ready(); code != http.StatusServiceUnavailable || !strings.Contains(body, "no space left") {
		t.Errorf("ready with a full disk = %d %q, want 503 naming the cause", code, body)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if code, body := ready(); code != http.StatusOK {
		t.Errorf("ready after room was made = %d %s, want 200", code, body)
	}
}
