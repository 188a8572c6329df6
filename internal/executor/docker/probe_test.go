package docker

import (
	"errors"
	"strings"
	"testing"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/executor"
)

// digest is a well-formed sha256 digest for the probes.
const digest = "sha256:" + sha

// TestCheckImageProbes: the red-team probes of a job's image against the
// allow lists. Each case names the rule that must refuse it ("" =
// allowed): "reference" (not a valid image reference, refused before any
// pull), or the allow list's option name.
func TestCheckImageProbes(t *testing.T) {
	alpine := []string{"alpine:*"}
	reg := []string{"registry.example.com/**"}
	cases := []struct {
		name     string
		patterns []string
		image    string
		refused  string
	}{
		{"allowed tag", alpine, "alpine:3.19", ""},
		{"digest only vs tag pattern", alpine, "alpine@" + digest, "allowed_images"},
		// The engine pulls by the digest and ignores the tag: the pattern
		// must allow the image without the tag too.
		{"allowed tag with any digest", alpine, "alpine:3.19@" + digest, "allowed_images"},
		{"tag and digest, both allowed", []string{"alpine{:*,@*}"}, "alpine:3.19@" + digest, ""},
		{"latest with empty digest", alpine, "alpine:latest@sha256:", "reference"},
		{"latest with short digest", alpine, "alpine:latest@sha256:abc", "reference"},
		{"fully qualified docker hub", alpine, "docker.io/library/alpine:3", "allowed_images"},
		{"other registry", alpine, "evil.example/alpine:3", "allowed_images"},
		{"localhost registry", alpine, "localhost:5000/alpine:3", "allowed_images"},
		{"dot-dot path", []string{"**/alpine:*"}, "library/../alpine:3", "reference"},
		{"dot-dot out of a registry", reg, "registry.example.com/../evil.example/x:1", "reference"},
		{"dot path", reg, "registry.example.com/./x:1", "reference"},
		{"double slash", reg, "registry.example.com//x:1", "reference"},
		{"registry prefix lookalike", reg, "registry.example.com.evil/x:1", "allowed_images"},
		{"registry as a path", reg, "evil.example/registry.example.com/x:1", "allowed_images"},
		{"allowed registry", reg, "registry.example.com/team/app:1", ""},
		{"upper case repository", alpine, "ALPINE:3", "reference"},
		{"upper case domain", reg, "REGISTRY.EXAMPLE.COM/team/app:1", "allowed_images"},
		{"leading space", []string{"*"}, " alpine:3", "reference"},
		{"trailing space", alpine, "alpine:3 ", "reference"},
		{"tab in tag", alpine, "alpine:3\t", "reference"},
		{"newline", alpine, "alpine:3\n", "reference"},
		{"NUL", alpine, "alpine:3\x00", "reference"},
		{"escape sequence", alpine, "alpine:3\x1b[2J", "reference"},
		{"empty image", nil, "", "reference"},
		{"empty image, list", alpine, "", "reference"},
		{"64-hex image ID", []string{"*"}, sha, "reference"},
		{"digest-looking name", []string{"*:*"}, digest, ""}, // library/sha256, a tag: see TestCheckImageReference
		{"tag too long", alpine, "alpine:" + strings.Repeat("a", 129), "reference"},
		{"empty tag", alpine, "alpine:", "reference"},
		{"empty list allows a valid reference", nil, "anything.example/x/y:z", ""},
		{"empty list refuses an invalid one", nil, "x/../y", "reference"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := checkImage("image", tc.image, "allowed_images", tc.patterns)
			if tc.refused == "" {
				if err != nil {
					t.Fatalf("checkImage(%q, %q) = %v, want nil", tc.image, tc.patterns, err)
				}
				return
			}
			var be *executor.BuildError
			if !errors.As(err, &be) {
				t.Fatalf("checkImage(%q, %q) = %v, want a refusal by %s", tc.image, tc.patterns, err, tc.refused)
			}
			wantReason, wantText := api.FailureReason(api.RunnerConfigurationError), tc.refused
			if tc.refused == "reference" {
				wantReason, wantText = api.ImagePullFailure, "not a valid image reference"
			}
			if be.Reason != wantReason || !strings.Contains(err.Error(), wantText) {
				t.Errorf("checkImage(%q, %q) = %v (%s), want %s naming %q", tc.image, tc.patterns, err, be.Reason, wantReason, wantText)
			}
		})
	}
}

// TestCheckImageReference: the name the engine is asked for is fully
// qualified, so that it never resolves a job's string as a local image ID
// prefix.
func TestCheckImageReference(t *testing.T) {
	cases := []struct{ image, want string }{
		{"alpine", "docker.io/library/alpine:latest"},
		{"alpine:3", "docker.io/library/alpine:3"},
		{"3f5e", "docker.io/library/3f5e:latest"}, // an ID prefix is a name
		{digest, "docker.io/library/sha256:" + sha},
		{"alpine:3@" + digest, "docker.io/library/alpine:3@" + digest},
		{"alpine@" + digest, "docker.io/library/alpine@" + digest},
		{"user/app", "docker.io/user/app:latest"},
		{"localhost:5000/app:1", "localhost:5000/app:1"},
		{"registry.example.com/a/b", "registry.example.com/a/b:latest"},
	}
	for _, tc := range cases {
		got, err := CheckImageReference(tc.image)
		if err != nil || got != tc.want {
			t.Errorf("CheckImageReference(%q) = %q, %v, want %q", tc.image, got, err, tc.want)
		}
	}
}

