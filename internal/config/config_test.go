package config

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// writeConfig writes src to config.toml in a fresh directory.
func writeConfig(t *testing.T, src string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "config.toml")
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

var cmpConfig = []cmp.Option{
	cmpopts.IgnoreUnexported(Config{}, RunnerConfig{}),
	cmpopts.EquateEmpty(),
	cmpopts.EquateNaNs(),
}

// defaultRunner returns a runner with the defaults Parse fills in.
func defaultRunner(name, url, token, executor string) RunnerConfig {
	return RunnerConfig{
		Name:                           name,
		URL:                            url,
		Token:                          token,
		Executor:                       executor,
		RequestConcurrency:             1,
		OutputLimit:                    4096,
		JobStatusFinalUpdateRetryLimit: 10,
		UnhealthyRequestsLimit:         3,
		UnhealthyInterval:              time.Hour,
	}
}

func defaultConfig(runners ...RunnerConfig) *Config {
	return &Config{
		Concurrent:      1,
		CheckInterval:   3,
		LogLevel:        "info",
		LogFormat:       "runner",
		ShutdownTimeout: 30,
		Runners:         runners,
	}
}

const minimalRunner = `
[[runners]]
  url = "https://gitlab.example.com"
  token = "glrt-abc"
  executor = "shell"
`

