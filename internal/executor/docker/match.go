package docker

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"unicode/utf8"

	"github.com/distribution/reference"
)

// ImageAllowed reports whether image, as the job wrote it (after variable
// expansion), is allowed by patterns, an allowed_images-style list. It
// follows GitLab Runner, which calls doublestar.Match(pattern, image) for
// each pattern:
//
//   - an empty list allows every image;
//   - the image string is matched as it is: no ":latest" is added to an
//     image without a tag and no "docker.io/library/" to a short name, so
//     "ruby:*" does not allow "ruby", and "ruby" does not allow
//     "ruby:latest" (write both, or "ruby{,:*}");
//   - "*" matches any run of characters except "/", "?" one character
//     except "/", "[abc]", "[a-z]" and "[!a-z]" (or "[^a-z]") one character
//     of (or not of) a class, "{a,b}" either alternative, "\" quotes the
//     next character;
//   - "**" as a whole path segment matches any number of segments, none
//     included ("registry.example.com/**" allows every image of that
//     registry, "**/ruby:*" a ruby image of any path); "**" inside a
//     segment is the same as "*";
//   - a malformed pattern (an unclosed "[" or "{", a trailing "\")
//     matches nothing, as doublestar's error is ignored by GitLab.
//     ParseConfig refuses such patterns.
//
// Drover is stricter than GitLab in one case: an image with both a tag and
// a digest ("alpine:3.19@sha256:…") is pulled by its digest alone, the
// tag being ignored by the engine, so it must be allowed without its tag
// too ("alpine@sha256:…"): "alpine:3.*" does not let a job pick any
// manifest of the alpine repository by digest while naming an allowed tag.
func ImageAllowed(patterns []string, image string) bool {
	if len(patterns) == 0 {
		return true
	}
	if !anyMatch(patterns, image) {
		return false
	}
	if untagged, ok := dropTagOfDigested(image); ok {
		return anyMatch(patterns, untagged)
	}
	return true
}

func anyMatch(patterns []string, image string) bool {
	for _, p := range patterns {
		if matchPattern(p, image) {
			return true
		}
	}
	return false
}

// dropTagOfDigested returns image without its tag when it has both a tag
// and a digest ("a/b:1@sha256:…" → "a/b@sha256:…"), as written.
func dropTagOfDigested(image string) (string, bool) {
	name, digest, ok := strings.Cut(image, "@")
	if !ok {
		return "", false
	}
	i := strings.LastIndexByte(name, ':')
	if i < 0 || i < strings.LastIndexByte(name, '/') {
		return "", false
	}
	return name[:i] + "@" + digest, true
}

// ErrImageReference is the error of CheckImageReference.
var ErrImageReference = errors.New("not a valid image reference")

// CheckImageReference checks that image, as a job wrote it, is a
// reference the engine would pull (lower-case repository path, no
// spaces, control characters or ".." segments, a valid tag and digest,
// not a 64-hex image ID), and returns the fully qualified name the engine
// is to be asked for ("alpine" → "docker.io/library/alpine:latest";
// "alpine:3@sha256:…" → "docker.io/library/alpine:3@sha256:…").
//
// Asking the engine for the qualified name rather than the job's string
// matters with the if-not-present and never pull policies: the engine
// resolves a bare name it has no tag for as a prefix of a local image ID
// ("3f5e" runs whatever local image has an ID starting so, maybe another
// project's private image), which allowed_images patterns like "*" or
// "*:*" would let through. GitLab Runner passes the job's string as it is.
func CheckImageReference(image string) (string, error) {
	ref, err := reference.ParseNormalizedNamed(image)
	if err != nil {
		return "", fmt.Errorf("%w: %q: %v", ErrImageReference, image, err)
	}
	return reference.TagNameOnly(ref).String(), nil
}

// maxAlternatives bounds the expansion of {a,b} alternatives.
const maxAlternatives = 1024

var (
	errUnclosedClass = errors.New(`unclosed "["`)
	errEmptyClass    = errors.New(`empty "[]"`)
	errBadRange      = errors.New(`range out of order in "[...]"`)
	errUnclosedBrace = errors.New(`unclosed "{"`)
	errTrailingQuote = errors.New(`"\" at the end`)
	errTooMany       = errors.New(`too many {…} alternatives`)
)

