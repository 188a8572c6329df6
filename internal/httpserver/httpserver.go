// Package httpserver makes the HTTP servers of drover's daemons (the
// coordinator, the router, a manager's listen_address) with limits that a
// slow or hostile client cannot get around: a request must arrive whole
// within a bound, headers are capped, idle keep-alive connections close,
// and the connections one client, and all clients together, may hold open
// are capped.
//
// # Timeouts
//
// A request's headers must arrive within ReadHeaderTimeout and the whole
// request, body included, within ReadTimeout. The wait for the answer is
// not bounded by it (net/http lifts the read deadline once the body is
// read), so a long poll held for 50 s is unaffected. There is no
// WriteTimeout, for the same long polls and for followed logs.
//
// The largest body a runner sends is a 1 MiB trace PATCH: with the 60 s
// default it must arrive at 17 KiB/s or more. A route that takes larger
// bodies over slow links (artifacts, once served) should lift the deadline
// for its own requests with http.ResponseController.SetReadDeadline, sized
// by Content-Length, rather than raise ReadTimeout for every route.
//
// # Connection caps
//
// Server.Serve accepts connections through a listener that counts them by
// client address (an IPv4 address, an IPv6 /64). A connection over
// MaxConnsPerClient is answered "429 Too Many Requests", one over MaxConns
// (by default three quarters of the process's open-file limit) "503
// Service Unavailable", both with Retry-After and a body naming the cause,
// and closed without reading the request. So a flood of connections that
// send nothing, or a body a byte at a time, from one address holds at most
// MaxConnsPerClient of them (each until ReadHeaderTimeout or ReadTimeout
// cuts it); the rest cost a file descriptor for the moment it takes to
// refuse them; all clients together leave a quarter of the process's file
// descriptors to the rest of it; and other clients keep being served. Refusals are counted in Metrics and logged at
// most once per client address a minute.
//
// Over TLS a refused connection is closed without an answer: answering
// would take a handshake, which is what a flood should not get for free.
//
// # TLS
//
// With Options.TLS (see ServerTLS) the server speaks HTTPS only, TLS 1.2
// or newer, with a certificate read again when its files change. The
// daemons' session cookies are Secure when IsHTTPS says the client's
// connection was (TLS here, or at a trusted proxy: TrustedProxies).
//
// Nothing the daemons serve hijacks a connection; one that did would keep
// its place in the counts until the hijacker closes it.
package httpserver

import (
	"context"
	"crypto/tls"
	"log/slog"
	"net"
	"net/http"
	"time"
)

// Defaults of Options.
const (
	DefaultReadHeaderTimeout = 10 * time.Second
	DefaultReadTimeout       = 60 * time.Second // 1 MiB trace patches from slow links fit
	DefaultIdleTimeout       = 120 * time.Second
	DefaultMaxHeaderBytes    = 64 << 10
	// DefaultMaxConnsPerClient leaves room for several runner managers
	// behind one NAT address, each holding a long poll per [[runners]]
	// entry (times request_concurrency), a jobs/watch and trace PATCHes
	// and job updates of its running jobs, and for a router forwarding
	// the calls of its runners' jobs; a client opening more is a flood.
	DefaultMaxConnsPerClient = 512
)

// NoCap, as Options.MaxConnsPerClient or Options.MaxConns, turns the cap
// off.
const NoCap = -1

// Options are the limits; zero values mean the defaults.
type Options struct {
	ReadHeaderTimeout time.Duration
	ReadTimeout       time.Duration
	IdleTimeout       time.Duration
	MaxHeaderBytes    int
	// MaxConnsPerClient caps the connections open at once from one client
	// address (an IPv4 address or an IPv6 /64); more are answered 429 and
	// closed. 0 = DefaultMaxConnsPerClient, negative = no cap.
	MaxConnsPerClient int
	// MaxConns caps the connections open at once from all clients; more
	// are answered 503 and closed. 0 = three quarters of the process's
	// open-file limit (see FDBudget), negative = no cap.
	MaxConns int
	// Logger receives refusals and net/http's own errors (accept errors
	// such as "too many open files"); nil = discarded.
	Logger *slog.Logger
	// Metrics counts open and refused connections; nil = not counted.
	Metrics *Metrics
	// TLS, if set, makes the server HTTPS only (see ServerTLS).
	TLS *tls.Config
}

// Server is an http.Server with the limits of its Options.
type Server struct {
	srv *http.Server
	lim *limiter // nil when there is no cap
	// tls is set with Options.TLS; srv.TLSConfig is no witness, as
	// net/http sets one on plain servers too.
	tls bool
}

// New returns a server for h with the limits of o.
func New(h http.Handler, o Options) *Server {
	def := func(d, v time.Duration) time.Duration {
		if v > 0 {
			return v
		}
		return d
	}
	mh := o.MaxHeaderBytes
	if mh <= 0 {
		mh = DefaultMaxHeaderBytes
	}
	logger := o.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: def(DefaultReadHeaderTimeout, o.ReadHeaderTimeout),
		ReadTimeout:       def(DefaultReadTimeout, o.ReadTimeout),
		IdleTimeout:       def(DefaultIdleTimeout, o.IdleTimeout),
		MaxHeaderBytes:    mh,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
		TLSConfig:         o.TLS,
	}
	perClient := o.MaxConnsPerClient
	if perClient == 0 {
		perClient = DefaultMaxConnsPerClient
	}
	total := o.MaxConns
	if total == 0 {
		total = FDBudget()
	}
	lim := newLimiter(max(perClient, 0), max(total, 0), logger, o.Metrics)
	if lim != nil {
		lim.closeOnly = o.TLS != nil
	}
	return &Server{srv: srv, lim: lim, tls: o.TLS != nil}
}

// Serve accepts connections on ln, within the caps, and serves them until
// Shutdown or Close, over TLS when Options.TLS is set; it returns what
// http.Server.Serve returns.
func (s *Server) Serve(ln net.Listener) error {
	if s.tls {
		// The certificate comes from TLSConfig.GetCertificate.
		return s.srv.ServeTLS(s.Listener(ln), "", "")
	}
	return s.srv.Serve(s.Listener(ln))
}

// Scheme is the scheme of the server's URLs: "https" with Options.TLS,
// else "http".
func (s *Server) Scheme() string {
	if s.tls {
		return "https"
	}
	return "http"
}

// Listener is ln with the connection caps, what Serve accepts from; it is
// for callers that start the server returned by HTTPServer themselves
// (httptest.Server in tests). The caps are shared by every listener of s.
func (s *Server) Listener(ln net.Listener) net.Listener {
	if s.lim == nil {
		return ln
	}
	return &capListener{Listener: ln, lim: s.lim}
}

// HTTPServer is the http.Server with the timeouts and header cap; serve it
// only on a Listener of s, or the connection caps do not apply.
func (s *Server) HTTPServer() *http.Server { return s.srv }

// Limits are the caps in force, 0 meaning none: per client address and in
// all.
func (s *Server) Limits() (perClient, total int) {
	if s.lim == nil {
		return 0, 0
	}
	return s.lim.perClient, s.lim.total
}

// Shutdown stops accepting and waits for the requests in progress; see
// http.Server.Shutdown.
func (s *Server) Shutdown(ctx context.Context) error { return s.srv.Shutdown(ctx) }

// Close closes the listeners and every connection; see http.Server.Close.
func (s *Server) Close() error { return s.srv.Close() }
