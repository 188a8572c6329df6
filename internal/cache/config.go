package cache

import (
	"errors"
	"fmt"
	"strings"
)

// Config is the [runners.cache] section of config.toml, with GitLab
// Runner's key names. An empty Type means no distributed cache: the local
// cache directory is used.
type Config struct {
	// Type is "s3"; "gcs" and "azure" (and GitLab's aliases "s3v2",
	// "gcsv2") parse but are not supported yet.
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
	// DualStack, Accelerate, RoleARN and the AssumeRole settings are
	// parsed for compatibility; Validate refuses the ones drover does not
	// implement yet when they are set.
	DualStack                           *bool  `toml:"DualStack,omitempty"`
	Accelerate                          bool   `toml:"Accelerate,omitempty"`
	RoleARN                             string `toml:"RoleARN,omitempty"`
	UploadRoleARN                       string `toml:"UploadRoleARN,omitempty"`
	AssumeRoleMaxConcurrency            int    `toml:"AssumeRoleMaxConcurrency,omitempty"`
	DisableAssumeRoleCredentialsCaching bool   `toml:"DisableAssumeRoleCredentialsCaching,omitempty"`
}

// GCSConfig is [runners.cache.gcs], parsed but not supported yet.
type GCSConfig struct {
	AccessID        string `toml:"AccessID,omitempty"`
	PrivateKey      string `toml:"PrivateKey,omitempty"`
	CredentialsFile string `toml:"CredentialsFile,omitempty"`
	BucketName      string `toml:"BucketName,omitempty"`
	UniverseDomain  string `toml:"UniverseDomain,omitempty"`
}

// AzureConfig is [runners.cache.azure], parsed but not supported yet.
type AzureConfig struct {
	AccountName   string `toml:"AccountName,omitempty"`
	AccountKey    string `toml:"AccountKey,omitempty"`
	ContainerName string `toml:"ContainerName,omitempty"`
	StorageDomain string `toml:"StorageDomain,omitempty"`
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
	case "gcs", "gcsv2", "azure":
		fail("[runners.cache] Type = %q: not supported yet by drover (only \"s3\" is); remove [runners.cache] to use the local cache directory", c.Type)
	default:
		fail("[runners.cache] Type = %q: unknown (want \"s3\"; \"gcs\" and \"azure\" are not supported yet)", c.Type)
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
		fail("Accelerate: not supported yet")
	}
	if c.RoleARN != "" || c.UploadRoleARN != "" {
		fail("RoleARN/UploadRoleARN: assuming a role is not supported yet")
	}
	return errs
}