// TestContainerUserProbes: a job's image docker.user against user and
// allowed_users.
func TestContainerUserProbes(t *testing.T) {
	img := func(u string) api.Image {
		return api.Image{ExecutorOpts: &api.ImageExecutorOpts{Docker: &api.ImageDockerOpts{User: u}}}
	}
	cases := []struct {
		name          string
		user          string
		allowed       []string
		job           api.Image
		want, ignored string
		refused       bool
	}{
		{"nothing set", "", nil, api.Image{}, "", "", false},
		{"job only", "", nil, img("root"), "root", "", false},
		// GitLab Runner: the runner's user takes precedence.
		{"runner user beats the job's root", "nobody", nil, img("root"), "nobody", "root", false},
		{"runner user beats uid 0", "nobody", nil, img("0"), "nobody", "0", false},
		{"job asks for the runner's user", "nobody", nil, img("nobody"), "nobody", "", false},
		{"listed", "", []string{"1000"}, img("1000"), "1000", "", false},
		{"root not listed", "", []string{"1000"}, img("0"), "", "", true},
		{"uid with root group", "", []string{"1000"}, img("1000:0"), "", "", true},
		{"leading space", "", []string{"1000"}, img(" 1000"), "", "", true},
		{"upper case name", "", []string{"nobody"}, img("NOBODY"), "", "", true},
		{"zero-padded uid", "", []string{"1000"}, img("01000"), "", "", true},
		// Drover's extension: allowed_users lets a job pick a listed user
		// over the runner's own (GitLab would run the runner's user).
		{"listed beats runner user", "nobody", []string{"1000"}, img("1000"), "1000", "", false},
		{"runner user always allowed", "nobody", []string{"1000"}, img("nobody"), "nobody", "", false},
		{"no docker opts", "nobody", []string{"1000"}, api.Image{ExecutorOpts: &api.ImageExecutorOpts{}}, "nobody", "", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := &Config{User: tc.user, AllowedUsers: tc.allowed}
			got, ignored, err := containerUser(cfg, tc.job)
			if tc.refused {
				var be *executor.BuildError
				if !errors.As(err, &be) || be.Reason != api.RunnerConfigurationError || !strings.Contains(err.Error(), "allowed_users") {
					t.Fatalf("containerUser = %q, %v, want a refusal naming allowed_users", got, err)
				}
				return
			}
			if err != nil || got != tc.want || ignored != tc.ignored {
				t.Errorf("containerUser = %q, ignored %q, %v; want %q, ignored %q", got, ignored, err, tc.want, tc.ignored)
			}
		})
	}
}

// TestAllowedPullProbes: a job's pull_policy against allowed_pull_policies.
func TestAllowedPullProbes(t *testing.T) {
	cfg := &Config{PullPolicy: []PullPolicy{PullAlways}, AllowedPullPolicies: []PullPolicy{PullAlways}}
	cases := []struct {
		name      string
		requested []string
		want      []PullPolicy
	}{
		{"none asked", nil, []PullPolicy{PullAlways}},
		{"allowed", []string{"always"}, []PullPolicy{PullAlways}},
		{"not allowed", []string{"if-not-present"}, nil},
		{"never not allowed", []string{"never"}, nil},
		{"upper case", []string{"Always"}, nil},
		{"space", []string{" always"}, nil},
		{"empty string", []string{""}, nil},
		{"allowed among others", []string{"never", "always"}, []PullPolicy{PullAlways}},
		{"repeated", []string{"always", "always"}, []PullPolicy{PullAlways}},
	}
	for _, tc := range cases {
		got, err := cfg.AllowedPull(tc.requested)
		if tc.want == nil {
			if err == nil {
				t.Errorf("%s: AllowedPull(%q) = %v, want an error", tc.name, tc.requested, got)
			}
			continue
		}
		if err != nil || len(got) != len(tc.want) || got[0] != tc.want[0] {
			t.Errorf("%s: AllowedPull(%q) = %v, %v, want %v", tc.name, tc.requested, got, err, tc.want)
		}
	}
}

// FuzzCheckImage: an image checkImage lets through is a valid reference
// whose qualified name has no white space or control character, and
// matches the allow list as written; with a digest and a tag, it matches
// without the tag too.
func FuzzCheckImage(f *testing.F) {
	for _, s := range []string{"alpine:3", "alpine:3@" + digest, "library/../alpine", " alpine", "ALPINE", sha, "localhost:5000/a"} {
		f.Add("alpine{:*,@*}", s)
		f.Add("**", s)
	}
	f.Fuzz(func(t *testing.T, pattern, image string) {
		patterns := []string{pattern}
		if checkImage("image", image, "allowed_images", patterns) != nil {
			return
		}
		ref, err := CheckImageReference(image)
		if err != nil {
			t.Fatalf("allowed %q, which is not a reference: %v", image, err)
		}
		if strings.ContainsFunc(ref, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
			t.Fatalf("allowed %q, whose reference %q has white space or a control character", image, ref)
		}
		if !matchPattern(pattern, image) {
			t.Fatalf("allowed %q, which %q does not match", image, pattern)
		}
		if u, ok := dropTagOfDigested(image); ok && !matchPattern(pattern, u) {
			t.Fatalf("allowed %q, whose untagged form %q %q does not match", image, u, pattern)
		}
	})
}
