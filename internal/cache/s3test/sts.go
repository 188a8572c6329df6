package s3test

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/xml"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/minio/minio-go/v7/pkg/signer"

	"github.com/drover-ci/drover/internal/cache"
)

// STSStandIn is a thin stand-in for AWS STS's AssumeRole, placed in front
// of a [Server]: one address that answers AssumeRole itself and passes
// every other request to versitygw, the way MinIO serves STS on its S3
// port. MinIO's server would do AssumeRole for real but is too slow to
// build here for CI.
//
// It checks the request's SigV4 signature (service sts) against the
// server's root credentials and the role's ARN, then makes a new account
// on the versitygw server (admin API, role admin) and returns it as the
// temporary credentials in an AssumeRoleResponse, with Expiration set
// Lifetime ahead. The credentials therefore really work, and only they
// do, against the S3 server. versitygw takes session tokens only from its
// own web-identity STS, so the SessionToken returned is empty unless
// SessionToken is set (for tests that only sign and look at the URLs).
type STSStandIn struct {
	// Addr is host:port of the stand-in, which is also the S3 endpoint
	// to configure (ServerAddress).
	Addr    string
	RoleARN string
	// SessionToken, when set, is returned with the credentials; URLs
	// signed with it are refused by versitygw.
	SessionToken string
	// Lifetime is how long the credentials handed out live; zero means
	// an hour.
	Lifetime time.Duration

	srv   *Server
	calls atomic.Int64
	mu    sync.Mutex
	keys  []string // access keys handed out
}

// StartSTS starts a stand-in in front of s for the role roleARN, stopped
// when t ends.
func StartSTS(t testing.TB, s *Server, roleARN string) *STSStandIn {
	t.Helper()
	st := &STSStandIn{RoleARN: roleARN, srv: s}
	target := &url.URL{Scheme: "http", Host: s.Addr}
	proxy := httputil.NewSingleHostReverseProxy(target)
	host, _, _ := net.SplitHostPort(s.Addr)
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Fatalf("s3test: STS stand-in: %v", err)
	}
	hs := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.URL.Path == "/" && strings.HasPrefix(r.Header.Get("Content-Type"), "application/x-www-form-urlencoded") {
			st.assumeRole(w, r)
			return
		}
		// The Host header stays the stand-in's, which the URLs were
		// signed for.
		proxy.ServeHTTP(w, r)
	}))
	_ = hs.Listener.Close()
	hs.Listener = l
	hs.Start()
	t.Cleanup(hs.Close)
	st.Addr = l.Addr().String()
	return st
}

// Config is a [runners.cache.s3] section for the S3 server through the
// stand-in, with RoleARN.
func (st *STSStandIn) Config() *cache.S3Config {
	cfg := st.srv.Config()
	cfg.ServerAddress = st.Addr
	cfg.RoleARN = st.RoleARN
	return cfg
}

// Calls is the number of AssumeRole calls answered with credentials.
func (st *STSStandIn) Calls() int64 { return st.calls.Load() }

// AccessKeys are the temporary access keys handed out, oldest first.
func (st *STSStandIn) AccessKeys() []string {
	st.mu.Lock()
	defer st.mu.Unlock()
	return slices.Clone(st.keys)
}

// stsError answers with STS's error shape.
func stsError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "text/xml")
	w.WriteHeader(status)
	fmt.Fprintf(w, `<ErrorResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/"><Error><Type>Sender</Type><Code>%s</Code><Message>%s</Message></Error><RequestId>stand-in</RequestId></ErrorResponse>`, code, msg)
}

func (st *STSStandIn) assumeRole(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		stsError(w, http.StatusBadRequest, "InvalidInput", err.Error())
		return
	}
	if code, msg := verifySigV4(r, body, st.srv.AccessKey, st.srv.SecretKey, "sts"); code != "" {
		stsError(w, http.StatusForbidden, code, msg)
		return
	}
	form, err := url.ParseQuery(string(body))
	if err != nil || form.Get("Action") != "AssumeRole" || form.Get("Version") != "2011-06-15" {
		stsError(w, http.StatusBadRequest, "InvalidAction", "the stand-in does AssumeRole (Version 2011-06-15) only")
		return
	}
	if form.Get("RoleArn") != st.RoleARN {
		stsError(w, http.StatusForbidden, "AccessDenied", "User is not authorized to perform: sts:AssumeRole on resource: "+form.Get("RoleArn"))
		return
	}
	if form.Get("RoleSessionName") == "" {
		stsError(w, http.StatusBadRequest, "ValidationError", "RoleSessionName is required")
		return
	}
	// Not AWS's ASIA prefix: versitygw takes keys with it for its own
	// STS's and wants a session token with them.
	access, secret := "STSSTANDIN"+strings.ToUpper(randomHex(5)), randomHex(20)
	if err := st.createAccount(r, access, secret); err != nil {
		stsError(w, http.StatusInternalServerError, "InternalFailure", err.Error())
		return
	}
	st.calls.Add(1)
	st.mu.Lock()
	st.keys = append(st.keys, access)
	st.mu.Unlock()
	lifetime := st.Lifetime
	if lifetime <= 0 {
		lifetime = time.Hour
	}
	w.Header().Set("Content-Type", "text/xml")
	fmt.Fprintf(w, `<AssumeRoleResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/">
  <AssumeRoleResult>
    <AssumedRoleUser><Arn>%s/%s</Arn><AssumedRoleId>AROA0STANDIN:%s</AssumedRoleId></AssumedRoleUser>
    <Credentials>
      <AccessKeyId>%s</AccessKeyId>
      <SecretAccessKey>%s</SecretAccessKey>
      <SessionToken>%s</SessionToken>
      <Expiration>%s</Expiration>
    </Credentials>
  </AssumeRoleResult>
  <ResponseMetadata><RequestId>stand-in</RequestId></ResponseMetadata>
</AssumeRoleResponse>`, xmlText(st.RoleARN), xmlText(form.Get("RoleSessionName")), xmlText(form.Get("RoleSessionName")),
		access, secret, xmlText(st.SessionToken), time.Now().Add(lifetime).UTC().Format(time.RFC3339))
}

