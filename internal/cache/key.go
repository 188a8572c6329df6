package cache

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode"
)

// keyNormaliser decodes url-escaped slashes and dots and turns backslashes
// into slashes, in one pass, as GitLab Runner does before resolving the
// key's `.` and `..` (cache/cachekey/cachekey.go in gitlab-runner).
var keyNormaliser = strings.NewReplacer("%2f", "/", "%2F", "/", "%2e", ".", "%2E", ".", `\`, "/")

// SanitizeKey returns the cache key GitLab Runner would use for raw: with
// %2f/%2F decoded to `/` and %2e/%2E to `.`, backslashes turned into
// slashes, `.` and `..` resolved as if the key were a path below a root it
// cannot leave, repeated and leading slashes dropped, and trailing
// whitespace trimmed from the last segments (segments left empty by the
// trim are dropped). Other escapes (%5c, %20…) are kept as written.
//
// warning is non-empty when the key changed, for the job log
// (`cache key "a/../b" sanitized to "b"`). An empty raw key is returned as
// is with no error: the caller picks its default. A key with nothing left
// (".", "..", "/", blanks) is an error.
//
// Unlike GitLab Runner, a `..` that the whitespace trim uncovers ("a/.. ")
// is resolved too, so no result ever has a `.` or `..` segment.
func SanitizeKey(raw string) (key, warning string, err error) {
	if raw == "" {
		return "", "", nil
	}
	key = keyNormaliser.Replace(raw)
	for {
		key = path.Clean("/" + key)[1:]
		trimmed := trimTrailingBlanks(key)
		if path.Clean("/" + trimmed)[1:] == trimmed {
			key = trimmed
			break
		}
		key = trimmed // the trim uncovered a "." or ".." segment
	}
	if key == "" {
		return "", "", fmt.Errorf("cache key %q could not be sanitized", raw)
	}
	if key != raw {
		warning = fmt.Sprintf("cache key %q sanitized to %q", raw, key)
	}
	return key, warning, nil
}

// trimTrailingBlanks trims trailing whitespace from the last segments of
// a slash-separated key, dropping the segments it empties.
func trimTrailingBlanks(key string) string {
	parts := strings.Split(key, "/")
	n := len(parts)
	for n > 0 {
		parts[n-1] = strings.TrimRightFunc(parts[n-1], unicode.IsSpace)
		if parts[n-1] != "" {
			break
		}
		n--
	}
	return strings.Join(parts[:n], "/")
}

// tokenPrefixes are stripped from a runner token before it is shortened,
// as GitLab Runner's helpers.ShortenToken does: authentication tokens
// (glrt-, with or without a partition prefix t1_…t3_), glrtr-, job tokens
// (glcbt-) and old registration tokens (GR + 7 hex digits).
var tokenPrefixes = []*regexp.Regexp{
	regexp.MustCompile(`^glrt-(t[123]_)?|^t[123]_|^glrtr-`),
	regexp.MustCompile(`^glcbt-`),
	regexp.MustCompile(`^GR[0-9A-Fa-f]{7}`),
}

// ShortToken is the short form of a runner token that names the runner's
// namespace in a bucket: the token without its known prefix, cut to 9
// characters.
func ShortToken(token string) string {
	for _, re := range tokenPrefixes {
		token = re.ReplaceAllString(token, "")
	}
	return token[:min(9, len(token))]
}

// ObjectName is where a cache archive for key lives in a bucket, as GitLab
// Runner lays it out: path.Join(c.Path, "runner", shortToken, "project",
// projectID, key), without the runner part when c.Shared is set. There is
// no file name suffix: the object is the key. key must be sanitized
// already; a key that still resolves outside the project's prefix is an
// error.
func ObjectName(c Config, shortToken string, projectID int64, key string) (string, error) {
	if key == "" {
		return "", errors.New("empty cache key")
	}
	ns := ""
	if !c.Shared {
		if shortToken == "" {
			return "", errors.New("cache object name: empty runner token (needed unless Shared = true)")
		}
		ns = path.Join("runner", shortToken)
	}
	base := path.Join(c.Path, ns, "project", strconv.FormatInt(projectID, 10))
	full := path.Join(base, key)
	if !strings.HasPrefix(full, base+"/") {
		return "", fmt.Errorf("cache key %q: computed cache path outside of the project's prefix", key)
	}
	return full, nil
}

// LocalPath is where a cache archive for key lives in a local cache
// directory, as GitLab Runner lays it out: <cacheDir>/<project
// dir>/<key>/cache.zip, projectDir being the project's path
// ("group/project") or project-<id>. key must be sanitized already.
func LocalPath(cacheDir, projectDir, key string) (string, error) {
	if key == "" {
		return "", errors.New("empty cache key")
	}
	base := filepath.Join(cacheDir, filepath.FromSlash(projectDir))
	full := filepath.Join(base, filepath.FromSlash(key), "cache.zip")
	rel, err := filepath.Rel(base, full)
	if err != nil || !filepath.IsLocal(rel) || !filepath.IsLocal(filepath.FromSlash(projectDir)) {
		return "", fmt.Errorf("cache key %q in %q: computed cache path outside of the cache directory", key, projectDir)
	}
	return full, nil
}

// FilesKey is the key of a cache keyed by files (drover's cache:key:files,
// which GitLab computes on its side): prefix, a dash and the first 40 hex
// digits of a SHA-256 over the files' names and contents (in the order of
// their names, whatever the order given), or just the digest without a
// prefix. Files that do not exist are
// left out; when none exists the key is prefix-default (or "default"), as
// GitLab's. open opens a file by its name, relative to the project
// directory; it returns an error wrapping fs.ErrNotExist for a missing
// one. A name that leaves the project directory is an error.
func FilesKey(prefix string, files []string, open func(name string) (io.ReadCloser, error)) (string, error) {
	names := make([]string, 0, len(files))
	for _, name := range files {
		slash := filepath.ToSlash(name)
		clean := path.Clean(slash)
		if name == "" || path.IsAbs(slash) || clean == "." || clean == ".." || strings.HasPrefix(clean, "../") {
			return "", fmt.Errorf("cache key file %q: must be a file inside the project directory", name)
		}
		names = append(names, clean)
	}
	slices.Sort(names)
	names = slices.Compact(names)
	h := sha256.New()
	found := 0
	for _, name := range names {
		rc, err := open(name)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return "", fmt.Errorf("cache key file %q: %w", name, err)
		}
		fmt.Fprintf(h, "%s\x00", name)
		_, err = io.Copy(h, rc)
		rc.Close()
		if err != nil {
			return "", fmt.Errorf("cache key file %q: %w", name, err)
		}
		h.Write([]byte{0})
		found++
	}
	sum := "default"
	if found > 0 {
		sum = hex.EncodeToString(h.Sum(nil))[:40]
	}
	if prefix == "" {
		return sum, nil
	}
	return prefix + "-" + sum, nil
}
