package main

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/drover-ci/drover/internal/client"
	"github.com/drover-ci/drover/internal/config"
	"github.com/drover-ci/drover/internal/coordinator"
	"github.com/drover-ci/drover/internal/executor/kubernetes"
)

// testCoordinator starts a drover coordinator in this process, served on
// a loopback port.
func testCoordinator(t *testing.T) (*coordinator.Coordinator, string) {
	t.Helper()
	c, err := coordinator.New(t.Context(), nil, coordinator.Config{DataDir: t.TempDir(), LongPollTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	srv := httptest.NewServer(c.Handler())
	t.Cleanup(srv.Close)
	return c, srv.URL
}

// serverRunner is a runner as drover's admin API lists it.
type serverRunner struct {
	ID             int64    `json:"id"`
	Description    string   `json:"description"`
	TagList        []string `json:"tag_list"`
	RunUntagged    bool     `json:"run_untagged"`
	Locked         bool     `json:"locked"`
	Paused         bool     `json:"paused"`
	MaximumTimeout int      `json:"maximum_timeout"`
	Managers       []struct {
		SystemID string `json:"system_id"`
	} `json:"managers"`
}

func serverRunners(t *testing.T, c *coordinator.Coordinator, url string) []serverRunner {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, url+"/api/v1/runners", nil)
	req.Header.Set("Authorization", "Bearer "+c.AdminToken())
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var rs []serverRunner
	if err := json.NewDecoder(resp.Body).Decode(&rs); err != nil {
		t.Fatal(err)
	}
	return rs
}

// clearRegisterEnv unsets the environment variables of register's flags,
// which a CI machine may well have (RUNNER_NAME, CI_SERVER_URL, ...).
func clearRegisterEnv(t *testing.T) {
	t.Helper()
	for _, cmd := range []func() *cobra.Command{newRegisterCmd, newUnregisterCmd, newListCmd} {
		cmd().Flags().VisitAll(func(fl *pflag.Flag) {
			if env := fl.Annotations["env"]; len(env) > 0 {
				t.Setenv(env[0], "")
			}
		})
	}
}

func writeTestFile(t *testing.T, path, src string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestRegisterGitlabFlags: gitlab-runner register's command line works
// against a real coordinator: the server gets the registration settings,
// config.toml gets exactly what the flags give and no defaults.
func TestRegisterGitlabFlags(t *testing.T) {
	clearRegisterEnv(t)
	c, url := testCoordinator(t)
	cfg := filepath.Join(t.TempDir(), "etc", "config.toml") // the directory is made too
	out, code, err := drover(t, "register", "-n", "-c", cfg, "-u", url, "-r", c.RegistrationToken(),
		"--description", "builder", "--tag-list", "linux,docker", "--run-untagged", "--locked=false",
		"--paused", "--maximum-timeout", "600", "--access-level", "ref_protected", "--maintenance-note", "note",
		"--executor", "docker", "--docker-image", "alpine:3", "--docker-privileged",
		"--docker-volumes", "/cache", "--docker-volumes", "/srv:/srv:ro", "--docker-memory", "512m",
		"--docker-pull-policy", "if-not-present", "--docker-shm-size", "1024",
		"--limit", "2", "--concurrent", "4", "--request-concurrency", "3", "--output-limit", "8192",
		"--env", "A=1", "--env", "B=2", "--builds-dir", "/b",
		"--debug-trace-disabled", "--prepare-timeout", "90s", "--get-sources-timeout", "10m",
		"--cache-type", "s3", "--cache-path", "ci", "--cache-shared", "--cache-s3-server-address", "s3.example:9000",
		"--cache-s3-bucket-name", "runner-cache", "--cache-s3-access-key", "AK", "--cache-s3-secret-key", "SK", "--cache-s3-insecure",
		"--cache-s3-upload-role-arn", "arn:aws:iam::1:role/up")
	if code != 0 {
		t.Fatalf("register = exit %d (%v):\n%s", code, err, out)
	}
	rs := serverRunners(t, c, url)
	if len(rs) != 1 {
		t.Fatalf("server has %d runners, want 1", len(rs))
	}
	want := serverRunner{ID: rs[0].ID, Description: "builder", TagList: []string{"linux", "docker"}, RunUntagged: true, Paused: true, MaximumTimeout: 600}
	if diff := cmp.Diff(want, rs[0], cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("runner on the server (-want +got):\n%s", diff)
	}

	text := readFile(t, cfg)
	loaded, _, err := config.Load(cfg)
	if err != nil {
		t.Fatalf("Load(%s) = %v\n%s", cfg, err, text)
	}
	r := loaded.Runners[0]
	if loaded.Concurrent != 4 || r.Name != "builder" || r.URL != url || r.ID != rs[0].ID || !strings.HasPrefix(r.Token, "glrt-") ||
		r.Executor != "docker" || r.Limit != 2 || r.RequestConcurrency != 3 || r.OutputLimit != 8192 ||
		!slices.Equal(r.Environment, []string{"A=1", "B=2"}) || r.BuildsDir != "/b" ||
		!r.DebugTraceDisabled || r.PrepareTimeout() != 90*time.Second || r.GetSourcesTimeout() != 10*time.Minute {
		t.Errorf("config.toml:\n%s", text)
	}
	wantDocker := map[string]any{
		"image": "alpine:3", "privileged": true, "volumes": []any{"/cache", "/srv:/srv:ro"},
		"memory": "512m", "pull_policy": []any{"if-not-present"}, "shm_size": int64(1024),
	}
	if diff := cmp.Diff(wantDocker, r.Docker); diff != "" {
		t.Errorf("[runners.docker] (-want +got):\n%s", diff)
	}
	wantCache := map[string]any{
		"Type": "s3", "Path": "ci", "Shared": true,
		"s3": map[string]any{"ServerAddress": "s3.example:9000", "BucketName": "runner-cache", "AccessKey": "AK", "SecretKey": "SK", "Insecure": true, "UploadRoleARN": "arn:aws:iam::1:role/up"},
	}
	if diff := cmp.Diff(wantCache, r.Cache); diff != "" {
		t.Errorf("[runners.cache] (-want +got):\n%s", diff)
	}
	// Only what was given: drover run fills in the rest.
	for _, key := range []string{"unhealthy_interval", "check_interval", "job_status_final_update_retry_limit", "unhealthy_requests_limit", "shutdown_timeout"} {
		if strings.Contains(text, key) {
			t.Errorf("config.toml has %s, which no flag gave:\n%s", key, text)
		}
	}
}

// TestRegisterEnvironment: gitlab-runner's environment variables stand
// for its flags; the command line wins over them.
func TestRegisterEnvironment(t *testing.T) {
	clearRegisterEnv(t)
	c, url := testCoordinator(t)
	cfg := filepath.Join(t.TempDir(), "config.toml")
	t.Setenv("CONFIG_FILE", cfg)
	t.Setenv("CI_SERVER_URL", url)
	t.Setenv("REGISTRATION_TOKEN", c.RegistrationToken())
	t.Setenv("RUNNER_NAME", "from-env")
	t.Setenv("RUNNER_TAG_LIST", "a,b")
	t.Setenv("REGISTER_LOCKED", "false")
	t.Setenv("RUNNER_EXECUTOR", "docker")
	t.Setenv("DOCKER_IMAGE", "busybox")
	t.Setenv("DOCKER_VOLUMES", "/cache,/data")
	t.Setenv("RUNNER_LIMIT", "1")
	t.Setenv("CACHE_TYPE", "s3")
	t.Setenv("CACHE_S3_BUCKET_NAME", "from-env")
	t.Setenv("CACHE_S3_SERVER_ADDRESS", "s3.example")
	out, code, err := drover(t, "register", "--non-interactive", "--docker-image", "alpine")
	if code != 0 {
		t.Fatalf("register = exit %d (%v):\n%s", code, err, out)
	}
	rs := serverRunners(t, c, url)
	if len(rs) != 1 || rs[0].Description != "from-env" || !slices.Equal(rs[0].TagList, []string{"a", "b"}) || rs[0].Locked {
		t.Errorf("server runners = %+v", rs)
	}
	loaded, _, err := config.Load(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r := loaded.Runners[0]
	if r.Name != "from-env" || r.Executor != "docker" || r.Limit != 1 || r.Docker["image"] != "alpine" ||
		!cmp.Equal(r.Docker["volumes"], []any{"/cache", "/data"}) ||
		!cmp.Equal(r.Cache, map[string]any{"Type": "s3", "s3": map[string]any{"BucketName": "from-env", "ServerAddress": "s3.example"}}) {
		t.Errorf("config.toml:\n%s", readFile(t, cfg))
	}

	t.Setenv("RUNNER_LIMIT", "many")
	if out, code, err := drover(t, "register"); code != 2 || err == nil || !strings.Contains(err.Error(), "$RUNNER_LIMIT (for --limit)") {
		t.Errorf("bad $RUNNER_LIMIT: exit %d, %v\n%s", code, err, out)
	}
}

// TestRegisterRefuses: mistakes are usage errors (exit 2) naming the flag,
// found before the coordinator registers anything, and gitlab-runner flags
// drover lacks are named as such.
func TestRegisterRefuses(t *testing.T) {
	clearRegisterEnv(t)
	c, url := testCoordinator(t)
	glrt, err := client.New(url, c.AdminToken(), nil).CreateRunner(t.Context(), client.RunnerSpec{Description: "r"})
	if err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(t.TempDir(), "config.toml")
	base := []string{"register", "-c", cfg, "-u", url, "-r", c.RegistrationToken(), "--name", "x"}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"glrt with server settings", []string{"register", "-c", cfg, "-u", url, "-t", glrt.Token, "--tag-list", "a", "--locked=false"}, "--tag-list, --locked: these belong to the glrt- token"},
		{"both tokens", append(base, "-t", glrt.Token), "--token and --registration-token are both given"},
		{"no url", []string{"register", "-c", cfg, "-r", "x"}, "--url (or $CI_SERVER_URL) is required"},
		{"no token", []string{"register", "-c", cfg, "-u", url}, "--token or --registration-token"},
		{"bad shell", append(base, "--shell", "zsh"), `--shell: unsupported shell "zsh"`},
		{"bad limit", append(base, "--limit", "-1"), "--limit: must be 0 (unlimited) or more"},
		{"bad url", []string{"register", "-c", cfg, "-u", "ftp://x", "-r", "x"}, `--url: "ftp://x" is not an absolute http:// or https:// URL`},
		{"bad docker memory", append(base, "--executor", "docker", "--docker-image", "a", "--docker-memory", "lots"), "--docker-memory: "},
		{"docker without image", append(base, "--executor", "docker"), "--docker-image (or $DOCKER_IMAGE) is required"},
		{"bad access level", append(base, "--access-level", "all"), `--access-level "all"`},
		{"unknown executor", append(base, "--executor", "docker-windows"), `--executor "docker-windows": not available`},
		{"virtualbox without base", append(base, "--executor", "virtualbox"), "--virtualbox-base-name (or $VIRTUALBOX_BASE_NAME) is required with --executor virtualbox"},
		{"parallels without base", append(base, "--executor", "parallels"), "--parallels-base-name (or $PARALLELS_BASE_NAME) is required with --executor parallels"},
		{"flag=value form", append(base, "--template-config=t.toml"), "flag --template-config is a gitlab-runner flag drover does not support (yet)"},
		{"docker key not applied", append(base, "--docker-isolation", "process"), "flag --docker-isolation is a gitlab-runner flag drover does not support (yet): drover reads this [runners.docker] key from config.toml and does not apply it: Windows containers only"},
		{"docker key in config.toml only", append(base, "--docker-gpus", "all"), "flag --docker-gpus is a gitlab-runner flag drover does not support (yet): not a flag of drover register: write it in [runners.docker] of config.toml after registering"},
		{"docker table", append(base, "--docker-sysctls", "{}"), "write it in [runners.docker] of config.toml"},
		{"scripts", append(base, "--pre-build-script", "x"), "drover does not run the runner's own scripts"},
		{"not a gitlab flag", append(base, "--nope"), "unknown flag: --nope"},
		{"cache type unknown", append(base, "--cache-type", "ftp"), `the --cache-* flags: [runners.cache] Type = "ftp": unknown`},
		{"gcs cache without credentials", append(base, "--cache-type", "gcs", "--cache-gcs-bucket-name", "b"), "needs CredentialsFile, or AccessID and PrivateKey"},
		{"cache s3 without a bucket", append(base, "--cache-type", "s3", "--cache-s3-server-address", "h"), "BucketName"},
		{"s3 key not acted on", append(base, "--cache-s3-dual-stack"), "flag --cache-s3-dual-stack is a gitlab-runner flag drover does not support (yet)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, code, err := drover(t, tc.args...)
			if code != 2 || err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("exit %d, %v; want 2 and %q\n%s", code, err, tc.want, out)
			}
		})
	}
	if rs := serverRunners(t, c, url); len(rs) != 1 { // the glrt- one
		t.Errorf("the server has %d runners after refused registrations, want 1", len(rs))
	}
	if _, err := os.Stat(cfg); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused registration wrote %s: %v", cfg, err)
	}
}