func xmlText(s string) string {
	var b bytes.Buffer
	_ = xml.EscapeText(&b, []byte(s))
	return b.String()
}

// createAccount adds an account to the versitygw server with its admin
// API, as root.
func (st *STSStandIn) createAccount(r *http.Request, access, secret string) error {
	body := fmt.Sprintf("<Account><Access>%s</Access><Secret>%s</Secret><Role>admin</Role></Account>", access, secret)
	req, err := http.NewRequestWithContext(r.Context(), http.MethodPatch, "http://"+st.srv.Addr+"/create-user", strings.NewReader(body))
	if err != nil {
		return err
	}
	sum := sha256.Sum256([]byte(body))
	req.Header.Set("X-Amz-Content-Sha256", hex.EncodeToString(sum[:]))
	req = signer.SignV4(*req, st.srv.AccessKey, st.srv.SecretKey, "", "us-east-1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("versitygw create-user: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return fmt.Errorf("versitygw create-user: %s: %s", resp.Status, b)
	}
	return nil
}

// verifySigV4 checks the Authorization header of r (AWS Signature
// Version 4, as AWS documents it) for the credentials access and secret
// and the service, with body as the payload.
func verifySigV4(r *http.Request, body []byte, access, secret, service string) (code, msg string) {
	auth, ok := strings.CutPrefix(r.Header.Get("Authorization"), "AWS4-HMAC-SHA256 ")
	if !ok {
		return "MissingAuthenticationToken", "Request is missing Authentication Token"
	}
	fields := map[string]string{}
	for _, f := range strings.Split(auth, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(f), "=")
		fields[k] = v
	}
	scope := strings.Split(fields["Credential"], "/")
	if len(scope) != 5 || scope[3] != service || scope[4] != "aws4_request" {
		return "IncompleteSignature", "bad Credential scope"
	}
	if scope[0] != access {
		return "InvalidClientTokenId", "The security token included in the request is invalid."
	}
	date := r.Header.Get("X-Amz-Date")
	if t, err := time.Parse("20060102T150405Z", date); err != nil || time.Since(t).Abs() > 15*time.Minute || !strings.HasPrefix(date, scope[1]) {
		return "SignatureDoesNotMatch", "Signature expired or X-Amz-Date bad"
	}
	signed := strings.Split(fields["SignedHeaders"], ";")
	var headers strings.Builder
	for _, h := range signed {
		v := strings.Join(r.Header.Values(h), ",")
		if h == "host" {
			v = r.Host
		}
		headers.WriteString(h + ":" + strings.Join(strings.Fields(v), " ") + "\n")
	}
	sum := sha256.Sum256(body)
	payload := hex.EncodeToString(sum[:])
	if h := r.Header.Get("X-Amz-Content-Sha256"); h != "" && h != payload {
		return "SignatureDoesNotMatch", "X-Amz-Content-Sha256 is not the body's"
	}
	canonical := strings.Join([]string{r.Method, r.URL.EscapedPath(), r.URL.RawQuery, headers.String(), fields["SignedHeaders"], payload}, "\n")
	csum := sha256.Sum256([]byte(canonical))
	toSign := "AWS4-HMAC-SHA256\n" + date + "\n" + strings.Join(scope[1:], "/") + "\n" + hex.EncodeToString(csum[:])
	mac := func(key []byte, s string) []byte {
		h := hmac.New(sha256.New, key)
		h.Write([]byte(s))
		return h.Sum(nil)
	}
	key := []byte("AWS4" + secret)
	for _, s := range scope[1:] {
		key = mac(key, s)
	}
	want := hex.EncodeToString(mac(key, toSign))
	if !hmac.Equal([]byte(want), []byte(fields["Signature"])) {
		return "SignatureDoesNotMatch", "The request signature we calculated does not match the signature you provided."
	}
	return "", ""
}