// checkPattern reports what is wrong with a pattern, or nil.
func checkPattern(pattern string) error {
	alts, err := expandBraces(pattern)
	if err != nil {
		return err
	}
	for _, a := range alts {
		for seg := range strings.SplitSeq(a, "/") {
			if err := checkSegment(seg); err != nil {
				return err
			}
		}
	}
	return nil
}

// matchPattern matches a whole name; a malformed pattern matches nothing,
// even if some of its alternatives are well formed.
func matchPattern(pattern, name string) bool {
	if checkPattern(pattern) != nil {
		return false
	}
	alts, _ := expandBraces(pattern)
	names := strings.Split(name, "/")
	for _, a := range alts {
		if matchSegments(strings.Split(a, "/"), names) {
			return true
		}
	}
	return false
}

// expandBraces turns "a{b,c{d,e}}f" into "abf", "acdf", "acef".
func expandBraces(p string) ([]string, error) {
	out := []string{}
	err := expandInto(p, &out)
	return out, err
}

func expandInto(p string, out *[]string) error {
	open := -1
	for i := 0; i < len(p) && open < 0; i++ {
		switch p[i] {
		case '\\':
			i++
		case '[':
			end, err := classEnd(p, i)
			if err != nil {
				return err
			}
			i = end - 1
		case '{':
			open = i
		}
	}
	if open < 0 {
		if len(*out) >= maxAlternatives {
			return errTooMany
		}
		*out = append(*out, p)
		return nil
	}
	var alts []string
	depth, start := 0, open+1
	for i := open + 1; i < len(p); i++ {
		switch p[i] {
		case '\\':
			i++
		case '[':
			end, err := classEnd(p, i)
			if err != nil {
				return err
			}
			i = end - 1
		case '{':
			depth++
		case ',':
			if depth == 0 {
				alts = append(alts, p[start:i])
				start = i + 1
			}
		case '}':
			if depth > 0 {
				depth--
				continue
			}
			alts = append(alts, p[start:i])
			for _, a := range alts {
				if err := expandInto(p[:open]+a+p[i+1:], out); err != nil {
					return err
				}
			}
			return nil
		}
	}
	return errUnclosedBrace
}

// classEnd returns the index after the "]" closing the class that starts
// at p[i] == '['.
func classEnd(p string, i int) (int, error) {
	i++
	if i < len(p) && (p[i] == '!' || p[i] == '^') {
		i++
	}
	if i < len(p) && p[i] == ']' {
		return 0, errEmptyClass
	}
	for i < len(p) {
		if p[i] == ']' {
			return i + 1, nil
		}
		lo, n, err := classChar(p, i)
		if err != nil {
			return 0, err
		}
		i += n
		if i+1 < len(p) && p[i] == '-' && p[i+1] != ']' {
			hi, n, err := classChar(p, i+1)
			if err != nil {
				return 0, err
			}
			if hi < lo {
				return 0, errBadRange
			}
			i += 1 + n
		}
	}
	return 0, errUnclosedClass
}

// classChar reads one character of a class at p[i], which may be quoted
// with "\", and returns it and its length in p.
func classChar(p string, i int) (rune, int, error) {
	n := 0
	if p[i] == '\\' {
		n = 1
		if i+1 >= len(p) {
			return 0, 0, errUnclosedClass
		}
	}
	r, size := utf8.DecodeRuneInString(p[i+n:])
	return r, n + size, nil
}

func checkSegment(p string) error {
	for i := 0; i < len(p); i++ {
		switch p[i] {
		case '\\':
			if i+1 >= len(p) {
				return errTrailingQuote
			}
			i++
		case '[':
			end, err := classEnd(p, i)
			if err != nil {
				return err
			}
			i = end - 1
		}
	}
	return nil
}

