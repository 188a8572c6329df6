// Package engine reaches the Docker engines of fleet instances the way
// GitLab's fleeting does: through the instance's connect info, over one
// SSH connection per instance that carries the engine's API (OpenSSH's
// streamlocal forwarding of the engine's unix socket). The connection is
// shared by every job on the instance and dialled again when it breaks;
// each instance has one Docker API client, so that what callers cache per
// engine (a helper image built once) stays cached across jobs.
package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"

	dockerclient "github.com/docker/docker/client"

	"github.com/drover-ci/drover/internal/clock"
	"github.com/drover-ci/drover/internal/sshx"
)

// DefaultSocket is the engine's socket on an instance.
const DefaultSocket = "/var/run/docker.sock"

// Socket returns the socket path on the instance that host names: a
// unix:// URL's path, DefaultSocket when host is empty. Any other scheme
// is an error: an instance's engine is reached through SSH, not directly.
func Socket(host string) (string, error) {
	switch {
	case host == "":
		return DefaultSocket, nil
	case strings.HasPrefix(host, "unix://"):
		p := strings.TrimPrefix(host, "unix://")
		if !strings.HasPrefix(p, "/") {
			return "", fmt.Errorf("host %q: the socket path is not absolute", host)
		}
		return p, nil
	}
	return "", fmt.Errorf("host %q: on autoscaled instances the engine is reached over SSH; only a unix:// socket path on the instance may be given", host)
}

// Pool holds the engine connections of instances, by key (the caller's:
// runner and instance id). Its zero value is not ready: use New.
type Pool struct {
	hostKeys *sshx.TOFU
	clk      clock.Clock
	log      *slog.Logger

	mu     sync.Mutex
	m      map[string]*Conn
	closed bool
}

// New returns an empty pool. hostKeys (nil = a store of its own) checks
// the instances' host keys; share it with whatever else connects to them.
func New(hostKeys *sshx.TOFU, clk clock.Clock, logger *slog.Logger) *Pool {
	if hostKeys == nil {
		hostKeys = &sshx.TOFU{}
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Pool{hostKeys: hostKeys, clk: clock.OrReal(clk), log: logger, m: map[string]*Conn{}}
}

// Target is how to reach one instance's engine.
type Target struct {
	// Key names the connection in the pool (runner and instance id).
	Key string
	// ID is the instance's id: its host key is checked under it.
	ID string
	// SSH is how to log in (address, user, credentials, timeouts); its
	// HostKey and Clock are the pool's.
	SSH sshx.Config
	// Socket is the engine's socket path on the instance; "" =
	// DefaultSocket.
	Socket string
}

// Get returns the connection to t's engine, made on first use; nothing
// is dialled until the client's first request.
func (p *Pool) Get(t Target) (*Conn, error) {
	if t.Socket == "" {
		t.Socket = DefaultSocket
	}
	cfg := t.SSH
	cfg.HostKey = p.hostKeys.Callback(t.ID)
	cfg.HostKeyAlgorithms = p.hostKeys.Algorithms(t.ID)
	cfg.Clock = p.clk
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, errors.New("engine pool closed")
	}
	if c, ok := p.m[t.Key]; ok && c.socket == t.Socket && c.cfg.Addr == cfg.Addr {
		return c, nil
	} else if ok {
		c.close()
	}
	c := &Conn{id: t.ID, cfg: cfg, socket: t.Socket, log: p.log.With("instance", t.ID)}
	cli, err := dockerclient.NewClientWithOpts(
		dockerclient.WithHost("tcp://"+hostLabel(t.ID)+":2375"),
		dockerclient.WithDialContext(c.dial),
		dockerclient.WithAPIVersionNegotiation(),
	)
	if err != nil {
		return nil, fmt.Errorf("engine of instance %s: client: %w", t.ID, err)
	}
	c.cli = cli
	p.m[t.Key] = c
	return c, nil
}

// hostLabel makes an instance id usable as the (never resolved) host of
// the client's URLs.
func hostLabel(id string) string {
	var b strings.Builder
	for _, r := range id {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '.' {
			b.WriteRune(r)
		} else {
			b.WriteByte('-')
		}
	}
	if b.Len() == 0 {
		return "instance"
	}
	return b.String()
}

// Forget closes and drops the connection of key (an instance that was
// deleted).
func (p *Pool) Forget(key string) {
	p.mu.Lock()
	c := p.m[key]
	delete(p.m, key)
	p.mu.Unlock()
	if c != nil {
		c.close()
	}
}

