// Package sshx is drover's SSH client for fleet instances: one connection
// per job (or per check), many sessions on it, keep-alives that notice a
// dead peer, and trust-on-first-use host keys per instance.
//
// # Authentication
//
// A private key (PEM, as fleet.ConnectInfo carries it) and a password are
// both offered when set; the key first.
//
// # Host keys
//
// Fleet instances are created on demand and their host keys are not known
// in advance, so a [TOFU] store accepts the first key an instance presents
// and from then on rejects any other key for the same instance id. The
// record lives in memory and, with TOFU.Path, in a file that survives a
// restart; a replaced instance has a new id. Call Forget when an instance
// is deleted.
//
// The host key algorithms offered in the handshake are those of the key
// expected (Config.HostKeyAlgorithms, TOFU.Algorithms) or, for a host not
// met yet, a list with ssh-ed25519 first: dropbear, the server of many VM
// guests, drops a client whose first choice is an algorithm it has no key
// for.
//
// # Keep-alive
//
// Every Keepalive interval the client sends an OpenSSH keepalive request;
// when the peer does not answer within Timeout the connection is closed,
// which fails every session on it, and Done is closed.
//
// # Opening sessions and forwards
//
// A session or a forward (a channel) waits for the peer's answer at most
// Timeout, and no longer than the connection lives. x/crypto/ssh waits
// for it with no bound of its own: an open asked just as the connection
// ends, after the connection dropped its channels but before it reports
// the end, is never answered and never failed (a job of the docker
// autoscaler waited on one for the rest of its life after its instance's
// SSH link was cut).
package sshx

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/drover-ci/drover/internal/clock"
)

// Defaults for Config's zero values.
const (
	DefaultTimeout   = 30 * time.Second
	DefaultKeepalive = 30 * time.Second
)

// Config is how to reach one host.
type Config struct {
	Addr     string // host:port
	User     string
	Password string
	Key      []byte // private key, PEM; empty = none
	// HostKey checks the server's key; nil refuses every key (use a TOFU
	// store's Callback, or ssh.InsecureIgnoreHostKey in tests only).
	HostKey ssh.HostKeyCallback
	// HostKeyAlgorithms are the host key algorithms offered, in order of
	// preference: those of the key(s) HostKey expects when it knows them
	// (see HostKeyAlgorithms and TOFU.Algorithms). Empty means
	// DefaultHostKeyAlgorithms, ssh-ed25519 first.
	HostKeyAlgorithms []string
	// Timeout bounds the TCP connect plus the SSH handshake, the wait for
	// a keep-alive reply, and the wait for the answer to a session's or a
	// forward's open. Zero means DefaultTimeout.
	Timeout time.Duration
	// Keepalive is the interval between keep-alive requests; zero means
	// DefaultKeepalive, negative disables them.
	Keepalive time.Duration
	Clock     clock.Clock  // nil = real
	Logger    *slog.Logger // nil discards
}

// Client is one SSH connection.
type Client struct {
	c       *ssh.Client
	addr    string
	clk     clock.Clock
	timeout time.Duration // bounds the wait for the peer's answer to an open
	logger  *slog.Logger
	done    chan struct{}
	once    sync.Once
	err     error // why the connection ended; set before done closes
}