// twoRunners is a config.toml as a person writes it.
const twoRunners = `# build-1's runners
concurrent = 2   # one per CPU

# The first one.
[[runners]]
  name = "one"
  url = "URL"
  token = "TOKEN1"
  executor = "shell"

# The second one, in containers.
[[runners]]
  name = "two"
  url = "URL"
  token = "TOKEN2"
  executor = "docker"
  [runners.docker]
    image = "alpine"   # small
`

// registerTwo registers two runners with a real coordinator and returns
// their tokens, and a config file holding them as twoRunners does.
func registerTwo(t *testing.T, c *coordinator.Coordinator, url string) (cfg, src, token1, token2 string) {
	t.Helper()
	dir := t.TempDir()
	scratch := filepath.Join(dir, "scratch.toml")
	for _, name := range []string{"one", "two"} {
		if out, code, err := drover(t, "register", "-c", scratch, "-u", url, "-r", c.RegistrationToken(), "--name", name); code != 0 {
			t.Fatalf("register = exit %d (%v):\n%s", code, err, out)
		}
	}
	got, _, err := config.Load(scratch)
	if err != nil {
		t.Fatal(err)
	}
	token1, token2 = got.Runners[0].Token, got.Runners[1].Token
	src = strings.NewReplacer("URL", url, "TOKEN1", token1, "TOKEN2", token2).Replace(twoRunners)
	cfg = filepath.Join(dir, "config.toml")
	writeTestFile(t, cfg, src)
	// The runner managers (this system id) exist once verified.
	if out, code, err := drover(t, "verify", "-c", cfg); code != 0 {
		t.Fatalf("verify = exit %d (%v):\n%s", code, err, out)
	}
	return cfg, src, token1, token2
}

