package httpserver

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"strings"
)

// TrustedProxies are the addresses of the reverse proxies (load balancers
// terminating TLS) whose X-Forwarded-Proto is believed. From any other
// address the header is ignored: a client could send it.
type TrustedProxies []netip.Prefix

// ParseTrustedProxies reads CIDR prefixes (10.0.0.0/8, fd00::/8) or single
// addresses (127.0.0.1); an entry that is neither is an error naming it.
func ParseTrustedProxies(list []string) (TrustedProxies, error) {
	var out TrustedProxies
	for _, s := range list {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		if p, err := netip.ParsePrefix(s); err == nil {
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(s)
		if err != nil {
			return nil, fmt.Errorf("trusted proxy %q: want an address or a CIDR prefix (10.0.0.0/8)", s)
		}
		a = a.Unmap()
		out = append(out, netip.PrefixFrom(a, a.BitLen()))
	}
	return out, nil
}

// trusts reports whether remoteAddr (an http.Request's RemoteAddr) is one
// of the proxies.
func (p TrustedProxies) trusts(remoteAddr string) bool {
	ap, err := netip.ParseAddrPort(remoteAddr)
	if err != nil {
		return false
	}
	a := ap.Addr().Unmap().WithZone("")
	for _, pr := range p {
		if pr.Contains(a) {
			return true
		}
	}
	return false
}

type forwardedProtoKey struct{}

// Handler passes requests to h, recording for IsHTTPS and Scheme the
// scheme a trusted proxy says its client used (X-Forwarded-Proto: the
// last value, the one the proxy next to drover added). With no proxies it
// is h.
func (p TrustedProxies) Handler(h http.Handler) http.Handler {
	if len(p) == 0 {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if vs := r.Header.Values("X-Forwarded-Proto"); len(vs) > 0 && p.trusts(r.RemoteAddr) {
			v := vs[len(vs)-1]
			if i := strings.LastIndexByte(v, ','); i >= 0 {
				v = v[i+1:]
			}
			switch v = strings.ToLower(strings.TrimSpace(v)); v {
			case "http", "https":
				r = r.WithContext(context.WithValue(r.Context(), forwardedProtoKey{}, v))
			}
		}
		h.ServeHTTP(w, r)
	})
}

// Scheme is the scheme the client reached drover with: what a trusted
// proxy said (TrustedProxies.Handler), else "https" when r came over TLS,
// else "http".
func Scheme(r *http.Request) string {
	if v, ok := r.Context().Value(forwardedProtoKey{}).(string); ok {
		return v
	}
	if r.TLS != nil {
		return "https"
	}
	return "http"
}

// IsHTTPS reports whether Scheme(r) is "https": a cookie set on the
// answer may be Secure.
func IsHTTPS(r *http.Request) bool { return Scheme(r) == "https" }
