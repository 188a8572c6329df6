package helper

import (
	"bytes"
	"crypto/tls"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/httpserver/tlstest"
)

// TestArtifactsTLS: the artifact commands verify the coordinator with
// the CA of CI_SERVER_TLS_CA_FILE (or --tls-ca-file) and show it the
// client certificate of CI_SERVER_TLS_CERT_FILE and
// CI_SERVER_TLS_KEY_FILE (or the flags), as a job gets them from its
// runner; without them a coordinator with a private CA that requires
// client certificates is not reached.
func TestArtifactsTLS(t *testing.T) {
	ca := tlstest.NewCA(t)
	srvCert, srvKey, _ := ca.Issue(t, "127.0.0.1")
	cliCert, cliKey, _ := ca.Issue(t, "runner")
	pair, err := tls.LoadX509KeyPair(srvCert, srvKey)
	if err != nil {
		t.Fatal(err)
	}
	var uploads atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.URL.Path == "/api/v4/jobs/7/artifacts" && len(r.TLS.PeerCertificates) > 0 {
			uploads.Add(1)
			w.WriteHeader(http.StatusCreated)
			return
		}
		http.Error(w, "unexpected", http.StatusBadRequest)
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{pair}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: ca.Pool()}
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshakes
	srv.StartTLS()
	t.Cleanup(srv.Close)

	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "out.txt"), []byte("built\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		env      map[string]string
		flags    []string
		wantCode int
		wantErr  string // on stderr
	}{
		{name: "no CA", wantCode: 1, wantErr: "certificate signed by unknown authority"},
		// (Over TLS 1.3 the client learns of the refusal in various ways.)
		{name: "CA without a client certificate", env: map[string]string{api.VarTLSCAFile: ca.CertFile}, wantCode: 1},
		{name: "job variables", env: map[string]string{api.VarTLSCAFile: ca.CertFile, api.VarTLSCertFile: cliCert, api.VarTLSKeyFile: cliKey}},
		{name: "flags", flags: []string{"--tls-ca-file", ca.CertFile, "--tls-cert-file", cliCert, "--tls-key-file", cliKey}},
		{name: "certificate without its key", env: map[string]string{api.VarTLSCAFile: ca.CertFile, api.VarTLSCertFile: cliCert},
			wantCode: 1, wantErr: "set both or neither"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, k := range []string{api.VarTLSCAFile, api.VarTLSCertFile, api.VarTLSKeyFile} {
				t.Setenv(k, tc.env[k])
			}
			before := uploads.Load()
			var stdout, stderr bytes.Buffer
			args := append([]string{"artifacts-uploader", "--url", srv.URL, "--id", "7", "--token", "job-token",
				"--root", root, "--path", "out.txt", "--timeout", time.Minute.String()}, tc.flags...)
			code := Main(t.Context(), args, &stdout, &stderr)
			if code != tc.wantCode || !strings.Contains(stderr.String(), tc.wantErr) {
				t.Errorf("Main(%v) = %d, stderr %q; want %d and %q\n%s", args, code, stderr.String(), tc.wantCode, tc.wantErr, stdout.String())
			}
			if got := uploads.Load() - before; (tc.wantCode == 0) != (got == 1) {
				t.Errorf("the coordinator got %d uploads with a client certificate", got)
			}
		})
	}
}
