package cache

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"
)

// DefaultExpiry is how long a pre-signed URL stays valid when the caller
// gives no expiry: GitLab Runner uses the job's timeout, whose default is
// one hour.
const DefaultExpiry = time.Hour

// URLSigner signs URLs for the objects of one bucket (an S3 or GCS
// bucket, an Azure container), one object at a time. The URLs carry their
// own signature and no credential, so they can be handed to a job's
// helper, which moves the archive with a [Transfer].
//
// GetURL signs a GET of the object name; PutURL signs a PUT and returns
// the headers the upload must send, because the signature covers them
// or the service requires them. Both are valid for expiry (DefaultExpiry
// when zero or negative); a signer may shorten it to what its
// credentials or its signature scheme allow. Signing may ask a server for
// credentials (STS), bounded by ctx.
type URLSigner interface {
	GetURL(ctx context.Context, name string, expiry time.Duration) (*url.URL, error)
	PutURL(ctx context.Context, name string, expiry time.Duration) (*url.URL, http.Header, error)
}

// OrDefaultExpiry is d, or DefaultExpiry when d is zero or negative.
func OrDefaultExpiry(d time.Duration) time.Duration {
	if d <= 0 {
		return DefaultExpiry
	}
	return d
}

// SignedStore is a [Store] over a [URLSigner]: each call signs a URL and
// moves the archive with Transfer, the way a job's helper does.
type SignedStore struct {
	Signer   URLSigner
	Transfer *Transfer
	// Expiry is the validity of the URLs signed; zero means DefaultExpiry.
	Expiry time.Duration
}

var _ Store = (*SignedStore)(nil)

// Download implements Store.
func (s *SignedStore) Download(ctx context.Context, name string, w io.Writer) (int64, error) {
	u, err := s.Signer.GetURL(ctx, name, s.Expiry)
	if err != nil {
		return 0, err
	}
	n, err := s.Transfer.Download(ctx, u.String(), w)
	if err != nil {
		return n, fmt.Errorf("cache object %q: %w", name, err)
	}
	return n, nil
}

// Upload implements Store.
func (s *SignedStore) Upload(ctx context.Context, name string, r io.ReaderAt, size int64) error {
	u, h, err := s.Signer.PutURL(ctx, name, s.Expiry)
	if err != nil {
		return err
	}
	if err := s.Transfer.Upload(ctx, u.String(), h, r, size); err != nil {
		return fmt.Errorf("cache object %q: %w", name, err)
	}
	return nil
}
