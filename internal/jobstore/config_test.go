package jobstore_test

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/drover-ci/drover/internal/config"
	"github.com/drover-ci/drover/internal/jobstore"
)

// runnerTOML is a [[runners]] entry; the store table follows it, so its
// first line is line 10.
const runnerTOML = `concurrent = 4
[[runners]]
  name = "r"
  url = "https://gitlab.example.com"
  id = 42
  token = "glrt-abcdefghijklmnop"
  executor = "shell"
  environment = ["STORE_ROOT=/var/lib/drover", "EMPTY="]
`

func parseStore(t *testing.T, store string, vars map[string]string) (*jobstore.Config, error) {
	t.Helper()
	c, _, err := config.Parse("config.toml", []byte(runnerTOML+store))
	if err != nil {
		t.Fatalf("config.Parse = %v", err)
	}
	return jobstore.ParseConfig("config.toml", &c.Runners[0], vars)
}

func TestParseConfig(t *testing.T) {
	defaults := jobstore.Config{
		HealthInterval:  5 * time.Second,
		CleanupInterval: 300 * time.Second,
		HealthTimeout:   30 * time.Second,
		StaleTimeout:    10800 * time.Second,
		MaxRetries:      10,
		Redis:           jobstore.RedisConfig{Prefix: "drover:"},
	}
	with := func(f func(c *jobstore.Config)) *jobstore.Config {
		c := defaults
		f(&c)
		return &c
	}
	tests := []struct {
		name  string
		store string
		vars  map[string]string
		want  *jobstore.Config
	}{
		{"none", "", nil, nil},
		{"seed example", `
  [runners.store]
    name = "file"
    health_interval = 5
    cleanup_interval = 300
    health_timeout = 30
    stale_timeout = 10800
    max_retries = 10
    [runners.store.file]
      path = "/tmp/store"
`, nil, with(func(c *jobstore.Config) { c.Name = "file"; c.File.Path = "/tmp/store" })},
		{"durations as strings and floats", `
  [runners.store]
    name = "file"
    health_interval = 0.5
    cleanup_interval = "1m30s"
    health_timeout = "2s"
    stale_timeout = 60
    max_retries = 0
    [runners.store.file]
      path = "/tmp/store"
`, nil, with(func(c *jobstore.Config) {
			c.Name = "file"
			c.File.Path = "/tmp/store"
			c.HealthInterval = 500 * time.Millisecond
			c.CleanupInterval = 90 * time.Second
			c.HealthTimeout = 2 * time.Second
			c.StaleTimeout = time.Minute
			c.MaxRetries = 0
		})},
		{"path variables", `
  [runners.store]
    name = "file"
    [runners.store.file]
      path = "${STORE_ROOT}/$CI_RUNNER_ID/$CI_RUNNER_SHORT_TOKEN/$CI_RUNNER_VERSION-${CI_RUNNER_REVISION}$EMPTY/$CI_RUNNER_TAGS/"
`, map[string]string{"CI_RUNNER_VERSION": "1.2.3", "CI_RUNNER_REVISION": "abc", "CI_RUNNER_TAGS": "a,b"},
			with(func(c *jobstore.Config) {
				c.Name = "file"
				c.File.Path = "/var/lib/drover/42/abcdefghi/1.2.3-abc/a,b"
			})},
		{"vars win over environment", `
  [runners.store]
    name = "file"
    [runners.store.file]
      path = "$STORE_ROOT/x"
`, map[string]string{"STORE_ROOT": "/override"}, with(func(c *jobstore.Config) { c.Name = "file"; c.File.Path = "/override/x" })},
		{"redis", `
  [runners.store]
    name = "redis"
    health_timeout = 10
    [runners.store.redis]
      url = "redis://:secret@10.0.0.1:6380/2"
      prefix = "ci:"
`, nil, with(func(c *jobstore.Config) {
			c.Name = "redis"
			c.HealthTimeout = 10 * time.Second
			c.Redis = jobstore.RedisConfig{URL: "redis://:secret@10.0.0.1:6380/2", Prefix: "ci:"}
		})},
		{"redis default prefix, unused file table", `
  [runners.store]
    name = "redis"
    [runners.store.redis]
      url = "redis://localhost"
    [runners.store.file]
      path = "/tmp/x"
`, nil, with(func(c *jobstore.Config) {
			c.Name = "redis"
			c.File.Path = "/tmp/x"
			c.Redis.URL = "redis://localhost"
		})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseStore(t, tt.store, tt.vars)
			if err != nil {
				t.Fatalf("ParseConfig = %v", err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("ParseConfig (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseConfigErrors(t *testing.T) {
	tests := []struct {
		name  string
		store string
		want  string // the whole error
	}{
		{"no name", `
  [runners.store]
    health_interval = 5
`, `config.toml:10: runners[0].store.name: missing; want "file" or "redis"`},
		{"unknown name", `
  [runners.store]
    name = "etcd"
`, `config.toml:11: runners[0].store.name: "etcd" is not a store; want "file" or "redis"`},
		{"name type", `
  [runners.store]
    name = 1
`, `config.toml:11: runners[0].store.name: must be a string, not an integer`},
		{"unknown key", `
  [runners.store]
    name = "file"
    heath_timeout = 5
    [runners.store.file]
      path = "/x"
`, `config.toml:12: runners[0].store.heath_timeout: unknown key`},
		{"zero duration", `
  [runners.store]
    name = "file"
    health_interval = 0
    [runners.store.file]
      path = "/x"
`, `config.toml:12: runners[0].store.health_interval: 0 seconds is out of range; want a positive number of seconds`},
		{"negative float", `
  [runners.store]
    name = "file"
    stale_timeout = -1.5
    [runners.store.file]
      path = "/x"
`, `config.toml:12: runners[0].store.stale_timeout: -1.5 seconds is out of range; want a positive number of seconds`},
		{"bad duration string", `
  [runners.store]
    name = "file"
    cleanup_interval = "5 minutes"
    [runners.store.file]
      path = "/x"
`, `config.toml:12: runners[0].store.cleanup_interval: "5 minutes" is not a duration; want seconds (30) or a duration string ("30s")`},
		{"duration type", `
  [runners.store]
    name = "file"
    cleanup_interval = true
    [runners.store.file]
      path = "/x"
`, `config.toml:12: runners[0].store.cleanup_interval: must be a number of seconds or a duration string, not a boolean`},
		{"negative retries", `
  [runners.store]
    name = "file"
    max_retries = -1
    [runners.store.file]
      path = "/x"
`, `config.toml:12: runners[0].store.max_retries: -1 is out of range; want 0 or more`},
		{"timeout not above interval", `
  [runners.store]
    name = "file"
    health_interval = 10
    health_timeout = 10
    [runners.store.file]
      path = "/x"
`, `config.toml:13: runners[0].store.health_timeout: health_timeout (10s) must be longer than health_interval (10s), or live jobs get resumed between two heartbeats`},
		{"interval above default timeout", `
  [runners.store]
    name = "file"
    health_interval = 60
    [runners.store.file]
      path = "/x"
`, `config.toml:12: runners[0].store.health_interval: health_timeout (30s) must be longer than health_interval (1m0s), or live jobs get resumed between two heartbeats`},
		{"file path missing", `
  [runners.store]
    name = "file"
`, `config.toml:10: runners[0].store.file.path: missing: the file store needs a directory`},
		{"file path unknown variable", `
  [runners.store]
    name = "file"
    [runners.store.file]
      path = "/tmp/$HOME/$CI_RUNNER_ID/$NOPE"
`, `config.toml:13: runners[0].store.file.path: $HOME, $NOPE is not available here; the path may use CI_RUNNER_ID, CI_RUNNER_REVISION, CI_RUNNER_SHORT_TOKEN, CI_RUNNER_TAGS, CI_RUNNER_VERSION and the runner's environment`},
		{"file path empty", `
  [runners.store]
    name = "file"
    [runners.store.file]
      path = "$EMPTY"
`, `config.toml:13: runners[0].store.file.path: "$EMPTY" expands to an empty path`},
		{"file unknown key", `
  [runners.store]
    name = "file"
    [runners.store.file]
      path = "/x"
      mode = 7
`, `config.toml:14: runners[0].store.file.mode: unknown key`},
		{"file not a table", `
  [runners.store]
    name = "file"
    file = "/x"
`, `config.toml:12: runners[0].store.file: must be a table, not a string`},
		{"redis url missing", `
  [runners.store]
    name = "redis"
    [runners.store.redis]
      prefix = "x:"
`, `config.toml:12: runners[0].store.redis.url: missing: the redis store needs a URL such as redis://127.0.0.1:6379/0`},
		{"redis bad url", `
  [runners.store]
    name = "redis"
    [runners.store.redis]
      url = "http://localhost:6379"
`, `config.toml:13: runners[0].store.redis.url: not a Redis URL: redis: invalid URL scheme: http`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseStore(t, tt.store, nil)
			if err == nil {
				t.Fatalf("ParseConfig = %+v, nil; want error %q", got, tt.want)
			}
			if _, ok := err.(*config.Error); !ok {
				t.Errorf("ParseConfig error is a %T, want *config.Error", err)
			}
			if err.Error() != tt.want {
				t.Errorf("ParseConfig error\n got %q\nwant %q", err, tt.want)
			}
		})
	}
}

func TestParseConfigShortTokenVariable(t *testing.T) {
	got, err := parseStore(t, `
  [runners.store]
    name = "file"
    [runners.store.file]
      path = "/s/$CI_RUNNER_SHORT_TOKEN"
`, nil)
	if err != nil {
		t.Fatal(err)
	}
	// glrt- tokens drop their prefix and keep 9 characters, as GitLab shows them.
	if !strings.HasPrefix(got.File.Path, "/s/") || strings.Contains(got.File.Path, "glrt") || got.File.Path == "/s" {
		t.Errorf("path = %q, want /s/<short token>", got.File.Path)
	}
}
