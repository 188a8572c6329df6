// Package azure keeps cache archives in an Azure Blob Storage container
// ([runners.cache] Type = "azure") through SAS-signed blob URLs.
//
// A [Signer] holds the storage account's key and signs, for one blob at
// a time and without any request to Azure, a service SAS (shared access
// signature) for reading (sp=r) or writing (sp=w) the blob, as GitLab
// Runner does: valid from an hour ago (clock skew) until the expiry, over
// HTTPS only. The string to sign and the query parameters are those of
// Azure's "Create a service SAS" documentation
// (https://learn.microsoft.com/rest/api/storageservices/create-service-sas),
// version [SASVersion].
//
// # Transfers
//
// The archive moves with a cache.Transfer: a GET of the blob (Get Blob)
// and a single PUT (Put Blob, with x-ms-blob-type: BlockBlob among the
// headers PutURL returns), which Azure takes up to 5000 MiB. GitLab Runner
// hands the SAS token to its helper's Azure SDK, which uploads in blocks;
// the objects, their names and the containers are the same.
package azure

import (
	"cmp"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/drover-ci/drover/internal/cache"
)

// DefaultStorageDomain is the blob service's domain when StorageDomain is
// empty.
const DefaultStorageDomain = "blob.core.windows.net"

// SASVersion is the storage service version the SAS tokens are signed
// for (sv), and the version of the requests made with them.
const SASVersion = "2022-11-02"

// Signer signs blob URLs for one container.
type Signer struct {
	account   string
	key       []byte
	container string
	// base is the blob service's URL: https://<account>.<domain>, or the
	// test endpoint with the account in its path.
	base     *url.URL
	protocol string // spr
	now      func() time.Time
}

var _ cache.URLSigner = (*Signer)(nil)

// New returns a Signer for the validated configuration cfg.
func New(cfg *cache.AzureConfig) (*Signer, error) {
	if cfg == nil {
		return nil, errors.New("azure cache: missing [runners.cache.azure]")
	}
	if cfg.AccountName == "" || cfg.ContainerName == "" {
		return nil, errors.New("azure cache: needs AccountName and ContainerName")
	}
	key, err := base64.StdEncoding.DecodeString(cfg.AccountKey)
	if err != nil || len(key) == 0 {
		return nil, errors.New("azure cache: AccountKey: want the storage account's base64 key")
	}
	s := &Signer{
		account:   cfg.AccountName,
		key:       key,
		container: cfg.ContainerName,
		base:      &url.URL{Scheme: "https", Host: cfg.AccountName + "." + cmp.Or(cfg.StorageDomain, DefaultStorageDomain)},
		protocol:  "https",
		now:       time.Now,
	}
	if cfg.DroverTestEndpoint != "" {
		if s.base, err = url.Parse(strings.TrimSuffix(cfg.DroverTestEndpoint, "/")); err != nil {
			return nil, fmt.Errorf("azure cache: DroverTestEndpoint: %w", err)
		}
		if s.base.Scheme == "http" {
			// An emulator on loopback speaks plain HTTP: the token must
			// allow it.
			s.protocol = "https,http"
		}
	}
	return s, nil
}

// GetURL signs a read of the blob name.
func (s *Signer) GetURL(_ context.Context, name string, expiry time.Duration) (*url.URL, error) {
	return s.sign(name, "r", expiry), nil
}

// PutURL signs a write of the blob name and returns the headers Put
// Blob needs.
func (s *Signer) PutURL(_ context.Context, name string, expiry time.Duration) (*url.URL, http.Header, error) {
	h := http.Header{}
	h.Set("X-Ms-Blob-Type", "BlockBlob")
	h.Set("X-Ms-Version", SASVersion)
	h.Set("Content-Type", "application/octet-stream")
	return s.sign(name, "w", expiry), h, nil
}

// sasTime is the SAS tokens' time format (ISO 8601, UTC, seconds).
const sasTime = "2006-01-02T15:04:05Z"

// sign returns the URL of blob name with a service SAS granting perms.
func (s *Signer) sign(name, perms string, expiry time.Duration) *url.URL {
	name = strings.TrimLeft(name, "/")
	now := s.now().UTC()
	start := now.Add(-time.Hour).Format(sasTime)
	end := now.Add(cache.OrDefaultExpiry(expiry)).Format(sasTime)
	// The fields of the string to sign, in the documented order; the ones
	// drover does not use are empty.
	toSign := strings.Join([]string{
		perms,
		start,
		end,
		"/blob/" + s.account + "/" + s.container + "/" + name, // canonicalized resource
		"",         // signed identifier
		"",         // signed IP
		s.protocol, // signed protocol
		SASVersion,
		"b",                // signed resource: a blob
		"",                 // signed snapshot time
		"",                 // signed encryption scope
		"", "", "", "", "", // rscc, rscd, rsce, rscl, rsct
	}, "\n")
	mac := hmac.New(sha256.New, s.key)
	mac.Write([]byte(toSign))
	q := url.Values{
		"sv":  {SASVersion},
		"spr": {s.protocol},
		"st":  {start},
		"se":  {end},
		"sr":  {"b"},
		"sp":  {perms},
		"sig": {base64.StdEncoding.EncodeToString(mac.Sum(nil))},
	}
	u := *s.base
	u.Path = strings.TrimSuffix(u.Path, "/") + "/" + s.container + "/" + name
	u.RawPath = ""
	u.RawQuery = q.Encode()
	return &u
}