// Dial connects and authenticates. ctx bounds the connect and the
// handshake; it does not bound the connection's life.
func Dial(ctx context.Context, cfg Config) (*Client, error) {
	if cfg.Addr == "" {
		return nil, errors.New("ssh: no address")
	}
	if cfg.User == "" {
		return nil, fmt.Errorf("ssh %s: no user name", cfg.Addr)
	}
	var auth []ssh.AuthMethod
	if len(cfg.Key) > 0 {
		signer, err := ssh.ParsePrivateKey(cfg.Key)
		if err != nil {
			return nil, fmt.Errorf("ssh %s: private key: %w", cfg.Addr, err)
		}
		auth = append(auth, ssh.PublicKeys(signer))
	}
	if cfg.Password != "" {
		auth = append(auth, ssh.Password(cfg.Password))
	}
	if len(auth) == 0 {
		return nil, fmt.Errorf("ssh %s: neither a key nor a password", cfg.Addr)
	}
	hostKey := cfg.HostKey
	if hostKey == nil {
		hostKey = func(string, net.Addr, ssh.PublicKey) error {
			return errors.New("no host key policy configured")
		}
	}
	hostKeyAlgos := cfg.HostKeyAlgorithms
	if len(hostKeyAlgos) == 0 {
		hostKeyAlgos = DefaultHostKeyAlgorithms()
	}
	timeout := cfg.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}

	dctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(dctx, "tcp", cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("ssh %s: %w: %w", cfg.Addr, ErrUnreachable, err)
	}
	// The handshake has no context of its own: a deadline on the connection
	// bounds it, and closing the connection aborts it when ctx ends first.
	if dl, ok := dctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	stop := context.AfterFunc(dctx, func() { conn.Close() })
	cc, chans, reqs, err := ssh.NewClientConn(conn, cfg.Addr, &ssh.ClientConfig{
		User:              cfg.User,
		Auth:              auth,
		HostKeyCallback:   hostKey,
		HostKeyAlgorithms: hostKeyAlgos,
		Timeout:           timeout,
	})
	if !stop() {
		if err == nil {
			cc.Close()
		}
		if err = ctx.Err(); err == nil {
			err = dctx.Err()
		}
		return nil, fmt.Errorf("ssh %s: handshake: %w", cfg.Addr, err)
	}
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("ssh %s: handshake: %w", cfg.Addr, err)
	}
	_ = conn.SetDeadline(time.Time{})

	c := &Client{c: ssh.NewClient(cc, chans, reqs), addr: cfg.Addr, clk: clock.OrReal(cfg.Clock), timeout: timeout,
		logger: logger.With("addr", cfg.Addr), done: make(chan struct{})}
	go func() {
		err := c.c.Wait()
		c.finish(fmt.Errorf("ssh %s: connection closed: %w", cfg.Addr, errOrEOF(err)))
	}()
	if cfg.Keepalive >= 0 {
		interval := cfg.Keepalive
		if interval == 0 {
			interval = DefaultKeepalive
		}
		go c.keepalive(c.clk, interval, timeout)
	}
	return c, nil
}

func errOrEOF(err error) error {
	if err == nil {
		return io.EOF
	}
	return err
}

// finish records why the connection ended (first reason wins) and closes it.
func (c *Client) finish(err error) {
	c.once.Do(func() {
		c.err = err
		c.c.Close()
		close(c.done)
	})
}

// keepalive pings the server every interval until the connection ends; a
// ping not answered within timeout ends it.
func (c *Client) keepalive(clk clock.Clock, interval, timeout time.Duration) {
	t := clk.NewTimer(interval)
	defer t.Stop()
	for {
		select {
		case <-c.done:
			return
		case <-t.C():
		}
		reply := make(chan error, 1)
		go func() {
			_, _, err := c.c.SendRequest("keepalive@openssh.com", true, nil)
			reply <- err
		}()
		deadline := clk.NewTimer(timeout)
		select {
		case err := <-reply:
			deadline.Stop()
			if err != nil {
				c.finish(fmt.Errorf("keep-alive: %w", err))
				return
			}
		case <-deadline.C():
			c.logger.Warn("ssh keep-alive not answered, closing the connection", "timeout", timeout)
			c.finish(fmt.Errorf("keep-alive not answered within %v", timeout))
			return
		case <-c.done:
			deadline.Stop()
			return
		}
		t.Reset(interval)
	}
}

// Done is closed when the connection has ended (Close, a network error or
// an unanswered keep-alive).
func (c *Client) Done() <-chan struct{} { return c.done }

// Err tells why the connection ended; nil while it is up.
func (c *Client) Err() error {
	select {
	case <-c.done:
		return c.err
	default:
		return nil
	}
}

