// Package registryauth finds the registry credentials of a job's image
// pulls the way GitLab Runner does, for every executor that pulls images
// (docker pulls with them, kubernetes hands them to the kubelet in a
// Secret).
//
// The sources, in GitLab Runner's order, the first one with an entry for
// the image's registry winning: DOCKER_AUTH_CONFIG (a job variable, else
// the runner's environment), the manager's Docker client configuration
// ($DOCKER_CONFIG/config.json, else ~/.docker/config.json), the job
// payload's registry credentials (GitLab's job token for its registry).
// A configuration's entry is an auths entry or a credential helper
// (credHelpers, credsStore: docker-credential-<name> get).
package registryauth

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

	"github.com/drover-ci/drover/internal/api"
)

// Where credentials come from besides a config.json (whose path names
// it), as the job's log says.
const (
	FromVariable = "$DOCKER_AUTH_CONFIG"
	FromPayload  = "job payload (GitLab Registry)"
)

// DockerHub is the registry host of Docker Hub's images.
const DockerHub = "docker.io"

// Credentials are what a registry is logged in to with.
type Credentials struct {
	// Registry is the registry host they are for (Host's form).
	Registry string
	// Username and Password, or IdentityToken (an OAuth refresh token).
	Username, Password, IdentityToken string
	// From is the source they came from: FromVariable, FromPayload or
	// the path of a Docker configuration.
	From string
}

// Config is the part of a Docker client configuration (config.json,
// DOCKER_AUTH_CONFIG) that says how to log in to registries.
type Config struct {
	Auths       map[string]Auth   `json:"auths"`
	CredsStore  string            `json:"credsStore"`
	CredHelpers map[string]string `json:"credHelpers"`
}

// Auth is one auths entry of a Config.
type Auth struct {
	Auth          string `json:"auth"` // base64 of user:password
	Username      string `json:"username"`
	Password      string `json:"password"`
	IdentityToken string `json:"identitytoken"`
}

// Source is one place credentials may come from.
type Source struct {
	From   string // FromVariable, FromPayload, a config.json's path
	Config Config
}

// Host is the registry of a qualified image reference
// (docker.CheckImageReference's form: docker.io/library/busybox:1).
func Host(ref string) string {
	host, _, ok := strings.Cut(ref, "/")
	if !ok || !strings.ContainsAny(host, ".:") && host != "localhost" {
		return DockerHub
	}
	return NormalizeRegistry(host)
}

// NormalizeRegistry is a config.json auths key as a registry host: no
// scheme or path, Docker Hub's names as docker.io.
func NormalizeRegistry(key string) string {
	key = strings.TrimPrefix(strings.TrimPrefix(key, "https://"), "http://")
	key, _, _ = strings.Cut(key, "/")
	switch key {
	case "index.docker.io", "registry-1.docker.io", "registry.hub.docker.com":
		return DockerHub
	}
	return strings.ToLower(key)
}

// Sources are the places a job's pulls look for credentials, in GitLab
// Runner's order (see the package doc). env is the runner's environment
// (KEY=VALUE entries). A source that does not parse is passed to warn (for
// the job's log) and skipped.
func Sources(job *api.JobResponse, env []string, warn func(from string, err error)) []Source {
	var out []Source
	if job == nil {
		job = &api.JobResponse{}
	}
	add := func(from string, data []byte) {
		var c Config
		if err := json.Unmarshal(data, &c); err != nil {
			if warn != nil {
				warn(from, err)
			}
			return
		}
		out = append(out, Source{From: from, Config: c})
	}
	if v, ok := Variable(job.Variables, env, "DOCKER_AUTH_CONFIG"); ok && strings.TrimSpace(v) != "" {
		add(FromVariable, []byte(v))
	}
	if path := ConfigPath(); path != "" {
		if data, err := os.ReadFile(path); err == nil {
			add(path, data)
		}
	}
	payload := Config{Auths: map[string]Auth{}}
	for _, c := range job.Credentials {
		if c.Type == "registry" && c.URL != "" {
			payload.Auths[NormalizeRegistry(c.URL)] = Auth{Username: c.Username, Password: c.Password}
		}
	}
	if len(payload.Auths) > 0 {
		out = append(out, Source{From: FromPayload, Config: payload})
	}
	return out
}

