package docker

import (
	"encoding/base64"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/docker/docker/api/types/registry"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/executor"
	"github.com/drover-ci/drover/internal/registryauth"
)

// The credentials of a pull come from the first source that has the
// image's registry, in GitLab Runner's order: DOCKER_AUTH_CONFIG (job
// variable over the runner's environment), the manager's Docker
// configuration, the job payload; a credential helper answers for a
// registry the configuration sends to it.
func TestRegistryAuth(t *testing.T) {
	b64 := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
	cfgDir := t.TempDir()
	t.Setenv("DOCKER_CONFIG", cfgDir)
	config := `{"auths": {"https://cfg.example.com": {"auth": "` + b64("cfg-user:cfg-pass") + `"}},
		"credHelpers": {"helped.example.com": "fake"}}`
	if err := os.WriteFile(filepath.Join(cfgDir, "config.json"), []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	helper := "#!/bin/sh\nread host\nif [ \"$host\" = helped.example.com ]; then echo '{\"ServerURL\":\"helped.example.com\",\"Username\":\"h-user\",\"Secret\":\"h-pass\"}'; else echo 'credentials not found in native keychain'; exit 1; fi\n"
	if err := os.WriteFile(filepath.Join(bin, "docker-credential-fake"), []byte(helper), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))

	job := &api.JobResponse{
		Variables: api.Variables{{Key: "DOCKER_AUTH_CONFIG", Value: `{"auths": {"var.example.com": {"username": "var-user", "password": "var-pass"}}}`}},
		Credentials: []api.Credentials{
			{Type: "registry", URL: "payload.example.com", Username: "gitlab-ci-token", Password: "job-token"},
			{Type: "registry", URL: "cfg.example.com", Username: "payload-loses", Password: "x"},
		},
	}
	e := &Executor{job: job, trace: io.Discard, settings: executor.Settings{
		Environment: []string{`DOCKER_AUTH_CONFIG={"auths": {"env.example.com": {"auth": "` + b64("env-user:env-pass") + `"}}}`},
	}}
	for _, tc := range []struct {
		ref, from, user, pass string
	}{
		{"var.example.com/a:1", registryauth.FromVariable, "var-user", "var-pass"},
		{"cfg.example.com/a:1", filepath.Join(cfgDir, "config.json"), "cfg-user", "cfg-pass"},
		{"helped.example.com/a:1", filepath.Join(cfgDir, "config.json"), "h-user", "h-pass"},
		{"payload.example.com/g/a:1", registryauth.FromPayload, "gitlab-ci-token", "job-token"},
		{"docker.io/library/busybox:1", "", "", ""},
		// The job's variable hides the runner's environment's.
		{"env.example.com/a:1", "", "", ""},
	} {
		enc, from, err := e.registryAuth(t.Context(), tc.ref)
		if err != nil {
			t.Errorf("registryAuth(%s) = %v", tc.ref, err)
			continue
		}
		if from != tc.from {
			t.Errorf("registryAuth(%s) from %q, want %q", tc.ref, from, tc.from)
		}
		if tc.from == "" {
			if enc != "" {
				t.Errorf("registryAuth(%s) = %q, want an anonymous pull", tc.ref, enc)
			}
			continue
		}
		ac, err := registry.DecodeAuthConfig(enc)
		if err != nil || ac.Username != tc.user || ac.Password != tc.pass || ac.ServerAddress != registryauth.Host(tc.ref) {
			t.Errorf("registryAuth(%s) = %+v, %v; want %s:%s", tc.ref, ac, err, tc.user, tc.pass)
		}
	}

	// Without the job's variable, the runner's environment's is used.
	e.job = &api.JobResponse{}
	if _, from, err := e.registryAuth(t.Context(), "env.example.com/a:1"); err != nil || from != registryauth.FromVariable {
		t.Errorf("registryAuth from the runner's environment = %q, %v", from, err)
	}
	// A DOCKER_AUTH_CONFIG that is not JSON is skipped with a warning.
	e.job = &api.JobResponse{Variables: api.Variables{{Key: "DOCKER_AUTH_CONFIG", Value: "not json"}}}
	e.settings.Environment = nil
	if enc, from, err := e.registryAuth(t.Context(), "cfg.example.com/a:1"); err != nil || from != filepath.Join(cfgDir, "config.json") || enc == "" {
		t.Errorf("registryAuth with a broken DOCKER_AUTH_CONFIG = %q, %q, %v; want config.json's", enc, from, err)
	}
}
