package api

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Header names of the runner API.
const (
	HeaderRunnerToken         = "RUNNER-TOKEN"
	HeaderJobToken            = "JOB-TOKEN"
	HeaderJobStatus           = "Job-Status"
	HeaderTraceUpdateInterval = "X-GitLab-Trace-Update-Interval"
	HeaderLastUpdate          = "X-GitLab-Last-Update"
	HeaderRequestID           = "X-Request-Id"
	// HeaderAckTimeout is drover's extension on a two-phase hand-out: the
	// acknowledgement timeout in (possibly fractional) seconds.
	HeaderAckTimeout = "X-Drover-Ack-Timeout"
)

// MaxTracePatch is the largest trace PATCH body a runner sends (1 MiB).
const MaxTracePatch = 1 << 20

// Response is what callers need from one HTTP exchange.
type Response struct {
	StatusCode int // the HTTP status code; callers branch on it, nothing here does
	// JobStatus is the Job-Status header (running, canceling, canceled, failed), if any.
	JobStatus string
	// UpdateInterval is X-GitLab-Trace-Update-Interval, or 0 when absent.
	UpdateInterval time.Duration
	// LastUpdate is X-GitLab-Last-Update, if any.
	LastUpdate string
	// RangeEnd is N of a "Range: 0-N" header; HasRange says whether one came.
	RangeEnd int64
	HasRange bool
	// RetryAfter is the Retry-After delay, if any.
	RetryAfter time.Duration
	RequestID  string // X-Request-Id of the answer (each request carries a new one), for the logs
	// AckTimeout is X-Drover-Ack-Timeout (two-phase start), or 0.
	AckTimeout time.Duration
	// Duration is the time from sending the request to its answer's
	// headers (the body may still be being read).
	Duration time.Duration
	// JobWatch is X-Drover-Job-Watch: the coordinator serves jobs/watch
	// and holds one at most this long; 0 when it does not.
	JobWatch time.Duration
}

// Client is a thin runner-side client of the runner API v4. Each method is
// one HTTP exchange; nothing retries here. A transport failure is returned
// as an error with a nil *Response; any HTTP status is returned as a
// *Response with a nil error unless the body of an expected success could
// not be decoded.
type Client struct {
	base      *url.URL
	http      *http.Client
	userAgent string
}

// ClientOptions configures NewClient; zero values mean defaults.
type ClientOptions struct {
	HTTPClient *http.Client // default: a client with sane transport timeouts
	Version    string       // for the User-Agent
	// TLS is the TLS configuration of the default client (see ClientTLS);
	// nil = the system's CAs. Not used with HTTPClient.
	TLS *tls.Config
	// ConnectionMaxAge bounds how long the default client reuses its
	// connections (connection_max_age, see maxAgeTransport); 0: no bound.
	// Not used with HTTPClient.
	ConnectionMaxAge time.Duration
}

// TLSFiles are a runner's tls-ca-file, tls-cert-file and tls-key-file:
// PEM files, "" when not set.
type TLSFiles struct {
	CAFile   string // CA certificates trusted besides the system's
	CertFile string // client certificate (mutual TLS), with KeyFile
	KeyFile  string // the client certificate's private key
}

// The variables that hold, in a job, the files of the TLS its runner
// reaches the coordinator with (file variables: their values are paths),
// as GitLab Runner names them; the helper's artifact commands read them.
const (
	VarTLSCAFile   = "CI_SERVER_TLS_CA_FILE"
	VarTLSCertFile = "CI_SERVER_TLS_CERT_FILE"
	VarTLSKeyFile  = "CI_SERVER_TLS_KEY_FILE"
)

