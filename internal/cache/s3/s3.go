// Package s3 keeps cache archives in an S3 bucket ([runners.cache] Type =
// "s3") through pre-signed URLs.
//
// A [Presigner] holds the credentials and signs GET and PUT URLs for one
// object at a time, with minio-go, without any request to the S3 server;
// the URLs can be handed to a job's helper, which moves the archive with
// a cache.Transfer and never sees a credential. cache.SignedStore puts
// the two together as a cache.Store for code that runs next to the
// credentials.
//
// # Roles and acceleration
//
// With RoleARN (or UploadRoleARN, for uploads only) the Presigner assumes
// the role through STS AssumeRole with AccessKey and SecretKey, at
// [STSEndpoint], and signs with the temporary credentials, which
// minio-go renews shortly before they expire; a URL never outlives them.
// Accelerate signs URLs for <bucket>.s3-accelerate.amazonaws.com, on AWS
// only.
package s3

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/minio/minio-go/v7/pkg/encrypt"

	"github.com/drover-ci/drover/internal/cache"
)

// DefaultServer is the endpoint used when ServerAddress is empty.
const DefaultServer = "s3.amazonaws.com"

// stsDuration is the lifetime asked of AssumeRole's credentials: an hour,
// as GitLab Runner asks (the longest AWS allows with role chaining).
const stsDuration = time.Hour

// Presigner signs URLs for objects of one bucket. It is a cache.URLSigner.
type Presigner struct {
	get, put signer
	bucket   string
	header   http.Header // server-side encryption headers, signed into PUTs
}

// signer is a client and its credentials; role credentials expire, and
// the URLs they sign must not outlive them.
type signer struct {
	client *minio.Client
	creds  *credentials.Credentials
	role   bool
}

var _ cache.URLSigner = (*Presigner)(nil)

// New returns a Presigner for the validated configuration cfg. No request
// reaches a server here: with RoleARN or UploadRoleARN the role is
// assumed at the first signing that needs it.
func New(cfg *cache.S3Config) (*Presigner, error) {
	if cfg == nil {
		return nil, fmt.Errorf("s3 cache: missing [runners.cache.s3]")
	}
	server := cfg.ServerAddress
	if server == "" {
		server = DefaultServer
	}
	accelerate := ""
	if cfg.Accelerate || s3AcceleratePattern.MatchString(server) {
		if !cache.IsAWSEndpoint(cfg.ServerAddress) {
			return nil, fmt.Errorf("s3 cache: Accelerate: S3 Transfer Acceleration exists on AWS only, not on %s", server)
		}
		// As GitLab Runner does: the client talks to the plain endpoint,
		// and minio-go puts the accelerate host in the URLs it signs.
		accelerate = "s3-accelerate.amazonaws.com"
		if s3AcceleratePattern.MatchString(server) {
			accelerate = server
			server = strings.Replace(server, "s3-accelerate", "s3", 1)
		}
	}
	region := cfg.BucketLocation
	if region == "" {
		// Setting the region keeps minio-go from asking the server for
		// the bucket's location: signing needs no network.
		region = "us-east-1"
	}
	var base *credentials.Credentials
	switch cfg.AuthType() {
	case cache.AuthAccessKey:
		base = credentials.NewStaticV4(cfg.AccessKey, cfg.SecretKey, cfg.SessionToken)
	case cache.AuthIAM:
		base = credentials.NewIAM("")
	default:
		return nil, fmt.Errorf("s3 cache: AuthenticationType %q: want %q or %q", cfg.AuthenticationType, cache.AuthAccessKey, cache.AuthIAM)
	}
	newSigner := func(creds *credentials.Credentials, role bool) (signer, error) {
		lookup := minio.BucketLookupAuto
		if cfg.PathStyle != nil {
			lookup = minio.BucketLookupDNS
			if *cfg.PathStyle {
				lookup = minio.BucketLookupPath
			}
		}
		client, err := minio.New(server, &minio.Options{
			Creds:        creds,
			Secure:       !cfg.Insecure,
			Region:       region,
			BucketLookup: lookup,
		})
		if err != nil {
			return signer{}, fmt.Errorf("s3 cache: client for %s: %w", server, err)
		}
		if accelerate != "" {
			client.SetS3TransferAccelerate(accelerate)
		}
		return signer{client: client, creds: creds, role: role}, nil
	}
	get, err := newSigner(base, false)
	if err != nil {
		return nil, err
	}
	put := get
	if arn := cmp.Or(cfg.RoleARN, cfg.UploadRoleARN); arn != "" {
		if cfg.AccessKey == "" || cfg.SecretKey == "" {
			return nil, fmt.Errorf("s3 cache: RoleARN/UploadRoleARN: assuming a role needs AccessKey and SecretKey")
		}
		creds, err := credentials.NewSTSAssumeRole(STSEndpoint(cfg), credentials.STSAssumeRoleOptions{
			AccessKey:       cfg.AccessKey,
			SecretKey:       cfg.SecretKey,
			SessionToken:    cfg.SessionToken,
			Location:        region,
			DurationSeconds: int(stsDuration / time.Second),
			RoleARN:         arn,
			RoleSessionName: "drover-runner-cache-" + randomHex(4),
		})
		if err != nil {
			return nil, fmt.Errorf("s3 cache: RoleARN: %w", err)
		}
		if put, err = newSigner(creds, true); err != nil {
			return nil, err
		}
		if cfg.RoleARN != "" {
			get = put
		}
	}
	header := http.Header{}
	switch strings.ToUpper(cfg.ServerSideEncryption) {
	case "S3", "AES256":
		encrypt.NewSSE().Marshal(header)
	case "KMS", "AWS:KMS":
		sse, err := encrypt.NewSSEKMS(cfg.ServerSideEncryptionKeyID, nil)
		if err != nil {
			return nil, fmt.Errorf("s3 cache: ServerSideEncryptionKeyID: %w", err)
		}
		sse.Marshal(header)
	}
	return &Presigner{get: get, put: put, bucket: cfg.BucketName, header: header}, nil
}

