package cache

import (
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
)

// Config is the [runners.cache] section of config.toml, with GitLab
// Runner's key names. An empty Type means no distributed cache: the local
// cache directory is used.
type Config struct {
	// Type is "s3", "gcs" or "azure" (GitLab's "s3v2" and "gcsv2" are
	// taken as "s3" and "gcs").
	Type string `toml:"Type,omitempty"`
	// Path is prepended to every object name.
	Path string `toml:"Path,omitempty"`
	// Shared drops the runner's namespace from object names, so that all
	// runners using the bucket share their caches.
	Shared bool `toml:"Shared,omitempty"`
	// MaxUploadedArchiveSize caps the size of an archive uploaded, in
	// bytes; zero means no cap.
	MaxUploadedArchiveSize int64 `toml:"MaxUploadedArchiveSize,omitempty"`

	S3    *S3Config    `toml:"s3,omitempty"`
	GCS   *GCSConfig   `toml:"gcs,omitempty"`
	Azure *AzureConfig `toml:"azure,omitempty"`
}

// S3Config is [runners.cache.s3].
type S3Config struct {
	// ServerAddress is host[:port] of the S3 endpoint; empty means
	// s3.amazonaws.com.
	ServerAddress string `toml:"ServerAddress,omitempty"`
	AccessKey     string `toml:"AccessKey,omitempty"`
	SecretKey     string `toml:"SecretKey,omitempty"`
	SessionToken  string `toml:"SessionToken,omitempty"`
	BucketName    string `toml:"BucketName,omitempty"`
	// BucketLocation is the region; empty means us-east-1.
	BucketLocation string `toml:"BucketLocation,omitempty"`
	// Insecure talks plain HTTP to ServerAddress.
	Insecure bool `toml:"Insecure,omitempty"`
	// AuthenticationType is "access-key" or "iam"; empty picks
	// access-key when ServerAddress, AccessKey and SecretKey are all set,
	// iam otherwise, as GitLab Runner does.
	AuthenticationType string `toml:"AuthenticationType,omitempty"`
	// ServerSideEncryption is "", "S3" (or "AES256"), "KMS" (or
	// "aws:kms"); DSSE-KMS is not supported yet.
	ServerSideEncryption      string `toml:"ServerSideEncryption,omitempty"`
	ServerSideEncryptionKeyID string `toml:"ServerSideEncryptionKeyID,omitempty"`
	// PathStyle forces path-style (true) or virtual-host (false) bucket
	// addressing; unset detects it from the endpoint.
	PathStyle *bool `toml:"PathStyle,omitempty"`
	// DualStack is parsed for compatibility (minio-go picks the
	// endpoint).
	DualStack *bool `toml:"DualStack,omitempty"`
	// Accelerate signs URLs for S3 Transfer Acceleration
	// (<bucket>.s3-accelerate.amazonaws.com); it exists on AWS only, so
	// Validate refuses it with another ServerAddress.
	Accelerate bool `toml:"Accelerate,omitempty"`
	// RoleARN is a role assumed through STS AssumeRole with AccessKey and
	// SecretKey; the URLs are signed with its temporary credentials.
	// UploadRoleARN does the same for uploads only (RoleARN wins when
	// both are set, as in GitLab Runner).
	RoleARN       string `toml:"RoleARN,omitempty"`
	UploadRoleARN string `toml:"UploadRoleARN,omitempty"`
	// AssumeRoleMaxConcurrency and DisableAssumeRoleCredentialsCaching
	// are parsed for compatibility: drover assumes a role once per
	// runner and renews the credentials shortly before they expire.
	AssumeRoleMaxConcurrency            int  `toml:"AssumeRoleMaxConcurrency,omitempty"`
	DisableAssumeRoleCredentialsCaching bool `toml:"DisableAssumeRoleCredentialsCaching,omitempty"`
}