// TestUnregisterKeepsTheFile: unregister --url --token removes that
// runner from the coordinator and its block from config.toml; the rest of
// the file stays byte for byte, and no default the user left out appears.
func TestUnregisterKeepsTheFile(t *testing.T) {
	clearRegisterEnv(t)
	c, url := testCoordinator(t)
	cfg, src, token1, _ := registerTwo(t, c, url)

	out, code, err := drover(t, "unregister", "-c", cfg, "--url", url+"/", "--token", token1)
	if code != 0 {
		t.Fatalf("unregister = exit %d (%v):\n%s", code, err, out)
	}
	first := strings.Index(src, "# The first one.")
	second := strings.Index(src, "# The second one")
	want := src[:first] + src[second:]
	if diff := cmp.Diff(want, readFile(t, cfg)); diff != "" {
		t.Errorf("config.toml after unregister (-want +got):\n%s", diff)
	}
	rs := serverRunners(t, c, url)
	if len(rs) != 2 || len(rs[0].Managers) != 0 || len(rs[1].Managers) != 1 {
		t.Errorf("server runners after unregister = %+v, want runner one without its manager", rs)
	}

	// --name, then nothing is left of the runners.
	if out, code, err := drover(t, "unregister", "-c", cfg, "-n", "two"); code != 0 {
		t.Fatalf("unregister -n two = exit %d (%v):\n%s", code, err, out)
	}
	if got := readFile(t, cfg); got != "# build-1's runners\nconcurrent = 2   # one per CPU\n" {
		t.Errorf("config.toml after unregistering both:\n%q", got)
	}
	if out, code, err := drover(t, "unregister", "-c", cfg, "-n", "two"); code != 2 || err == nil || !strings.Contains(err.Error(), "config "+cfg+": no runner named \"two\"") {
		t.Errorf("unregister of a runner no longer there: exit %d, %v\n%s", code, err, out)
	}
}

// TestUnregisterStatuses: a legacy token unregisters the whole runner; a
// token the coordinator does not know goes from config.toml too; one the
// coordinator fails to unregister stays; --url with --token works for a
// runner config.toml does not hold, as with gitlab-runner.
func TestUnregisterStatuses(t *testing.T) {
	clearRegisterEnv(t)
	var mu sync.Mutex
	var calls []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var req struct {
			Token string `json:"token"`
		}
		_ = json.Unmarshal(body, &req)
		mu.Lock()
		calls = append(calls, r.Method+" "+r.URL.Path+" "+req.Token)
		mu.Unlock()
		switch req.Token {
		case "gone":
			w.WriteHeader(http.StatusForbidden)
		case "broken":
			w.WriteHeader(http.StatusInternalServerError)
		default:
			w.WriteHeader(http.StatusNoContent)
		}
	}))
	defer srv.Close()
	src := `concurrent = 1
[[runners]]
  name = "legacy"
  url = "` + srv.URL + `"
  token = "legacy"
  executor = "shell"
[[runners]]
  name = "gone"
  url = "` + srv.URL + `"
  token = "gone"
  executor = "shell"
[[runners]]
  name = "broken"
  url = "` + srv.URL + `"
  token = "broken"
  executor = "shell"
`
	cfg := filepath.Join(t.TempDir(), "config.toml")
	writeTestFile(t, cfg, src)
	out, code, err := drover(t, "unregister", "-c", cfg, "--all-runners")
	if code != 1 || err == nil || !strings.Contains(err.Error(), "the coordinator at "+srv.URL+" answered 500; broken stays in config.toml") {
		t.Errorf("unregister --all-runners = exit %d, %v; want 1 naming the failure\n%s", code, err, out)
	}
	want := "concurrent = 1\n" + src[strings.Index(src, "[[runners]]\n  name = \"broken\""):]
	if diff := cmp.Diff(want, readFile(t, cfg)); diff != "" {
		t.Errorf("config.toml (-want +got):\n%s", diff)
	}
	if out, code, err := drover(t, "unregister", "-c", cfg, "-u", srv.URL, "-t", "elsewhere"); code != 0 {
		t.Errorf("unregister of a runner not in config.toml = exit %d (%v)\n%s", code, err, out)
	}
	wantCalls := []string{"DELETE /api/v4/runners legacy", "DELETE /api/v4/runners gone", "DELETE /api/v4/runners broken", "DELETE /api/v4/runners elsewhere"}
	if diff := cmp.Diff(wantCalls, calls); diff != "" {
		t.Errorf("requests (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(want, readFile(t, cfg)); diff != "" {
		t.Errorf("config.toml changed by unregistering a runner it does not hold (-want +got):\n%s", diff)
	}
}

