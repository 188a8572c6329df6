package httpserver

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"
)

// CertFiles is a server certificate and its key read from PEM files, read
// again at the first handshake after either file changed (its modification
// time or size), so a renewed certificate is served without a restart. A
// pair that does not load (the key not yet written beside a new
// certificate, a bad file) is logged and the one loaded before is served
// until the files change again.
type CertFiles struct {
	certFile, keyFile string
	log               *slog.Logger

	mu    sync.Mutex
	cert  *tls.Certificate
	stamp [2]fileStamp // of the files at the last load or attempt
}

type fileStamp struct {
	mod  time.Time
	size int64
}

func stampOf(path string) fileStamp {
	st, err := os.Stat(path)
	if err != nil {
		return fileStamp{}
	}
	return fileStamp{st.ModTime(), st.Size()}
}

// LoadCertFiles reads the certificate in certFile (PEM, the server's
// certificate first, then the intermediates) and its key in keyFile; nil
// logger = discarded.
func LoadCertFiles(certFile, keyFile string, logger *slog.Logger) (*CertFiles, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	c := &CertFiles{certFile: certFile, keyFile: keyFile, log: logger}
	c.stamp = [2]fileStamp{stampOf(certFile), stampOf(keyFile)}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("TLS certificate %s, key %s: %w", certFile, keyFile, err)
	}
	c.cert = &cert
	return c, nil
}

// GetCertificate is tls.Config.GetCertificate: the pair, read again
// first if a file changed.
func (c *CertFiles) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	now := [2]fileStamp{stampOf(c.certFile), stampOf(c.keyFile)}
	c.mu.Lock()
	defer c.mu.Unlock()
	if now != c.stamp {
		c.stamp = now
		cert, err := tls.LoadX509KeyPair(c.certFile, c.keyFile)
		if err != nil {
			c.log.Warn("TLS certificate changed but does not load; still serving the one loaded before",
				"cert_file", c.certFile, "key_file", c.keyFile, "err", err)
		} else {
			c.cert = &cert
			attrs := []any{"cert_file", c.certFile}
			if cert.Leaf != nil {
				attrs = append(attrs, "not_after", cert.Leaf.NotAfter)
			}
			c.log.Info("TLS certificate reloaded", attrs...)
		}
	}
	return c.cert, nil
}

// TLSConfig is the TLS configuration of drover's servers: TLS 1.2 or
// newer, Go's default cipher suites (forward secrecy and AEAD only), the
// certificate of c.
func TLSConfig(c *CertFiles) *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: c.GetCertificate}
}

// ServerTLS is how every daemon turns its certificate and key flags into
// Options.TLS: nil when both are empty (plain HTTP), an error when only
// one is given or the pair does not load.
func ServerTLS(certFile, keyFile string, logger *slog.Logger) (*tls.Config, error) {
	switch {
	case certFile == "" && keyFile == "":
		return nil, nil
	case certFile == "" || keyFile == "":
		return nil, errors.New("a TLS certificate needs its key, and a key its certificate: give both or neither")
	}
	c, err := LoadCertFiles(certFile, keyFile, logger)
	if err != nil {
		return nil, err
	}
	return TLSConfig(c), nil
}