// matchSegments matches path segments, "**" matching any number of them.
func matchSegments(ps, names []string) bool {
	for len(ps) > 0 {
		if ps[0] == "**" {
			for len(ps) > 1 && ps[1] == "**" {
				ps = ps[1:]
			}
			if len(ps) == 1 {
				return true
			}
			for i := 0; i <= len(names); i++ {
				if matchSegments(ps[1:], names[i:]) {
					return true
				}
			}
			return false
		}
		if len(names) == 0 || !matchSegment(ps[0], names[0]) {
			return false
		}
		ps, names = ps[1:], names[1:]
	}
	return len(names) == 0
}

// matchSegment matches one segment (no "/") of a checked pattern against
// one segment of a name, backtracking to the last "*" only, which is
// enough for "*" patterns.
func matchSegment(p, s string) bool {
	px, sx := 0, 0
	starPx, starSx := -1, 0
	for px < len(p) || sx < len(s) {
		if px < len(p) {
			switch c := p[px]; c {
			case '*':
				for px < len(p) && p[px] == '*' {
					px++
				}
				starPx, starSx = px, sx
				continue
			case '?':
				if sx < len(s) {
					_, n := utf8.DecodeRuneInString(s[sx:])
					px, sx = px+1, sx+n
					continue
				}
			case '[':
				if sx < len(s) {
					r, n := utf8.DecodeRuneInString(s[sx:])
					if end, ok := matchClass(p, px, r); ok {
						px, sx = end, sx+n
						continue
					}
				}
			case '\\':
				if px+1 < len(p) && sx < len(s) && p[px+1] == s[sx] {
					px, sx = px+2, sx+1
					continue
				}
			default:
				if sx < len(s) && c == s[sx] {
					px, sx = px+1, sx+1
					continue
				}
			}
		}
		if starPx >= 0 && starSx < len(s) {
			_, n := utf8.DecodeRuneInString(s[starSx:])
			starSx += n
			px, sx = starPx, starSx
			continue
		}
		return false
	}
	return true
}

// matchClass reports whether r is in the (checked) class at p[i] == '[',
// and returns the index after it.
func matchClass(p string, i int, r rune) (int, bool) {
	i++
	negated := i < len(p) && (p[i] == '!' || p[i] == '^')
	if negated {
		i++
	}
	in := false
	for i < len(p) && p[i] != ']' {
		lo, n, err := classChar(p, i)
		if err != nil {
			return 0, false
		}
		i += n
		hi := lo
		if i+1 < len(p) && p[i] == '-' && p[i+1] != ']' {
			hi, n, err = classChar(p, i+1)
			if err != nil {
				return 0, false
			}
			i += 1 + n
		}
		if lo <= r && r <= hi {
			in = true
		}
	}
	if i >= len(p) {
		return 0, false
	}
	return i + 1, in != negated
}

// registryPort is GitLab Runner's referenceRegexpNoPort: a registry
// port in the first path segment, which service names leave out.
var registryPort = regexp.MustCompile(`^(.*?)(|:[0-9]+)(|/.*)$`)

// ServiceNames returns the host names GitLab Runner derives from a
// service's image, besides its aliases: the image without its tag or
// digest, and without the port of its registry, with "/" replaced by "__"
// and, as a second name when different, by "-" ("mysql:8" → "mysql";
// "registry.example.com:5000/a/b:1" → "registry.example.com__a__b",
// "registry.example.com-a-b"). An image that is not a valid reference
// gets no names (nil).
func ServiceNames(image string) []string {
	m := reference.ReferenceRegexp.FindStringSubmatch(image)
	if m == nil || m[1] == "" {
		return nil
	}
	p := registryPort.FindStringSubmatch(m[1])
	service := p[1] + p[3]
	names := []string{strings.ReplaceAll(service, "/", "__")}
	if dash := strings.ReplaceAll(service, "/", "-"); dash != names[0] {
		names = append(names, dash)
	}
	return names
}

// SplitAliases splits a service's alias field, which may list several
// aliases separated by commas or white space, dropping empty ones (as
// GitLab Runner's Image.Aliases does).
func SplitAliases(alias string) []string {
	if f := strings.Fields(strings.ReplaceAll(alias, ",", " ")); len(f) > 0 {
		return f
	}
	return nil
}