// TestVerifyDeleteKeepsTheFile: verify --delete removes the runners whose
// token is invalid and leaves the rest of the file as it was.
func TestVerifyDeleteKeepsTheFile(t *testing.T) {
	clearRegisterEnv(t)
	c, url := testCoordinator(t)
	cfg, src, _, token2 := registerTwo(t, c, url)
	src = strings.Replace(src, token2, "glrt-revoked", 1)
	writeTestFile(t, cfg, src)
	out, code, _ := drover(t, "verify", "-c", cfg, "--delete")
	if code != 1 || !strings.Contains(out, "invalid (status 403)") {
		t.Errorf("verify --delete = exit %d\n%s", code, out)
	}
	want := strings.TrimSuffix(src[:strings.Index(src, "# The second one")], "\n")
	if diff := cmp.Diff(want, readFile(t, cfg)); diff != "" {
		t.Errorf("config.toml after verify --delete (-want +got):\n%s", diff)
	}
}

func TestList(t *testing.T) {
	clearRegisterEnv(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.toml")
	src := `[[runners]]
  name = "first"
  url = "https://gitlab.example.com"
  token = "glrt-abcdefghijklmnopqrstuvwxyz"
  executor = "docker"
  [runners.docker]
    image = "alpine"
[[runners]]
  name = "short"
  url = "http://127.0.0.1:8080"
  token = "t0k3n"
  executor = "shell"
`
	writeTestFile(t, cfg, src)
	out, code, err := drover(t, "list", "-c", cfg)
	if code != 0 {
		t.Fatalf("list = exit %d (%v)\n%s", code, err, out)
	}
	for _, want := range []string{
		"Listing configured runners", "ConfigFile=" + cfg,
		"first", "Executor=docker Token=glrt-abcdefghi… URL=https://gitlab.example.com\n",
		"short", "Executor=shell Token=t0… URL=http://127.0.0.1:8080\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("list output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "abcdefghij") || strings.Contains(out, "t0k") {
		t.Errorf("list shows too much of a token:\n%s", out)
	}

	// No runners, or no file yet: nothing to list, no error.
	empty := filepath.Join(dir, "empty.toml")
	writeTestFile(t, empty, "concurrent = 1\n")
	for _, path := range []string{empty, filepath.Join(dir, "none.toml")} {
		if out, code, err := drover(t, "list", "--config", path); code != 0 || strings.Contains(out, "Executor=") {
			t.Errorf("list --config %s = exit %d (%v)\n%s", path, code, err, out)
		}
	}
}

// TestListKeepsUnavailableExecutors: a GitLab Runner config.toml with a
// runner of an executor this build lacks can be listed (with a warning
// naming its line); drover run refuses it.
func TestListKeepsUnavailableExecutors(t *testing.T) {
	clearRegisterEnv(t)
	cfg := filepath.Join(t.TempDir(), "config.toml")
	writeTestFile(t, cfg, `[[runners]]
  name = "vbox"
  url = "https://gitlab.example.com"
  token = "glrt-vboxvboxvbox"
  executor = "docker-windows"
`)
	out, code, err := drover(t, "list", "-c", cfg)
	if code != 0 || !strings.Contains(out, "vbox") || !strings.Contains(out, "Executor=docker-windows") ||
		!strings.Contains(out, cfg+`:5: runners[0].executor: "docker-windows" is not available in this build of drover`) {
		t.Errorf("list = exit %d (%v), want 0 with the runner and a warning at line 5:\n%s", code, err, out)
	}
	out, code, err = drover(t, "run", "-c", cfg)
	if code != 2 || err == nil || !strings.Contains(err.Error(), cfg+`:5: runners[0].executor: "docker-windows" is not available`) {
		t.Errorf("run = exit %d (%v), want 2 naming the executor's line:\n%s", code, err, out)
	}
}

// TestConfigErrorsNameTheFile: whatever goes wrong with the config file,
// every command's error names the one in use.
func TestConfigErrorsNameTheFile(t *testing.T) {
	clearRegisterEnv(t)
	_, url := testCoordinator(t)
	broken := filepath.Join(t.TempDir(), "broken.toml")
	writeTestFile(t, broken, "concurrent = \n")
	// A valid file whose system id cannot be read.
	noID := filepath.Join(t.TempDir(), "config.toml")
	writeTestFile(t, noID, "concurrent = 1\n[[runners]]\n  name = \"a\"\n  url = \""+url+"\"\n  token = \"glrt-x\"\n  executor = \"shell\"\n")
	if err := os.Mkdir(filepath.Join(filepath.Dir(noID), config.SystemIDFile), 0o700); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{broken, noID} {
		for _, args := range [][]string{
			{"run"}, {"verify"}, {"unregister", "--all-runners"}, {"list"},
			{"register", "-u", url, "-r", "x", "--name", "n"},
		} {
			if path == noID && args[0] == "list" {
				continue // list needs no system id
			}
			args := append(args, "--config", path)
			out, code, err := drover(t, args...)
			if code == 0 || err == nil || !strings.Contains(err.Error(), path) {
				t.Errorf("%v = exit %d, %v; want an error naming %s\n%s", args, code, err, path, out)
			}
		}
	}
}

func TestConfigPathFor(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		euid    int
		home    string
		homeErr error
		want    string
	}{
		{0, "/root", nil, "/etc/drover/config.toml"},
		{1000, "/home/ci", nil, "/home/ci/.drover/config.toml"},
		{1000, "", errors.New("$HOME is not defined"), "config.toml"},
	} {
		if got := configPathFor(tc.euid, tc.home, tc.homeErr); got != tc.want {
			t.Errorf("configPathFor(%d, %q, %v) = %q, want %q", tc.euid, tc.home, tc.homeErr, got, tc.want)
		}
	}
}

