package hcloudtest

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/cachedir"
)

// PluginSourceEnv is the environment variable that names the directory
// of the Hetzner plugin's source tree (the module
// gitlab.com/hetznercloud/fleeting-plugin-hetzner) for BuildPlugin;
// unset, it is DefaultPluginSource.
const PluginSourceEnv = "DROVER_HETZNER_PLUGIN_SRC"

// DefaultPluginSource is where the plugin's source is kept as a test
// fixture, unchanged: shared/fixtures/fleeting-plugin-hetzner beside the
// repository (../shared from its root).
func DefaultPluginSource() string {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return filepath.Join("..", "shared", "fixtures", "fleeting-plugin-hetzner")
	}
	root := filepath.Join(filepath.Dir(file), "..", "..", "..")
	return filepath.Join(root, "..", "shared", "fixtures", "fleeting-plugin-hetzner")
}

var (
	buildMu    sync.Mutex
	buildCache = map[string]string{} // source directory -> binary
)

// BuildPlugin returns the path of the Hetzner plugin's binary, built from
// its source (PluginSourceEnv) once per test binary, and cached as
// $DROVER_CACHE_DIR/bin/fleeting-plugin-hetzner-<hash> (default
// ~/.cache/drover) where <hash> covers the source's go.mod, go.sum and
// version.go, so that a later run does not build again. The build needs
// the Go module proxy (or a module cache that has the plugin's
// dependencies) and writes nothing into the source tree: it runs with a
// copy of go.mod and go.sum (-modfile). BuildPlugin skips t when the
// source is absent and fails it when the build fails.
func BuildPlugin(t testing.TB) string {
	t.Helper()
	src := os.Getenv(PluginSourceEnv)
	if src == "" {
		src = DefaultPluginSource()
	}
	if _, err := os.Stat(filepath.Join(src, "cmd", "fleeting-plugin-hetzner")); err != nil {
		t.Skipf("hcloudtest: no Hetzner plugin source at %s (set %s): %v", src, PluginSourceEnv, err)
	}
	buildMu.Lock()
	defer buildMu.Unlock()
	if bin, ok := buildCache[src]; ok {
		return bin
	}
	bin, err := buildPlugin(src)
	if err != nil {
		t.Fatalf("hcloudtest: build the Hetzner plugin: %v", err)
	}
	buildCache[src] = bin
	return bin
}

func buildPlugin(src string) (string, error) {
	h := sha256.New()
	for _, f := range []string{"go.mod", "go.sum", "version.go"} {
		data, err := os.ReadFile(filepath.Join(src, f))
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "%s %d\n", f, len(data))
		h.Write(data)
	}
	fmt.Fprintf(h, "%s/%s\n", runtime.GOOS, runtime.GOARCH)
	dir, err := cachedir.Dir()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "bin", "fleeting-plugin-hetzner-"+hex.EncodeToString(h.Sum(nil))[:16])
	if fi, err := os.Stat(bin); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
		return bin, nil
	}
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		return "", err
	}
	// The build may add to go.sum (GOFLAGS=-mod=mod): let it write to a
	// copy, never into the source tree.
	mod, err := os.MkdirTemp("", "hcloudtest-modfile-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(mod)
	for _, f := range []string{"go.mod", "go.sum"} {
		data, err := os.ReadFile(filepath.Join(src, f))
		if err != nil {
			return "", err
		}
		if err := os.WriteFile(filepath.Join(mod, f), data, 0o644); err != nil {
			return "", err
		}
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("no go command in PATH: %w", err)
	}
	suffix := make([]byte, 4)
	_, _ = rand.Read(suffix)
	// Built next to its final name and renamed, so that concurrent test
	// binaries never run a half-written file.
	tmp := bin + ".tmp-" + hex.EncodeToString(suffix)
	defer os.Remove(tmp)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, goTool, "build", "-modfile="+filepath.Join(mod, "go.mod"), "-o", tmp, "./cmd/fleeting-plugin-hetzner")
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("%s: %w\n%s", cmd, err, out)
	}
	if err := os.Rename(tmp, bin); err != nil {
		return "", err
	}
	return bin, nil
}

// PluginConfig returns a plugin_config for the Hetzner plugin that the
// stand-in s accepts: name "hcloudtest", s's token and endpoint, location
// hel1, image debian-12, and a server type of this machine's
// architecture (cpx22 on amd64, cax11 on arm64), so that ConnectInfo
// reports the architecture the machines have. The keys of extra are set
// over those; a nil value removes the key.
func PluginConfig(s *Server, extra map[string]any) map[string]any {
	cfg := map[string]any{
		"name":        "hcloudtest",
		"token":       s.Token,
		"endpoint":    s.URL,
		"location":    "hel1",
		"server_type": hostServerType(),
		"image":       "debian-12",
	}
	for k, v := range extra {
		if v == nil {
			delete(cfg, k)
			continue
		}
		cfg[k] = v
	}
	return cfg
}
