package fleetingdir_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/fleet/fleetingdir"
	"github.com/drover-ci/drover/internal/fleet/fleetingdir/fleetingdirtest"
)

// publishVersions publishes versions of repo on reg, each with a linux/
// amd64 build printing "<version> amd64", a linux/arm64 one and a windows
// one, so that picking the wrong platform shows.
func publishVersions(ctx context.Context, t *testing.T, reg *fleetingdirtest.Registry, repo string, versions ...string) {
	t.Helper()
	for _, v := range versions {
		err := reg.Publish(ctx, repo, v,
			fleetingdirtest.Plugin{OS: "linux", Arch: "arm64", Binary: fleetingdirtest.Script(v + " arm64")},
			fleetingdirtest.Plugin{OS: "linux", Arch: "amd64", Binary: fleetingdirtest.Script(v + " amd64")},
			fleetingdirtest.Plugin{OS: "windows", Arch: "amd64", Binary: []byte("MZ " + v)},
		)
		if err != nil {
			t.Fatalf("Publish(%s, %s) = %v", repo, v, err)
		}
	}
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// runPlugin runs an installed plugin (a shell script) and returns what it
// printed.
func runPlugin(t *testing.T, path string) string {
	t.Helper()
	if runtime.GOOS == "windows" {
		t.Skip("the test plugins are shell scripts")
	}
	out, err := fleetingdirtest.Output(path)
	if err != nil {
		t.Fatalf("%s: %v\n%s", path, err, out)
	}
	return strings.TrimSpace(string(out))
}

func TestFleetingInstall(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	reg := fleetingdirtest.Start(ctx, t, fleetingdirtest.Options{})
	publishVersions(ctx, t, reg, "ns/myplugin", "1.2.3", "2.0.0", "1.3.0", "2.1.0-rc.1")
	repo := reg.Host + "/ns/myplugin"
	amd64 := fleetingdir.WithPlatform("linux", "amd64", "")

	tests := []struct {
		constraint string
		want       string
	}{
		{"latest", "2.0.0"},
		{"1", "1.3.0"},
		{"1.2", "1.2.3"},
		{"1.2.3", "1.2.3"},
		{"2.1.0-rc.1", "2.1.0-rc.1"},
	}
	for _, tt := range tests {
		t.Run(tt.constraint, func(t *testing.T) {
			t.Parallel()
			root := t.TempDir()
			ref, err := fleetingdir.ParseRef(repo + ":" + tt.constraint)
			if err != nil {
				t.Fatal(err)
			}
			path, ver, err := fleetingdir.Install(ctx, root, ref, amd64)
			if err != nil {
				t.Fatalf("Install(%s) = %v", ref, err)
			}
			// The layout GitLab's installer makes.
			wantPath := filepath.Join(root, reg.Host, "ns", "myplugin", tt.want, "plugin")
			if path != wantPath || ver != tt.want {
				t.Fatalf("Install(%s) = %q, %q; want %q, %q", ref, path, ver, wantPath, tt.want)
			}
			if got, want := runPlugin(t, path), tt.want+" amd64"; got != want {
				t.Errorf("installed plugin printed %q, want %q", got, want)
			}
			if p, v, err := fleetingdir.Find(root, ref); err != nil || p != path || v != ver {
				t.Errorf("Find(%s) after Install = %q, %q, %v; want %q, %q", ref, p, v, err, path, ver)
			}
			entries, _ := os.ReadDir(filepath.Dir(filepath.Dir(path)))
			if len(entries) != 1 {
				t.Errorf("the repository's directory holds %d entries, want 1 (no temporary directory left)", len(entries))
			}
		})
	}

	t.Run("idempotent", func(t *testing.T) {
		t.Parallel()
		root := t.TempDir()
		ref := fleetingdir.Ref{Repository: repo, Constraint: "1"}
		path, _, err := fleetingdir.Install(ctx, root, ref, amd64)
		if err != nil {
			t.Fatal(err)
		}
		before, err := os.Stat(filepath.Dir(path))
		if err != nil {
			t.Fatal(err)
		}
		path2, ver2, err := fleetingdir.Install(ctx, root, ref, amd64)
		if err != nil || path2 != path || ver2 != "1.3.0" {
			t.Fatalf("second Install(%s) = %q, %q, %v; want %q, 1.3.0", ref, path2, ver2, err, path)
		}
		after, err := os.Stat(filepath.Dir(path))
		if err != nil || !os.SameFile(before, after) {
			t.Errorf("second Install replaced the version directory (%v)", err)
		}
		installed, err := fleetingdir.List(root)
		if err != nil || len(installed) != 1 {
			t.Errorf("List after two installs = %v, %v; want one version", installed, err)
		}
	})

	t.Run("concurrent", func(t *testing.T) {
		t.Parallel()
		root := t.TempDir()
		ref := fleetingdir.Ref{Repository: repo, Constraint: "latest"}
		var wg sync.WaitGroup
		errs := make([]error, 4)
		for i := range errs {
			wg.Go(func() { _, _, errs[i] = fleetingdir.Install(ctx, root, ref, amd64) })
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatalf("concurrent Install(%s) = %v", ref, err)
		}
		if installed, err := fleetingdir.List(root); err != nil || len(installed) != 1 || installed[0].Version != "2.0.0" {
			t.Errorf("List = %v, %v; want 2.0.0 only", installed, err)
		}
	})

	t.Run("other platforms", func(t *testing.T) {
		t.Parallel()
		root := t.TempDir()
		ref := fleetingdir.Ref{Repository: repo, Constraint: "1.2"}
		path, _, err := fleetingdir.Install(ctx, root, ref, fleetingdir.WithPlatform("linux", "arm64", ""))
		if err != nil {
			t.Fatal(err)
		}
		if got := runPlugin(t, path); got != "1.2.3 arm64" {
			t.Errorf("linux/arm64 install printed %q, want the arm64 build", got)
		}
		path, _, err = fleetingdir.Install(ctx, t.TempDir(), ref, fleetingdir.WithPlatform("windows", "amd64", ""))
		if err != nil {
			t.Fatal(err)
		}
		if got, err := os.ReadFile(path); err != nil || filepath.Base(path) != "plugin.exe" || string(got) != "MZ 1.2.3" {
			t.Errorf("windows install = %s: %q, %v; want plugin.exe of the windows build", path, got, err)
		}
		_, _, err = fleetingdir.Install(ctx, t.TempDir(), ref, fleetingdir.WithPlatform("linux", "s390x", ""))
		if err == nil || !strings.Contains(err.Error(), "no image for linux/s390x (it has: linux/arm64, linux/amd64, windows/amd64)") {
			t.Errorf("Install for linux/s390x = %v, want the error naming the platforms there are", err)
		}
	})

	t.Run("running platform", func(t *testing.T) {
		t.Parallel()
		if runtime.GOOS != "linux" || (runtime.GOARCH != "amd64" && runtime.GOARCH != "arm64") {
			t.Skipf("the test release has no build for %s/%s", runtime.GOOS, runtime.GOARCH)
		}
		root := t.TempDir()
		path, _, err := fleetingdir.Install(ctx, root, fleetingdir.Ref{Repository: repo, Constraint: "1.2.3"})
		if err != nil {
			t.Fatal(err)
		}
		if got, want := runPlugin(t, path), "1.2.3 "+runtime.GOARCH; got != want {
			t.Errorf("installed plugin printed %q, want %q", got, want)
		}
	})

	t.Run("no such version", func(t *testing.T) {
		t.Parallel()
		ref := fleetingdir.Ref{Repository: repo, Constraint: "3"}
		_, _, err := fleetingdir.Install(ctx, t.TempDir(), ref, amd64)
		if !errors.Is(err, fleetingdir.ErrNoVersion) || !strings.Contains(err.Error(), "versions: 1.2.3, 1.3.0, 2.0.0, 2.1.0-rc.1") {
			t.Errorf("Install(%s) = %v; want ErrNoVersion listing the versions", ref, err)
		}
	})

	t.Run("no such repository", func(t *testing.T) {
		t.Parallel()
		ref := fleetingdir.Ref{Repository: reg.Host + "/ns/missing", Constraint: "latest"}
		_, _, err := fleetingdir.Install(ctx, t.TempDir(), ref, amd64)
		if err == nil || !strings.Contains(err.Error(), "NAME_UNKNOWN") {
			t.Errorf("Install(%s) = %v; want the registry's NAME_UNKNOWN", ref, err)
		}
	})
}

// Not parallel: it sets FLEETING_PLUGIN_PATH.
func TestFleetingInstallPluginPathOverride(t *testing.T) {
	ctx := testContext(t)
	reg := fleetingdirtest.Start(ctx, t, fleetingdirtest.Options{})
	publishVersions(ctx, t, reg, "ns/myplugin", "1.0.0")
	dir := t.TempDir()
	t.Setenv("FLEETING_PLUGIN_PATH", dir)
	ref := fleetingdir.Ref{Repository: reg.Host + "/ns/myplugin", Constraint: "latest"}
	path, _, err := fleetingdir.Install(ctx, fleetingdir.Root(), ref, fleetingdir.WithPlatform("linux", "amd64", ""))
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(dir, reg.Host, "ns", "myplugin", "1.0.0", "plugin"); path != want {
		t.Errorf("Install into Root() = %q, want %q", path, want)
	}
}

// Not parallel: it sets DOCKER_CONFIG, where Login writes.
func TestFleetingInstallWithLogin(t *testing.T) {
	ctx := testContext(t)
	reg := fleetingdirtest.Start(ctx, t, fleetingdirtest.Options{Username: "ci", Password: "s3cret"})
	publishVersions(ctx, t, reg, "ns/private", "1.0.0")
	ref := fleetingdir.Ref{Repository: reg.Host + "/ns/private", Constraint: "1"}
	amd64 := fleetingdir.WithPlatform("linux", "amd64", "")

	docker := t.TempDir()
	t.Setenv("DOCKER_CONFIG", docker)
	_, _, err := fleetingdir.Install(ctx, t.TempDir(), ref, amd64)
	if !errors.Is(err, fleetingdir.ErrUnauthorized) || !strings.Contains(err.Error(), "no credentials are stored for "+reg.Host) {
		t.Fatalf("Install before login = %v, want ErrUnauthorized saying there are no credentials", err)
	}

	// Another registry's entry, and other settings, are kept.
	mustWrite(t, filepath.Join(docker, "config.json"), `{"auths":{"other.example.com":{"auth":"eDp5"}},"detachKeys":"ctrl-x"}`, 0o600)
	file, err := fleetingdir.Login(reg.Host, "ci", "wrong")
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(docker, "config.json"); file != want {
		t.Errorf("Login stored in %q, want %q", file, want)
	}
	_, _, err = fleetingdir.Install(ctx, t.TempDir(), ref, amd64)
	if !errors.Is(err, fleetingdir.ErrUnauthorized) || !strings.Contains(err.Error(), "with the credentials stored for "+reg.Host) {
		t.Fatalf("Install with a wrong password = %v, want ErrUnauthorized about the stored credentials", err)
	}

	if _, err := fleetingdir.Login(reg.Host, "ci", "s3cret"); err != nil {
		t.Fatal(err)
	}
	path, ver, err := fleetingdir.Install(ctx, t.TempDir(), ref, amd64)
	if err != nil || ver != "1.0.0" {
		t.Fatalf("Install after login = %q, %q, %v", path, ver, err)
	}

	// The file is as Docker's tools write it.
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		Auths      map[string]map[string]string `json:"auths"`
		DetachKeys string                       `json:"detachKeys"`
	}
	if err := json.Unmarshal(data, &cfg); err != nil {
		t.Fatal(err)
	}
	wantAuth := base64.StdEncoding.EncodeToString([]byte("ci:s3cret"))
	if cfg.Auths[reg.Host]["auth"] != wantAuth || cfg.Auths["other.example.com"]["auth"] != "eDp5" || cfg.DetachKeys != "ctrl-x" {
		t.Errorf("config.json after login = %s", data)
	}
	if st, err := os.Stat(file); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("config.json mode = %v, %v; want 0600", st.Mode(), err)
	}
}

