// Package gcstest runs a GCS emulator for tests: fsouza's fake-gcs-server,
// in the test process, on a free loopback port, with a bucket and a
// service account key made for the test.
//
// fake-gcs-server takes any signature; the server here checks the V4
// signature of every signed URL with the service account's public key
// before handing the request on, and answers a bad or expired one as
// Google does (403 with an XML error), so that a signing mistake fails
// the tests instead of passing unnoticed.
package gcstest

import (
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fsouza/fake-gcs-server/fakestorage"

	"github.com/drover-ci/drover/internal/cache"
)

// Server is a running fake-gcs-server with one bucket, behind the
// signature check.
type Server struct {
	// Endpoint is the server's base URL, http://127.0.0.1:<port>: the
	// DroverTestEndpoint of [runners.cache.gcs].
	Endpoint string
	Bucket   string
	// AccessID and PrivateKey (PEM, PKCS #8) are the service account's;
	// CredentialsFile is a JSON key file holding them.
	AccessID        string
	PrivateKey      string
	CredentialsFile string

	fake *fakestorage.Server
	key  *rsa.PrivateKey
}

// Start starts a server for t on 127.0.0.1 and stops it when t ends.
func Start(t testing.TB) *Server {
	t.Helper()
	return StartAt(t, "127.0.0.1")
}

// StartAt is Start on the address host (an IP of this machine).
func StartAt(t testing.TB, host string) *Server {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Fatalf("gcstest: %v", err)
	}
	addr := l.Addr().String()
	fake, err := fakestorage.NewServerWithOptions(fakestorage.Options{
		NoListener: true,
		Scheme:     "http",
		PublicHost: addr,
		Writer:     io.Discard,
	})
	if err != nil {
		t.Fatalf("gcstest: fake-gcs-server: %v", err)
	}
	s := &Server{
		Endpoint:   "http://" + addr,
		Bucket:     "drover-cache",
		AccessID:   "drover-cache-" + strings.ToLower(strconv.FormatInt(key.PublicKey.N.Int64()&0xffffff, 36)) + "@drover-test.iam.gserviceaccount.com",
		PrivateKey: string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})),
		fake:       fake,
		key:        key,
	}
	fake.CreateBucketWithOpts(fakestorage.CreateBucketOpts{Name: s.Bucket})
	s.CredentialsFile = filepath.Join(t.TempDir(), "service-account.json")
	f, _ := json.Marshal(map[string]string{
		"type": "service_account", "project_id": "drover-test", "client_email": s.AccessID, "private_key": s.PrivateKey,
	})
	if err := os.WriteFile(s.CredentialsFile, f, 0o600); err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewUnstartedServer(s.checkSignature(fake.HTTPHandler()))
	_ = hs.Listener.Close()
	hs.Listener = l
	hs.Start()
	t.Cleanup(func() {
		hs.Close()
		fake.Stop()
	})
	return s
}

// Config is a [runners.cache.gcs] section for the server, with AccessID
// and PrivateKey.
func (s *Server) Config() *cache.GCSConfig {
	return &cache.GCSConfig{AccessID: s.AccessID, PrivateKey: s.PrivateKey, BucketName: s.Bucket, DroverTestEndpoint: s.Endpoint}
}

// Keys lists the object names in the bucket, sorted.
func (s *Server) Keys() ([]string, error) {
	var keys []string
	opts := fakestorage.ListOptions{}
	for {
		resp, err := s.fake.ListObjectsWithOptionsPaginated(s.Bucket, opts)
		if err != nil {
			return nil, err
		}
		for _, o := range resp.Objects {
			keys = append(keys, o.Name)
		}
		if resp.NextPageToken == "" {
			break
		}
		opts.PageToken = resp.NextPageToken
	}
	slices.Sort(keys)
	return keys, nil
}

// refuse answers as GCS's XML API does.
func refuse(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/xml; charset=UTF-8")
	w.WriteHeader(status)
	fmt.Fprintf(w, "<?xml version='1.0' encoding='UTF-8'?><Error><Code>%s</Code><Message>%s</Message></Error>", code, msg)
}

