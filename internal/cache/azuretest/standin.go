// Package azuretest runs a stand-in for Azure Blob Storage in tests.
//
// Azure's own emulator (Azurite) cannot run here, so [StandIn] is a thin
// server of drover's, written from Azure's Blob REST documentation, that
// does only what the cache uses: Put Blob of block blobs and Get Blob
// (with ranges), each authorised by a service SAS whose signature it
// checks with the account key, with the permission, time window and
// protocol of the token, and errors in Azure's shape (an XML body with a
// Code, and the x-ms-error-code header). It is a stand-in, not an
// emulator: no other operation, no Shared Key authorisation, no account
// SAS, no user delegation SAS. Like Azurite it serves the account in
// the path: http://127.0.0.1:<port>/<account>/<container>/<blob>.
package azuretest

import (
	"bytes"
	"crypto/hmac"
	"crypto/md5"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/cache"
)

// maxPutBlob is the largest body of one Put Blob (5000 MiB).
const maxPutBlob = 5000 << 20

// StandIn is a running blob service stand-in with one account and one
// container.
type StandIn struct {
	// Endpoint is the blob service of the account, with the account in
	// the path: the DroverTestEndpoint of [runners.cache.azure].
	Endpoint  string
	Account   string
	Key       string // base64
	Container string

	key   []byte
	mu    sync.Mutex
	blobs map[string]blob // by container + "/" + name
}

type blob struct {
	data     []byte
	etag     string
	modified time.Time
}

// Start starts a stand-in for t on 127.0.0.1 and stops it when t ends.
func Start(t testing.TB) *StandIn {
	t.Helper()
	return StartAt(t, "127.0.0.1")
}

// StartAt is Start on the address host (an IP of this machine).
func StartAt(t testing.TB, host string) *StandIn {
	t.Helper()
	key := make([]byte, 64)
	_, _ = rand.Read(key)
	s := &StandIn{
		Account:   "drover" + hex.EncodeToString(key[:3]),
		Key:       base64.StdEncoding.EncodeToString(key),
		Container: "drover-cache",
		key:       key,
		blobs:     map[string]blob{},
	}
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Fatalf("azuretest: %v", err)
	}
	hs := httptest.NewUnstartedServer(s)
	_ = hs.Listener.Close()
	hs.Listener = l
	hs.Start()
	t.Cleanup(hs.Close)
	s.Endpoint = hs.URL + "/" + s.Account
	return s
}

// Config is a [runners.cache.azure] section for the stand-in.
func (s *StandIn) Config() *cache.AzureConfig {
	return &cache.AzureConfig{AccountName: s.Account, AccountKey: s.Key, ContainerName: s.Container, DroverTestEndpoint: s.Endpoint}
}

// Keys lists the blob names in the container, sorted.
func (s *StandIn) Keys() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var keys []string
	for k := range s.blobs {
		if name, ok := strings.CutPrefix(k, s.Container+"/"); ok {
			keys = append(keys, name)
		}
	}
	slices.Sort(keys)
	return keys
}

// fail answers with Azure's error shape.
func fail(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/xml")
	w.Header().Set("X-Ms-Error-Code", code)
	w.WriteHeader(status)
	fmt.Fprintf(w, "\ufeff<?xml version=\"1.0\" encoding=\"utf-8\"?><Error><Code>%s</Code><Message>%s</Message></Error>", code, msg)
}

