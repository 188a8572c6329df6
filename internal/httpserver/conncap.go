package httpserver

import (
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"syscall"
	"time"
)

// Refusals.
const (
	// retryAfter is the Retry-After of a refusal, in seconds.
	retryAfter = 5
	// refuseWriteTimeout bounds the write of a refusal; a fresh
	// connection's send buffer is empty, so it never waits in practice.
	refuseWriteTimeout = time.Second
	// lingerTime is how long a refused connection is kept, its sending
	// side shut, reading and discarding what the client sends: closing a
	// socket with unread data resets it, and a reset can reach the client
	// before it has read the refusal. At most maxLingering refusals linger
	// at once; beyond that a refused connection is closed at once.
	lingerTime     = 500 * time.Millisecond
	lingerMaxBytes = 64 << 10
	maxLingering   = 64
	// logEvery: a client address's refusals are logged at most this often
	// (the server-wide cap's too); the others are only counted.
	logEvery = time.Minute
	// maxLogged bounds the addresses whose last logged refusal is
	// remembered; beyond it (a flood from many addresses within a minute)
	// refusals of new addresses are counted, not logged.
	maxLogged = 4096
)

// Reasons of a refusal (label "reason" of the refused-connections metric).
const (
	reasonClient = "per_client"
	reasonServer = "server"
)

// FDBudget is the default of Options.MaxConns: three quarters of the
// process's soft open-file limit (RLIMIT_NOFILE, which Go raises to the
// hard limit at start), leaving a quarter, and at least 64, for the
// database and its journal, logs and trace files, outbound connections
// (the upstream, PostgreSQL, executors) and refusals in progress; 0 when
// the limit cannot be read or is unlimited.
func FDBudget() int {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil || rl.Cur > 1<<30 {
		return 0
	}
	n := int(rl.Cur)
	return max(n-max(n/4, 64), 1)
}

// limiter counts a server's open connections, in all and by client.
type limiter struct {
	perClient, total int // 0 = no cap
	log              *slog.Logger
	metrics          *Metrics
	now              func() time.Time // of refusals, for their log
	// closeOnly: refusals are closed without an answer (TLS: the answer
	// would cost a handshake).
	closeOnly bool

	mu        sync.Mutex
	open      int
	byClient  map[netip.Prefix]int
	lingering int
	logged    map[netip.Prefix]logState // key netip.Prefix{} for the server-wide cap
	prunedAt  time.Time                 // of logged's last sweep
}

type logState struct {
	at       time.Time // of the last logged refusal
	unlogged int       // refusals since
}

// newLimiter returns nil when neither cap applies.
func newLimiter(perClient, total int, log *slog.Logger, m *Metrics) *limiter {
	if perClient <= 0 && total <= 0 {
		return nil
	}
	return &limiter{
		perClient: perClient, total: total, log: log, metrics: m, now: time.Now,
		byClient: map[netip.Prefix]int{}, logged: map[netip.Prefix]logState{},
	}
}

// clientOf is the address connections are counted by: an IPv4 address
// (/32), or an IPv6 /64, as one host commonly holds a whole /64. It is
// invalid for a non-IP address (a Unix socket): counted only in all.
func clientOf(a net.Addr) netip.Prefix {
	var ap netip.AddrPort
	switch a := a.(type) {
	case *net.TCPAddr:
		ap = a.AddrPort()
	default:
		if a == nil {
			return netip.Prefix{}
		}
		var err error
		if ap, err = netip.ParseAddrPort(a.String()); err != nil {
			return netip.Prefix{}
		}
	}
	ip := ap.Addr().Unmap().WithZone("")
	switch {
	case !ip.IsValid():
		return netip.Prefix{}
	case ip.Is4():
		return netip.PrefixFrom(ip, 32)
	default:
		p, _ := ip.Prefix(64)
		return p
	}
}

// clientString is a client key as shown to people: the address alone for
// IPv4.
func clientString(p netip.Prefix) string {
	if p.Addr().Is4() {
		return p.Addr().String()
	}
	return p.String()
}

// capListener accepts within the caps of lim.
type capListener struct {
	net.Listener
	lim *limiter
}

// Accept returns the next connection within the caps, refusing those
// over them. Errors of the listener are returned as they are: net/http
// retries temporary ones (EMFILE among them) with a growing pause of up to
// a second instead of spinning or stopping.
func (l *capListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if tc := l.lim.admit(c); tc != nil {
			return tc, nil
		}
	}
}

