package instance

import (
	"crypto/sha256"
	"encoding/hex"
	"sync"
	"time"

	"github.com/drover-ci/drover/internal/clock"
	"github.com/drover-ci/drover/internal/sshx"
)

// Idle connections kept per host and how long one may stay idle: a job
// that finds one skips the TCP connect, the key exchange and the
// authentication (most of a trivial job's cost over SSH).
const (
	maxIdlePerHost = 4
	idleTimeout    = 5 * time.Minute
)

// connPool keeps the SSH connections of finished jobs for the next job on
// the same host with the same credentials. A connection serves one job at
// a time, so sshd's per-connection session limit is never shared. The
// zero value is not ready: use newConnPool.
type connPool struct {
	clock clock.Clock
	mu    sync.Mutex
	idle  map[string][]idleConn
}

type idleConn struct {
	c     *sshx.Client
	since time.Time
}

func newConnPool(clk clock.Clock) *connPool {
	return &connPool{clock: clock.OrReal(clk), idle: map[string][]idleConn{}}
}

// poolKey identifies a host and how it is logged into: the instance id,
// the address, the user and a digest of the credentials (a reloaded
// config.toml with other credentials does not reuse old connections).
func poolKey(id string, cfg sshx.Config) string {
	h := sha256.New()
	for _, s := range []string{id, cfg.Addr, cfg.User, string(cfg.Key), cfg.Password} {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))
}

// get returns an idle, still open connection for key, or nil.
func (p *connPool) get(key string) *sshx.Client {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.expireLocked()
	l := p.idle[key]
	for len(l) > 0 {
		ic := l[len(l)-1]
		l = l[:len(l)-1]
		if ic.c.Err() == nil {
			p.setLocked(key, l)
			return ic.c
		}
		ic.c.Close()
	}
	p.setLocked(key, l)
	return nil
}

// put keeps c for the next job on key's host, or closes it when it has
// ended or the host has enough idle connections.
func (p *connPool) put(key string, c *sshx.Client) {
	if p == nil || c.Err() != nil {
		c.Close()
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.expireLocked()
	if len(p.idle[key]) >= maxIdlePerHost {
		c.Close()
		return
	}
	p.idle[key] = append(p.idle[key], idleConn{c: c, since: p.clock.Now()})
}

// closeAll closes every idle connection.
func (p *connPool) closeAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for k, l := range p.idle {
		for _, ic := range l {
			ic.c.Close()
		}
		delete(p.idle, k)
	}
}

func (p *connPool) setLocked(key string, l []idleConn) {
	if len(l) == 0 {
		delete(p.idle, key)
		return
	}
	p.idle[key] = l
}

// expireLocked closes connections idle for longer than idleTimeout and
// those that ended.
func (p *connPool) expireLocked() {
	now := p.clock.Now()
	for k, l := range p.idle {
		kept := l[:0]
		for _, ic := range l {
			if ic.c.Err() != nil || now.Sub(ic.since) > idleTimeout {
				ic.c.Close()
				continue
			}
			kept = append(kept, ic)
		}
		p.setLocked(k, kept)
	}
}
