package cache

import (
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// MaxSinglePut is the largest object one S3 PUT may carry (5 GiB); larger
// archives would need a multipart upload, which pre-signed URLs of one
// request cannot do.
const MaxSinglePut = 5 << 30

// Transfer downloads and uploads archives through pre-signed URLs. It
// holds no credentials: the URLs carry their own signature, so a Transfer
// can run where the job runs.
//
// # Retries
//
// Each call makes up to Attempts requests. It retries after network
// errors, 408, 429 and 5xx answers, waiting Backoff before the second
// attempt and twice as long before each later one; any other answer ends
// the call. A download that breaks off after some bytes resumes with a
// Range request pinned to the object's ETag (If-Match), so the bytes
// already written to the caller's writer are not sent again and an object
// replaced in between is an error rather than a mix. An upload resends
// the whole body: S3 stores an object only once its PUT is complete.
type Transfer struct {
	// Client makes the requests; nil means http.DefaultClient. Bound a
	// request's time with the context, not Client.Timeout, which would
	// cut off large archives.
	Client *http.Client
	// Attempts is the number of requests per call; zero means 3.
	Attempts int
	// Backoff is the wait before the second attempt; zero means 1s.
	Backoff time.Duration
	// RequestTimeout bounds each request, its body included (GitLab
	// Runner's CACHE_REQUEST_TIMEOUT); a request that runs out of it
	// counts as a network error. Zero means no bound but the context's.
	RequestTimeout time.Duration
}

// errRequestTimeout is the cause of a request that ran out of
// Transfer.RequestTimeout.
var errRequestTimeout = errors.New("request timeout")

// request returns the context of one request: ctx bounded by
// RequestTimeout.
func (t *Transfer) request(ctx context.Context) (context.Context, context.CancelFunc) {
	if t.RequestTimeout <= 0 {
		return ctx, func() {}
	}
	return context.WithTimeoutCause(ctx, t.RequestTimeout, fmt.Errorf("%w of %v exceeded", errRequestTimeout, t.RequestTimeout))
}

// requestError says so when a request failed because it ran out of
// RequestTimeout.
func requestError(rctx context.Context, err error) error {
	if cause := context.Cause(rctx); errors.Is(cause, errRequestTimeout) && err != nil {
		return fmt.Errorf("%w: %w", cause, err)
	}
	return err
}

// httpError is an unexpected answer, with the S3 error code when the
// body had one.
type httpError struct {
	method, url string
	status      int
	code, msg   string
}

func (e *httpError) Error() string {
	s := fmt.Sprintf("%s %s: %d %s", e.method, e.url, e.status, http.StatusText(e.status))
	if e.code != "" {
		s += ": " + e.code
	}
	if e.msg != "" {
		s += ": " + e.msg
	}
	return s
}

func (e *httpError) retryable() bool {
	return e.status == http.StatusRequestTimeout || e.status == http.StatusTooManyRequests || e.status >= 500
}

// redact drops the query (the signature) from a URL for error messages.
func redact(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return "(unparsable URL)"
	}
	p.RawQuery, p.User = "", nil
	return p.String()
}

// authCodes are the error codes of refused credentials or signatures:
// S3's (GCS's XML API uses the same), then Azure Blob Storage's. Servers
// differ in the status they send with them (versitygw answers an unknown
// access key with 404).
var authCodes = map[string]bool{
	"AccessDenied": true, "InvalidAccessKeyId": true, "SignatureDoesNotMatch": true,
	"ExpiredToken": true, "InvalidToken": true, "TokenRefreshRequired": true,
	"AuthorizationHeaderMalformed": true, "AuthorizationQueryParametersError": true,
	"XAdminUserNotFound":   true,
	"AuthenticationFailed": true, "AuthorizationFailure": true, "AuthorizationPermissionMismatch": true,
	"AuthorizationProtocolMismatch": true, "AuthorizationResourceTypeMismatch": true,
}

// missCodes are the error codes of a missing object (S3's and GCS's,
// Azure's); a missing bucket or container is not among them.
var missCodes = map[string]bool{"": true, "NoSuchKey": true, "BlobNotFound": true}