// TestDefaultConfig: without --config the commands use the default place
// (or $CONFIG_FILE), and say so when ./config.toml, the old default, is
// there instead.
func TestDefaultConfig(t *testing.T) {
	clearRegisterEnv(t)
	def := defaultConfigPath()
	if _, err := os.Stat(def); err == nil {
		t.Skipf("%s exists on this machine", def)
	}
	t.Chdir(t.TempDir())
	out, code, _ := drover(t, "list")
	if code != 0 || !strings.Contains(out, "ConfigFile="+def) {
		t.Errorf("list = exit %d, want 0 listing %s\n%s", code, def, out)
	}
	writeTestFile(t, "config.toml", "concurrent = 1\n")
	for _, args := range [][]string{{"list"}, {"run"}, {"verify"}, {"unregister", "--all-runners"}} {
		out, code, err := drover(t, args...)
		if code != 2 || err == nil || !strings.Contains(err.Error(), "config "+def+": no such file; ./config.toml exists: give --config config.toml") {
			t.Errorf("%v = exit %d, %v\n%s", args, code, err, out)
		}
	}
	t.Setenv("CONFIG_FILE", "config.toml")
	if out, code, err := drover(t, "list"); code != 0 || !strings.Contains(out, "ConfigFile=config.toml") {
		t.Errorf("list with $CONFIG_FILE = exit %d (%v)\n%s", code, err, out)
	}
}

// kubeCmp compares kubernetes.Configs: quantities by value and text,
// regular expressions by their source.
var kubeCmp = cmp.Options{
	cmp.Comparer(func(a, b resource.Quantity) bool { return a.Cmp(b) == 0 && a.String() == b.String() }),
	cmp.Comparer(func(a, b *regexp.Regexp) bool {
		if a == nil || b == nil {
			return a == b
		}
		return a.String() == b.String()
	}),
}

func kubeQty(s string) *resource.Quantity {
	q := resource.MustParse(s)
	return &q
}