// Close closes every connection; Get fails afterwards.
func (p *Pool) Close() {
	p.mu.Lock()
	conns := p.m
	p.m, p.closed = map[string]*Conn{}, true
	p.mu.Unlock()
	for _, c := range conns {
		c.close()
	}
}

// Conn is one instance's engine: a Docker API client whose connections
// are forwarded through an SSH connection to the instance.
type Conn struct {
	id     string
	cfg    sshx.Config
	socket string
	log    *slog.Logger
	cli    *dockerclient.Client

	mu      sync.Mutex
	ssh     *sshx.Client
	dialing chan struct{} // closed when the dial in progress ends
	dials   int
	closed  bool
}

// Client is the Docker API client of the instance's engine.
func (c *Conn) Client() *dockerclient.Client { return c.cli }

// Dials reports how many SSH connections were made so far.
func (c *Conn) Dials() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.dials
}

// dial is the Docker client's dialer: a forwarded connection to the
// engine's socket over the instance's SSH connection, which is dialled
// (again) when there is none or it ended. A forward that fails on a
// connection that then turns out dead is tried once more on a new one.
func (c *Conn) dial(ctx context.Context, _, _ string) (net.Conn, error) {
	for attempt := 0; ; attempt++ {
		sc, err := c.sshClient(ctx)
		if err != nil {
			return nil, fmt.Errorf("engine of instance %s: %w", c.id, err)
		}
		conn, err := sc.DialContext(ctx, "unix", c.socket)
		if err == nil {
			return conn, nil
		}
		if attempt > 0 || ctx.Err() != nil {
			return nil, fmt.Errorf("engine of instance %s: %w", c.id, err)
		}
		// The connection may be dead without knowing it yet (its peer
		// killed, no keep-alive answered so far): one more try on a new
		// one. A socket that is not there fails again, on the new one.
		c.log.Info("forward over the SSH connection failed; dialling again", "err", err, "conn_err", sc.Err())
		c.drop(sc)
	}
}

// sshClient returns the live SSH connection, dialling one when needed;
// concurrent callers share one dial.
func (c *Conn) sshClient(ctx context.Context) (*sshx.Client, error) {
	for {
		c.mu.Lock()
		if c.closed {
			c.mu.Unlock()
			return nil, errors.New("connection closed (instance forgotten)")
		}
		if c.ssh != nil && c.ssh.Err() == nil {
			sc := c.ssh
			c.mu.Unlock()
			return sc, nil
		}
		if wait := c.dialing; wait != nil {
			c.mu.Unlock()
			select {
			case <-wait:
				continue
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		done := make(chan struct{})
		c.dialing = done
		cfg := c.cfg
		c.mu.Unlock()

		start := time.Now()
		sc, err := sshx.Dial(ctx, cfg)
		c.mu.Lock()
		c.dialing = nil
		close(done)
		if err != nil {
			c.mu.Unlock()
			return nil, err
		}
		if c.closed {
			c.mu.Unlock()
			sc.Close()
			return nil, errors.New("connection closed (instance forgotten)")
		}
		if old := c.ssh; old != nil {
			old.Close()
		}
		c.ssh = sc
		c.dials++
		n := c.dials
		c.mu.Unlock()
		c.log.Debug("SSH connection to the instance's engine", "addr", cfg.Addr, "dial", n, "took", time.Since(start))
		return sc, nil
	}
}

// drop closes sc and forgets it, if it is still the current connection.
func (c *Conn) drop(sc *sshx.Client) {
	c.mu.Lock()
	if c.ssh == sc {
		c.ssh = nil
	}
	c.mu.Unlock()
	sc.Close()
}

// Ping asks the engine whether it answers.
func (c *Conn) Ping(ctx context.Context) error {
	if _, err := c.cli.Ping(ctx); err != nil {
		return fmt.Errorf("engine of instance %s does not answer: %w", c.id, err)
	}
	return nil
}

// Break closes the SSH connection (not the client): the next request
// dials again. For tests and for callers that know the link is bad.
func (c *Conn) Break() {
	c.mu.Lock()
	sc := c.ssh
	c.mu.Unlock()
	if sc != nil {
		sc.Close()
	}
}

func (c *Conn) close() {
	c.mu.Lock()
	c.closed = true
	sc := c.ssh
	c.ssh = nil
	c.mu.Unlock()
	if sc != nil {
		sc.Close()
	}
	c.cli.Close()
}
