package api

import (
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// maxAgeTransport bounds how long the connections of a transport are
// reused (GitLab Runner's connection_max_age): before a request, once the
// maximum age has passed since the idle connections were last closed, it
// closes them, and the request and those after it open new ones. That is
// GitLab Runner's policy (its network client does the same): connections
// held by a request (a long poll) are not cut, so a load balancer in front
// of the coordinator sees its connections spread again and renewed
// certificates are picked up, and no request fails for it.
type maxAgeTransport struct {
	base   *http.Transport
	maxAge atomic.Int64 // nanoseconds; 0: no limit

	mu    sync.Mutex
	since time.Time // when the idle connections were last closed, or the transport made
}

func newMaxAgeTransport(base *http.Transport, maxAge time.Duration) *maxAgeTransport {
	t := &maxAgeTransport{base: base, since: time.Now()}
	t.maxAge.Store(int64(maxAge))
	return t
}

// RoundTrip closes the idle connections when they may be older than the
// maximum age, then sends req on the base transport.
func (t *maxAgeTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if age := time.Duration(t.maxAge.Load()); age > 0 {
		t.mu.Lock()
		if now := time.Now(); now.Sub(t.since) >= age {
			t.base.CloseIdleConnections()
			t.since = now
		}
		t.mu.Unlock()
	}
	return t.base.RoundTrip(req)
}

// CloseIdleConnections closes the base transport's idle connections (what
// http.Client.CloseIdleConnections calls).
func (t *maxAgeTransport) CloseIdleConnections() { t.base.CloseIdleConnections() }

// SetConnectionMaxAge changes the maximum age of the connections of c's
// own transport (connection_max_age, on reload); 0 removes the limit. It
// does nothing to a client made with ClientOptions.HTTPClient.
func (c *Client) SetConnectionMaxAge(d time.Duration) {
	if t, ok := c.http.Transport.(*maxAgeTransport); ok {
		t.maxAge.Store(int64(max(d, 0)))
	}
}
