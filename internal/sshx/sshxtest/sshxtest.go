// Package sshxtest starts a real OpenSSH sshd for tests: a fresh host key
// and client key in t.TempDir(), a free port on 127.0.0.1, the current
// user allowed in by key. Only tests import it.
package sshxtest

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/drover-ci/drover/internal/freeport"
	"github.com/drover-ci/drover/internal/lockedbuf"
)

// SSHD is the sshd binary the tests start.
const SSHD = "/usr/sbin/sshd"

// Server is a running sshd.
type Server struct {
	Addr    string // 127.0.0.1:port
	User    string // the user running the tests
	Key     []byte // the client's private key, PEM (authorized)
	HostKey ssh.PublicKey
	Dir     string // where its files are

	cmd  *exec.Cmd
	log  *lockedbuf.Buffer
	once sync.Once
}

// Start starts sshd and stops it when the test ends. It skips the test when
// sshd is not installed or cannot run here (not root and no privilege
// separation directory).
func Start(t testing.TB) *Server {
	t.Helper()
	return StartWith(t, Options{})
}

// Options change the server Start makes.
type Options struct {
	// SetEnv are NAME=value pairs set in every session (sshd_config
	// SetEnv), e.g. a PATH without some tool.
	SetEnv []string
	// FirstPort, when not 0, is the port of the first attempt instead of
	// a free one (to test what happens when it is taken).
	FirstPort int
}

// StartWith is Start with options.
func StartWith(t testing.TB, o Options) *Server {
	t.Helper()
	if _, err := os.Stat(SSHD); err != nil {
		t.Skipf("%s not installed: %v", SSHD, err)
	}
	// sshd refuses to start without its privilege separation directory; as
	// root the test can create it.
	if _, err := os.Stat("/run/sshd"); err != nil {
		if err := os.MkdirAll("/run/sshd", 0o755); err != nil {
			t.Skipf("sshd needs /run/sshd: %v", err)
		}
	}
	u, err := user.Current()
	if err != nil {
		t.Fatalf("user.Current() = %v", err)
	}
	dir := t.TempDir()
	hostPub, hostPEM := newKey(t)
	clientPub, clientPEM := newKey(t)
	write(t, filepath.Join(dir, "host_ed25519"), hostPEM, 0o600)
	write(t, filepath.Join(dir, "authorized_keys"), ssh.MarshalAuthorizedKey(clientPub), 0o600)

	// SetEnv SHLVL=1: bash sources ~/.bashrc for commands run by sshd
	// unless it is a nested shell; on a developer machine that rc file can
	// cost half a second per session (pyenv, nvm...), which real instances
	// do not pay and tests should not either.
	s := &Server{User: u.Username, Key: clientPEM, HostKey: hostPub, Dir: dir}
	return s.serve(t, "sshd", o.FirstPort, func(port int) *exec.Cmd {
		cfg := fmt.Sprintf(`Port %d
ListenAddress 127.0.0.1
HostKey %[2]s/host_ed25519
AuthorizedKeysFile %[2]s/authorized_keys
PidFile %[2]s/sshd.pid
PermitRootLogin yes
StrictModes no
UsePAM no
PasswordAuthentication no
KbdInteractiveAuthentication no
MaxSessions 32
MaxStartups 64
LogLevel VERBOSE
SetEnv SHLVL=1 %[3]s
`, port, dir, strings.Join(o.SetEnv, " "))
		write(t, filepath.Join(dir, "sshd_config"), []byte(cfg), 0o600)
		return exec.Command(SSHD, "-D", "-e", "-f", filepath.Join(dir, "sshd_config"))
	})
}

// serve starts the server that command makes for a port, on a free port
// of 127.0.0.1 (firstPort, when not 0, for the first attempt), until s's
// own server answers there; a port taken meanwhile by another server means
// another attempt on another port, five at most. The server is stopped when
// the test ends, and its log shown if the test failed. name is the
// program's, for messages.
func (s *Server) serve(t testing.TB, name string, firstPort int, command func(port int) *exec.Cmd) *Server {
	t.Helper()
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		port := freePort(t)
		if attempt == 0 && firstPort != 0 {
			port = firstPort
		}
		s.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		s.log = &lockedbuf.Buffer{}
		s.once = sync.Once{}
		s.cmd = command(port)
		s.cmd.Stdout, s.cmd.Stderr = s.log, s.log
		if err := s.cmd.Start(); err != nil {
			t.Fatalf("start %s: %v", name, err)
		}
		exited := make(chan struct{})
		go func() { _ = s.cmd.Wait(); close(exited) }()
		if lastErr = waitOwn(s, exited); lastErr == nil {
			t.Cleanup(func() {
				s.Stop()
				<-exited
				if t.Failed() {
					t.Logf("%s log:\n%s", name, s.log.String())
				}
			})
			return s
		}
		_ = s.cmd.Process.Kill()
		<-exited
	}
	t.Fatalf("%s did not start: %v\n%s", name, lastErr, s.log.String())
	return nil
}

