// Package fleetingdirtest runs distribution's registry for tests (with
// authentication, or as a pull-through cache: the registry mirror tests
// use it too) and publishes fleeting plugin artifacts to it the way
// fleeting-artifact release does, so that installing can be tested
// against the real thing.
package fleetingdirtest

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/drover-ci/drover/internal/cachedir"
	"github.com/drover-ci/drover/internal/freeport"
	"github.com/drover-ci/drover/internal/lockedbuf"
)

// registryPackage is distribution's registry, which scripts/test.sh and
// the e2e tests install into the bin directory of drover's cache.
const registryPackage = "github.com/distribution/distribution/v3/cmd/registry@latest"

var (
	binaryOnce sync.Once
	binaryPath string
	binaryErr  error
)

// RegistryBinary returns the path of distribution's registry binary in
// $DROVER_CACHE_DIR/bin (else ~/.cache/drover/bin), building it with go
// install when it is missing. It skips tb when it cannot be built.
func RegistryBinary(tb testing.TB) string {
	tb.Helper()
	binaryOnce.Do(func() { binaryPath, binaryErr = installRegistry() })
	if binaryErr != nil {
		tb.Skipf("distribution's registry binary is not available: %v", binaryErr)
	}
	return binaryPath
}

func installRegistry() (string, error) {
	cache, err := cachedir.Dir()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(cache, "bin")
	path := filepath.Join(bin, "registry")
	if fi, err := os.Stat(path); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
		return path, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "install", registryPackage)
	cmd.Env = append(os.Environ(), "GOBIN="+bin)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("GOBIN=%s go install %s: %w\n%s", bin, registryPackage, err, out)
	}
	return path, nil
}

// Options configure a registry.
type Options struct {
	// Username and Password, when set, make the registry demand them
	// (htpasswd authentication, answered with a Basic challenge).
	Username, Password string
	// Listen is the address it listens on: "" is 127.0.0.1; "0.0.0.0"
	// for one that containers reach at the bridge's gateway.
	Listen string
	// Upstream, when set, makes it a pull-through cache of that registry
	// (a URL: proxy.remoteurl).
	Upstream string
}

// Registry is a distribution registry process serving plain HTTP on a
// loopback port, with its storage in a temporary directory.
type Registry struct {
	// Host is 127.0.0.1:port, the registry part of references to it.
	Host string
	// Port is the port it listens on.
	Port string
	// Root is its storage's root directory.
	Root string

	opts Options
	log  *lockedbuf.Buffer

	mu        sync.Mutex
	published map[string][]string // repository path -> versions
}

const registryConfig = `version: 0.1
log:
  level: info
  formatter: text
storage:
  filesystem:
    rootdirectory: %s
http:
  addr: %s:%s
`

const proxyConfig = `proxy:
  remoteurl: %s
`

const htpasswdConfig = `auth:
  htpasswd:
    realm: drover-test
    path: %s
`

// Start starts a registry and waits, bounded by ctx, until it answers
// GET /v2/. It is killed when the test ends; its log is shown when the
// test failed.
func Start(ctx context.Context, tb testing.TB, o Options) *Registry {
	tb.Helper()
	bin := RegistryBinary(tb)
	dir := tb.TempDir()
	if o.Listen == "" {
		o.Listen = "127.0.0.1"
	}
	port := freePort(tb, o.Listen)
	r := &Registry{Host: "127.0.0.1:" + port, Port: port, Root: filepath.Join(dir, "storage"),
		opts: o, log: &lockedbuf.Buffer{}, published: map[string][]string{}}
	// Access logs stay on (stdout, the rest stderr: both are kept).
	cfg := fmt.Sprintf(registryConfig, r.Root, o.Listen, port)
	if o.Upstream != "" {
		cfg += fmt.Sprintf(proxyConfig, o.Upstream)
	}
	if o.Username != "" {
		hash, err := bcrypt.GenerateFromPassword([]byte(o.Password), bcrypt.MinCost)
		if err != nil {
			tb.Fatal(err)
		}
		htpasswd := filepath.Join(dir, "htpasswd")
		if err := os.WriteFile(htpasswd, fmt.Appendf(nil, "%s:%s\n", o.Username, hash), 0o600); err != nil {
			tb.Fatal(err)
		}
		cfg += fmt.Sprintf(htpasswdConfig, htpasswd)
	}
	cfgPath := filepath.Join(dir, "config.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		tb.Fatal(err)
	}
	cmd := exec.Command(bin, "serve", cfgPath)
	cmd.Stdout, cmd.Stderr = r.log, r.log
	// No OpenTelemetry exporter: nothing collects them here.
	cmd.Env = append(os.Environ(), "OTEL_TRACES_EXPORTER=none", "OTEL_METRICS_EXPORTER=none", "OTEL_LOGS_EXPORTER=none")
	if err := cmd.Start(); err != nil {
		tb.Fatalf("start %s: %v", bin, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	tb.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		if tb.Failed() {
			tb.Logf("log of the registry at %s:\n%s", r.Host, r.log.String())
		}
	})

	// The registry cannot be handed a listener, so its port is asked
	// until it answers, or the process exits, or ctx ends.
	url := "http://" + r.Host + "/v2/"
	poll := time.NewTicker(20 * time.Millisecond)
	defer poll.Stop()
	var lastErr error
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusUnauthorized {
				return r
			}
			err = fmt.Errorf("GET %s: %s", url, resp.Status)
		}
		lastErr = err
		select {
		case err := <-exited:
			exited <- err // for the cleanup
			tb.Fatalf("the registry exited before it answered: %v\n%s", err, r.log.String())
		case <-ctx.Done():
			tb.Fatalf("the registry did not answer: %v (last: %v)\n%s", ctx.Err(), lastErr, r.log.String())
		case <-poll.C:
		}
	}
}

// Log is what the registry wrote so far (its access log included).
func (r *Registry) Log() string { return r.log.String() }

// freePort returns a TCP port free on host at the time of the call.
// Another process could take it before the registry binds it; the
// registry then exits, which Start reports.
func freePort(tb testing.TB, host string) string {
	tb.Helper()
	port, err := freeport.On(host)
	if err != nil {
		tb.Fatal(err)
	}
	return strconv.Itoa(port)
}

// Count returns how many lines of the registry's log contain all of
// words: requests seen, for example Count("GET", "/blobs/").
func (r *Registry) Count(words ...string) int {
	n := 0
	for _, line := range strings.Split(r.log.String(), "\n") {
		all := true
		for _, w := range words {
			all = all && strings.Contains(line, w)
		}
		if all {
			n++
		}
	}
	return n
}