// ClientTLS is the TLS configuration for f: TLS 1.2 or newer, the
// system's CAs and those of f.CAFile (as GitLab Runner's tls-ca-file: a
// coordinator with a private CA is verified, not trusted blindly), and
// the client certificate of f.CertFile and f.KeyFile when both are set.
// It is nil, nil when f is empty. A file that does not read, or a CA file
// with no certificate, is an error naming it.
func ClientTLS(f TLSFiles) (*tls.Config, error) {
	if f == (TLSFiles{}) {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if f.CAFile != "" {
		pem, err := os.ReadFile(f.CAFile)
		if err != nil {
			return nil, fmt.Errorf("tls-ca-file: %w", err)
		}
		pool, err := x509.SystemCertPool()
		if err != nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("tls-ca-file %s: no PEM certificate in it", f.CAFile)
		}
		cfg.RootCAs = pool
	}
	switch {
	case f.CertFile != "" && f.KeyFile != "":
		cert, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("tls-cert-file %s, tls-key-file %s: %w", f.CertFile, f.KeyFile, err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	case f.CertFile != "" || f.KeyFile != "":
		return nil, errors.New("tls-cert-file and tls-key-file go together: set both or neither")
	}
	return cfg, nil
}

// NewClient returns a client for the coordinator at baseURL (a GitLab
// instance URL; a trailing "/ci" is removed, "/api/v4/" is appended).
func NewClient(baseURL string, opts ClientOptions) (*Client, error) {
	u, err := url.Parse(strings.TrimSpace(baseURL))
	if err != nil {
		return nil, fmt.Errorf("coordinator url %q: %w", baseURL, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("coordinator url %q: scheme must be http or https", baseURL)
	}
	p := strings.TrimSuffix(u.Path, "/")
	p = strings.TrimSuffix(p, "/ci")
	u.Path = p + "/api/v4/"
	hc := opts.HTTPClient
	if hc == nil {
		hc = &http.Client{
			Timeout: 60 * time.Minute,
			Transport: newMaxAgeTransport(&http.Transport{
				Proxy:                 http.ProxyFromEnvironment,
				ResponseHeaderTimeout: 10 * time.Minute,
				TLSHandshakeTimeout:   10 * time.Second,
				TLSClientConfig:       opts.TLS,
				MaxIdleConns:          100,
				MaxIdleConnsPerHost:   100,
				IdleConnTimeout:       90 * time.Second,
			}, opts.ConnectionMaxAge),
		}
	}
	v := opts.Version
	if v == "" {
		v = "dev"
	}
	return &Client{
		base:      u,
		http:      hc,
		userAgent: fmt.Sprintf("drover %s (%s; %s; %s/%s)", v, "main", runtime.Version(), runtime.GOOS, runtime.GOARCH),
	}, nil
}

// URL returns the API base URL (ending in /api/v4/).
func (c *Client) URL() string { return c.base.String() }

func newRequestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func (c *Client) do(ctx context.Context, method, path string, hdr http.Header, body io.Reader, contentType string) (*http.Response, *Response, error) {
	u := c.base.ResolveReference(&url.URL{Path: path})
	if i := strings.IndexByte(path, '?'); i >= 0 {
		u = c.base.ResolveReference(&url.URL{Path: path[:i], RawQuery: path[i+1:]})
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), body)
	if err != nil {
		return nil, nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	for k, vs := range hdr {
		req.Header[k] = vs
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	req.Header.Set("User-Agent", c.userAgent)
	sent := newRequestID()
	req.Header.Set(HeaderRequestID, sent)
	start := time.Now()
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, nil, fmt.Errorf("%s %s: %w", method, u.Path, err)
	}
	r := parseResponse(resp)
	if r.RequestID == "" {
		// The request's own id, as GitLab Runner takes it when the
		// server names none.
		r.RequestID = sent
	}
	r.Duration = time.Since(start)
	return resp, r, nil
}

func parseResponse(resp *http.Response) *Response {
	r := &Response{
		StatusCode: resp.StatusCode,
		JobStatus:  resp.Header.Get(HeaderJobStatus),
		LastUpdate: resp.Header.Get(HeaderLastUpdate),
		RequestID:  resp.Header.Get(HeaderRequestID),
	}
	if s := resp.Header.Get(HeaderTraceUpdateInterval); s != "" {
		if n, err := strconv.Atoi(s); err == nil && n > 0 {
			r.UpdateInterval = time.Duration(n) * time.Second
		}
	}
	r.AckTimeout = parseSeconds(resp.Header.Get(HeaderAckTimeout))
	r.JobWatch = watchWait(resp.Header.Get(HeaderJobWatch))
	if s := resp.Header.Get("Range"); s != "" {
		if n, err := parseRangeEnd(s); err == nil {
			r.RangeEnd, r.HasRange = n, true
		}
	}
	if s := resp.Header.Get("Retry-After"); s != "" {
		if n, err := strconv.Atoi(s); err == nil && n >= 0 {
			r.RetryAfter = time.Duration(n) * time.Second
		} else if t, err := http.ParseTime(s); err == nil {
			r.RetryAfter = time.Until(t)
		}
	}
	return r
}

// parseSeconds reads a positive (possibly fractional) number of seconds
// below a million; anything else is 0.
func parseSeconds(s string) time.Duration {
	if s == "" {
		return 0
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || !(f > 0 && f < 1e6) {
		return 0
	}
	return time.Duration(f * float64(time.Second))
}

// parseRangeEnd reads N from "0-N".
func parseRangeEnd(s string) (int64, error) {
	s = strings.TrimPrefix(strings.TrimSpace(s), "bytes ")
	_, end, ok := strings.Cut(s, "-")
	if !ok {
		return 0, fmt.Errorf("range %q: want 0-N", s)
	}
	return strconv.ParseInt(strings.TrimSpace(end), 10, 64)
}

func (c *Client) doJSON(ctx context.Context, method, path string, hdr http.Header, in any, wantStatus int, out any) (*Response, error) {
	var body io.Reader
	ct := ""
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return nil, fmt.Errorf("%s %s: encode body: %w", method, path, err)
		}
		body = bytes.NewReader(b)
		ct = "application/json"
	}
	if hdr == nil {
		hdr = http.Header{}
	}
	if out != nil {
		hdr.Set("Accept", "application/json")
	}
	resp, r, err := c.do(ctx, method, path, hdr, body, ct)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if out != nil && resp.StatusCode == wantStatus {
		mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
		if mt != "application/json" {
			return r, fmt.Errorf("%s %s: status %d with content type %q, want application/json", method, path, resp.StatusCode, mt)
		}
		if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<20)).Decode(out); err != nil {
			return r, fmt.Errorf("%s %s: decode answer: %w", method, path, err)
		}
		return r, nil
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	return r, nil
}