// Stop kills sshd (the listener; sessions already running keep their own
// processes until their connections end).
func (s *Server) Stop() {
	s.once.Do(func() { _ = s.cmd.Process.Kill() })
}

// Log returns what sshd logged so far.
func (s *Server) Log() string { return s.log.String() }

// errNotOurs: what answers on the port is not the sshd just started (the
// port was taken between the pick and sshd's bind, and sshd gave up).
var errNotOurs = errors.New("another server answers on the port")

// waitOwn waits until s's own sshd answers on s.Addr: its process is alive
// and an SSH key exchange shows the host key generated for it. Anything
// else on the port is errNotOurs, for a retry on another port. The check
// stops before authentication, so sshd logs no accepted login for it.
func waitOwn(s *Server, exited <-chan struct{}) error {
	want := s.HostKey.Marshal()
	deadline := time.Now().Add(20 * time.Second)
	for {
		select {
		case <-exited:
			return errors.New("sshd exited")
		default:
		}
		var ours, other bool
		cfg := &ssh.ClientConfig{
			User: s.User, // no auth method: the handshake ends after the key exchange
			// Ask for the key's own algorithm: dropbear ends the handshake
			// when offered algorithms first that it has no key for.
			HostKeyAlgorithms: []string{s.HostKey.Type()},
			HostKeyCallback: func(_ string, _ net.Addr, k ssh.PublicKey) error {
				if bytes.Equal(k.Marshal(), want) {
					ours = true
					return nil
				}
				other = true
				return errNotOurs
			},
			Timeout: 5 * time.Second,
		}
		c, err := ssh.Dial("tcp", s.Addr, cfg)
		if c != nil {
			c.Close()
		}
		switch {
		case ours:
			select {
			case <-exited:
				return errors.New("sshd exited")
			default:
				return nil
			}
		case other:
			return errNotOurs
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// FreeAddr returns a 127.0.0.1 address on which nothing listens (for a
// moment).
func FreeAddr(t testing.TB) string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t)))
}

func freePort(t testing.TB) int {
	t.Helper()
	port, err := freeport.Port()
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	return port
}

// newKey returns a new ed25519 key pair: the public key and the private key
// as OpenSSH PEM.
func newKey(t testing.TB) (ssh.PublicKey, []byte) {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatalf("generate key: %v", err)
	}
	block, err := ssh.MarshalPrivateKey(priv, "")
	if err != nil {
		t.Fatalf("marshal key: %v", err)
	}
	sp, err := ssh.NewPublicKey(pub)
	if err != nil {
		t.Fatalf("public key: %v", err)
	}
	return sp, pem.EncodeToMemory(block)
}

// NewPublicKey returns a fresh public key that no server has (a host key
// to tell apart from a server's).
func NewPublicKey(t testing.TB) ssh.PublicKey {
	k, _ := newKey(t)
	return k
}

// NewKey returns a fresh private key (PEM) that no server authorizes.
func NewKey(t testing.TB) []byte {
	_, k := newKey(t)
	return k
}

func write(t testing.TB, path string, b []byte, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, b, mode); err != nil {
		t.Fatalf("write %s: %v", path, err)
	}
}

// Proxy forwards TCP connections to a target, and can make the peer
// vanish: Freeze stops forwarding without closing anything (a host that
// went away), Cut closes every connection (a reset).
type Proxy struct {
	Addr string

	mu        sync.Mutex
	conns     []net.Conn
	frozen    chan struct{}
	once      sync.Once
	swallowed chan struct{}
}

// NewProxy starts a proxy to target on 127.0.0.1, closed when the test
// ends.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	return NewProxyAt(t, "127.0.0.1:0", target)
}

// NewProxyAt is NewProxy listening on addr.
func NewProxyAt(t testing.TB, addr, target string) *Proxy {
	t.Helper()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	p := &Proxy{Addr: l.Addr().String(), frozen: make(chan struct{}), swallowed: make(chan struct{}, 1)}
	t.Cleanup(func() { l.Close(); p.Cut() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, u)
			p.mu.Unlock()
			go p.pipe(c, u)
			go p.pipe(u, c)
		}
	}()
	return p
}

func (p *Proxy) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		select {
		case <-p.frozen:
			if err != nil {
				return
			}
			select { // swallowed: the peer is unreachable
			case p.swallowed <- struct{}{}:
			default:
			}
			continue
		default:
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			dst.Close()
			return
		}
	}
}

// Swallowed receives once bytes were swallowed while frozen (since the
// last receive): a test knows then that what it sent reached the
// vanished peer's side of the link.
func (p *Proxy) Swallowed() <-chan struct{} { return p.swallowed }

// Freeze stops forwarding in both directions, closing nothing.
func (p *Proxy) Freeze() { p.once.Do(func() { close(p.frozen) }) }

// Cut closes every connection made through the proxy.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}
