package api_test

import (
	"context"
	"crypto/x509"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/httpserver"
	"github.com/drover-ci/drover/internal/httpserver/tlstest"
)

// TestClientTLS: a client made with a runner's tls-ca-file verifies a
// coordinator whose certificate that CA signed; without it the same
// request fails on the certificate; files that do not load are errors
// naming the key.
func TestClientTLS(t *testing.T) {
	ca := tlstest.NewCA(t)
	cert, key, _ := ca.Issue(t, "127.0.0.1")
	srvTLS, err := httpserver.ServerTLS(cert, key, nil)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := httpserver.New(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"id":7,"token":"glrt-x"}`))
	}), httpserver.Options{TLS: srvTLS})
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })
	url := "https://" + ln.Addr().String()

	verify := func(files api.TLSFiles) error {
		cfg, err := api.ClientTLS(files)
		if err != nil {
			t.Fatalf("ClientTLS(%+v) = %v", files, err)
		}
		c, err := api.NewClient(url, api.ClientOptions{TLS: cfg})
		if err != nil {
			t.Fatal(err)
		}
		_, _, err = c.Verify(context.Background(), api.VerifyRequest{Token: "glrt-x"})
		return err
	}
	if err := verify(api.TLSFiles{CAFile: ca.CertFile}); err != nil {
		t.Errorf("verify with tls-ca-file = %v, want nil", err)
	}
	var unknown x509.UnknownAuthorityError
	if err := verify(api.TLSFiles{}); !errors.As(err, &unknown) {
		t.Errorf("verify without tls-ca-file = %v, want an unknown-authority error", err)
	}

	notPEM := filepath.Join(t.TempDir(), "not.pem")
	if err := os.WriteFile(notPEM, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		files api.TLSFiles
		want  string
	}{
		{api.TLSFiles{CAFile: filepath.Join(t.TempDir(), "missing.pem")}, "tls-ca-file"},
		{api.TLSFiles{CAFile: notPEM}, "tls-ca-file"},
		{api.TLSFiles{CertFile: cert}, "tls-key-file"},
		{api.TLSFiles{CertFile: cert, KeyFile: notPEM}, "tls-cert-file"},
	} {
		if _, err := api.ClientTLS(tc.files); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ClientTLS(%+v) = %v, want an error naming %s", tc.files, err, tc.want)
		}
	}
	if cfg, err := api.ClientTLS(api.TLSFiles{CertFile: cert, KeyFile: key}); err != nil || len(cfg.Certificates) != 1 {
		t.Errorf("ClientTLS with a client certificate = %v, %v; want it loaded", cfg, err)
	}
}