func runnerHeader(token string) http.Header {
	h := http.Header{}
	h.Set(HeaderRunnerToken, token)
	return h
}

func jobHeader(token string) http.Header {
	h := http.Header{}
	h.Set(HeaderJobToken, token)
	return h
}

// Verify calls POST runners/verify (200 on success, 403 invalid token).
func (c *Client) Verify(ctx context.Context, req VerifyRequest) (*VerifyResponse, *Response, error) {
	var out VerifyResponse
	r, err := c.doJSON(ctx, http.MethodPost, "runners/verify", runnerHeader(req.Token), req, http.StatusOK, &out)
	if err != nil || r.StatusCode != http.StatusOK {
		return nil, r, err
	}
	return &out, r, nil
}

// Register calls POST runners with a legacy registration token (201 on success).
func (c *Client) Register(ctx context.Context, req RegisterRequest) (*VerifyResponse, *Response, error) {
	var out VerifyResponse
	r, err := c.doJSON(ctx, http.MethodPost, "runners", runnerHeader(req.Token), req, http.StatusCreated, &out)
	if err != nil || r.StatusCode != http.StatusCreated {
		return nil, r, err
	}
	return &out, r, nil
}

// Unregister calls DELETE runners (legacy tokens; 204 on success).
func (c *Client) Unregister(ctx context.Context, token string) (*Response, error) {
	return c.doJSON(ctx, http.MethodDelete, "runners", runnerHeader(token), UnregisterRequest{Token: token}, http.StatusNoContent, nil)
}

// UnregisterManager calls DELETE runners/managers (glrt- tokens; 204 on success).
func (c *Client) UnregisterManager(ctx context.Context, token, systemID string) (*Response, error) {
	return c.doJSON(ctx, http.MethodDelete, "runners/managers", runnerHeader(token), UnregisterRequest{Token: token, SystemID: systemID}, http.StatusNoContent, nil)
}

