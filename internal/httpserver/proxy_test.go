package httpserver

import (
	"crypto/tls"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestTrustedProxiesScheme: X-Forwarded-Proto decides the scheme only when
// the request comes from a trusted proxy; from anyone else it is ignored.
func TestTrustedProxiesScheme(t *testing.T) {
	proxies, err := ParseTrustedProxies([]string{"127.0.0.1", "10.0.0.0/8", "fd00::/8"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		proxies TrustedProxies
		remote  string
		proto   []string
		tls     bool
		want    string
	}{
		{"direct http", proxies, "192.0.2.1:1234", nil, false, "http"},
		{"direct TLS", proxies, "192.0.2.1:1234", nil, true, "https"},
		{"trusted https", proxies, "127.0.0.1:1234", []string{"https"}, false, "https"},
		{"trusted in a prefix", proxies, "10.1.2.3:1234", []string{"HTTPS"}, false, "https"},
		{"trusted IPv6", proxies, "[fd00::1]:1234", []string{"https"}, false, "https"},
		{"trusted IPv4-mapped", proxies, "[::ffff:127.0.0.1]:1234", []string{"https"}, false, "https"},
		{"trusted says http over TLS", proxies, "127.0.0.1:1234", []string{"http"}, true, "http"},
		{"trusted, last value is the proxy's", proxies, "127.0.0.1:1234", []string{"https, http"}, false, "http"},
		{"trusted, last header line", proxies, "127.0.0.1:1234", []string{"http", "https"}, false, "https"},
		{"trusted, junk ignored", proxies, "127.0.0.1:1234", []string{"gopher"}, false, "http"},
		{"untrusted https", proxies, "192.0.2.1:1234", []string{"https"}, false, "http"},
		{"untrusted http over TLS", proxies, "192.0.2.1:1234", []string{"http"}, true, "https"},
		{"no proxies", nil, "127.0.0.1:1234", []string{"https"}, false, "http"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got string
			h := tc.proxies.Handler(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
				got = Scheme(r)
				if IsHTTPS(r) != (got == "https") {
					t.Errorf("IsHTTPS = %v with Scheme %q", IsHTTPS(r), got)
				}
			}))
			r := httptest.NewRequest("GET", "/", nil)
			r.RemoteAddr = tc.remote
			if tc.tls {
				r.TLS = &tls.ConnectionState{}
			}
			for _, v := range tc.proto {
				r.Header.Add("X-Forwarded-Proto", v)
			}
			h.ServeHTTP(httptest.NewRecorder(), r)
			if got != tc.want {
				t.Errorf("Scheme = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestParseTrustedProxies: addresses and prefixes are taken, anything
// else is an error naming the entry.
func TestParseTrustedProxies(t *testing.T) {
	got, err := ParseTrustedProxies([]string{" 127.0.0.1 ", "10.1.0.0/16", "::1", "10.9.9.9/8", ""})
	if err != nil {
		t.Fatal(err)
	}
	var s []string
	for _, p := range got {
		s = append(s, p.String())
	}
	if want := "127.0.0.1/32 10.1.0.0/16 ::1/128 10.0.0.0/8"; strings.Join(s, " ") != want {
		t.Errorf("ParseTrustedProxies = %v, want %s", s, want)
	}
	for _, bad := range []string{"localhost", "10.0.0.0/33", "1.2.3"} {
		if _, err := ParseTrustedProxies([]string{bad}); err == nil || !strings.Contains(err.Error(), bad) {
			t.Errorf("ParseTrustedProxies(%q) = %v, want an error naming it", bad, err)
		}
	}
}