// TestRegisterKubernetes: gitlab-runner register's --kubernetes-* flags
// (and their environment variables) write [runners.kubernetes], and the
// file they write is one drover run takes: ParseConfig reads it without
// a warning.
func TestRegisterKubernetes(t *testing.T) {
	clearRegisterEnv(t)
	c, url := testCoordinator(t)
	const helper = "registry.example.com/drover-helper:1"
	zero, grace := int64(0), int64(20)
	tests := []struct {
		name       string
		args       []string
		env        map[string]string
		wantTable  map[string]any
		wantConfig *kubernetes.Config
	}{
		{
			name:      "the helper image alone",
			args:      []string{"--kubernetes-helper-image", helper},
			wantTable: map[string]any{"helper_image": helper},
			wantConfig: &kubernetes.Config{Namespace: "default", HelperImage: helper,
				PollInterval: kubernetes.DefaultPollInterval, PollTimeout: kubernetes.DefaultPollTimeout},
		},
		{
			name: "every flag",
			args: []string{
				"--kubernetes-host", "https://k8s.example.com:6443", "--kubernetes-bearer_token", "tok",
				"--kubernetes-ca-file", "/etc/k8s/ca.crt", "--kubernetes-cert-file", "/etc/k8s/c.crt", "--kubernetes-key-file", "/etc/k8s/c.key",
				"--kubernetes-context", "ci", "--kubernetes-namespace", "ci-jobs", "--kubernetes-namespace_overwrite_allowed", "^ci-.*$",
				"--kubernetes-image", "alpine:3.20", "--kubernetes-helper-image", helper,
				"--kubernetes-pull-policy", "if-not-present", "--kubernetes-pull-policy", "always",
				"--kubernetes-service-account", "runner",
				"--kubernetes-cpu-request", "500m", "--kubernetes-cpu-limit", "2",
				"--kubernetes-memory-request", "256Mi", "--kubernetes-memory-limit", "1Gi",
				"--kubernetes-helper-cpu-request", "100m", "--kubernetes-helper-cpu-limit", "200m",
				"--kubernetes-helper-memory-request", "64Mi", "--kubernetes-helper-memory-limit", "128Mi",
				"--kubernetes-service-cpu-request", "250m", "--kubernetes-service-cpu-limit", "1",
				"--kubernetes-service-memory-request", "128Mi", "--kubernetes-service-memory-limit", "512Mi",
				"--kubernetes-poll-interval", "5", "--kubernetes-poll-timeout", "600", "--kubernetes-cleanup_grace_period_seconds", "0",
				"--kubernetes-node-selector", "kubernetes.io/os=linux", "--kubernetes-node-selector", "disktype=ssd",
				"--kubernetes-node-tolerations", "dedicated=ci:NoSchedule",
				"--kubernetes-pod-labels", "team=ci", "--kubernetes-pod-annotations", "example.com/note=a=b: c",
				"--kubernetes-image-pull-secrets", "regcred", "--kubernetes-image-pull-secrets", "mirror",
				"--kubernetes-use-service-account-image-pull-secrets",
				"--kubernetes-allowed-images", "alpine:*", "--kubernetes-allowed-services", "postgres:*",
			},
			wantTable: map[string]any{
				"host": "https://k8s.example.com:6443", "bearer_token": "tok", "ca_file": "/etc/k8s/ca.crt",
				"cert_file": "/etc/k8s/c.crt", "key_file": "/etc/k8s/c.key", "context": "ci", "namespace": "ci-jobs",
				"namespace_overwrite_allowed": "^ci-.*$", "image": "alpine:3.20", "helper_image": helper,
				"pull_policy": []any{"if-not-present", "always"}, "service_account": "runner",
				"cpu_request": "500m", "cpu_limit": "2", "memory_request": "256Mi", "memory_limit": "1Gi",
				"helper_cpu_request": "100m", "helper_cpu_limit": "200m", "helper_memory_request": "64Mi", "helper_memory_limit": "128Mi",
				"service_cpu_request": "250m", "service_cpu_limit": "1", "service_memory_request": "128Mi", "service_memory_limit": "512Mi",
				"poll_interval": int64(5), "poll_timeout": int64(600), "cleanup_grace_period_seconds": int64(0),
				"node_selector":    map[string]any{"kubernetes.io/os": "linux", "disktype": "ssd"},
				"node_tolerations": map[string]any{"dedicated=ci": "NoSchedule"},
				"pod_labels":       map[string]any{"team": "ci"}, "pod_annotations": map[string]any{"example.com/note": "a=b: c"},
				"image_pull_secrets": []any{"regcred", "mirror"}, "allowed_images": []any{"alpine:*"}, "allowed_services": []any{"postgres:*"},
				"use_service_account_image_pull_secrets": true,
			},
			wantConfig: &kubernetes.Config{
				Host: "https://k8s.example.com:6443", BearerToken: "tok", CAFile: "/etc/k8s/ca.crt",
				CertFile: "/etc/k8s/c.crt", KeyFile: "/etc/k8s/c.key", Context: "ci", Namespace: "ci-jobs",
				NamespaceOverwrite: regexp.MustCompile("^ci-.*$"), Image: "alpine:3.20", HelperImage: helper,
				PullPolicy: []corev1.PullPolicy{corev1.PullIfNotPresent, corev1.PullAlways}, ServiceAccount: "runner",
				Build:        kubernetes.Resources{CPURequest: kubeQty("500m"), CPULimit: kubeQty("2"), MemoryRequest: kubeQty("256Mi"), MemoryLimit: kubeQty("1Gi")},
				Helper:       kubernetes.Resources{CPURequest: kubeQty("100m"), CPULimit: kubeQty("200m"), MemoryRequest: kubeQty("64Mi"), MemoryLimit: kubeQty("128Mi")},
				Service:      kubernetes.Resources{CPURequest: kubeQty("250m"), CPULimit: kubeQty("1"), MemoryRequest: kubeQty("128Mi"), MemoryLimit: kubeQty("512Mi")},
				NodeSelector: map[string]string{"kubernetes.io/os": "linux", "disktype": "ssd"},
				NodeTolerations: []corev1.Toleration{
					{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "ci", Effect: corev1.TaintEffectNoSchedule},
				},
				PodLabels: map[string]string{"team": "ci"}, PodAnnotations: map[string]string{"example.com/note": "a=b: c"},
				ImagePullSecrets: []string{"regcred", "mirror"}, UseServiceAccountImagePullSecrets: true,
				PollInterval: 5 * time.Second, PollTimeout: 600 * time.Second,
				CleanupGrace: &zero, AllowedImages: []string{"alpine:*"}, AllowedServices: []string{"postgres:*"},
			},
		},
		{
			name: "gitlab-runner's KEY:VALUE forms",
			args: []string{"--kubernetes-helper-image", helper,
				"--kubernetes-node-selector", "kubernetes.io/arch:amd64", "--kubernetes-pod-labels", "tier:build",
				"--kubernetes-pod-labels", "empty", "--kubernetes-pod-annotations", "example.com/url:https://x.example/?a=b",
				"--kubernetes-node-tolerations", "spot", "--kubernetes-node-tolerations", "gpu:NoExecute",
				"--kubernetes-node-tolerations", "example.com/pool=ci:"},
			wantTable: map[string]any{
				"helper_image":     helper,
				"node_selector":    map[string]any{"kubernetes.io/arch": "amd64"},
				"pod_labels":       map[string]any{"tier": "build", "empty": ""},
				"pod_annotations":  map[string]any{"example.com/url": "https://x.example/?a=b"},
				"node_tolerations": map[string]any{"spot": "", "gpu": "NoExecute", "example.com/pool=ci": ""},
			},
			wantConfig: &kubernetes.Config{Namespace: "default", HelperImage: helper,
				PollInterval: kubernetes.DefaultPollInterval, PollTimeout: kubernetes.DefaultPollTimeout,
				NodeSelector:   map[string]string{"kubernetes.io/arch": "amd64"},
				PodLabels:      map[string]string{"tier": "build", "empty": ""},
				PodAnnotations: map[string]string{"example.com/url": "https://x.example/?a=b"},
				NodeTolerations: []corev1.Toleration{
					{Key: "example.com/pool", Operator: corev1.TolerationOpEqual, Value: "ci"},
					{Key: "gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
					{Key: "spot", Operator: corev1.TolerationOpExists},
				},
			},
		},
		{
			name: "environment variables",
			args: []string{"--kubernetes-namespace", "from-flag"},
			env: map[string]string{
				"KUBERNETES_HELPER_IMAGE": helper, "KUBERNETES_HOST": "https://10.0.0.1", "KUBERNETES_BEARER_TOKEN": "env-token",
				"KUBERNETES_NAMESPACE": "from-env", "KUBERNETES_IMAGE": "busybox", "KUBERNETES_PULL_POLICY": "never,always",
				"KUBERNETES_CPU_LIMIT": "1", "KUBERNETES_HELPER_MEMORY_REQUEST": "32Mi", "KUBERNETES_SERVICE_CPU_REQUEST": "10m",
				"KUBERNETES_NODE_SELECTOR": "disktype=ssd", "KUBERNETES_NODE_TOLERATIONS": "dedicated=ci:NoSchedule",
				"KUBERNETES_IMAGE_PULL_SECRETS": "a,b", "KUBERNETES_POLL_TIMEOUT": "30",
				"KUBERNETES_CLEANUP_GRACE_PERIOD_SECONDS": "20", "KUBERNETES_SERVICE_ACCOUNT": "sa",
				"KUBERNETES_ALLOWED_IMAGES": "busybox,alpine:*", "KUBERNETES_ALLOWED_SERVICES": "redis",
				"KUBERNETES_NAMESPACE_OVERWRITE_ALLOWED": "^ci-", "KUBECTL_CONTEXT": "ctx",
				"KUBERNETES_CA_FILE": "/ca", "KUBERNETES_CERT_FILE": "/c", "KUBERNETES_KEY_FILE": "/k",
			},
			wantTable: map[string]any{
				"helper_image": helper, "host": "https://10.0.0.1", "bearer_token": "env-token",
				"namespace": "from-flag", // the command line wins
				"image":     "busybox", "pull_policy": []any{"never", "always"}, "cpu_limit": "1",
				"helper_memory_request": "32Mi", "service_cpu_request": "10m",
				"node_selector":      map[string]any{"disktype": "ssd"},
				"node_tolerations":   map[string]any{"dedicated=ci": "NoSchedule"},
				"image_pull_secrets": []any{"a", "b"}, "poll_timeout": int64(30), "cleanup_grace_period_seconds": int64(20),
				"service_account": "sa", "allowed_images": []any{"busybox", "alpine:*"}, "allowed_services": []any{"redis"},
				"namespace_overwrite_allowed": "^ci-", "context": "ctx", "ca_file": "/ca", "cert_file": "/c", "key_file": "/k",
			},
			wantConfig: &kubernetes.Config{
				Host: "https://10.0.0.1", BearerToken: "env-token", CAFile: "/ca", CertFile: "/c", KeyFile: "/k", Context: "ctx",
				Namespace: "from-flag", NamespaceOverwrite: regexp.MustCompile("^ci-"), Image: "busybox", HelperImage: helper,
				PullPolicy: []corev1.PullPolicy{corev1.PullNever, corev1.PullAlways}, ServiceAccount: "sa",
				Build: kubernetes.Resources{CPULimit: kubeQty("1")}, Helper: kubernetes.Resources{MemoryRequest: kubeQty("32Mi")},
				Service: kubernetes.Resources{CPURequest: kubeQty("10m")}, NodeSelector: map[string]string{"disktype": "ssd"},
				NodeTolerations: []corev1.Toleration{
					{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "ci", Effect: corev1.TaintEffectNoSchedule},
				},
				ImagePullSecrets: []string{"a", "b"}, PollInterval: kubernetes.DefaultPollInterval, PollTimeout: 30 * time.Second,
				CleanupGrace: &grace, AllowedImages: []string{"busybox", "alpine:*"}, AllowedServices: []string{"redis"},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			cfg := filepath.Join(t.TempDir(), "config.toml")
			args := append([]string{"register", "-n", "-c", cfg, "-u", url, "-r", c.RegistrationToken(), "--name", "kube", "--executor", "kubernetes"}, tt.args...)
			out, code, err := drover(t, args...)
			if code != 0 {
				t.Fatalf("register = exit %d (%v):\n%s", code, err, out)
			}
			loaded, warnings, err := config.Load(cfg)
			if err != nil || len(warnings) > 0 {
				t.Fatalf("Load(%s) = warnings %v, error %v\n%s", cfg, warnings, err, readFile(t, cfg))
			}
			r := loaded.Runners[0]
			if r.Executor != "kubernetes" || r.Docker != nil {
				t.Errorf("config.toml:\n%s", readFile(t, cfg))
			}
			if diff := cmp.Diff(tt.wantTable, r.Kubernetes); diff != "" {
				t.Errorf("[runners.kubernetes] (-want +got):\n%s\n%s", diff, readFile(t, cfg))
			}
			kc, kw, err := kubernetes.ParseConfig(cfg, &r)
			if err != nil || len(kw) > 0 {
				t.Fatalf("kubernetes.ParseConfig(written config.toml) = warnings %v, error %v", kw, err)
			}
			if diff := cmp.Diff(tt.wantConfig, kc, kubeCmp); diff != "" {
				t.Errorf("kubernetes.ParseConfig(written config.toml) (-want +got):\n%s", diff)
			}
		})
	}
}

// TestRegisterKubernetesRefuses: a --kubernetes-* value drover run would
// refuse is a usage error naming the flag, found before the coordinator
// registers anything; gitlab-runner's --kubernetes-* flags drover does not
// apply are named as such.
func TestRegisterKubernetesRefuses(t *testing.T) {
	clearRegisterEnv(t)
	c, url := testCoordinator(t)
	cfg := filepath.Join(t.TempDir(), "config.toml")
	base := []string{"register", "-c", cfg, "-u", url, "-r", c.RegistrationToken(), "--name", "x", "--executor", "kubernetes"}
	kube := append(slices.Clone(base), "--kubernetes-helper-image", "h")
	notApplied := "is a gitlab-runner flag drover does not support (yet): drover reads this [runners.kubernetes] key from config.toml but does not apply it yet"
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"no helper image", base, nil, "--kubernetes-helper-image (or $KUBERNETES_HELPER_IMAGE) is required with --executor kubernetes"},
		{"empty helper image", append(slices.Clone(base), "--kubernetes-helper-image", ""), nil, "--kubernetes-helper-image: required: the image of drover's helper"},
		{"bad quantity", append(slices.Clone(kube), "--kubernetes-cpu-limit", "lots"), nil, `--kubernetes-cpu-limit: "lots" is not a quantity`},
		{"bad helper quantity", append(slices.Clone(kube), "--kubernetes-helper-memory-request", "1 GB"), nil, `--kubernetes-helper-memory-request: "1 GB" is not a quantity`},
		{"request above limit", append(slices.Clone(kube), "--kubernetes-service-cpu-request", "2", "--kubernetes-service-cpu-limit", "1"), nil,
			"--kubernetes-service-cpu-request: 2 is more than service_cpu_limit (1)"},
		{"bad namespace", append(slices.Clone(kube), "--kubernetes-namespace", "CI_Jobs"), nil, `--kubernetes-namespace: "CI_Jobs" is not a namespace name`},
		{"bad namespace regexp", append(slices.Clone(kube), "--kubernetes-namespace_overwrite_allowed", "ci-("), nil,
			"--kubernetes-namespace_overwrite_allowed: not a regular expression"},
		{"bad pull policy", append(slices.Clone(kube), "--kubernetes-pull-policy", "always", "--kubernetes-pull-policy", "sometimes"), nil,
			`--kubernetes-pull-policy: "sometimes" is not a pull policy`},
		{"bad node selector", append(slices.Clone(kube), "--kubernetes-node-selector", "bad key=v"), nil, `--kubernetes-node-selector: "bad key" is not a label name`},
		{"bad node selector value", append(slices.Clone(kube), "--kubernetes-node-selector", "os=not linux"), nil, `--kubernetes-node-selector: "not linux" is not a label value`},
		{"drover's label prefix", append(slices.Clone(kube), "--kubernetes-pod-labels", "drover.io/job=1"), nil,
			`--kubernetes-pod-labels: label "drover.io/job": the drover.io/ prefix is drover's own`},
		{"bad annotation name", append(slices.Clone(kube), "--kubernetes-pod-annotations", "a b=c"), nil, `--kubernetes-pod-annotations: "a b" is not an annotation name`},
		{"bad taint effect", append(slices.Clone(kube), "--kubernetes-node-tolerations", "a=b:Sometimes"), nil, `--kubernetes-node-tolerations: "Sometimes" is not a taint effect`},
		{"cert without key", append(slices.Clone(kube), "--kubernetes-cert-file", "/c.crt"), nil, "--kubernetes-cert-file: needs key_file"},
		{"key without cert", append(slices.Clone(kube), "--kubernetes-key-file", "/c.key"), nil, "--kubernetes-key-file: needs cert_file"},
		{"negative poll timeout", append(slices.Clone(kube), "--kubernetes-poll-timeout", "-1"), nil, "--kubernetes-poll-timeout: must not be negative (got -1)"},
		{"negative grace", append(slices.Clone(kube), "--kubernetes-cleanup_grace_period_seconds", "-1"), nil,
			"--kubernetes-cleanup_grace_period_seconds: must not be negative (got -1)"},
		{"bad environment variable", kube, map[string]string{"KUBERNETES_POLL_INTERVAL": "soon"}, "$KUBERNETES_POLL_INTERVAL (for --kubernetes-poll-interval)"},
		{"bad value from the environment", base, map[string]string{"KUBERNETES_HELPER_IMAGE": "h", "KUBERNETES_MEMORY_LIMIT": "lots"},
			`--kubernetes-memory-limit: "lots" is not a quantity`},
		{"not applied", append(slices.Clone(kube), "--kubernetes-privileged"), nil, "flag --kubernetes-privileged " + notApplied},
		{"not applied, underscores", append(slices.Clone(kube), "--kubernetes-pod_termination_grace_period_seconds", "5"), nil,
			"flag --kubernetes-pod_termination_grace_period_seconds " + notApplied},
		{"not applied, overwrite limit", append(slices.Clone(kube), "--kubernetes-helper-memory-limit-overwrite-max-allowed=1Gi"), nil,
			"flag --kubernetes-helper-memory-limit-overwrite-max-allowed " + notApplied},
		{"not applied, ephemeral storage", append(slices.Clone(kube), "--kubernetes-service-ephemeral_storage-limit", "1Gi"), nil,
			"flag --kubernetes-service-ephemeral_storage-limit " + notApplied},
		{"other kubernetes flag", append(slices.Clone(kube), "--kubernetes-volumes", "x"), nil,
			"flag --kubernetes-volumes is a gitlab-runner flag drover does not support (yet): not a flag of drover register: write it in [runners.kubernetes] of config.toml after registering"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			out, code, err := drover(t, tc.args...)
			if code != 2 || err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("exit %d, %v; want 2 and %q\n%s", code, err, tc.want, out)
			}
		})
	}
	if rs := serverRunners(t, c, url); len(rs) != 0 {
		t.Errorf("the server has %d runners after refused registrations, want none", len(rs))
	}
	if _, err := os.Stat(cfg); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused registration wrote %s: %v", cfg, err)
	}
}

