package sshx_test

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/drover-ci/drover/internal/sshx"
	"github.com/drover-ci/drover/internal/sshx/sshxtest"
	"golang.org/x/crypto/ssh"
)

// TestTOFUFile: keys learnt on first use are kept in Path, so a new store
// on the same file (a restarted manager) refuses a changed key, naming
// both fingerprints; Forget removes a key from the file too.
func TestTOFUFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "host-keys")
	addr := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 22}
	a, b := sshxtest.NewPublicKey(t), sshxtest.NewPublicKey(t)

	first := &sshx.TOFU{Path: path}
	if err := first.Callback("ssh://h:22")("h:22", addr, a); err != nil {
		t.Fatalf("first key: %v", err)
	}
	if err := first.Callback("inst-2")("x:22", addr, b); err != nil {
		t.Fatalf("first key of another id: %v", err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("host key file: %v, %v; want mode 0600", fi, err)
	}

	restarted := &sshx.TOFU{Path: path}
	if !restarted.Known("ssh://h:22") || !restarted.Known("inst-2") {
		t.Fatal("a new store on the same file does not know the keys")
	}
	if err := restarted.Callback("ssh://h:22")("h:22", addr, a); err != nil {
		t.Errorf("same key after a restart: %v", err)
	}
	err := restarted.Callback("ssh://h:22")("h:22", addr, b)
	if !errors.Is(err, sshx.ErrHostKeyMismatch) || !strings.Contains(err.Error(), ssh.FingerprintSHA256(a)) || !strings.Contains(err.Error(), ssh.FingerprintSHA256(b)) {
		t.Errorf("changed key after a restart = %v, want a mismatch naming both fingerprints", err)
	}

	restarted.Forget("inst-2")
	if again := (&sshx.TOFU{Path: path}); again.Known("inst-2") || !again.Known("ssh://h:22") {
		t.Error("Forget did not remove exactly its id from the file")
	}

	if err := os.WriteFile(path, []byte("id not-a-key\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := (&sshx.TOFU{Path: path}).Callback("id")("h:22", addr, a); err == nil || !strings.Contains(err.Error(), path+":1") {
		t.Errorf("corrupt file = %v, want an error naming %s:1", err, path)
	}
}