// Close ends the connection and every session on it.
func (c *Client) Close() error {
	c.finish(errors.New("closed"))
	return nil
}

// Session opens a new session (a channel) on the connection; the peer
// has Timeout to answer (see the package's doc).
func (c *Client) Session() (*ssh.Session, error) {
	if err := c.Err(); err != nil {
		return nil, err
	}
	s, err := openChannel(context.Background(), c, c.c.NewSession)
	if err != nil {
		if cerr := c.Err(); cerr != nil {
			return nil, cerr
		}
		return nil, fmt.Errorf("open session: %w", err)
	}
	return s, nil
}

// openChannel runs open, which asks the peer for a channel, and waits
// for its answer until ctx ends, the connection ends or Timeout passes;
// an open the ending connection failed gives the connection's error. A
// channel that comes after the wait was given up is closed. An open that
// is never answered leaves its goroutine behind: x/crypto/ssh gives no
// way to abandon it.
func openChannel[T io.Closer](ctx context.Context, c *Client, open func() (T, error)) (T, error) {
	type result struct {
		v   T
		err error
	}
	got := make(chan result)
	gaveUp := make(chan struct{})
	go func() {
		v, err := open()
		select {
		case got <- result{v, err}:
		case <-gaveUp:
			if err == nil {
				_ = v.Close()
			}
		}
	}()
	t := c.clk.NewTimer(c.timeout)
	defer t.Stop()
	var zero T
	select {
	case r := <-got:
		if r.err == nil || !droppedByConnection(r.err) {
			return r.v, r.err
		}
		// The connection is ending: x/crypto/ssh fails its pending
		// opens before it reports the end, which is the error to give.
		select {
		case <-c.done:
			return zero, c.err
		case <-ctx.Done():
		case <-t.C():
		}
		return zero, r.err
	case <-ctx.Done():
		close(gaveUp)
		return zero, ctx.Err()
	case <-c.done:
		close(gaveUp)
		return zero, c.err
	case <-t.C():
		close(gaveUp)
		return zero, fmt.Errorf("ssh %s did not answer within %v", c.addr, c.timeout)
	}
}

// droppedByConnection reports whether err is how x/crypto/ssh fails an
// open that was pending when its connection ended: on the way out it
// closes every channel's message queue, and the open reads a nil message
// ("unexpected packet in response to channel open: <nil>"). The peer's
// refusal is an *ssh.OpenChannelError instead.
func droppedByConnection(err error) bool {
	var refused *ssh.OpenChannelError
	return !errors.As(err, &refused) && strings.HasSuffix(err.Error(), "in response to channel open: <nil>")
}

// Listen asks the server to listen on addr (host:port on its side) and
// forward the connections it accepts over this connection (remote port
// forwarding, ssh -R). The listener ends with the connection.
func (c *Client) Listen(network, addr string) (net.Listener, error) {
	return c.c.Listen(network, addr)
}

// DialContext opens a connection from the remote host to addr: network
// "tcp" (host:port as the remote host resolves it) or "unix" (a socket
// path on the remote host, OpenSSH's streamlocal forwarding, e.g. the
// Docker engine's /var/run/docker.sock). The peer has Timeout to answer
// (see the package's doc). The connection ends with the SSH connection.
func (c *Client) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	if err := c.Err(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	conn, err := openChannel(ctx, c, func() (net.Conn, error) { return c.c.Dial(network, addr) })
	if err != nil {
		if cerr := c.Err(); cerr != nil {
			return nil, cerr
		}
		return nil, fmt.Errorf("ssh: forward to %s %s: %w", network, addr, err)
	}
	return conn, nil
}