func TestLoadValid(t *testing.T) {
	t.Parallel()
	minimal := defaultRunner("gitlab.example.com", "https://gitlab.example.com", "glrt-abc", "shell")
	tests := []struct {
		name     string
		src      string
		want     *Config
		warnings []string // without the directory
	}{
		{
			name: "minimal gets defaults",
			src:  minimalRunner,
			want: defaultConfig(minimal),
		},
		{
			name: "globals",
			src: `concurrent = 8
check_interval = 10
log_level = "DEBUG"
log_format = "json"
listen_address = "localhost:9300"
shutdown_timeout = 60
user = "gitlab-runner"
[labels]
  team = "infra"
` + minimalRunner,
			want: func() *Config {
				c := defaultConfig(minimal)
				c.Concurrent = 8
				c.CheckInterval = 10
				c.LogLevel = "debug"
				c.LogFormat = "json"
				c.ListenAddress = "localhost:9300"
				c.ShutdownTimeout = 60
				c.User = "gitlab-runner"
				c.Labels = map[string]string{"team": "infra"}
				return c
			}(),
		},
		{
			name: "non-positive intervals fall back to defaults",
			src:  "check_interval = -1\nshutdown_timeout = 0\n" + minimalRunner,
			want: defaultConfig(minimal),
		},
		{
			name: "listen address without port gets 9252",
			src:  `listen_address = "0.0.0.0"` + "\n" + minimalRunner,
			want: func() *Config {
				c := defaultConfig(minimal)
				c.ListenAddress = "0.0.0.0:9252"
				return c
			}(),
		},
		{
			name: "IPv6 listen address without port",
			src:  `listen_address = "[::1]"` + "\n" + minimalRunner,
			want: func() *Config {
				c := defaultConfig(minimal)
				c.ListenAddress = "[::1]:9252"
				return c
			}(),
		},
		{
			name: "every runner key",
			src: `
[[runners]]
  name = "build-1"
  url = "http://gitlab.local:8080/"
  id = 42
  token = "glrt-t1_xyz"
  token_obtained_at = 2024-05-14T12:00:00Z
  token_expires_at = 0001-01-01T00:00:00Z
  tls-ca-file = "/etc/ca.pem"
  tls-cert-file = "/etc/cert.pem"
  tls-key-file = "/etc/key.pem"
  executor = "docker"
  shell = "bash"
  limit = 4
  request_concurrency = 3
  strict_check_interval = true
  output_limit = 16384
  builds_dir = "/builds"
  cache_dir = "/cache"
  clone_url = "https://mirror.local"
  environment = ["A=1", "B=two"]
  pre_get_sources_script = "echo pre-get"
  post_get_sources_script = "echo post-get"
  pre_build_script = "echo pre"
  post_build_script = "echo post"
  debug_trace_disabled = true
  job_status_final_update_retry_limit = 5
  unhealthy_requests_limit = 7
  unhealthy_interval = "90s"
  [runners.feature_flags]
    FF_USE_ADAPTIVE_REQUEST_CONCURRENCY = false
  [runners.labels]
    os = "linux"
  [runners.docker]
    image = "alpine:3"
    privileged = false
`,
			want: defaultConfig(RunnerConfig{
				Name:                           "build-1",
				URL:                            "http://gitlab.local:8080/",
				ID:                             42,
				Token:                          "glrt-t1_xyz",
				TokenObtainedAt:                time.Date(2024, 5, 14, 12, 0, 0, 0, time.UTC),
				TokenExpiresAt:                 time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC),
				TLSCAFile:                      "/etc/ca.pem",
				TLSCertFile:                    "/etc/cert.pem",
				TLSKeyFile:                     "/etc/key.pem",
				Executor:                       "docker",
				Shell:                          "bash",
				Limit:                          4,
				RequestConcurrency:             3,
				StrictCheckInterval:            true,
				OutputLimit:                    16384,
				BuildsDir:                      "/builds",
				CacheDir:                       "/cache",
				CloneURL:                       "https://mirror.local",
				Environment:                    []string{"A=1", "B=two"},
				PreGetSourcesScript:            "echo pre-get",
				PostGetSourcesScript:           "echo post-get",
				PreBuildScript:                 "echo pre",
				PostBuildScript:                "echo post",
				DebugTraceDisabled:             true,
				JobStatusFinalUpdateRetryLimit: 5,
				UnhealthyRequestsLimit:         7,
				UnhealthyInterval:              90 * time.Second,
				FeatureFlags:                   map[string]bool{"FF_USE_ADAPTIVE_REQUEST_CONCURRENCY": false},
				Labels:                         map[string]string{"os": "linux"},
				Docker:                         map[string]any{"image": "alpine:3", "privileged": false},
			}),
		},
		{
			name: "out-of-range runner values are defaulted",
			src: `
[[runners]]
  url = "https://gitlab.example.com"
  token = "glrt-abc"
  executor = "shell"
  request_concurrency = 0
  output_limit = -5
  job_status_final_update_retry_limit = 0
  unhealthy_requests_limit = -1
  unhealthy_interval = "0s"
`,
			want: func() *Config {
				r := minimal
				r.UnhealthyInterval = 0 // explicit 0 is kept
				return defaultConfig(r)
			}(),
		},
		{
			name: "runners as inline array, name derived from url with path",
			src:  `runners = [{url = "https://example.com/gitlab/", token = "t", executor = "docker"}]`,
			want: defaultConfig(defaultRunner("example.com/gitlab", "https://example.com/gitlab/", "t", "docker")),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			path := writeConfig(t, tt.src)
			got, warnings, err := Load(path)
			if err != nil {
				t.Fatalf("Load() error = %v", err)
			}
			checkMessages(t, "Load() warnings", warningStrings(warnings, filepath.Dir(path)), tt.warnings)
			if diff := cmp.Diff(tt.want, got, cmpConfig...); diff != "" {
				t.Errorf("Load() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDurationsAndLimits(t *testing.T) {
	t.Parallel()
	c := &Config{}
	if got := c.CheckIntervalDuration(); got != 3*time.Second {
		t.Errorf("zero CheckIntervalDuration() = %v, want 3s", got)
	}
	if got := c.ShutdownTimeoutDuration(); got != 30*time.Second {
		t.Errorf("zero ShutdownTimeoutDuration() = %v, want 30s", got)
	}
	c = &Config{CheckInterval: 7, ShutdownTimeout: 2}
	if got := c.CheckIntervalDuration(); got != 7*time.Second {
		t.Errorf("CheckIntervalDuration() = %v, want 7s", got)
	}
	if got := c.ShutdownTimeoutDuration(); got != 2*time.Second {
		t.Errorf("ShutdownTimeoutDuration() = %v, want 2s", got)
	}
	if got := (&RunnerConfig{}).OutputLimitBytes(); got != 4096*1024 {
		t.Errorf("zero OutputLimitBytes() = %d, want %d", got, 4096*1024)
	}
	if got := (&RunnerConfig{OutputLimit: 1}).OutputLimitBytes(); got != 1024 {
		t.Errorf("OutputLimitBytes() = %d, want 1024", got)
	}
}

// A GitLab Runner config using every section drover keeps but does not
// interpret yet must load without a single warning.
// TestKnownSections checks that GitLab Runner's sections are kept
// verbatim and draw no "unknown key" warning; those drover does not act
// on say so instead.
func TestKnownSections(t *testing.T) {
	t.Parallel()
	src := `concurrent = 2
sentry_dsn = "https://key@sentry.example.com/1"
connection_max_age = "15m"

[session_server]
  listen_address = "[::]:8093"
  session_timeout = 1800

[machine.shutdown_drain]
  enabled = true

[experimental.usage_logger]
  enabled = false

[[runners]]
  url = "https://gitlab.example.com"
  token = "glrt-abc"
  executor = "docker-autoscaler"
  prepare_timeout = "1m"
  safe_directory_checkout = true
  step_runner_image = "registry.example.com/step-runner"
  [runners.custom_build_dir]
    enabled = true
  [runners.artifact]
    upload_timeout = "1h"
  [runners.experimental.boot_verify]
    enabled = true
  [runners.docker]
    image = "alpine"
    [[runners.docker.services]]
      name = "postgres"
  [runners.machine]
    IdleCount = 1
  [runners.autoscaler]
    plugin = "aws"
    [runners.autoscaler.plugin_config]
      name = "asg"
    [[runners.autoscaler.policy]]
      idle_count = 2
  [runners.instance]
    use_common_build_dir = true
  [runners.custom]
    run_exec = "/bin/run"
  [runners.cache]
    Type = "s3"
    [runners.cache.s3]
      BucketName = "b"
  [runners.kubernetes]
    namespace = "ci"
  [runners.ssh]
    host = "h"
  [runners.store]
    type = "file"
  [runners.parallels]
    base_name = "x"
  [runners.referees]
  [runners.monitoring]
`
	c, warnings, err := Parse("config.toml", []byte(src))
	if err != nil {
		t.Fatalf("Parse() error = %v", err)
	}
	checkMessages(t, "Parse() warnings", warningStrings(warnings, ""), []string{
		"config.toml:2: sentry_dsn: not acted on: ...",
		"config.toml:5: session_server: not acted on: ...",
		`config.toml:42: runners[0].custom: ignored: executor "docker-autoscaler" does not use [runners.custom]; ...`,
		`config.toml:48: runners[0].kubernetes: ignored: executor "docker-autoscaler" does not use [runners.kubernetes]; ...`,
		`config.toml:50: runners[0].ssh: ignored: executor "docker-autoscaler" does not use [runners.ssh]; ...`,
		`config.toml:54: runners[0].parallels: ignored: executor "docker-autoscaler" does not use [runners.parallels]; ...`,
	})
	r := c.Runners[0]
	for name, m := range map[string]map[string]any{
		"docker": r.Docker, "machine": r.Machine, "autoscaler": r.Autoscaler,
		"instance": r.Instance, "custom": r.Custom, "cache": r.Cache,
		"kubernetes": r.Kubernetes, "ssh": r.SSH, "store": r.Store,
		"custom_build_dir": r.CustomBuildDir, "artifact": r.Artifact,
	} {
		if len(m) == 0 {
			t.Errorf("runners[0].%s not kept", name)
		}
	}
	if got := r.Autoscaler["policy"].([]map[string]any)[0]["idle_count"]; got != int64(2) {
		t.Errorf("autoscaler.policy[0].idle_count = %#v, want int64(2)", got)
	}
	if _, ok := c.Extra["session_server"]; !ok {
		t.Errorf("Extra = %v, want session_server kept", c.Extra)
	}
}

func TestParseErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		src  string
		want string // exact error text, or prefix when ending in "..."
	}{
		{
			name: "syntax error",
			src:  "concurrent = 1\nlog_level = \"info\n",
			want: "config.toml:2: log_level: ...",
		},
		{
			name: "syntax error in header",
			src:  "concurrent = 1\n\n[[runners]\n",
			want: "config.toml:3: ...",
		},
		{
			name: "wrong type",
			src:  "concurrent = \"x\"\n" + minimalRunner,
			want: "config.toml:1: concurrent: must be an integer, not a string",
		},
		{
			name: "concurrent zero",
			src:  "# comment\nconcurrent = 0\n" + minimalRunner,
			want: "config.toml:2: concurrent: must be at least 1",
		},
		{
			name: "concurrent negative",
			src:  "concurrent = -3\n" + minimalRunner,
			want: "config.toml:1: concurrent: must be at least 1",
		},
		{
			name: "missing url points at the runner's header",
			src:  "concurrent = 1\n\n[[runners]]\n  token = \"t\"\n  executor = \"shell\"\n",
			want: "config.toml:3: runners[0].url: missing: every runner needs the GitLab URL",
		},
		{
			name: "missing token",
			src:  "[[runners]]\n  url = \"https://g.example\"\n  executor = \"shell\"\n",
			want: "config.toml:1: runners[0].token: missing: ...",
		},
		{
			name: "missing executor",
			src:  "[[runners]]\n  url = \"https://g.example\"\n  token = \"t\"\n",
			want: "config.toml:1: runners[0].executor: missing: ...",
		},
		{
			name: "unknown executor",
			src:  minimalRunner + "[[runners]]\n  url = \"https://g.example\"\n  token = \"t\"\n  executor = \"docker-ssh\"\n",
			want: `config.toml:9: runners[1].executor: unknown executor "docker-ssh": want one of custom, docker, docker+machine, docker-autoscaler, instance, kubernetes, parallels, qemu, shell, ssh, virtualbox`,
		},
		{
			name: "executor this build does not have",
			src:  minimalRunner + "[[runners]]\n  url = \"https://g.example\"\n  token = \"t\"\n  executor = \"docker-windows\"\n",
			want: `config.toml:9: runners[1].executor: "docker-windows" is not available in this build of drover (available: custom, docker, docker+machine, docker-autoscaler, instance, kubernetes, parallels, qemu, shell, ssh, virtualbox)`,
		},
		{
			name: "bad shell",
			src:  "[[runners]]\n  url = \"https://g.example\"\n  token = \"t\"\n  executor = \"shell\"\n  shell = \"cmd\"\n",
			want: `config.toml:5: runners[0].shell: unsupported shell "cmd": want bash, sh, pwsh or powershell`,
		},
		{
			name: "bad URL in runners[1]",
			src:  minimalRunner + "\n[[runners]]\n  name = \"two\"\n  url = \"gitlab.example.com\"\n  token = \"t\"\n  executor = \"shell\"\n",
			want: `config.toml:9: runners[1].url: "gitlab.example.com" is not an absolute http:// or https:// URL`,
		},
		{
			name: "non-http scheme",
			src:  "[[runners]]\n  url = \"ftp://g.example\"\n  token = \"t\"\n  executor = \"shell\"\n",
			want: `config.toml:2: runners[0].url: "ftp://g.example" is not an absolute http:// or https:// URL`,
		},
		{
			name: "negative limit",
			src:  minimalRunner + "  limit = -1\n",
			want: "config.toml:6: runners[0].limit: must be 0 (unlimited) or more",
		},
		{
			name: "type error in second runner after a sub-table",
			src:  minimalRunner + "  [runners.docker]\n    limit = \"x\"\n[[runners]]\n  url = \"https://g.example\"\n  token = \"t\"\n  executor = \"shell\"\n  limit = 1.5\n",
			want: "config.toml:12: runners[1].limit: must be an integer, not a float",
		},
		{
			name: "wrong type of a sub-table",
			src:  minimalRunner + "  docker = \"alpine\"\n",
			want: "config.toml:6: runners[0].docker: must be a table, not a string",
		},
		{
			name: "feature flag not a boolean",
			src:  minimalRunner + "  [runners.feature_flags]\n    FF_X = \"yes\"\n",
			want: "config.toml:7: runners[0].feature_flags.FF_X: must be a boolean, not a string",
		},
		{
			name: "environment entry not a string",
			src:  minimalRunner + "  environment = [\n    \"A=1\",\n    2,\n  ]\n",
			want: "config.toml:8: runners[0].environment[1]: must be a string, not an integer",
		},
		{
			name: "bad duration",
			src:  minimalRunner + "  unhealthy_interval = \"soon\"\n",
			want: `config.toml:6: runners[0].unhealthy_interval: "soon" is not a duration ...`,
		},
		{
			name: "bad log level",
			src:  "log_level = \"loud\"\n" + minimalRunner,
			want: `config.toml:1: log_level: unknown log level "loud" ...`,
		},
		{
			name: "bad listen address",
			src:  "listen_address = \"host:port:9\"\n" + minimalRunner,
			want: `config.toml:1: listen_address: "host:port:9" is not a host:port address`,
		},
		{
			name: "first error in file order comes first",
			src:  "[[runners]]\n  url = \"x\"\n  token = \"t\"\n  executor = \"shell\"\n  shell = \"fish\"\n",
			want: `config.toml:2: runners[0].url: ...`,
		},
		{
			name: "runners not tables",
			src:  "runners = [1]\n",
			want: "config.toml:1: runners[0]: must be a table, not an integer",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			path := writeConfig(t, tt.src)
			_, _, err := Load(path)
			if err == nil {
				t.Fatalf("Load() error = nil, want %q", tt.want)
			}
			var cerr *Error
			if !errors.As(err, &cerr) {
				t.Fatalf("Load() error = %T %v, want *Error", err, err)
			}
			got := strings.TrimPrefix(err.Error(), filepath.Dir(path)+string(filepath.Separator))
			if prefix, ok := strings.CutSuffix(tt.want, "..."); ok {
				if !strings.HasPrefix(got, prefix) {
					t.Errorf("Load() error = %q, want prefix %q", got, prefix)
				}
			} else if got != tt.want {
				t.Errorf("Load() error = %q, want %q", got, tt.want)
			}
			if cerr.File != path || cerr.Line < 1 {
				t.Errorf("Load() error File, Line = %q, %d; want %q, >= 1", cerr.File, cerr.Line, path)
			}
		})
	}
}

func TestLoadMissingFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "config.toml")
	_, _, err := Load(path)
	var cerr *Error
	if !errors.As(err, &cerr) || !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Load(missing) error = %v, want *Error wrapping fs.ErrNotExist", err)
	}
	if !strings.HasPrefix(err.Error(), path+": ") {
		t.Errorf("Load(missing) error = %q, want prefix %q", err, path+": ")
	}
}

func TestWarnings(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		src  string
		want []string
	}{
		{
			name: "unknown keys with their lines",
			src: `concurrent = 1
concurent = 2

[[runners]]
  url = "https://gitlab.example.com"
  token = "t"
  executor = "shell"
  limt = 3

[[runners]]
  url = "https://gitlab.example.com"
  token = "t"
  executor = "docker"
  [runners.dokcer]
    image = "alpine"
  [runners.docker]
    imag = "kept verbatim, not checked"

[sesion_server]
  listen_address = ":8093"
`,
			want: []string{
				"config.toml:2: concurent: unknown key, ignored",
				"config.toml:8: runners[0].limt: unknown key, ignored",
				"config.toml:14: runners[1].dokcer: unknown key, ignored",
				"config.toml:19: sesion_server: unknown key, ignored",
			},
		},
		{
			name: "no runners",
			src:  "concurrent = 1\n",
			want: []string{"config.toml: runners: no [[runners]] configured: there is nothing to run"},
		},
		{
			name: "empty runners array",
			src:  "concurrent = 1\nrunners = []\n",
			want: []string{"config.toml:2: runners: empty: there is nothing to run"},
		},
		{
			name: "environment without =",
			src:  minimalRunner + "  environment = [\"A=1\", \"B\"]\n",
			want: []string{`config.toml:6: runners[0].environment[1]: "B" is not of the form NAME=value`},
		},
		{
			name: "integer duration",
			src:  minimalRunner + "  unhealthy_interval = 60\n",
			want: []string{`config.toml:6: runners[0].unhealthy_interval: integer durations are nanoseconds; write a duration string such as "60m"`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, warnings, err := Parse("config.toml", []byte(tt.src))
			if err != nil {
				t.Fatalf("Parse() error = %v", err)
			}
			var got []string
			for _, w := range warnings {
				got = append(got, w.String())
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Parse() warnings mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestEnvExpansion(t *testing.T) {
	t.Setenv("DROVER_TEST_HOST", "gitlab.example.com")
	t.Setenv("DROVER_TEST_TOKEN", "glrt-secret")
	src := `
[[runners]]
  url = "https://${DROVER_TEST_HOST}/"
  token = "$DROVER_TEST_TOKEN"
  executor = "shell"
  builds_dir = "$HOME/builds"
  pre_build_script = "echo $CI_JOB_ID"
`
	path := writeConfig(t, src)
	c, _, err := Load(path)
	if err != nil {
		t.Fatalf("Load() error = %v", err)
	}
	r := c.Runners[0]
	if r.URL != "https://gitlab.example.com/" || r.Token != "glrt-secret" {
		t.Errorf("URL, Token = %q, %q; want expanded", r.URL, r.Token)
	}
	if r.BuildsDir != "$HOME/builds" || r.PreBuildScript != "echo $CI_JOB_ID" {
		t.Errorf("BuildsDir, PreBuildScript = %q, %q; want unexpanded", r.BuildsDir, r.PreBuildScript)
	}

	// Saving keeps the references, not the secret...
	if err := c.Save(path); err != nil {
		t.Fatalf("Save() error = %v", err)
	}
	data, _ := os.ReadFile(path)
	if strings.Contains(string(data), "glrt-secret") || !strings.Contains(string(data), `"$DROVER_TEST_TOKEN"`) {
		t.Errorf("saved file:\n%s\nwant the $DROVER_TEST_TOKEN reference, not its value", data)
	}
	// ...until the token is replaced (token rotation).
	c.Runners[0].Token = "glrt-rotated"
	if err := c.Save(path); err != nil {
		t.Fatalf("Save() error = %v", err)
	}
	c2, _, err := Load(path)
	if err != nil {
		t.Fatalf("Load() after Save error = %v", err)
	}
	if got := c2.Runners[0].Token; got != "glrt-rotated" {
		t.Errorf("Token after rotation and reload = %q, want glrt-rotated", got)
	}
	if got := c2.Runners[0].URL; got != "https://gitlab.example.com/" {
		t.Errorf("URL after reload = %q", got)
	}

	t.Setenv("DROVER_TEST_TOKEN", "")
	if _, _, err := Load(writeConfig(t, src)); err == nil || !strings.Contains(err.Error(), ":4: runners[0].token: expands to an empty string") {
		t.Errorf("Load() with empty variable error = %v, want runners[0].token on line 4", err)
	}
}

func TestSaveLoadRoundTrip(t *testing.T) {
	t.Parallel()
	src := `concurrent = 3
check_interval = 5
listen_address = ":9252"
sentry_dsn = "https://sentry"
unknown_kept = [1, 2]

[labels]
  region = "eu"

[session_server]
  session_timeout = 900

[[runners]]
  name = "one"
  url = "https://gitlab.example.com"
  id = 7
  token = "glrt-abc"
  token_obtained_at = 2024-05-14T12:00:00Z
  token_expires_at = 2025-05-14T12:00:00+02:00
  executor = "docker"
  limit = 2
  environment = ["A=1"]
  unhealthy_interval = "0s"
  prepare_timeout = "2m"
  [runners.feature_flags]
    FF_X = true
  [runners.docker]
    image = "alpine"
    volumes = ["/cache"]
    shm_size = 0
    cpus = "1.5"
    [[runners.docker.services]]
      name = "postgres"
      alias = "db"
  [runners.autoscaler]
    max_instances = 10
    [runners.autoscaler.plugin_config]
      when = 1979-05-27T07:32:00
      ratio = 0.5
    [[runners.autoscaler.policy]]
      idle_count = 5
      idle_time = "20m0s"

[[runners]]
  url = "http://localhost:8080/"
  token = "t2"
  executor = "shell"
  shell = "sh"
  strict_check_interval = true
  [runners.custom]
    run_exec = "/bin/run"
`
	path := writeConfig(t, src)
	first, _, err := Load(path)
	if err != nil {
		t.Fatalf("Load() error = %v", err)
	}
	if err := first.Save(path); err != nil {
		t.Fatalf("Save() error = %v", err)
	}
	second, _, err := Load(path)
	if err != nil {
		data, _ := os.ReadFile(path)
		t.Fatalf("Load() of saved file error = %v\n%s", err, data)
	}
	if diff := cmp.Diff(first, second, cmpConfig...); diff != "" {
		t.Errorf("round trip mismatch (-before +after):\n%s", diff)
	}

	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if mode := fi.Mode().Perm(); mode != 0o600 {
		t.Errorf("saved file mode = %v, want 0600", mode)
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 1 {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Errorf("directory holds %v, want only config.toml (no temp files left)", names)
	}
}

func TestSaveBuiltConfig(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "config.toml")
	c := defaultConfig(defaultRunner("r", "https://gitlab.example.com/", "glrt-x", "shell"))
	c.Runners[0].TokenObtainedAt = time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	if err := c.Save(path); err != nil {
		t.Fatalf("Save() error = %v", err)
	}
	got, warnings, err := Load(path)
	if err != nil || len(warnings) > 0 {
		t.Fatalf("Load() = warnings %v, error %v", warnings, err)
	}
	if diff := cmp.Diff(c, got, cmpConfig...); diff != "" {
		t.Errorf("Load(Save(c)) mismatch (-want +got):\n%s", diff)
	}
}

func TestSaveIntoMissingDirectory(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "nope", "config.toml")
	if err := defaultConfig().Save(path); err == nil {
		t.Errorf("Save(%s) error = nil, want an error", path)
	}
}

func TestKeyPosition(t *testing.T) {
	src := `concurrent = 2
[[runners]]
  name = "a"
  url = "https://example.com"
  token = "glrt-x"
  executor = "shell"
[[runners]]
  name = "b"
  url = "https://example.com"
  token = "glrt-y"
  executor = "shell"
  [runners.store]
    name = "file"
    [runners.store.file]
      path = "/tmp/x"
`
	c, _, err := Parse("config.toml", []byte(src))
	if err != nil {
		t.Fatalf("Parse = %v", err)
	}
	tests := []struct {
		keys     []string
		wantKey  string
		wantLine int
	}{
		{[]string{"store"}, "runners[1].store", 12},
		{[]string{"store", "name"}, "runners[1].store.name", 13},
		{[]string{"store", "file", "path"}, "runners[1].store.file.path", 15},
		{[]string{"store", "redis", "url"}, "runners[1].store.redis.url", 12}, // absent: nearest table
		{[]string{"name"}, "runners[1].name", 8},
	}
	for _, tt := range tests {
		key, line := c.Runners[1].KeyPosition(tt.keys...)
		if key != tt.wantKey || line != tt.wantLine {
			t.Errorf("KeyPosition(%q) = %q, %d, want %q, %d", tt.keys, key, line, tt.wantKey, tt.wantLine)
		}
	}
	var r RunnerConfig
	if key, line := r.KeyPosition("store", "name"); key != "store.name" || line != 0 {
		t.Errorf("zero RunnerConfig KeyPosition = %q, %d, want \"store.name\", 0", key, line)
	}
}

func TestRunnerKeyLine(t *testing.T) {
	src := `concurrent = 1
[[runners]]
  url = "https://a.example.com"
  token = "a"
  executor = "shell"
[[runners]]
  url = "https://b.example.com"
  token = "b"
  executor = "docker+machine"
  [runners.machine]
    IdleCount = 2
    "odd.key" = 1
    [[runners.machine.autoscaling]]
      Periods = ["* * * * * * *"]
    [[runners.machine.autoscaling]]
      Periods = [
        "* * 9-17 * * mon-fri *",
        "* * * * * sat *",
      ]
`
	c, _, err := Parse("c.toml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	r := &c.Runners[1]
	for _, tc := range []struct {
		key, path string
		line      int
	}{
		{"machine.IdleCount", "runners[1].machine.IdleCount", 11},
		{`machine."odd.key"`, `runners[1].machine."odd.key"`, 12},
		{"machine.autoscaling[1].Periods[1]", "runners[1].machine.autoscaling[1].Periods[1]", 18},
		{"machine.autoscaling[0].IdleCount", "runners[1].machine.autoscaling[0].IdleCount", 13}, // absent: its table
		{"machine", "runners[1].machine", 10},
		{"executor", "runners[1].executor", 9},
	} {
		path, line := r.KeyLine(tc.key)
		if path != tc.path || line != tc.line {
			t.Errorf("KeyLine(%q) = %q, %d; want %q, %d", tc.key, path, line, tc.path, tc.line)
		}
	}
	if path, line := (&RunnerConfig{}).KeyLine("machine.IdleCount"); path != "machine.IdleCount" || line != 0 {
		t.Errorf("RunnerConfig not from Parse: %q, %d", path, line)
	}
}
