// Package sshdtest starts a real OpenSSH sshd for tests: on a free
// loopback port, with a fresh host key and one authorised client key, as
// the current user. Tests skip when /usr/sbin/sshd is absent.
package sshdtest

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/drover-ci/drover/internal/freeport"
)

// Binary is the sshd the package runs.
const Binary = "/usr/sbin/sshd"

// Server is a running sshd.
type Server struct {
	// Addr is 127.0.0.1:port.
	Addr string
	// User is the login user: the user running the test.
	User string
	// KeyPath is the client's private key (OpenSSH PEM), authorised.
	KeyPath string
	// Key is the content of KeyPath.
	Key []byte
	// HostKey is the server's public host key.
	HostKey ssh.PublicKey

	cmd     *exec.Cmd
	done    chan struct{}
	logPath string
}

// Start runs sshd until the test ends.
func Start(t testing.TB) *Server {
	t.Helper()
	if _, err := os.Stat(Binary); err != nil {
		t.Skipf("no %s on this machine", Binary)
	}
	u, err := user.Current()
	if err != nil {
		t.Fatalf("current user: %v", err)
	}
	if u.Uid == "0" {
		// sshd running as root insists on its privilege separation
		// directory.
		if err := os.MkdirAll("/run/sshd", 0o755); err != nil {
			t.Fatalf("create /run/sshd: %v", err)
		}
	}
	dir := t.TempDir()
	hostPriv, hostPEM := newKey(t)
	clientPriv, clientPEM := newKey(t)
	hostSigner, err := ssh.NewSignerFromKey(hostPriv)
	if err != nil {
		t.Fatal(err)
	}
	clientSigner, err := ssh.NewSignerFromKey(clientPriv)
	if err != nil {
		t.Fatal(err)
	}
	write := func(name string, data []byte, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	hostKey := write("host_ed25519", hostPEM, 0o600)
	clientKey := write("client_ed25519", clientPEM, 0o600)
	authKeys := write("authorized_keys", ssh.MarshalAuthorizedKey(clientSigner.PublicKey()), 0o600)

	port := freePort(t)
	cfg := write("sshd_config", []byte(strings.Join([]string{
		"ListenAddress 127.0.0.1:" + strconv.Itoa(port),
		"HostKey " + hostKey,
		"AuthorizedKeysFile " + authKeys,
		"PidFile none",
		"UsePAM no",
		"UseDNS no",
		"StrictModes no",
		"PermitRootLogin prohibit-password",
		"PasswordAuthentication no",
		"KbdInteractiveAuthentication no",
		"LogLevel ERROR",
		"",
	}, "\n")), 0o600)

	// The log is a file, not a pipe: a session process that outlives the
	// listener would keep a pipe open and Wait with it.
	logPath := filepath.Join(dir, "sshd.log")
	logs, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logs.Close()
	cmd := exec.Command(Binary, "-D", "-e", "-f", cfg)
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatalf("start sshd: %v", err)
	}
	s := &Server{
		Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), User: u.Username,
		KeyPath: clientKey, Key: clientPEM, HostKey: hostSigner.PublicKey(),
		cmd: cmd, done: make(chan struct{}), logPath: logPath,
	}
	go func() { _ = cmd.Wait(); close(s.done) }()
	t.Cleanup(s.Stop)
	if err := s.waitReady(10 * time.Second); err != nil {
		t.Fatalf("sshd on %s: %v; its log:\n%s", s.Addr, err, s.Log())
	}
	return s
}

// Stop kills sshd and waits for it; Start's cleanup calls it.
func (s *Server) Stop() {
	select {
	case <-s.done:
		return
	default:
	}
	_ = s.cmd.Process.Kill()
	<-s.done
}

// Log returns what sshd wrote so far.
func (s *Server) Log() string {
	data, _ := os.ReadFile(s.logPath)
	return string(data)
}

func (s *Server) waitReady(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		conn, err := net.DialTimeout("tcp", s.Addr, time.Second)
		if err == nil {
			_ = conn.SetDeadline(time.Now().Add(time.Second))
			buf := make([]byte, 4)
			_, err = io.ReadFull(conn, buf)
			conn.Close()
			if err == nil && string(buf) == "SSH-" {
				return nil
			}
		}
		select {
		case <-s.done:
			return fmt.Errorf("sshd exited: %v", s.cmd.ProcessState)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not answering after %s: %v", timeout, err)
		}
	}
}

// Run connects as the authorised user with key and runs cmd, returning
// its combined output.
func Run(addr, user string, key []byte, cmd string) (string, error) {
	signer, err := ssh.ParsePrivateKey(key)
	if err != nil {
		return "", fmt.Errorf("parse key: %w", err)
	}
	client, err := ssh.Dial("tcp", addr, &ssh.ClientConfig{
		User:            user,
		Auth:            []ssh.AuthMethod{ssh.PublicKeys(signer)},
		HostKeyCallback: ssh.InsecureIgnoreHostKey(),
		Timeout:         5 * time.Second,
	})
	if err != nil {
		return "", fmt.Errorf("ssh dial %s: %w", addr, err)
	}
	defer client.Close()
	sess, err := client.NewSession()
	if err != nil {
		return "", fmt.Errorf("ssh session: %w", err)
	}
	defer sess.Close()
	out, err := sess.CombinedOutput(cmd)
	return string(out), err
}

func newKey(t testing.TB) (ed25519.PrivateKey, []byte) {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	blk, err := ssh.MarshalPrivateKey(priv, "sshdtest")
	if err != nil {
		t.Fatal(err)
	}
	return priv, pem.EncodeToMemory(blk)
}

// freePort asks the kernel for a free loopback port. sshd binds it a
// moment later; another process taking it in between is unlikely enough
// for tests.
func freePort(t testing.TB) int {
	t.Helper()
	port, err := freeport.Port()
	if err != nil {
		t.Fatal(err)
	}
	return port
}
