package registryauth

import (
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/drover-ci/drover/internal/api"
)

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

func TestHost(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ ref, want string }{
		{"docker.io/library/busybox:1", "docker.io"},
		{"registry.example.com/g/app:1", "registry.example.com"},
		{"127.0.0.1:5000/demo/busybox:1", "127.0.0.1:5000"},
		{"localhost/x:1", "localhost"},
		{"Registry.Example.com:443/a/b@sha1", "registry.example.com:443"},
		{"library/busybox:1", "docker.io"},
		{"busybox", "docker.io"},
	} {
		if got := Host(tc.ref); got != tc.want {
			t.Errorf("Host(%q) = %q, want %q", tc.ref, got, tc.want)
		}
	}
	for _, tc := range []struct{ key, want string }{
		{"https://index.docker.io/v1/", "docker.io"},
		{"registry-1.docker.io", "docker.io"},
		{"registry.hub.docker.com", "docker.io"},
		{"http://127.0.0.1:5000", "127.0.0.1:5000"},
		{"registry.example.com/v2/", "registry.example.com"},
		{"REGISTRY.example.com", "registry.example.com"},
	} {
		if got := NormalizeRegistry(tc.key); got != tc.want {
			t.Errorf("NormalizeRegistry(%q) = %q, want %q", tc.key, got, tc.want)
		}
	}
}

