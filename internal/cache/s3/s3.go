// Package s3 keeps cache archives in an S3 bucket ([runners.cache] Type =
// "s3") through pre-signed URLs.
//
// A [Presigner] holds the credentials and signs GET and PUT URLs for one
// object at a time, with minio-go, without any request to the server; the
// URLs can be handed to a job's helper, which moves the archive with a
// cache.Transfer and never sees a credential. [Store] puts the two
// together as a cache.Store for code that runs next to the credentials.
package s3

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/minio/minio-go/v7/pkg/encrypt"

	"github.com/drover-ci/drover/internal/cache"
)

// DefaultServer is the endpoint used when ServerAddress is empty.
const DefaultServer = "s3.amazonaws.com"

// DefaultExpiry is how long a pre-signed URL stays valid when the caller
// gives no expiry: GitLab Runner uses the job's timeout, whose default is
// one hour.
const DefaultExpiry = time.Hour

// Presigner signs URLs for objects of one bucket.
type Presigner struct {
	client *minio.Client
	bucket string
	header http.Header // server-side encryption headers, signed into PUTs
}

// New returns a Presigner for the validated configuration cfg.
func New(cfg *cache.S3Config) (*Presigner, error) {
	if cfg == nil {
		return nil, fmt.Errorf("s3 cache: missing [runners.cache.s3]")
	}
	server := cfg.ServerAddress
	if server == "" {
		server = DefaultServer
	}
	region := cfg.BucketLocation
	if region == "" {
		// Setting the region keeps minio-go from asking the server for
		// the bucket's location: signing needs no network.
		region = "us-east-1"
	}
	var creds *credentials.Credentials
	switch cfg.AuthType() {
	case cache.AuthAccessKey:
		creds = credentials.NewStaticV4(cfg.AccessKey, cfg.SecretKey, cfg.SessionToken)
	case cache.AuthIAM:
		creds = credentials.NewIAM("")
	default:
		return nil, fmt.Errorf("s3 cache: AuthenticationType %q: want %q or %q", cfg.AuthenticationType, cache.AuthAccessKey, cache.AuthIAM)
	}
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
		return nil, fmt.Errorf("s3 cache: client for %s: %w", server, err)
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
	return &Presigner{client: client, bucket: cfg.BucketName, header: header}, nil
}

// GetURL signs a GET of the object name, valid for expiry
// (DefaultExpiry when zero).
func (p *Presigner) GetURL(ctx context.Context, name string, expiry time.Duration) (*url.URL, error) {
	u, err := p.client.PresignHeader(ctx, http.MethodGet, p.bucket, name, orDefault(expiry), nil, nil)
	if err != nil {
		return nil, fmt.Errorf("s3 cache: signing GET of %q: %w", name, err)
	}
	return u, nil
}

// PutURL signs a PUT of the object name, valid for expiry (DefaultExpiry
// when zero). The upload must send the returned headers, which are part
// of the signature.
func (p *Presigner) PutURL(ctx context.Context, name string, expiry time.Duration) (*url.URL, http.Header, error) {
	h := p.header.Clone()
	u, err := p.client.PresignHeader(ctx, http.MethodPut, p.bucket, name, orDefault(expiry), nil, h)
	if err != nil {
		return nil, nil, fmt.Errorf("s3 cache: signing PUT of %q: %w", name, err)
	}
	return u, h, nil
}

func orDefault(d time.Duration) time.Duration {
	if d <= 0 {
		return DefaultExpiry
	}
	return d
}

// Store is a cache.Store over a bucket: each call signs a URL and moves
// the archive with Transfer.
type Store struct {
	Presigner *Presigner
	Transfer  *cache.Transfer
	// Expiry is the validity of the URLs signed; zero means DefaultExpiry.
	Expiry time.Duration
}

var _ cache.Store = (*Store)(nil)

// Download implements cache.Store.
func (s *Store) Download(ctx context.Context, name string, w io.Writer) (int64, error) {
	u, err := s.Presigner.GetURL(ctx, name, s.Expiry)
	if err != nil {
		return 0, err
	}
	n, err := s.Transfer.Download(ctx, u.String(), w)
	if err != nil {
		return n, fmt.Errorf("cache object %q: %w", name, err)
	}
	return n, nil
}

// Upload implements cache.Store.
func (s *Store) Upload(ctx context.Context, name string, r io.ReaderAt, size int64) error {
	u, h, err := s.Presigner.PutURL(ctx, name, s.Expiry)
	if err != nil {
		return err
	}
	if err := s.Transfer.Upload(ctx, u.String(), h, r, size); err != nil {
		return fmt.Errorf("cache object %q: %w", name, err)
	}
	return nil
}