// TestInstallBearerToken puts a proxy that demands bearer tokens, as
// registry.gitlab.com does, in front of a registry: the token comes from
// the realm of the challenge, for the credentials stored.
//
// Not parallel: it sets DOCKER_CONFIG.
func TestFleetingInstallBearerToken(t *testing.T) {
	ctx := testContext(t)
	reg := fleetingdirtest.Start(ctx, t, fleetingdirtest.Options{})
	publishVersions(ctx, t, reg, "ns/tokened", "1.0.0")

	const token = "tok-123"
	var mu sync.Mutex
	var scopes []string
	upstream := &url.URL{Scheme: "http", Host: reg.Host}
	proxy := httputil.NewSingleHostReverseProxy(upstream)
	var srv *httptest.Server
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/jwt/auth" {
			user, pass, ok := r.BasicAuth()
			if !ok || user != "deploy" || pass != "tokenpass" {
				w.WriteHeader(http.StatusUnauthorized)
				return
			}
			mu.Lock()
			scopes = append(scopes, r.URL.Query().Get("service")+" "+r.URL.Query().Get("scope"))
			mu.Unlock()
			json.NewEncoder(w).Encode(map[string]string{"token": token})
			return
		}
		if r.Header.Get("Authorization") != "Bearer "+token {
			w.Header().Set("WWW-Authenticate", `Bearer realm="`+srv.URL+`/jwt/auth",service="container_registry"`)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		r.Header.Del("Authorization")
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)

	host := strings.TrimPrefix(srv.URL, "http://")
	ref := fleetingdir.Ref{Repository: host + "/ns/tokened", Constraint: "latest"}
	amd64 := fleetingdir.WithPlatform("linux", "amd64", "")
	t.Setenv("DOCKER_CONFIG", t.TempDir())
	if _, _, err := fleetingdir.Install(ctx, t.TempDir(), ref, amd64); !errors.Is(err, fleetingdir.ErrUnauthorized) {
		t.Fatalf("Install without credentials = %v, want ErrUnauthorized", err)
	}
	if _, err := fleetingdir.Login(host, "deploy", "tokenpass"); err != nil {
		t.Fatal(err)
	}
	path, _, err := fleetingdir.Install(ctx, t.TempDir(), ref, amd64)
	if err != nil {
		t.Fatalf("Install with a token = %v", err)
	}
	if got := runPlugin(t, path); got != "1.0.0 amd64" {
		t.Errorf("plugin printed %q", got)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(scopes) == 0 || scopes[0] != "container_registry repository:ns/tokened:pull" {
		t.Errorf("token requests = %q, want service container_registry, scope repository:ns/tokened:pull", scopes)
	}
}