// admit counts c in and returns it wrapped so that closing it counts it
// out, or refuses it and returns nil.
func (l *limiter) admit(c net.Conn) net.Conn {
	key := clientOf(c.RemoteAddr())
	l.mu.Lock()
	var (
		status int
		msg    string
		reason string
		limit  int
	)
	switch {
	case key.IsValid() && l.perClient > 0 && l.byClient[key] >= l.perClient:
		status, reason, limit = http.StatusTooManyRequests, reasonClient, l.perClient
		msg = fmt.Sprintf("too many connections from %s: limit %d", clientString(key), l.perClient)
	case l.total > 0 && l.open >= l.total:
		status, reason, limit = http.StatusServiceUnavailable, reasonServer, l.total
		msg = fmt.Sprintf("too many connections to this server: limit %d", l.total)
	default:
		l.open++
		if key.IsValid() {
			l.byClient[key]++
		}
		l.mu.Unlock()
		l.metrics.opened()
		return &capConn{Conn: c, lim: l, key: key}
	}
	logKey := key
	if reason == reasonServer {
		logKey = netip.Prefix{}
	}
	unlogged, doLog := l.shouldLog(logKey)
	linger := l.lingering < maxLingering && !l.closeOnly
	if linger {
		l.lingering++
	}
	l.mu.Unlock()

	l.metrics.refused(reason)
	if doLog {
		client := c.RemoteAddr().String()
		if reason == reasonClient {
			client = clientString(key)
		}
		l.log.Warn("connection refused: "+msg+" (logged once a minute; every refusal is counted in the metrics)",
			"client", client, "status", status, "reason", reason, "limit", limit, "unlogged_before", unlogged)
	}
	if l.closeOnly {
		c.Close()
		return nil
	}
	go l.refuse(c, status, msg, linger)
	return nil
}

// shouldLog says whether a refusal under key is logged, and how many went
// unlogged since the last that was; l.mu is held.
func (l *limiter) shouldLog(key netip.Prefix) (unlogged int, log bool) {
	now := l.now()
	st, ok := l.logged[key]
	if ok && now.Sub(st.at) < logEvery {
		st.unlogged++
		l.logged[key] = st
		return 0, false
	}
	if !ok && len(l.logged) >= maxLogged && now.Sub(l.prunedAt) >= time.Second {
		l.prunedAt = now // a sweep a second at most, however many addresses flood
		for k, s := range l.logged {
			if now.Sub(s.at) >= logEvery {
				delete(l.logged, k)
			}
		}
	}
	if !ok && len(l.logged) >= maxLogged {
		return 0, false
	}
	l.logged[key] = logState{at: now}
	return st.unlogged, true
}

// refuse answers c with status and msg and closes it, without reading the
// request; with linger it shuts its sending side first and discards what
// the client sends for a moment (see lingerTime).
func (l *limiter) refuse(c net.Conn, status int, msg string, linger bool) {
	defer c.Close()
	if linger {
		defer func() {
			l.mu.Lock()
			l.lingering--
			l.mu.Unlock()
		}()
	}
	body := msg + "\n"
	resp := fmt.Sprintf("HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\nRetry-After: %d\r\nConnection: close\r\n\r\n%s",
		status, http.StatusText(status), len(body), retryAfter, body)
	_ = c.SetWriteDeadline(time.Now().Add(refuseWriteTimeout))
	if _, err := io.WriteString(c, resp); err != nil || !linger {
		return
	}
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
	_ = c.SetReadDeadline(time.Now().Add(lingerTime))
	_, _ = io.CopyN(io.Discard, c, lingerMaxBytes)
}

// release counts out a connection of key.
func (l *limiter) release(key netip.Prefix) {
	l.mu.Lock()
	l.open--
	if key.IsValid() {
		if n := l.byClient[key] - 1; n > 0 {
			l.byClient[key] = n
		} else {
			delete(l.byClient, key)
		}
	}
	l.mu.Unlock()
	l.metrics.closed()
}

// capConn is an admitted connection; closing it counts it out, once.
type capConn struct {
	net.Conn
	lim  *limiter
	key  netip.Prefix
	once sync.Once
}

func (c *capConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.lim.release(c.key) })
	return err
}

// CloseWrite shuts the sending side, which net/http does before closing a
// connection whose request it did not read whole, so that the client
// reads the answer before the close resets the connection.
func (c *capConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