// GCSConfig is [runners.cache.gcs]. The credentials are a service
// account's: CredentialsFile (its JSON key file), or AccessID (its
// e-mail) and PrivateKey (its PEM key); the file wins when both are set.
type GCSConfig struct {
	AccessID        string `toml:"AccessID,omitempty"`
	PrivateKey      string `toml:"PrivateKey,omitempty"`
	CredentialsFile string `toml:"CredentialsFile,omitempty"`
	BucketName      string `toml:"BucketName,omitempty"`
	// UniverseDomain replaces googleapis.com in the storage host.
	UniverseDomain string `toml:"UniverseDomain,omitempty"`
	// DroverTestEndpoint is drover's own key, for tests only: the base
	// URL (scheme://host:port) of a GCS emulator such as
	// fake-gcs-server, used in place of https://storage.googleapis.com.
	// GitLab Runner has no such key.
	DroverTestEndpoint string `toml:"DroverTestEndpoint,omitempty"`
}

// AzureConfig is [runners.cache.azure].
type AzureConfig struct {
	AccountName   string `toml:"AccountName,omitempty"`
	AccountKey    string `toml:"AccountKey,omitempty"`
	ContainerName string `toml:"ContainerName,omitempty"`
	// StorageDomain is the blob service's domain; empty means
	// blob.core.windows.net.
	StorageDomain string `toml:"StorageDomain,omitempty"`
	// DroverTestEndpoint is drover's own key, for tests only: the blob
	// service's URL with the account in the path, as emulators serve it
	// (http://127.0.0.1:10000/devstoreaccount1), used in place of
	// https://<AccountName>.<StorageDomain>. With an http URL the SAS
	// tokens allow http as well as https. GitLab Runner has no such key.
	DroverTestEndpoint string `toml:"DroverTestEndpoint,omitempty"`
}

// The authentication types of [S3Config.AuthenticationType].
const (
	AuthAccessKey = "access-key"
	AuthIAM       = "iam"
)

// AuthType is the authentication type in effect: AuthenticationType
// lower-cased, or GitLab Runner's default when it is empty.
func (c *S3Config) AuthType() string {
	if t := strings.ToLower(c.AuthenticationType); t != "" {
		return t
	}
	if c.ServerAddress == "" || c.AccessKey == "" || c.SecretKey == "" {
		return AuthIAM
	}
	return AuthAccessKey
}

// Validate checks c and names the fields at fault, with their TOML names.
// All problems are reported at once.
func (c *Config) Validate() error {
	var errs []error
	fail := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if c.MaxUploadedArchiveSize < 0 {
		fail("[runners.cache] MaxUploadedArchiveSize: %d is negative", c.MaxUploadedArchiveSize)
	}
	switch strings.ToLower(c.Type) {
	case "":
	case "s3", "s3v2":
		if c.S3 == nil {
			fail("[runners.cache] Type = %q needs a [runners.cache.s3] section", c.Type)
			break
		}
		errs = append(errs, c.S3.validate()...)
	case "gcs", "gcsv2":
		if c.GCS == nil {
			fail("[runners.cache] Type = %q needs a [runners.cache.gcs] section", c.Type)
			break
		}
		errs = append(errs, c.GCS.validate()...)
	case "azure":
		if c.Azure == nil {
			fail("[runners.cache] Type = %q needs a [runners.cache.azure] section", c.Type)
			break
		}
		errs = append(errs, c.Azure.validate()...)
	default:
		fail("[runners.cache] Type = %q: unknown (want \"s3\", \"gcs\" or \"azure\")", c.Type)
	}
	return errors.Join(errs...)
}

