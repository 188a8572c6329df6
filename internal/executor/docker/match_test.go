package docker

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestImageAllowed(t *testing.T) {
	tests := []struct {
		patterns []string
		image    string
		want     bool
	}{
		{nil, "anything/at:all", true},
		{[]string{}, "ruby", true},

		// exact and "*" within one segment
		{[]string{"ruby"}, "ruby", true},
		{[]string{"ruby"}, "ruby:latest", false},
		{[]string{"ruby:*"}, "ruby:3.3", true},
		{[]string{"ruby:*"}, "ruby", false}, // as written: no ":latest" is added
		{[]string{"ruby:*"}, "ruby:", true},
		{[]string{"ruby:*"}, "rubyx:3", false},
		{[]string{"ruby:*"}, "library/ruby:3", false},
		{[]string{"*"}, "ruby:3", true},
		{[]string{"*"}, "library/ruby:3", false},
		{[]string{"*/*"}, "library/ruby:3", true},
		{[]string{"ruby*"}, "ruby-alpine:1", true},
		{[]string{"*:*-alpine"}, "node:20-alpine", true},
		{[]string{"*:*-alpine"}, "node:20-alpine3", false},
		{[]string{"*a*a*a*b"}, "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", false},
		{[]string{"*a*a*a*b"}, "xaxaxaxb", true},

		// registries and paths
		{[]string{"registry.example.com/*/*"}, "registry.example.com/group/app:1", true},
		{[]string{"registry.example.com/*/*"}, "registry.example.com/group/sub/app:1", false},
		{[]string{"registry.example.com:5000/*/*"}, "registry.example.com:5000/g/a", true},
		{[]string{"registry.example.com/**"}, "registry.example.com/group/sub/app:1", true},
		{[]string{"registry.example.com/**"}, "registry.example.com", true}, // ** matches no segment too
		{[]string{"registry.example.com/**"}, "registry.example.com.evil/x", false},
		{[]string{"registry.example.com/**"}, "evil.com/registry.example.com/x", false},
		{[]string{"**"}, "a/b/c:d", true},
		{[]string{"**/ruby:*"}, "ruby:3", true},
		{[]string{"**/ruby:*"}, "docker.io/library/ruby:3", true},
		{[]string{"**/ruby:*"}, "docker.io/library/jruby:3", false},
		{[]string{"a/**/b"}, "a/b", true},
		{[]string{"a/**/b"}, "a/x/y/b", true},
		{[]string{"a/**/b"}, "a/x/y/c", false},
		{[]string{"a/**/**/b"}, "a/x/b", true},
		{[]string{"registry**"}, "registry.example.com/x", false}, // "**" inside a segment is "*"
		{[]string{"registry**"}, "registry.example.com", true},

		// "?", classes, alternatives, quoting
		{[]string{"ruby:3.?"}, "ruby:3.3", true},
		{[]string{"ruby:3.?"}, "ruby:3.10", false},
		{[]string{"a?b"}, "a/b", false},
		{[]string{"ruby:[23].*"}, "ruby:2.7", true},
		{[]string{"ruby:[23].*"}, "ruby:4.0", false},
		{[]string{"ruby:[0-9]*"}, "ruby:3", true},
		{[]string{"ruby:[!0-9]*"}, "ruby:3", false},
		{[]string{"ruby:[^0-9]*"}, "ruby:slim", true},
		{[]string{"ruby:[\\]]"}, "ruby:]", true},
		{[]string{"ruby{,:*}"}, "ruby", true},
		{[]string{"ruby{,:*}"}, "ruby:3", true},
		{[]string{"{ruby,python}:*"}, "python:3.12", true},
		{[]string{"{ruby,python}:*"}, "perl:5", false},
		{[]string{"{a,b{c,d}}:1"}, "bd:1", true},
		{[]string{"{registry.example.com/**,alpine}"}, "registry.example.com/x/y", true},
		{[]string{`ruby\*`}, "ruby*", true},
		{[]string{`ruby\*`}, "ruby3", false},
		{[]string{"ü*"}, "über:1", true},
		{[]string{"?ber"}, "über", true},

		// malformed patterns match nothing
		{[]string{"[ruby"}, "[ruby", false},
		{[]string{"ruby{"}, "ruby{", false},
		{[]string{`ruby\`}, `ruby\`, false},
		{[]string{"[]"}, "[]", false},
		{[]string{"[z-a]"}, "m", false},

		// any pattern of the list
		{[]string{"[bad", "alpine:*"}, "alpine:3", true},
		{[]string{"ruby:*", "python:*"}, "node:20", false},
	}
	for _, tc := range tests {
		if got := ImageAllowed(tc.patterns, tc.image); got != tc.want {
			t.Errorf("ImageAllowed(%q, %q) = %v, want %v", tc.patterns, tc.image, got, tc.want)
		}
	}
}

func TestCheckPattern(t *testing.T) {
	good := []string{"", "ruby", "ruby:*", "**", "a/**/b", "[a-z]", "[!a]", "[^a]", `[\]]`, "{a,b}", "{a,{b,c}}", "}", ",", `\*`, "a]"}
	for _, p := range good {
		if err := checkPattern(p); err != nil {
			t.Errorf("checkPattern(%q) = %v, want nil", p, err)
		}
	}
	bad := []string{"[", "[a", "[]", "[!]", "[z-a]", `[\`, "{", "{a,b", `a\`, "{a,[}", "{a,b}{c,d}{e,f}{g,h}{i,j}{k,l}{m,n}{o,p}{q,r}{s,t}{u,v}"}
	for _, p := range bad {
		if err := checkPattern(p); err == nil {
			t.Errorf("checkPattern(%q) = nil, want an error", p)
		}
	}
}

func TestServiceNames(t *testing.T) {
	tests := []struct {
		image string
		want  []string
	}{
		{"mysql", []string{"mysql"}},
		{"mysql:8", []string{"mysql"}},
		{"mysql:latest", []string{"mysql"}},
		{"postgres@sha256:" + sha, []string{"postgres"}},
		{"postgres:16@sha256:" + sha, []string{"postgres"}},
		{"tutum/wordpress", []string{"tutum__wordpress", "tutum-wordpress"}},
		{"tutum/wordpress:latest", []string{"tutum__wordpress", "tutum-wordpress"}},
		{"registry.example.com/a/b:1", []string{"registry.example.com__a__b", "registry.example.com-a-b"}},
		// As GitLab Runner does, the registry's port is left out.
		{"registry.example.com:5000/a/b:1", []string{"registry.example.com__a__b", "registry.example.com-a-b"}},
		{"localhost:5000/svc", []string{"localhost__svc", "localhost-svc"}},
		// Not a reference (upper case path, empty): no names.
		{"MySQL", nil},
		{"", nil},
		{"a b", nil},
	}
	for _, tc := range tests {
		if diff := cmp.Diff(tc.want, ServiceNames(tc.image)); diff != "" {
			t.Errorf("ServiceNames(%q) mismatch (-want +got):\n%s", tc.image, diff)
		}
	}
}

const sha = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

func TestSplitAliases(t *testing.T) {
	tests := []struct {
		alias string
		want  []string
	}{
		{"", nil},
		{"db", []string{"db"}},
		{"db,pg", []string{"db", "pg"}},
		{"db, pg", []string{"db", "pg"}},
		{" db  pg ,, cache,", []string{"db", "pg", "cache"}},
		{",", nil},
		{"a\tb", []string{"a", "b"}},
	}
	for _, tc := range tests {
		if diff := cmp.Diff(tc.want, SplitAliases(tc.alias)); diff != "" {
			t.Errorf("SplitAliases(%q) mismatch (-want +got):\n%s", tc.alias, diff)
		}
	}
}

// FuzzImageAllowed checks that matching never panics or hangs, that a
// pattern without special characters matches itself only, and that a
// pattern checkPattern refuses matches nothing. Strings with both a tag
// and a digest are left out of the plain-pattern check: such an image
// must also be allowed without its tag (ImageAllowed), so it does not
// match a pattern equal to itself alone.
func FuzzImageAllowed(f *testing.F) {
	for _, s := range []string{"ruby:*", "registry.example.com/**", "{a,b{c,d}}/[!x-z]?", `\*[\]]`, "[", "{", "**/**/a"} {
		f.Add(s, "registry.example.com/a/b:1")
	}
	f.Fuzz(func(t *testing.T, pattern, image string) {
		got := ImageAllowed([]string{pattern}, image)
		if checkPattern(pattern) != nil && got {
			t.Fatalf("malformed pattern %q matched %q", pattern, image)
		}
		_, patternDigested := dropTagOfDigested(pattern)
		_, imageDigested := dropTagOfDigested(image)
		if !strings.ContainsAny(pattern, `*?[]{}\`) && !patternDigested && !imageDigested {
			if want := pattern == image; got != want {
				t.Fatalf("ImageAllowed(%q, %q) = %v, want %v", pattern, image, got, want)
			}
			if !ImageAllowed([]string{pattern}, pattern) {
				t.Fatalf("plain pattern %q does not match itself", pattern)
			}
		}
	})
}
