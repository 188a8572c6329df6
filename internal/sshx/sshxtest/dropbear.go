package sshxtest

import (
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"
)

// Dropbear and DropbearKey are the dropbear binaries StartDropbear uses
// (Debian's dropbear-bin).
const (
	Dropbear    = "/usr/sbin/dropbear"
	DropbearKey = "/usr/bin/dropbearkey"
)

// StartDropbear starts a real dropbear SSH server (the small server of
// many VM guest images) on 127.0.0.1 with only an ed25519 host key, made
// by dropbearkey, and stops it when the test ends. The returned Server
// lets the current user in with Key.
//
// Dropbear reads authorized_keys from the login user's home directory
// and has no option to name another file, so the server runs in a
// private mount namespace (unshare -m) in which a directory under
// t.TempDir() is bind-mounted over that home directory: the real home is
// neither read nor changed, and nothing is left behind. That needs root;
// the test is skipped otherwise, or when dropbear or unshare is missing.
func StartDropbear(t testing.TB) *Server {
	t.Helper()
	for _, bin := range []string{Dropbear, DropbearKey} {
		if _, err := os.Stat(bin); err != nil {
			t.Skipf("%s not installed (apt-get install dropbear-bin): %v", bin, err)
		}
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Skipf("dropbear test server needs unshare (util-linux): %v", err)
	}
	if os.Geteuid() != 0 {
		t.Skip("dropbear test server needs root (a private mount namespace over the home directory)")
	}
	u, err := user.Current()
	if err != nil {
		t.Fatalf("user.Current() = %v", err)
	}
	dir := t.TempDir()
	home := filepath.Join(dir, "home")
	if err := os.MkdirAll(filepath.Join(home, ".ssh"), 0o700); err != nil {
		t.Fatal(err)
	}
	// dropbear refuses an authorized_keys in a directory others can write.
	if err := os.Chmod(home, 0o700); err != nil {
		t.Fatal(err)
	}
	hostKey := filepath.Join(dir, "host_ed25519")
	out, err := exec.Command(DropbearKey, "-t", "ed25519", "-f", hostKey).CombinedOutput()
	if err != nil {
		t.Fatalf("dropbearkey: %v\n%s", err, out)
	}
	var hostPub ssh.PublicKey
	for _, line := range strings.Split(string(out), "\n") {
		if k, _, _, _, err := ssh.ParseAuthorizedKey([]byte(line)); err == nil {
			hostPub = k
			break
		}
	}
	if hostPub == nil {
		t.Fatalf("dropbearkey printed no public key:\n%s", out)
	}
	clientPub, clientPEM := newKey(t)
	write(t, filepath.Join(home, ".ssh", "authorized_keys"), ssh.MarshalAuthorizedKey(clientPub), 0o600)

	s := &Server{User: u.Username, Key: clientPEM, HostKey: hostPub, Dir: dir}
	return s.serve(t, "dropbear", 0, func(int) *exec.Cmd {
		// -F foreground, -E log to stderr, -s no passwords, -P a pid file
		// of its own (the default is /var/run/dropbear.pid).
		script := fmt.Sprintf(`mount --bind "$1" "$2" && exec %s -F -E -s -p %s -r "$3" -P "$4"`, Dropbear, s.Addr)
		return exec.Command(unshare, "--mount", "--propagation", "private", "sh", "-c", script, "sh",
			home, u.HomeDir, hostKey, filepath.Join(dir, "dropbear.pid"))
	})
}