// checkSignature lets requests with a valid, unexpired V4 signature of
// the service account through to next, and requests that carry no
// signature at all (the test's own inspection of the bucket).
func (s *Server) checkSignature(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		if q.Get("X-Goog-Signature") == "" && q.Get("Signature") == "" {
			next.ServeHTTP(w, r)
			return
		}
		if code, msg := s.verify(r, q); code != "" {
			refuse(w, http.StatusForbidden, code, msg)
			return
		}
		if rng := r.Header.Get("X-Goog-Content-Length-Range"); rng != "" && r.Method == http.MethodPut {
			var lo, hi int64
			if _, err := fmt.Sscanf(rng, "%d,%d", &lo, &hi); err != nil || r.ContentLength < lo || r.ContentLength > hi {
				refuse(w, http.StatusBadRequest, "EntityTooLarge", "Your proposed upload is larger than the maximum object size specified in your Policy Document.")
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// verify checks the V4 signature of r, written from Google's description
// of the canonical request, independently of package gcs's signer.
func (s *Server) verify(r *http.Request, q url.Values) (code, msg string) {
	if q.Get("X-Goog-Algorithm") != "GOOG4-RSA-SHA256" {
		return "AuthorizationQueryParametersError", "only GOOG4-RSA-SHA256 signed URLs are checked here"
	}
	date, err := time.Parse("20060102T150405Z", q.Get("X-Goog-Date"))
	if err != nil {
		return "AuthorizationQueryParametersError", "bad X-Goog-Date"
	}
	secs, err := strconv.Atoi(q.Get("X-Goog-Expires"))
	if err != nil || secs < 1 || secs > 604800 {
		return "AuthorizationQueryParametersError", "bad X-Goog-Expires"
	}
	if now := time.Now(); now.After(date.Add(time.Duration(secs)*time.Second)) || now.Before(date.Add(-time.Minute)) {
		return "ExpiredToken", "the signed URL is not valid now"
	}
	cred := strings.SplitN(q.Get("X-Goog-Credential"), "/", 2)
	if len(cred) != 2 || cred[0] != s.AccessID || cred[1] != date.Format("20060102")+"/auto/storage/goog4_request" {
		return "AccessDenied", "unknown credential"
	}
	signed := strings.Split(q.Get("X-Goog-SignedHeaders"), ";")
	if !slices.Contains(signed, "host") {
		return "AuthorizationQueryParametersError", "host is not signed"
	}
	var headers strings.Builder
	for _, h := range signed {
		v := r.Header.Get(h)
		if h == "host" {
			v = r.Host
			if hh, _, err := net.SplitHostPort(v); err == nil {
				v = hh
			}
		}
		headers.WriteString(h + ":" + strings.Join(strings.Fields(v), " ") + "\n")
	}
	rest := url.Values{}
	for k, v := range q {
		if k != "X-Goog-Signature" {
			rest[k] = v
		}
	}
	keys := make([]string, 0, len(rest))
	for k := range rest {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var query []string
	for _, k := range keys {
		for _, v := range rest[k] {
			query = append(query, escape(k)+"="+escape(v))
		}
	}
	canonical := r.Method + "\n" + r.URL.EscapedPath() + "\n" + strings.Join(query, "&") + "\n" + headers.String() + "\n" + strings.Join(signed, ";") + "\nUNSIGNED-PAYLOAD"
	sum := sha256.Sum256([]byte(canonical))
	toSign := "GOOG4-RSA-SHA256\n" + q.Get("X-Goog-Date") + "\n" + cred[1] + "\n" + hex.EncodeToString(sum[:])
	digest := sha256.Sum256([]byte(toSign))
	sig, err := hex.DecodeString(q.Get("X-Goog-Signature"))
	if err != nil || rsa.VerifyPKCS1v15(&s.key.PublicKey, crypto.SHA256, digest[:], sig) != nil {
		return "SignatureDoesNotMatch", "The request signature we calculated does not match the signature you provided."
	}
	return "", ""
}

// escape is the percent-encoding of V4: all but A-Z a-z 0-9 - . _ ~.
func escape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~' {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}
