package docker

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/docker/docker/api/types/registry"

	"github.com/drover-ci/drover/internal/api"
)

// Where a pull's registry credentials come from, in GitLab Runner's order:
// the first source that has an entry for the image's registry wins.
const (
	authFromVariable = "$DOCKER_AUTH_CONFIG"
	authFromPayload  = "job payload (GitLab Registry)"
)

// dockerConfig is the part of a Docker client configuration (config.json,
// DOCKER_AUTH_CONFIG) that says how to log in to registries.
type dockerConfig struct {
	Auths       map[string]configAuth `json:"auths"`
	CredsStore  string                `json:"credsStore"`
	CredHelpers map[string]string     `json:"credHelpers"`
}

type configAuth struct {
	Auth          string `json:"auth"`
	Username      string `json:"username"`
	Password      string `json:"password"`
	IdentityToken string `json:"identitytoken"`
}

// authSource is one place credentials may come from.
type authSource struct {
	from string // for the job's log: "$DOCKER_AUTH_CONFIG", a config.json path, the payload
	cfg  dockerConfig
}

// registryHost is the registry of a qualified image reference
// (CheckImageReference's form: docker.io/library/busybox:1).
func registryHost(ref string) string {
	host, _, ok := strings.Cut(ref, "/")
	if !ok || !strings.ContainsAny(host, ".:") && host != "localhost" {
		return "docker.io"
	}
	return normalizeRegistry(host)
}

// normalizeRegistry is a config.json auths key as a registry host: no
// scheme or path, Docker Hub's names as docker.io.
func normalizeRegistry(key string) string {
	key = strings.TrimPrefix(strings.TrimPrefix(key, "https://"), "http://")
	key, _, _ = strings.Cut(key, "/")
	switch key {
	case "index.docker.io", "registry-1.docker.io", "registry.hub.docker.com":
		return "docker.io"
	}
	return strings.ToLower(key)
}

// authSources are the places the job's pulls look for credentials, in
// GitLab Runner's order: DOCKER_AUTH_CONFIG (a job variable, else the
// runner's environment), the manager's Docker client configuration
// ($DOCKER_CONFIG/config.json, else ~/.docker/config.json), the job
// payload's registry credentials. A source that does not parse is reported
// in the job's log and skipped.
func (e *Executor) authSources() []authSource {
	var out []authSource
	job := e.job
	if job == nil {
		job = &api.JobResponse{}
	}
	add := func(from string, data []byte) {
		var c dockerConfig
		if err := json.Unmarshal(data, &c); err != nil {
			e.printf("\033[0;33mWARNING: %s is not a Docker configuration (%v): not used\033[0;m\n", from, err)
			return
		}
		out = append(out, authSource{from: from, cfg: c})
	}
	if v, ok := jobVariable(job.Variables, e.settings.Environment, "DOCKER_AUTH_CONFIG"); ok && strings.TrimSpace(v) != "" {
		add(authFromVariable, []byte(v))
	}
	if path := dockerConfigPath(); path != "" {
		if data, err := os.ReadFile(path); err == nil {
			add(path, data)
		}
	}
	payload := dockerConfig{Auths: map[string]configAuth{}}
	for _, c := range job.Credentials {
		if c.Type == "registry" && c.URL != "" {
			payload.Auths[normalizeRegistry(c.URL)] = configAuth{Username: c.Username, Password: c.Password}
		}
	}
	if len(payload.Auths) > 0 {
		out = append(out, authSource{from: authFromPayload, cfg: payload})
	}
	return out
}

// jobVariable is the value of key among the job's variables (the last
// definition), else in the runner's environment (KEY=VALUE entries).
func jobVariable(vars api.Variables, env []string, key string) (string, bool) {
	for i := len(vars) - 1; i >= 0; i-- {
		if vars[i].Key == key {
			return vars[i].Value, true
		}
	}
	for i := len(env) - 1; i >= 0; i-- {
		if k, v, ok := strings.Cut(env[i], "="); ok && k == key {
			return v, true
		}
	}
	return "", false
}

// dockerConfigPath is the manager's Docker client configuration file, ""
// when there is no home to find it in.
func dockerConfigPath() string {
	if d := os.Getenv("DOCKER_CONFIG"); d != "" {
		return filepath.Join(d, "config.json")
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return ""
	}
	return filepath.Join(home, ".docker", "config.json")
}

// registryAuth is the X-Registry-Auth of a pull of the qualified image
// ref, and where it came from; "" when no source has credentials for its
// registry (the pull is anonymous).
func (e *Executor) registryAuth(ctx context.Context, ref string) (encoded, from string, err error) {
	host := registryHost(ref)
	for _, src := range e.authSources() {
		ac, ok, err := src.cfg.lookup(ctx, host)
		if err != nil {
			return "", "", fmt.Errorf("credentials for %s from %s: %w", host, src.from, err)
		}
		if !ok {
			continue
		}
		ac.ServerAddress = host
		enc, err := registry.EncodeAuthConfig(ac)
		if err != nil {
			return "", "", err
		}
		return enc, src.from, nil
	}
	return "", "", nil
}

// lookup finds host's credentials in c: an auths entry (auth is
// base64 of user:password), else the credential helper credHelpers or
// credsStore names (docker-credential-<name> get).
func (c dockerConfig) lookup(ctx context.Context, host string) (registry.AuthConfig, bool, error) {
	for key, a := range c.Auths {
		if normalizeRegistry(key) != host {
			continue
		}
		ac := registry.AuthConfig{Username: a.Username, Password: a.Password, IdentityToken: a.IdentityToken}
		if a.Auth != "" {
			raw, err := base64.StdEncoding.DecodeString(a.Auth)
			if err != nil {
				return ac, false, fmt.Errorf("auths %q: auth is not base64: %w", key, err)
			}
			user, pass, ok := strings.Cut(string(raw), ":")
			if !ok {
				return ac, false, fmt.Errorf("auths %q: auth is not user:password", key)
			}
			ac.Username, ac.Password = user, pass
		}
		if ac.Username != "" || ac.IdentityToken != "" {
			return ac, true, nil
		}
	}
	helper := c.CredsStore
	for key, h := range c.CredHelpers {
		if normalizeRegistry(key) == host {
			helper = h
		}
	}
	if helper == "" {
		return registry.AuthConfig{}, false, nil
	}
	return credentialHelper(ctx, helper, host)
}

// credentialHelper asks docker-credential-<name> for host's credentials,
// as the Docker CLI does; a helper that knows none is no credentials.
func credentialHelper(ctx context.Context, name, host string) (registry.AuthConfig, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "docker-credential-"+name, "get")
	cmd.Stdin = strings.NewReader(host)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stdout.String() + " " + stderr.String())
		if strings.Contains(msg, "credentials not found") {
			return registry.AuthConfig{}, false, nil
		}
		var ee *exec.Error
		if errors.As(err, &ee) {
			return registry.AuthConfig{}, false, fmt.Errorf("credential helper %s: %w", name, err)
		}
		return registry.AuthConfig{}, false, fmt.Errorf("credential helper %s: %v: %s", name, err, msg)
	}
	var out struct{ Username, Secret string }
	if err := json.Unmarshal(stdout.Bytes(), &out); err != nil {
		return registry.AuthConfig{}, false, fmt.Errorf("credential helper %s: %w", name, err)
	}
	if out.Username == "<token>" {
		return registry.AuthConfig{IdentityToken: out.Secret}, true, nil
	}
	return registry.AuthConfig{Username: out.Username, Password: out.Secret}, true, nil
}
