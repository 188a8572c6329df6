package ciconfig

import "testing"

// The slugs are GitLab's, as jobs see them in CI_ENVIRONMENT_SLUG
// (gitlab-ci-local's environment case, and names GitLab keeps as they
// are).
func TestEnvironmentSlug(t *testing.T) {
	for name, want := range map[string]string{
		"Stage Domain":                    "stage-domain-ip33nk",
		"stage-domain-foobar-long-string": "stage-domain-foob-yafktx",
		"dev-domain":                      "dev-domain",
		"production":                      "production",
		"review-":                         "review",
	} {
		if got := EnvironmentSlug(name); got != want {
			t.Errorf("EnvironmentSlug(%q) = %q, want %q", name, got, want)
		}
	}
	for _, name := range []string{"1st", "a/b", "ÄÖ", "x--y", "", "a-very-long-environment-name-indeed"} {
		got := EnvironmentSlug(name)
		if len(got) > 24 || got == "" || got[0] < 'a' || got[0] > 'z' {
			t.Errorf("EnvironmentSlug(%q) = %q: want 1–24 characters starting with a letter", name, got)
		}
	}
}

func TestGuessTier(t *testing.T) {
	for name, want := range map[string]string{
		"production": "production", "prd": "production", "live": "production",
		"staging": "staging", "Stage Domain": "staging", "pre-prod": "staging",
		"review/feature-1": "development", "dev": "development",
		"qa": "testing", "test-env": "testing",
		"sandbox": "other",
	} {
		if got := GuessTier(name); got != want {
			t.Errorf("GuessTier(%q) = %q, want %q", name, got, want)
		}
	}
}