func (s *StandIn) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("X-Ms-Request-Id", hex.EncodeToString(s.key[:4])+fmt.Sprint(time.Now().UnixNano()))
	w.Header().Set("X-Ms-Version", cmpOr(r.Header.Get("X-Ms-Version"), r.URL.Query().Get("sv")))
	// /<account>/<container>/<blob>
	parts := strings.SplitN(strings.TrimPrefix(r.URL.Path, "/"), "/", 3)
	if len(parts) != 3 || parts[2] == "" {
		fail(w, http.StatusBadRequest, "InvalidUri", "The stand-in serves blobs only: /<account>/<container>/<blob>.")
		return
	}
	account, container, name := parts[0], parts[1], parts[2]
	if account != s.Account {
		fail(w, http.StatusForbidden, "AuthenticationFailed", "Unknown account.")
		return
	}
	perm := map[string]string{http.MethodGet: "r", http.MethodHead: "r", http.MethodPut: "w"}[r.Method]
	if perm == "" {
		fail(w, http.StatusMethodNotAllowed, "UnsupportedHttpVerb", "The stand-in does Get Blob and Put Blob only.")
		return
	}
	if status, code, msg := s.authorize(r, perm, "/blob/"+account+"/"+container+"/"+name, "/blob/"+account+"/"+container); code != "" {
		fail(w, status, code, msg)
		return
	}
	if container != s.Container {
		fail(w, http.StatusNotFound, "ContainerNotFound", "The specified container does not exist.")
		return
	}
	if r.Method == http.MethodPut {
		s.putBlob(w, r, container+"/"+name)
		return
	}
	s.mu.Lock()
	b, ok := s.blobs[container+"/"+name]
	s.mu.Unlock()
	if !ok {
		fail(w, http.StatusNotFound, "BlobNotFound", "The specified blob does not exist.")
		return
	}
	w.Header().Set("ETag", b.etag)
	w.Header().Set("X-Ms-Blob-Type", "BlockBlob")
	w.Header().Set("Content-Type", "application/octet-stream")
	// ServeContent does Range and If-Match as Get Blob does.
	http.ServeContent(w, r, "", b.modified, bytes.NewReader(b.data))
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func (s *StandIn) putBlob(w http.ResponseWriter, r *http.Request, key string) {
	switch bt := r.Header.Get("X-Ms-Blob-Type"); {
	case bt == "":
		fail(w, http.StatusBadRequest, "MissingRequiredHeader", "An HTTP header that's mandatory for this request is not specified: x-ms-blob-type.")
		return
	case bt != "BlockBlob":
		fail(w, http.StatusBadRequest, "InvalidHeaderValue", "The stand-in stores block blobs only.")
		return
	}
	if r.ContentLength < 0 {
		fail(w, http.StatusLengthRequired, "MissingContentLengthHeader", "Content-Length is required.")
		return
	}
	if r.ContentLength > maxPutBlob {
		fail(w, http.StatusRequestEntityTooLarge, "RequestBodyTooLarge", "The request body is too large and exceeds the maximum permissible limit.")
		return
	}
	data, err := io.ReadAll(r.Body)
	if err != nil || int64(len(data)) != r.ContentLength {
		// The blob stays as it was: Put Blob is all or nothing.
		fail(w, http.StatusBadRequest, "InvalidInput", "The body ended before Content-Length.")
		return
	}
	sum := md5.Sum(data)
	b := blob{data: data, etag: fmt.Sprintf("\"0x%X\"", time.Now().UnixNano()), modified: time.Now().UTC()}
	s.mu.Lock()
	s.blobs[key] = b
	s.mu.Unlock()
	w.Header().Set("ETag", b.etag)
	w.Header().Set("Last-Modified", b.modified.Format(http.TimeFormat))
	w.Header().Set("Content-MD5", base64.StdEncoding.EncodeToString(sum[:]))
	w.Header().Set("X-Ms-Request-Server-Encrypted", "true")
	w.WriteHeader(http.StatusCreated)
}

// sasTime is the SAS time format the stand-in reads (ISO 8601 UTC; Azure
// also takes dates alone and fractions, which drover does not send).
const sasTime = "2006-01-02T15:04:05Z"

// authorize checks the service SAS of r for perm on the blob (canonical
// resource blobRes) or its container (containerRes), following "Create a
// service SAS": the string to sign of versions 2020-12-06 and later.
func (s *StandIn) authorize(r *http.Request, perm, blobRes, containerRes string) (int, string, string) {
	q := r.URL.Query()
	denied := func(msg string) (int, string, string) {
		return http.StatusForbidden, "AuthenticationFailed", "Server failed to authenticate the request. " + msg
	}
	if q.Get("sig") == "" {
		return http.StatusNotFound, "ResourceNotFound", "The specified resource does not exist." // anonymous access is off
	}
	sv := q.Get("sv")
	if sv < "2020-12-06" {
		return denied("The stand-in checks service SAS of versions 2020-12-06 and later only; sv=" + sv)
	}
	res := map[string]string{"b": blobRes, "c": containerRes}[q.Get("sr")]
	if res == "" {
		return denied("sr must be b or c.")
	}
	toSign := strings.Join([]string{
		q.Get("sp"), q.Get("st"), q.Get("se"), res, q.Get("si"), q.Get("sip"), q.Get("spr"), sv, q.Get("sr"),
		q.Get("snapshot"), q.Get("ses"), q.Get("rscc"), q.Get("rscd"), q.Get("rsce"), q.Get("rscl"), q.Get("rsct"),
	}, "\n")
	mac := hmac.New(sha256.New, s.key)
	mac.Write([]byte(toSign))
	sig, err := base64.StdEncoding.DecodeString(q.Get("sig"))
	if err != nil || !hmac.Equal(sig, mac.Sum(nil)) {
		return denied("Signature did not match. String to sign used was " + url.QueryEscape(toSign))
	}
	now := time.Now().UTC()
	expiry, err := time.Parse(sasTime, q.Get("se"))
	if err != nil {
		return denied("se is not a time.")
	}
	if st := q.Get("st"); st != "" {
		start, err := time.Parse(sasTime, st)
		if err != nil {
			return denied("st is not a time.")
		}
		if now.Before(start) {
			return denied("Signed start time is in the future.")
		}
	}
	if now.After(expiry) {
		return denied("Signed expiry time [" + q.Get("se") + "] must be after signed start time / current time.")
	}
	switch spr := q.Get("spr"); spr {
	case "", "https,http":
	case "https":
		if r.TLS == nil {
			return http.StatusForbidden, "AuthorizationProtocolMismatch", "This request is not authorized to perform this operation using this protocol."
		}
	default:
		return denied("spr must be https or https,http.")
	}
	if !strings.Contains(q.Get("sp"), perm) {
		return http.StatusForbidden, "AuthorizationPermissionMismatch", "This request is not authorized to perform this operation using this permission."
	}
	return 0, "", ""
}