// RequestJob calls POST jobs/request. It returns a nil job on 204 and on
// any status other than 201; the caller reads the status in *Response.
func (c *Client) RequestJob(ctx context.Context, req JobRequest) (*JobResponse, *Response, error) {
	var out JobResponse
	r, err := c.doJSON(ctx, http.MethodPost, "jobs/request", runnerHeader(req.Token), req, http.StatusCreated, &out)
	if err != nil || r.StatusCode != http.StatusCreated {
		return nil, r, err
	}
	out.CorrelationID = r.RequestID
	return &out, r, nil
}

// UpdateJob calls PUT jobs/:id.
func (c *Client) UpdateJob(ctx context.Context, id int64, req UpdateJobRequest) (*Response, error) {
	return c.doJSON(ctx, http.MethodPut, "jobs/"+strconv.FormatInt(id, 10), jobHeader(req.Token), req, 0, nil)
}

// ReportProvisioning calls POST jobs/:id/runner_provisioning (two-phase start).
func (c *Client) ReportProvisioning(ctx context.Context, id int64, jobToken string, req ProvisioningRequest) (*Response, error) {
	return c.doJSON(ctx, http.MethodPost, "jobs/"+strconv.FormatInt(id, 10)+"/runner_provisioning", jobHeader(jobToken), req, 0, nil)
}

// PatchTrace calls PATCH jobs/:id/trace with data starting at offset.
// data must not be empty nor larger than MaxTracePatch.
func (c *Client) PatchTrace(ctx context.Context, id int64, jobToken string, offset int64, data []byte) (*Response, error) {
	return c.PatchTraceMode(ctx, id, jobToken, offset, data, false)
}

// PatchTraceMode is PatchTrace saying whether the log is a debug trace
// (debug_trace=true: the job set CI_DEBUG_TRACE or CI_DEBUG_SERVICES),
// which GitLab shows only to those who may see the job's variables.
func (c *Client) PatchTraceMode(ctx context.Context, id int64, jobToken string, offset int64, data []byte, debug bool) (*Response, error) {
	if len(data) == 0 {
		return nil, errors.New("patch trace: empty patch")
	}
	if len(data) > MaxTracePatch {
		return nil, fmt.Errorf("patch trace: %d bytes is over the %d byte cap", len(data), MaxTracePatch)
	}
	h := jobHeader(jobToken)
	h.Set("Content-Range", fmt.Sprintf("%d-%d", offset, offset+int64(len(data))-1))
	resp, r, err := c.do(ctx, http.MethodPatch, "jobs/"+strconv.FormatInt(id, 10)+"/trace?debug_trace="+strconv.FormatBool(debug), h, bytes.NewReader(data), "text/plain")
	if err != nil {
		return nil, err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	return r, nil
}

// LastUpdates remembers the X-GitLab-Last-Update value per runner token, to
// echo it as last_update in the next jobs/request (long polling).
type LastUpdates struct {
	mu sync.Mutex
	m  map[string]string
}

// Get returns the value stored for key.
func (l *LastUpdates) Get(key string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.m[key]
}

// Set stores a non-empty value for key.
func (l *LastUpdates) Set(key, v string) {
	if v == "" {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.m == nil {
		l.m = map[string]string{}
	}
	l.m[key] = v
}

// TraceSize asks the coordinator how many bytes of the job's log it has:
// it sends a one-byte patch at an offset no log can reach, which every
// API v4 coordinator answers with 416 and "Range: 0-<size>". A job resumed
// after a manager restart uses it to continue its log where the
// coordinator has it.
func (c *Client) TraceSize(ctx context.Context, id int64, jobToken string) (int64, *Response, error) {
	const unreachable = 1 << 62
	r, err := c.PatchTrace(ctx, id, jobToken, unreachable, []byte{'\n'})
	if err != nil {
		return 0, nil, err
	}
	if r.StatusCode != http.StatusRequestedRangeNotSatisfiable || !r.HasRange {
		return 0, r, fmt.Errorf("trace size of job %d: status %d without a Range", id, r.StatusCode)
	}
	return r.RangeEnd, r, nil
}
