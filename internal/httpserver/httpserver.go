// Package httpserver makes the HTTP servers of drover's daemons (the
// coordinator, the router, a manager's listen_address) with limits that a
// slow or hostile client cannot get around: a request must arrive whole
// within a bound, headers are capped, idle keep-alive connections close.
//
// A request's body must be read within ReadTimeout; the wait for the
// answer is not bounded by it (net/http lifts the read deadline once the
// body is read), so a long poll held for 50 s is unaffected. There is no
// WriteTimeout, for the same long polls and for followed logs.
package httpserver

import (
	"net/http"
	"time"
)

// Defaults of Options.
const (
	DefaultReadHeaderTimeout = 10 * time.Second
	DefaultReadTimeout       = 60 * time.Second // 1 MiB trace patches from slow links fit
	DefaultIdleTimeout       = 120 * time.Second
	DefaultMaxHeaderBytes    = 64 << 10
)

// Options are the limits; zero values mean the defaults.
type Options struct {
	ReadHeaderTimeout time.Duration
	ReadTimeout       time.Duration
	IdleTimeout       time.Duration
	MaxHeaderBytes    int
}

// New returns a server for h with the limits of o.
func New(h http.Handler, o Options) *http.Server {
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
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: def(DefaultReadHeaderTimeout, o.ReadHeaderTimeout),
		ReadTimeout:       def(DefaultReadTimeout, o.ReadTimeout),
		IdleTimeout:       def(DefaultIdleTimeout, o.IdleTimeout),
		MaxHeaderBytes:    mh,
	}
}