// Not parallel: it puts a credential helper in $PATH and sets
// DOCKER_CONFIG.
func TestFleetingLoginCredentialHelper(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("the helper is a shell script")
	}
	ctx := testContext(t)
	reg := fleetingdirtest.Start(ctx, t, fleetingdirtest.Options{Username: "ci", Password: "viahelper"})
	publishVersions(ctx, t, reg, "ns/private", "1.0.0")

	// docker-credential-fake keeps one credential in a file, as a
	// keychain would, speaking the helper protocol on stdin and stdout.
	bin := t.TempDir()
	store := filepath.Join(t.TempDir(), "stored.json")
	mustWrite(t, filepath.Join(bin, "docker-credential-fake"), `#!/bin/sh
case "$1" in
store) cat > '`+store+`' ;;
get) read server; if [ -f '`+store+`' ]; then cat '`+store+`'; else echo "credentials not found in native keychain"; exit 1; fi ;;
esac
`, 0o755)
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	docker := t.TempDir()
	t.Setenv("DOCKER_CONFIG", docker)
	mustWrite(t, filepath.Join(docker, "config.json"), `{"credsStore":"fake"}`, 0o600)

	if _, err := fleetingdir.Login(reg.Host, "ci", "viahelper"); err != nil {
		t.Fatalf("Login = %v", err)
	}
	stored, err := os.ReadFile(store)
	if err != nil || !strings.Contains(string(stored), `"Secret":"viahelper"`) || !strings.Contains(string(stored), `"ServerURL":"`+reg.Host+`"`) {
		t.Fatalf("the helper stored %s, %v", stored, err)
	}
	ref := fleetingdir.Ref{Repository: reg.Host + "/ns/private", Constraint: "1.0.0"}
	if _, _, err := fleetingdir.Install(ctx, t.TempDir(), ref, fleetingdir.WithPlatform("linux", "amd64", "")); err != nil {
		t.Errorf("Install with the helper's credentials = %v", err)
	}
}