// s3AcceleratePattern is GitLab Runner's test for a ServerAddress that
// names the accelerate endpoint itself.
var s3AcceleratePattern = regexp.MustCompile(`s3-accelerate.*\.amazonaws\.com$`)

// STSEndpoint is where RoleARN is assumed: AWS's regional STS endpoint
// for AWS's S3, else the S3 endpoint itself, where S3 servers with STS
// (MinIO) serve it.
func STSEndpoint(cfg *cache.S3Config) string {
	if cache.IsAWSEndpoint(cfg.ServerAddress) {
		region := cmp.Or(cfg.BucketLocation, "us-east-1")
		if strings.HasPrefix(region, "cn-") {
			return "https://sts." + region + ".amazonaws.com.cn"
		}
		return "https://sts." + region + ".amazonaws.com"
	}
	scheme := "https"
	if cfg.Insecure {
		scheme = "http"
	}
	return scheme + "://" + cfg.ServerAddress
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// expiry is the validity of a URL signed by s: expiry (DefaultExpiry when
// zero), but no longer than role credentials live, which it fetches
// (assuming the role) when it has none or they are about to expire.
func (s signer) expiry(ctx context.Context, expiry time.Duration) (time.Duration, error) {
	expiry = cache.OrDefaultExpiry(expiry)
	if !s.role {
		return expiry, nil
	}
	v, err := s.creds.GetWithContext(&credentials.CredContext{Client: http.DefaultClient, Context: ctx})
	var stsErr credentials.ErrorResponse
	if errors.As(err, &stsErr) && stsErr.STSError.Code != "" {
		// minio-go's message leaves STS's error code out.
		return 0, fmt.Errorf("assuming the role: STS: %s: %w", stsErr.STSError.Code, err)
	}
	if err != nil {
		return 0, fmt.Errorf("assuming the role: %w", err)
	}
	if !v.Expiration.IsZero() {
		// A second less: the URL must not outlive the credentials.
		if left := time.Until(v.Expiration) - time.Second; left < expiry {
			expiry = max(left, time.Second)
		}
	}
	return expiry, nil
}

// GetURL signs a GET of the object name, valid for expiry
// (DefaultExpiry when zero) or as long as role credentials last.
func (p *Presigner) GetURL(ctx context.Context, name string, expiry time.Duration) (*url.URL, error) {
	expiry, err := p.get.expiry(ctx, expiry)
	if err != nil {
		return nil, fmt.Errorf("s3 cache: signing GET of %q: %w", name, err)
	}
	u, err := p.get.client.PresignHeader(ctx, http.MethodGet, p.bucket, name, expiry, nil, nil)
	if err != nil {
		return nil, fmt.Errorf("s3 cache: signing GET of %q: %w", name, err)
	}
	return u, nil
}

// PutURL signs a PUT of the object name, valid for expiry (DefaultExpiry
// when zero, shorter with role credentials). The upload must send the
// returned headers, which are part of the signature.
func (p *Presigner) PutURL(ctx context.Context, name string, expiry time.Duration) (*url.URL, http.Header, error) {
	expiry, err := p.put.expiry(ctx, expiry)
	if err != nil {
		return nil, nil, fmt.Errorf("s3 cache: signing PUT of %q: %w", name, err)
	}
	h := p.header.Clone()
	u, err := p.put.client.PresignHeader(ctx, http.MethodPut, p.bucket, name, expiry, nil, h)
	if err != nil {
		return nil, nil, fmt.Errorf("s3 cache: signing PUT of %q: %w", name, err)
	}
	return u, h, nil
}