// answerError reads an unexpected answer into an error, wrapping ErrAuth
// for 401, 403 and the error codes of refused credentials, and
// ErrNotFound for other 404s (without an error code, or NoSuchKey,
// BlobNotFound: a missing bucket is a configuration error, not a miss).
func answerError(req *http.Request, resp *http.Response) error {
	var body struct {
		Code    string
		Message string
	}
	_ = xml.NewDecoder(io.LimitReader(resp.Body, 64<<10)).Decode(&body)
	e := &httpError{method: req.Method, url: redact(req.URL.String()), status: resp.StatusCode, code: body.Code, msg: body.Message}
	switch {
	case authCodes[body.Code] || resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		return fmt.Errorf("%w: %w", ErrAuth, e)
	case resp.StatusCode == http.StatusNotFound && missCodes[body.Code]:
		return fmt.Errorf("%w: %w", ErrNotFound, e)
	}
	return e
}

func (t *Transfer) client() *http.Client {
	if t.Client != nil {
		return t.Client
	}
	return http.DefaultClient
}

// retry runs attempt until it succeeds, fails for good, or the attempts
// run out. attempt reports whether its error is worth another try.
func (t *Transfer) retry(ctx context.Context, attempt func() (retry bool, err error)) error {
	attempts := t.Attempts
	if attempts <= 0 {
		attempts = 3
	}
	wait := t.Backoff
	if wait <= 0 {
		wait = time.Second
	}
	var err error
	for i := range attempts {
		if i > 0 {
			timer := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				timer.Stop()
				return fmt.Errorf("%w (after: %w)", ctx.Err(), err)
			case <-timer.C:
			}
			wait *= 2
		}
		var again bool
		again, err = attempt()
		if err == nil || !again || ctx.Err() != nil {
			return err
		}
	}
	return fmt.Errorf("after %d attempts: %w", attempts, err)
}

// Download writes the object at the pre-signed GET URL u to w and returns
// its size. A missing object is an error wrapping ErrNotFound, with
// nothing written.
func (t *Transfer) Download(ctx context.Context, u string, w io.Writer) (int64, error) {
	var written int64
	var etag string
	err := t.retry(ctx, func() (bool, error) {
		rctx, cancel := t.request(ctx)
		defer cancel()
		req, err := http.NewRequestWithContext(rctx, http.MethodGet, u, nil)
		if err != nil {
			return false, fmt.Errorf("cache download: %w", err)
		}
		if written > 0 {
			req.Header.Set("Range", "bytes="+strconv.FormatInt(written, 10)+"-")
			if etag != "" {
				req.Header.Set("If-Match", etag)
			}
		}
		resp, err := t.client().Do(req)
		if err != nil {
			return true, fmt.Errorf("cache download: %w", requestError(rctx, err))
		}
		defer resp.Body.Close()
		switch {
		case resp.StatusCode == http.StatusOK && written == 0:
			etag = resp.Header.Get("ETag")
		case resp.StatusCode == http.StatusPartialContent && written > 0:
		default:
			err := answerError(req, resp)
			var he *httpError
			return errors.As(err, &he) && he.retryable(), fmt.Errorf("cache download: %w", err)
		}
		n, err := io.Copy(w, resp.Body)
		written += n
		if err != nil {
			return true, fmt.Errorf("cache download: after %d bytes: %w", written, requestError(rctx, err))
		}
		return false, nil
	})
	return written, err
}

// Upload sends size bytes of r with a PUT to the pre-signed URL u, with
// header (the headers the URL was signed with, such as server-side
// encryption). Archives over MaxSinglePut are refused with an error
// wrapping ErrTooLarge before anything is sent.
func (t *Transfer) Upload(ctx context.Context, u string, header http.Header, r io.ReaderAt, size int64) error {
	if size > MaxSinglePut {
		return fmt.Errorf("cache upload: %d bytes: archives over 5 GiB need a multipart upload, not supported: %w", size, ErrTooLarge)
	}
	return t.retry(ctx, func() (bool, error) {
		rctx, cancel := t.request(ctx)
		defer cancel()
		body := func() (io.ReadCloser, error) { return io.NopCloser(io.NewSectionReader(r, 0, size)), nil }
		b, _ := body()
		req, err := http.NewRequestWithContext(rctx, http.MethodPut, u, b)
		if err != nil {
			return false, fmt.Errorf("cache upload: %w", err)
		}
		req.GetBody = body
		req.ContentLength = size
		if size == 0 {
			req.Body = http.NoBody
		}
		for k, vs := range header {
			req.Header[k] = vs
		}
		resp, err := t.client().Do(req)
		if err != nil {
			return true, fmt.Errorf("cache upload: %w", requestError(rctx, err))
		}
		defer resp.Body.Close()
		if resp.StatusCode/100 == 2 {
			_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
			return false, nil
		}
		err = answerError(req, resp)
		var he *httpError
		return errors.As(err, &he) && he.retryable(), fmt.Errorf("cache upload: %w", err)
	})
}