// Resolve returns the credentials of the first source that has any for
// the registry of the qualified image reference ref; ok is false when
// none has (the pull is anonymous).
func Resolve(ctx context.Context, sources []Source, ref string) (c Credentials, ok bool, err error) {
	host := Host(ref)
	for _, src := range sources {
		c, ok, err := src.Config.Lookup(ctx, host)
		if err != nil {
			return Credentials{}, false, fmt.Errorf("credentials for %s from %s: %w", host, src.From, err)
		}
		if ok {
			c.From = src.From
			return c, true, nil
		}
	}
	return Credentials{}, false, nil
}

// Variable is the value of key among the job's variables (the last
// definition), else in the runner's environment (KEY=VALUE entries).
func Variable(vars api.Variables, env []string, key string) (string, bool) {
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

// ConfigPath is the manager's Docker client configuration file, "" when
// there is no home to find it in.
func ConfigPath() string {
	if d := os.Getenv("DOCKER_CONFIG"); d != "" {
		return filepath.Join(d, "config.json")
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return ""
	}
	return filepath.Join(home, ".docker", "config.json")
}

// Lookup finds host's credentials in c: an auths entry, else the
// credential helper credHelpers or credsStore names. From is left empty.
func (c Config) Lookup(ctx context.Context, host string) (Credentials, bool, error) {
	for key, a := range c.Auths {
		if NormalizeRegistry(key) != host {
			continue
		}
		cr := Credentials{Registry: host, Username: a.Username, Password: a.Password, IdentityToken: a.IdentityToken}
		if a.Auth != "" {
			raw, err := base64.StdEncoding.DecodeString(a.Auth)
			if err != nil {
				return Credentials{}, false, fmt.Errorf("auths %q: auth is not base64: %w", key, err)
			}
			user, pass, ok := strings.Cut(string(raw), ":")
			if !ok {
				return Credentials{}, false, fmt.Errorf("auths %q: auth is not user:password", key)
			}
			cr.Username, cr.Password = user, pass
		}
		if cr.Username != "" || cr.IdentityToken != "" {
			return cr, true, nil
		}
	}
	helper := c.CredsStore
	for key, h := range c.CredHelpers {
		if NormalizeRegistry(key) == host {
			helper = h
		}
	}
	if helper == "" {
		return Credentials{}, false, nil
	}
	return CredentialHelper(ctx, helper, host)
}

// helperTimeout bounds one credential helper call: a helper that waits
// for a prompt nobody answers must not hold the job forever.
const helperTimeout = 30 * time.Second

// CredentialHelper asks docker-credential-<name> for host's credentials,
// as the Docker CLI does; a helper that knows none is no credentials.
func CredentialHelper(ctx context.Context, name, host string) (Credentials, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, helperTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "docker-credential-"+name, "get")
	cmd.Stdin = strings.NewReader(host)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stdout.String() + " " + stderr.String())
		if strings.Contains(msg, "credentials not found") {
			return Credentials{}, false, nil
		}
		var ee *exec.Error
		if errors.As(err, &ee) {
			return Credentials{}, false, fmt.Errorf("credential helper %s: %w", name, err)
		}
		return Credentials{}, false, fmt.Errorf("credential helper %s: %v: %s", name, err, msg)
	}
	var out struct{ Username, Secret string }
	if err := json.Unmarshal(stdout.Bytes(), &out); err != nil {
		return Credentials{}, false, fmt.Errorf("credential helper %s: %w", name, err)
	}
	if out.Username == "<token>" {
		return Credentials{Registry: host, IdentityToken: out.Secret}, true, nil
	}
	return Credentials{Registry: host, Username: out.Username, Password: out.Secret}, true, nil
}

// DockerConfigJSON is the content of a Secret of type
// kubernetes.io/dockerconfigjson (key .dockerconfigjson) holding creds:
// {"auths": {registry: {username, password, auth}}}, Docker Hub's under
// the key docker login writes. Identity tokens are not in it (the kubelet
// cannot use them); the caller reports those.
func DockerConfigJSON(creds []Credentials) ([]byte, error) {
	type entry struct {
		Username string `json:"username"`
		Password string `json:"password"`
		Auth     string `json:"auth"`
	}
	auths := map[string]entry{}
	for _, c := range creds {
		if c.Username == "" {
			continue
		}
		key := c.Registry
		if key == DockerHub {
			key = "https://index.docker.io/v1/"
		}
		auths[key] = entry{Username: c.Username, Password: c.Password,
			Auth: base64.StdEncoding.EncodeToString([]byte(c.Username + ":" + c.Password))}
	}
	return json.Marshal(map[string]any{"auths": auths})
}