// fakeHelper installs docker-credential-fake on PATH: it knows
// helped.example.com (user and password) and token.example.com (an
// identity token), and no other registry.
func fakeHelper(t *testing.T) {
	bin := t.TempDir()
	helper := `#!/bin/sh
read host
case "$host" in
helped.example.com) echo '{"ServerURL":"helped.example.com","Username":"h-user","Secret":"h-pass"}' ;;
token.example.com) echo '{"ServerURL":"token.example.com","Username":"<token>","Secret":"refresh"}' ;;
*) echo 'credentials not found in native keychain'; exit 1 ;;
esac
`
	if err := os.WriteFile(filepath.Join(bin, "docker-credential-fake"), []byte(helper), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
}

// Resolve takes the first source that has the image's registry, in
// GitLab Runner's order: DOCKER_AUTH_CONFIG (job variable over the
// runner's environment), the manager's Docker configuration (auths, then
// its credential helpers), the job payload.
func TestResolve(t *testing.T) {
	cfgDir := t.TempDir()
	t.Setenv("DOCKER_CONFIG", cfgDir)
	cfgPath := filepath.Join(cfgDir, "config.json")
	config := `{"auths": {"https://cfg.example.com": {"auth": "` + b64("cfg-user:cfg-pass") + `"}},
		"credHelpers": {"helped.example.com": "fake", "token.example.com": "fake"}}`
	if err := os.WriteFile(cfgPath, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	fakeHelper(t)
	envVar := `DOCKER_AUTH_CONFIG={"auths": {"env.example.com": {"auth": "` + b64("env-user:env-pass") + `"}}}`
	job := &api.JobResponse{
		Variables: api.Variables{
			{Key: "DOCKER_AUTH_CONFIG", Value: `{"auths": {"earlier.example.com": {"username": "x", "password": "y"}}}`},
			{Key: "DOCKER_AUTH_CONFIG", Value: `{"auths": {"var.example.com": {"username": "var-user", "password": "var-pass"}}}`},
		},
		Credentials: []api.Credentials{
			{Type: "registry", URL: "payload.example.com", Username: "gitlab-ci-token", Password: "job-token"},
			{Type: "registry", URL: "cfg.example.com", Username: "payload-loses", Password: "x"},
			{Type: "other", URL: "other.example.com", Username: "no", Password: "no"},
		},
	}
	for _, tc := range []struct {
		name string
		job  *api.JobResponse
		env  []string
		ref  string
		want *Credentials // nil: anonymous
	}{
		{"job variable", job, nil, "var.example.com/a:1", &Credentials{Registry: "var.example.com", Username: "var-user", Password: "var-pass", From: FromVariable}},
		{"last definition of the variable", job, nil, "earlier.example.com/a:1", nil},
		{"config.json over the payload", job, nil, "cfg.example.com/a:1", &Credentials{Registry: "cfg.example.com", Username: "cfg-user", Password: "cfg-pass", From: cfgPath}},
		{"credential helper", job, nil, "helped.example.com/a:1", &Credentials{Registry: "helped.example.com", Username: "h-user", Password: "h-pass", From: cfgPath}},
		{"credential helper's identity token", job, nil, "token.example.com/a:1", &Credentials{Registry: "token.example.com", IdentityToken: "refresh", From: cfgPath}},
		{"job payload", job, nil, "payload.example.com/g/a:1", &Credentials{Registry: "payload.example.com", Username: "gitlab-ci-token", Password: "job-token", From: FromPayload}},
		{"payload credentials not of type registry", job, nil, "other.example.com/a:1", nil},
		{"no source has the registry", job, nil, "docker.io/library/busybox:1", nil},
		{"the job's variable hides the runner's", job, []string{envVar}, "env.example.com/a:1", nil},
		{"the runner's environment", &api.JobResponse{}, []string{"OTHER=1", envVar}, "env.example.com/a:1", &Credentials{Registry: "env.example.com", Username: "env-user", Password: "env-pass", From: FromVariable}},
		{"nil job", nil, nil, "cfg.example.com/a:1", &Credentials{Registry: "cfg.example.com", Username: "cfg-user", Password: "cfg-pass", From: cfgPath}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok, err := Resolve(t.Context(), Sources(tc.job, tc.env, nil), tc.ref)
			if err != nil {
				t.Fatalf("Resolve(%s) = %v", tc.ref, err)
			}
			if tc.want == nil {
				if ok {
					t.Errorf("Resolve(%s) = %+v, want an anonymous pull", tc.ref, got)
				}
				return
			}
			if !ok {
				t.Fatalf("Resolve(%s) found nothing, want %+v", tc.ref, *tc.want)
			}
			if diff := cmp.Diff(*tc.want, got); diff != "" {
				t.Errorf("Resolve(%s) (-want +got):\n%s", tc.ref, diff)
			}
		})
	}
}

// A source that does not parse is reported and skipped; one whose entry
// is broken, or names a helper that is not installed, fails the lookup
// with the source named.
func TestResolveBrokenSources(t *testing.T) {
	t.Setenv("DOCKER_CONFIG", t.TempDir()) // no config.json
	fakeHelper(t)
	for _, tc := range []struct {
		name, config string
		warned       bool
		err          string // "" = no error, anonymous
	}{
		{"not json", "not json", true, ""},
		{"auth not base64", `{"auths": {"r.example.com": {"auth": "%%%"}}}`, false, `credentials for r.example.com from $DOCKER_AUTH_CONFIG: auths "r.example.com": auth is not base64`},
		{"auth without a colon", `{"auths": {"r.example.com": {"auth": "` + b64("user") + `"}}}`, false, "auth is not user:password"},
		{"helper not installed", `{"credsStore": "missing-helper"}`, false, "credential helper missing-helper"},
		{"helper without the registry", `{"credsStore": "fake"}`, false, ""},
		{"entry without credentials", `{"auths": {"r.example.com": {}}}`, false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			job := &api.JobResponse{Variables: api.Variables{{Key: "DOCKER_AUTH_CONFIG", Value: tc.config}}}
			var warned []string
			srcs := Sources(job, nil, func(from string, err error) { warned = append(warned, from) })
			if got := len(warned) > 0; got != tc.warned || tc.warned && warned[0] != FromVariable {
				t.Errorf("warnings %q, want one for %s: %v", warned, FromVariable, tc.warned)
			}
			c, ok, err := Resolve(t.Context(), srcs, "r.example.com/a:1")
			switch {
			case tc.err == "" && (err != nil || ok):
				t.Errorf("Resolve = %+v, %v, %v; want an anonymous pull", c, ok, err)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Errorf("Resolve = %v, want an error containing %q", err, tc.err)
			}
		})
	}
}

func TestDockerConfigJSON(t *testing.T) {
	t.Parallel()
	data, err := DockerConfigJSON([]Credentials{
		{Registry: "docker.io", Username: "hub", Password: "p1"},
		{Registry: "127.0.0.1:5000", Username: "u", Password: "p:2"},
		{Registry: "token.example.com", IdentityToken: "refresh"},
	})
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]map[string]map[string]string
	if err := json.Unmarshal(data, &got); err != nil {
		t.Fatalf("%s: %v", data, err)
	}
	want := map[string]map[string]map[string]string{"auths": {
		"https://index.docker.io/v1/": {"username": "hub", "password": "p1", "auth": b64("hub:p1")},
		"127.0.0.1:5000":              {"username": "u", "password": "p:2", "auth": b64("u:p:2")},
	}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("DockerConfigJSON (-want +got):\n%s", diff)
	}
	// What it writes reads back as the same credentials.
	var c Config
	if err := json.Unmarshal(data, &c); err != nil {
		t.Fatal(err)
	}
	if cr, ok, err := c.Lookup(t.Context(), "docker.io"); err != nil || !ok || cr.Username != "hub" || cr.Password != "p1" {
		t.Errorf("Lookup(docker.io) in %s = %+v, %v, %v", data, cr, ok, err)
	}
}
