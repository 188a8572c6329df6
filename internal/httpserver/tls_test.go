package httpserver

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"math/big"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/httpserver/conntest"
	"github.com/drover-ci/drover/internal/httpserver/tlstest"
)

// serveTLS serves okHandler over TLS with certFile and keyFile.
func serveTLS(t *testing.T, certFile, keyFile string, o Options) string {
	t.Helper()
	cfg, err := ServerTLS(certFile, keyFile, nil)
	if err != nil {
		t.Fatal(err)
	}
	o.TLS = cfg
	return serve(t, okHandler, o)
}

// TestServesTLS: with Options.TLS the server speaks HTTPS only: a client
// trusting the CA gets its answer over TLS 1.2 or newer; one that does not
// trust it, one limited to TLS 1.1 and a plain HTTP request get nothing.
func TestServesTLS(t *testing.T) {
	ca := tlstest.NewCA(t)
	cert, key, _ := ca.Issue(t, "127.0.0.1")
	addr := serveTLS(t, cert, key, Options{})

	resp, err := ca.Client().Get("https://" + addr + "/")
	if err != nil {
		t.Fatalf("GET with the CA: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(b) != "ok" || resp.TLS == nil || resp.TLS.Version < tls.VersionTLS12 {
		t.Errorf("GET with the CA = %d %q over %+v, want 200 ok over TLS >= 1.2", resp.StatusCode, b, resp.TLS)
	}

	_, err = http.Get("https://" + addr + "/")
	var unknown x509.UnknownAuthorityError
	if err == nil || !errors.As(err, &unknown) {
		t.Errorf("GET without the CA = %v, want an unknown-authority error", err)
	}

	old := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool(), MaxVersion: tls.VersionTLS11}}}
	if _, err := old.Get("https://" + addr + "/"); err == nil {
		t.Error("GET with TLS 1.1 at most succeeded, want the handshake refused")
	}

	resp, err = http.Get("http://" + addr + "/")
	if err == nil {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Errorf("plain HTTP GET = %d %q, want no answer of the handler", resp.StatusCode, b)
		}
	}
}

// TestServerTLSWantsBoth: a certificate without its key (or the other way
// round) is an error, none is plain HTTP, a file that is not a certificate
// is an error naming it.
func TestServerTLSWantsBoth(t *testing.T) {
	ca := tlstest.NewCA(t)
	cert, key, _ := ca.Issue(t, "127.0.0.1")
	for _, tc := range []struct {
		name, cert, key string
		want            string // "" = no error
	}{
		{"neither", "", "", ""},
		{"cert only", cert, "", "give both or neither"},
		{"key only", "", key, "give both or neither"},
		{"swapped", key, cert, key},
		{"both", cert, key, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := ServerTLS(tc.cert, tc.key, nil)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("ServerTLS = %v, want nil", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("ServerTLS = %v, want an error containing %q", err, tc.want)
			case tc.want == "" && (cfg == nil) != (tc.cert == ""):
				t.Errorf("ServerTLS config = %v for cert %q", cfg, tc.cert)
			case cfg != nil && cfg.MinVersion != tls.VersionTLS12:
				t.Errorf("MinVersion = %x, want TLS 1.2", cfg.MinVersion)
			}
		})
	}
}

// serialOf connects to addr afresh and returns the serial number of the
// certificate it presents.
func serialOf(t *testing.T, ca *tlstest.CA, addr string) *big.Int {
	t.Helper()
	c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: ca.Pool()})
	if err != nil {
		t.Fatalf("TLS dial: %v", err)
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0].SerialNumber
}

// TestCertificateReloadsWhenItsFilesChange: a certificate renewed in place
// is served from the next handshake on, without a restart; a broken file
// keeps the last good one served.
func TestCertificateReloadsWhenItsFilesChange(t *testing.T) {
	ca := tlstest.NewCA(t)
	cert, key, first := ca.Issue(t, "127.0.0.1")
	addr := serveTLS(t, cert, key, Options{})
	if got := serialOf(t, ca, addr); got.Cmp(first) != 0 {
		t.Fatalf("serial = %v, want %v", got, first)
	}

	second := ca.IssueTo(t, cert, key, "127.0.0.1")
	// A modification time surely unlike the first files', whatever the
	// file system's granularity.
	later := time.Now().Add(time.Hour)
	for _, f := range []string{cert, key} {
		if err := os.Chtimes(f, later, later); err != nil {
			t.Fatal(err)
		}
	}
	if got := serialOf(t, ca, addr); got.Cmp(second) != 0 {
		t.Fatalf("serial after renewal = %v, want the new %v", got, second)
	}

	if err := os.WriteFile(cert, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := serialOf(t, ca, addr); got.Cmp(second) != 0 {
		t.Errorf("serial after a broken write = %v, want the last good %v", got, second)
	}
}

// TestRefusalOverTLSIsAClose: over TLS a connection over the per-client
// cap is closed without an answer (no handshake), while the client's
// admitted connection and other clients are served.
func TestRefusalOverTLSIsAClose(t *testing.T) {
	ca := tlstest.NewCA(t)
	cert, key, _ := ca.Issue(t, "127.0.0.1")
	addr := serveTLS(t, cert, key, Options{MaxConnsPerClient: 1})
	dial := func(from string) (*tls.Conn, error) {
		c := tls.Client(conntest.Dial(t, from, addr), &tls.Config{RootCAs: ca.Pool(), ServerName: "127.0.0.1"})
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		return c, c.Handshake()
	}
	first, err := dial("127.0.0.2")
	if err != nil {
		t.Fatalf("first connection from 127.0.0.2: %v", err)
	}
	if a := conntest.Get(t, first, "/"); a.Status != http.StatusOK {
		t.Fatalf("first connection: %d %q", a.Status, a.Body)
	}
	if _, err := dial("127.0.0.2"); err == nil {
		t.Error("second connection from 127.0.0.2: handshake succeeded, want the connection closed")
	}
	// Closed without a byte: no plain-text 429 that a TLS client could
	// not read anyway.
	raw := conntest.Dial(t, "127.0.0.2", addr)
	_ = raw.SetReadDeadline(time.Now().Add(10 * time.Second))
	if b, err := io.ReadAll(raw); len(b) != 0 {
		t.Errorf("refused connection sent %q (%v), want it closed without an answer", b, err)
	}
	other, err := dial("127.0.0.3")
	if err != nil {
		t.Fatalf("connection from 127.0.0.3: %v", err)
	}
	if a := conntest.Get(t, other, "/"); a.Status != http.StatusOK {
		t.Errorf("from 127.0.0.3: %d %q", a.Status, a.Body)
	}
}

// TestScheme: a server says https only with Options.TLS, also once it
// serves (net/http gives a plain server a TLS config of its own then).
func TestScheme(t *testing.T) {
	plain, addr := start(t, okHandler, Options{})
	resp, err := http.Get("http://" + addr + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got := plain.Scheme(); got != "http" {
		t.Errorf("plain server's Scheme = %q, want http", got)
	}
	ca := tlstest.NewCA(t)
	cert, key, _ := ca.Issue(t, "127.0.0.1")
	cfg, err := ServerTLS(cert, key, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := New(okHandler, Options{TLS: cfg}).Scheme(); got != "https" {
		t.Errorf("TLS server's Scheme = %q, want https", got)
	}
}