// Output runs cmd (a shell command line for the user's login shell) with
// stdin as its input and returns its standard output. A non-zero exit is a
// *ssh.ExitError whose message carries the command's standard error.
// Cancelling ctx closes the session and returns ctx's error; the remote
// command may run on (kill it by other means if that matters).
func (c *Client) Output(ctx context.Context, cmd string, stdin io.Reader) ([]byte, error) {
	s, err := c.Session()
	if err != nil {
		return nil, err
	}
	defer s.Close()
	var out, errb bytes.Buffer
	s.Stdin, s.Stdout, s.Stderr = stdin, &out, &errb
	if err := s.Start(cmd); err != nil {
		return nil, fmt.Errorf("start remote command: %w", err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Wait() }()
	select {
	case err = <-done:
	case <-ctx.Done():
		s.Close()
		return nil, ctx.Err()
	case <-c.done:
		s.Close()
		return nil, c.err
	}
	if err != nil {
		if msg := bytes.TrimSpace(errb.Bytes()); len(msg) > 0 {
			return out.Bytes(), fmt.Errorf("%w: %s", err, msg)
		}
		if cerr := c.Err(); cerr != nil {
			return out.Bytes(), fmt.Errorf("%w (%w)", err, cerr)
		}
		return out.Bytes(), err
	}
	return out.Bytes(), nil
}

// DefaultHostKeyAlgorithms are the host key algorithms offered when the
// host's key is not known yet: plain keys (no certificates), ssh-ed25519
// first. Dropbear, the SSH server of many small VM guest images, ends the
// handshake (the client sees EOF) when the client's first choice is an
// algorithm it has no host key for, and Go's own default list starts with
// certificates, ECDSA and RSA; a guest usually has an ed25519 key.
func DefaultHostKeyAlgorithms() []string {
	return []string{
		ssh.KeyAlgoED25519,
		ssh.KeyAlgoECDSA256, ssh.KeyAlgoECDSA384, ssh.KeyAlgoECDSA521,
		ssh.KeyAlgoRSASHA512, ssh.KeyAlgoRSASHA256, ssh.KeyAlgoRSA,
	}
}

// HostKeyAlgorithms returns the host key algorithms that let a server
// present one of keys, for Config.HostKeyAlgorithms: a key's own type,
// and for an RSA key rsa-sha2-512, rsa-sha2-256 and ssh-rsa (the same key
// signed with SHA-512, SHA-256 or SHA-1). For a certificate it is the
// certificate's type. Nil for no keys.
func HostKeyAlgorithms(keys ...ssh.PublicKey) []string {
	var algos []string
	add := func(a ...string) {
		for _, x := range a {
			if !slices.Contains(algos, x) {
				algos = append(algos, x)
			}
		}
	}
	for _, k := range keys {
		switch k.Type() {
		case ssh.KeyAlgoRSA:
			add(ssh.KeyAlgoRSASHA512, ssh.KeyAlgoRSASHA256, ssh.KeyAlgoRSA)
		case ssh.CertAlgoRSAv01:
			add(ssh.CertAlgoRSASHA512v01, ssh.CertAlgoRSASHA256v01, ssh.CertAlgoRSAv01)
		default:
			add(k.Type())
		}
	}
	return algos
}

// ErrUnreachable is returned (wrapped) by Dial when no TCP connection could
// be made: worth another try on an instance that has just booted, unlike a
// failed handshake or authentication.
var ErrUnreachable = errors.New("unreachable")

// TOFU is a trust-on-first-use host key store keyed by instance id. The
// zero value keeps the keys in memory; with Path set they are kept in
// that file too, so a restarted manager still refuses a changed key. It
// is safe for concurrent use.
type TOFU struct {
	// Path is the file the keys are kept in: one line per id, the
	// URL-escaped id, a space and the key in authorized_keys form. Set it
	// before first use.
	Path string

	mu     sync.Mutex
	keys   map[string][]byte // instance id -> marshalled public key
	loaded bool
}

// ErrHostKeyMismatch is returned (wrapped) by a TOFU callback when an
// instance presents a key other than the one it presented first.
var ErrHostKeyMismatch = errors.New("host key mismatch")

// Callback returns the host key check for instance id: the first key seen
// is remembered, later connections must present the same key.
func (t *TOFU) Callback(id string) ssh.HostKeyCallback {
	return func(host string, remote net.Addr, key ssh.PublicKey) error {
		t.mu.Lock()
		defer t.mu.Unlock()
		if err := t.loadLocked(); err != nil {
			return err
		}
		got := key.Marshal()
		if known, ok := t.keys[id]; ok {
			if !bytes.Equal(known, got) {
				was := "?"
				if k, err := ssh.ParsePublicKey(known); err == nil {
					was = k.Type() + " " + ssh.FingerprintSHA256(k)
				}
				return fmt.Errorf("%w: %s (%s) presented %s %s, not the key it presented first (%s)",
					ErrHostKeyMismatch, id, host, key.Type(), ssh.FingerprintSHA256(key), was)
			}
			return nil
		}
		if t.Path != "" {
			line := url.QueryEscape(id) + " " + string(ssh.MarshalAuthorizedKey(key))
			if err := appendSync(t.Path, line); err != nil {
				return fmt.Errorf("remember the host key of %s: %w", id, err)
			}
		}
		t.keys[id] = got
		return nil
	}
}

// loadLocked reads Path once; a file that does not exist yet is empty.
func (t *TOFU) loadLocked() error {
	if t.loaded {
		return nil
	}
	if t.keys == nil {
		t.keys = make(map[string][]byte)
	}
	if t.Path == "" {
		t.loaded = true
		return nil
	}
	b, err := os.ReadFile(t.Path)
	if errors.Is(err, fs.ErrNotExist) {
		t.loaded = true
		return nil
	}
	if err != nil {
		return fmt.Errorf("host keys: %w", err)
	}
	for i, line := range strings.Split(string(b), "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		esc, rest, ok := strings.Cut(line, " ")
		id, err := url.QueryUnescape(esc)
		if !ok || err != nil {
			return fmt.Errorf("host keys %s:%d: want an id and a key", t.Path, i+1)
		}
		key, _, _, _, err := ssh.ParseAuthorizedKey([]byte(rest))
		if err != nil {
			return fmt.Errorf("host keys %s:%d: %w", t.Path, i+1, err)
		}
		t.keys[id] = key.Marshal()
	}
	t.loaded = true
	return nil
}

// appendSync appends line to the file at path (created 0600) and syncs it.
func appendSync(path, line string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(line); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// Forget drops the key remembered for instance id (the instance is gone),
// from Path too.
func (t *TOFU) Forget(id string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.loadLocked(); err != nil {
		return
	}
	if _, ok := t.keys[id]; !ok {
		return
	}
	delete(t.keys, id)
	if t.Path == "" {
		return
	}
	var buf strings.Builder
	for k, v := range t.keys {
		key, err := ssh.ParsePublicKey(v)
		if err != nil {
			continue
		}
		buf.WriteString(url.QueryEscape(k) + " " + string(ssh.MarshalAuthorizedKey(key)))
	}
	tmp := t.Path + ".tmp"
	if err := os.WriteFile(tmp, []byte(buf.String()), 0o600); err == nil {
		os.Rename(tmp, t.Path)
	}
}

// Algorithms returns the host key algorithms of the key remembered for
// instance id (see HostKeyAlgorithms), nil when none is: for
// Config.HostKeyAlgorithms, so the instance presents the key it
// presented first rather than another of its keys.
func (t *TOFU) Algorithms(id string) []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.loadLocked() != nil {
		return nil
	}
	b, ok := t.keys[id]
	if !ok {
		return nil
	}
	k, err := ssh.ParsePublicKey(b)
	if err != nil {
		return nil
	}
	return HostKeyAlgorithms(k)
}

// Known reports whether a key is remembered for instance id.
func (t *TOFU) Known(id string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.loadLocked() != nil {
		return false
	}
	_, ok := t.keys[id]
	return ok
}
