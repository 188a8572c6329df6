// Package cache is the storage side of a job's cache: where a cache
// archive lives and how it gets there and back. Making and reading the
// archives is package archive's job.
//
// # Keys and object names
//
// [SanitizeKey] cleans a cache key as GitLab Runner does (url-escaped
// slashes and dots decoded, backslashes turned into slashes, `.` and `..`
// resolved inside the key, trailing blanks dropped) and returns a warning
// for the job log when it changed the key. [ObjectName] places the key in
// a bucket exactly where GitLab Runner puts it,
//
//	<Path>/runner/<runner short token>/project/<project id>/<key>
//	<Path>/project/<project id>/<key>                  (Shared = true)
//
// so that drover and GitLab Runner sharing a bucket find each other's
// caches; [LocalPath] does the same for a local cache directory
// (<cache_dir>/<project path>/<key>/cache.zip).
//
// # Stores
//
// A [Store] downloads and uploads whole archives by object name. [DirStore]
// keeps them in a local directory. The shared caches keep them in a
// bucket through pre-signed URLs: a [URLSigner] signs a GET and a PUT URL
// per object (package cache/s3 for S3, with STS roles; cache/gcs for
// Google Cloud Storage; cache/azure for Azure Blob Storage), and a
// [Transfer], the HTTP client that can run where the job runs since a
// signed URL carries no credentials, moves the archive. [SignedStore]
// puts the two together. [Cache] is what callers use: it adds the key to
// object name step, the size cap of [Config.MaxUploadedArchiveSize] and
// logging to any Store. Package cache/cachetest is the conformance suite
// every shared cache backend passes.
//
// # Errors
//
// A cache miss is [ErrNotFound], an archive over a size cap
// [ErrTooLarge], refused credentials [ErrAuth]. The cache is best effort:
// callers log these and let the job go on.
package cache