// --kubernetes-* flags with another executor are ignored with a warning,
// as the --docker-* ones are.
func TestRegisterKubernetesFlagsOtherExecutor(t *testing.T) {
	clearRegisterEnv(t)
	c, url := testCoordinator(t)
	cfg := filepath.Join(t.TempDir(), "config.toml")
	out, code, err := drover(t, "register", "-c", cfg, "-u", url, "-r", c.RegistrationToken(), "--name", "sh", "--executor", "shell",
		"--kubernetes-namespace", "ci", "--kubernetes-cpu-limit", "lots")
	if code != 0 || !strings.Contains(out, `warning: --kubernetes-namespace, --kubernetes-cpu-limit ignored: executor "shell" has no [runners.kubernetes]`) {
		t.Fatalf("register = exit %d (%v), want 0 with a warning:\n%s", code, err, out)
	}
	if text := readFile(t, cfg); strings.Contains(text, "kubernetes") {
		t.Errorf("config.toml has a kubernetes table:\n%s", text)
	}
}

// Every gitlab-runner flag register names as unsupported is one it does
// not define (else the entry is dead), and each --kubernetes-* one said
// to be "read but not applied" is a key kubernetes.ParseConfig warns
// about as not honoured.
func TestRegisterGitlabOnlyFlags(t *testing.T) {
	t.Parallel()
	fs := newRegisterCmd().Flags()
	for _, f := range gitlabOnlyFlags("register") {
		if !strings.HasSuffix(f.name, "-") && fs.Lookup(f.name) != nil {
			t.Errorf("--%s is both a flag of register and a gitlab-runner flag it lacks", f.name)
		}
	}
	var b strings.Builder
	b.WriteString("[[runners]]\n  url = \"https://g.example\"\n  token = \"t\"\n  executor = \"kubernetes\"\n  [runners.kubernetes]\n    helper_image = \"h\"\n")
	for _, n := range kubernetesNotApplied() {
		b.WriteString("    " + strings.ReplaceAll(n, "-", "_") + " = 1\n")
	}
	path := filepath.Join(t.TempDir(), "config.toml")
	writeTestFile(t, path, b.String())
	loaded, _, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	_, warnings, _ := kubernetes.ParseConfig(path, &loaded.Runners[0])
	if len(warnings) != len(kubernetesNotApplied()) {
		t.Errorf("%d warnings for %d not-applied flags: %v", len(warnings), len(kubernetesNotApplied()), warnings)
	}
	for _, w := range warnings {
		if !strings.Contains(w.Msg, "not honoured") {
			t.Errorf("%s: want a not-honoured warning", w)
		}
	}
}
