package web_test

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/coordinator"
	"github.com/drover-ci/drover/internal/httpserver"
	"github.com/drover-ci/drover/internal/httpserver/tlstest"
)

// TestSessionCookieSecure: the session cookie is Secure when the browser
// reached the coordinator over HTTPS: directly over TLS, or through a
// trusted proxy that says X-Forwarded-Proto: https. The same header from
// a client that is not a trusted proxy changes nothing.
func TestSessionCookieSecure(t *testing.T) {
	t.Parallel()
	c, err := coordinator.New(t.Context(), slog.New(slog.DiscardHandler), coordinator.Config{DataDir: t.TempDir(), LongPollTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	ca := tlstest.NewCA(t)
	certFile, keyFile, _ := ca.Issue(t, "127.0.0.1")
	tlsCfg, err := httpserver.ServerTLS(certFile, keyFile, nil)
	if err != nil {
		t.Fatal(err)
	}
	proxies, err := httpserver.ParseTrustedProxies([]string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	serve := func(h http.Handler, o httpserver.Options) string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		srv := httpserver.New(h, o)
		go func() { _ = srv.Serve(ln) }()
		t.Cleanup(func() { srv.Close() })
		return ln.Addr().String()
	}
	tlsAddr := serve(c.Handler(), httpserver.Options{TLS: tlsCfg})
	proxied := serve(proxies.Handler(c.Handler()), httpserver.Options{})

	// from is a client connecting from the loopback address src.
	from := func(src string, base *http.Transport) *http.Client {
		tr := base.Clone()
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
		tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
			return d.DialContext(ctx, network, addr)
		}
		return &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	plain := &http.Transport{}
	withCA := &http.Transport{TLSClientConfig: ca.Client().Transport.(*http.Transport).TLSClientConfig}
	for _, tc := range []struct {
		name      string
		client    *http.Client
		url       string
		forwarded string
		want      bool
	}{
		{"direct TLS", from("127.0.0.1", withCA), "https://" + tlsAddr, "", true},
		{"trusted proxy says https", from("127.0.0.1", plain), "http://" + proxied, "https", true},
		{"trusted proxy says nothing", from("127.0.0.1", plain), "http://" + proxied, "", false},
		{"untrusted client says https", from("127.0.0.2", plain), "http://" + proxied, "https", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequestWithContext(t.Context(), "GET", tc.url+"/login?"+url.Values{"token": {c.AdminToken()}, "next": {"/jobs"}}.Encode(), nil)
			if err != nil {
				t.Fatal(err)
			}
			if tc.forwarded != "" {
				req.Header.Set("X-Forwarded-Proto", tc.forwarded)
			}
			resp, err := tc.client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			var session *http.Cookie
			for _, ck := range resp.Cookies() {
				if ck.Name == "drover_session" {
					session = ck
				}
			}
			if resp.StatusCode != http.StatusSeeOther || session == nil {
				t.Fatalf("GET /login?token = %d with cookies %v, want 303 and a session", resp.StatusCode, resp.Cookies())
			}
			if session.Secure != tc.want {
				t.Errorf("session cookie Secure = %v, want %v", session.Secure, tc.want)
			}
		})
	}
}
