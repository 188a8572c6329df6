package ciconfig

import (
	"crypto/sha256"
	"encoding/hex"
	"math/big"
	"regexp"
	"strings"
)

// environmentTiers are deployment_tier's values.
var environmentTiers = []string{"production", "staging", "testing", "development", "other"}

// Tier guesses, in GitLab's order: the first pattern the name matches.
var tierGuesses = []struct {
	tier string
	re   *regexp.Regexp
}{
	{"development", regexp.MustCompile(`(?i)(dev|review|trunk)`)},
	{"testing", regexp.MustCompile(`(?i)(test|tst|int|ac(ce|)pt|qa|qc|control|quality)`)},
	{"staging", regexp.MustCompile(`(?i)(st(a|)g|mod(e|)l|pre|demo|non)`)},
	{"production", regexp.MustCompile(`(?i)(pr(o|)d|live)`)},
}

// GuessTier is the deployment tier GitLab gives an environment without
// deployment_tier:, from its name (other when nothing matches).
func GuessTier(name string) string {
	for _, g := range tierGuesses {
		if g.re.MatchString(name) {
			return g.tier
		}
	}
	return "other"
}

var slugNonAlnum = regexp.MustCompile(`[^a-z0-9]`)
var slugDashes = regexp.MustCompile(`-+`)

// EnvironmentSlug is GitLab's CI_ENVIRONMENT_SLUG of an environment name:
// lower case, every other character than a-z and 0-9 a dash, "env-" in
// front unless it starts with a letter, no repeated dashes; when that
// changed the name or is longer than 24 characters, its first 17
// characters, a dash and 6 characters of a hash of the name (so that two
// names never share a slug), else without a trailing dash.
func EnvironmentSlug(name string) string {
	s := slugNonAlnum.ReplaceAllString(strings.ToLower(name), "-")
	if s == "" || s[0] < 'a' || s[0] > 'z' {
		s = "env-" + s
	}
	s = slugDashes.ReplaceAllString(s, "-")
	if len(s) <= 24 && s == name {
		return strings.TrimSuffix(s, "-")
	}
	sum := sha256.Sum256([]byte(name))
	n := new(big.Int)
	n.SetString(hex.EncodeToString(sum[:]), 16)
	b36 := n.Text(36)
	return s[:min(len(s), 17)] + "-" + b36[max(0, len(b36)-6):]
}