func (c *S3Config) validate() []error {
	var errs []error
	fail := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("[runners.cache.s3] "+format, args...))
	}
	if c.BucketName == "" {
		fail("BucketName: required")
	}
	switch c.AuthType() {
	case AuthAccessKey:
		if c.AccessKey == "" || c.SecretKey == "" {
			fail("AuthenticationType = %q needs AccessKey and SecretKey", AuthAccessKey)
		}
	case AuthIAM:
	default:
		fail("AuthenticationType = %q: want %q or %q", c.AuthenticationType, AuthAccessKey, AuthIAM)
	}
	switch strings.ToUpper(c.ServerSideEncryption) {
	case "", "S3", "AES256":
	case "KMS", "AWS:KMS":
		if c.ServerSideEncryptionKeyID == "" {
			fail("ServerSideEncryption = %q needs ServerSideEncryptionKeyID", c.ServerSideEncryption)
		}
	case "DSSE-KMS", "AWS:KMS:DSSE":
		fail("ServerSideEncryption = %q: not supported yet (use S3 or KMS)", c.ServerSideEncryption)
	default:
		fail("ServerSideEncryption = %q: want S3, AES256, KMS or aws:kms", c.ServerSideEncryption)
	}
	if strings.Contains(c.ServerAddress, "://") {
		fail("ServerAddress = %q: give host[:port] without a scheme (set Insecure = true for http)", c.ServerAddress)
	}
	if c.Accelerate {
		if !IsAWSEndpoint(c.ServerAddress) {
			fail("Accelerate: S3 Transfer Acceleration exists on AWS only, and ServerAddress %q is not an AWS S3 endpoint (leave ServerAddress empty, or drop Accelerate)", c.ServerAddress)
		}
		if strings.Contains(c.BucketName, ".") {
			fail("Accelerate: bucket %q has a dot in its name, which S3 Transfer Acceleration does not allow", c.BucketName)
		}
	}
	if c.RoleARN != "" || c.UploadRoleARN != "" {
		if c.AccessKey == "" || c.SecretKey == "" {
			fail("RoleARN/UploadRoleARN: assuming a role needs AccessKey and SecretKey (drover does not assume roles with instance credentials)")
		}
	}
	return errs
}

// IsAWSEndpoint reports whether the S3 ServerAddress server (host[:port],
// empty for the default) is Amazon's.
func IsAWSEndpoint(server string) bool {
	if server == "" {
		return true
	}
	host := server
	if h, _, err := net.SplitHostPort(server); err == nil {
		host = h
	}
	host = strings.ToLower(host)
	return strings.HasSuffix(host, ".amazonaws.com") || strings.HasSuffix(host, ".amazonaws.com.cn")
}

func (c *GCSConfig) validate() []error {
	var errs []error
	fail := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("[runners.cache.gcs] "+format, args...))
	}
	if c.BucketName == "" {
		fail("BucketName: required")
	}
	if c.CredentialsFile == "" && (c.AccessID == "" || c.PrivateKey == "") {
		fail("needs CredentialsFile, or AccessID and PrivateKey: drover signs URLs with a service account key only, not through the metadata server's account (IAM signBlob) as GitLab Runner can")
	}
	if c.DroverTestEndpoint != "" {
		if u, err := url.Parse(c.DroverTestEndpoint); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			fail("DroverTestEndpoint = %q: want http[s]://host[:port]", c.DroverTestEndpoint)
		}
	}
	return errs
}

func (c *AzureConfig) validate() []error {
	var errs []error
	fail := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("[runners.cache.azure] "+format, args...))
	}
	if c.AccountName == "" {
		fail("AccountName: required")
	}
	if c.ContainerName == "" {
		fail("ContainerName: required")
	}
	if c.AccountKey == "" {
		fail("AccountKey: required: drover signs SAS tokens with the account key only, not with a user delegation key from Microsoft Entra ID as GitLab Runner can")
	} else if _, err := base64.StdEncoding.DecodeString(c.AccountKey); err != nil {
		fail("AccountKey: not base64: %v", err)
	}
	if c.DroverTestEndpoint != "" {
		if u, err := url.Parse(c.DroverTestEndpoint); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			fail("DroverTestEndpoint = %q: want http[s]://host[:port]/<account>", c.DroverTestEndpoint)
		}
	}
	return errs
}
