package jobstore

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/config"
)

// Store names, the values of [runners.store] name.
const (
	NameFile  = "file"
	NameRedis = "redis"
)

// Defaults of [runners.store], from the fault tolerance design.
const (
	DefaultHealthInterval  = 5 * time.Second
	DefaultCleanupInterval = 300 * time.Second
	DefaultHealthTimeout   = 30 * time.Second
	DefaultStaleTimeout    = 10800 * time.Second
	DefaultMaxRetries      = 10
	DefaultRedisPrefix     = "drover:"
)

// Config is a runner's [runners.store] table with defaults filled in.
type Config struct {
	// Name is NameFile or NameRedis.
	Name string
	// HealthInterval is how often a running job's health is written.
	HealthInterval time.Duration
	// CleanupInterval is how often finished and stale records are removed.
	CleanupInterval time.Duration
	// HealthTimeout is the age of a job's health time after which the job
	// is resumed (claimed) by a manager. Always longer than HealthInterval.
	HealthTimeout time.Duration
	// StaleTimeout is the age after which a record is removed.
	StaleTimeout time.Duration
	// MaxRetries is how often a job may be resumed before it is failed.
	MaxRetries int
	// File is [runners.store.file].
	File FileConfig
	// Redis is [runners.store.redis].
	Redis RedisConfig
}

// FileConfig is [runners.store.file].
type FileConfig struct {
	// Path is the store directory, variables expanded and cleaned.
	Path string
}

// RedisConfig is [runners.store.redis].
type RedisConfig struct {
	// URL is a redis:// or rediss:// URL (also unix://) as go-redis
	// parses it.
	URL string
	// Prefix starts every key the store writes (default "drover:").
	Prefix string
}

// pathVariables returns the variables [runners.store.file] path may use
// besides the runner's environment, as the design lists them.
func pathVariables() []string {
	return []string{"CI_RUNNER_ID", "CI_RUNNER_REVISION", "CI_RUNNER_SHORT_TOKEN", "CI_RUNNER_TAGS", "CI_RUNNER_VERSION"}
}

// ParseConfig interprets r.Store, the raw [runners.store] table of a runner
// parsed from file, and returns nil, nil when there is none.
//
// [runners.store.file] path may use $CI_RUNNER_ID and
// $CI_RUNNER_SHORT_TOKEN (taken from r), $CI_RUNNER_TAGS,
// $CI_RUNNER_VERSION and $CI_RUNNER_REVISION (taken from vars, empty when
// vars lacks them) and the variables of the runner's environment; vars
// wins over the environment. Any other variable is an error. A problem is a *config.Error naming file, line
// and key.
//
// Durations are seconds as integers (as the design writes them), or
// fractions of seconds as floats, or Go duration strings ("30s"); they
// must be positive. Unknown keys are errors, because a misspelt timeout
// silently left at its default defeats the point of setting it.
func ParseConfig(file string, r *config.RunnerConfig, vars map[string]string) (*Config, error) {
	if r.Store == nil {
		return nil, nil
	}
	p := &configParser{file: file, r: r}
	c := &Config{
		HealthInterval:  DefaultHealthInterval,
		CleanupInterval: DefaultCleanupInterval,
		HealthTimeout:   DefaultHealthTimeout,
		StaleTimeout:    DefaultStaleTimeout,
		MaxRetries:      DefaultMaxRetries,
		Redis:           RedisConfig{Prefix: DefaultRedisPrefix},
	}
	var fileTable, redisTable map[string]any
	healthTimeoutSet := false
	for _, k := range config.SortedKeys(r.Store) {
		v := r.Store[k]
		switch k {
		case "name":
			s, ok := p.str(v, "store", k)
			if !ok {
				continue
			}
			if s != NameFile && s != NameRedis {
				p.fail(fmt.Sprintf("%q is not a store; want %q or %q", s, NameFile, NameRedis), "store", k)
				continue
			}
			c.Name = s
		case "health_interval":
			c.HealthInterval = p.duration(v, c.HealthInterval, "store", k)
		case "cleanup_interval":
			c.CleanupInterval = p.duration(v, c.CleanupInterval, "store", k)
		case "health_timeout":
			c.HealthTimeout = p.duration(v, c.HealthTimeout, "store", k)
			healthTimeoutSet = true
		case "stale_timeout":
			c.StaleTimeout = p.duration(v, c.StaleTimeout, "store", k)
		case "max_retries":
			c.MaxRetries = p.count(v, c.MaxRetries, "store", k)
		case NameFile:
			fileTable, _ = p.table(v, "store", k)
		case NameRedis:
			redisTable, _ = p.table(v, "store", k)
		default:
			p.fail("unknown key", "store", k)
		}
	}
	for _, k := range config.SortedKeys(fileTable) {
		switch v := fileTable[k]; k {
		case "path":
			if s, ok := p.str(v, "store", NameFile, k); ok {
				c.File.Path = p.expandPath(s, vars, "store", NameFile, k)
			}
		default:
			p.fail("unknown key", "store", NameFile, k)
		}
	}
	for _, k := range config.SortedKeys(redisTable) {
		switch v := redisTable[k]; k {
		case "url":
			if s, ok := p.str(v, "store", NameRedis, k); ok {
				if _, err := redis.ParseURL(s); err != nil {
					p.fail(fmt.Sprintf("not a Redis URL: %v", err), "store", NameRedis, k)
				}
				c.Redis.URL = s
			}
		case "prefix":
			if s, ok := p.str(v, "store", NameRedis, k); ok && s != "" {
				c.Redis.Prefix = s
			}
		default:
			p.fail("unknown key", "store", NameRedis, k)
		}
	}
	switch c.Name {
	case "":
		if !p.failedAt("store", "name") {
			p.fail(fmt.Sprintf("missing; want %q or %q", NameFile, NameRedis), "store", "name")
		}
	case NameFile:
		if c.File.Path == "" && !p.failedAt("store", NameFile, "path") {
			p.fail("missing: the file store needs a directory", "store", NameFile, "path")
		}
	case NameRedis:
		if c.Redis.URL == "" && !p.failedAt("store", NameRedis, "url") {
			p.fail("missing: the redis store needs a URL such as redis://127.0.0.1:6379/0", "store", NameRedis, "url")
		}
	}
	if c.HealthTimeout <= c.HealthInterval {
		at := []string{"store", "health_timeout"}
		if !healthTimeoutSet {
			at = []string{"store", "health_interval"}
		}
		p.fail(fmt.Sprintf("health_timeout (%v) must be longer than health_interval (%v), or live jobs get resumed between two heartbeats", c.HealthTimeout, c.HealthInterval), at...)
	}
	if err := p.first(); err != nil {
		return nil, err
	}
	return c, nil
}

// configParser collects the problems of one [runners.store] table.
type configParser struct {
	file string
	r    *config.RunnerConfig
	errs []*config.Error
}

func (p *configParser) fail(msg string, keys ...string) {
	key, line := p.r.KeyPosition(keys...)
	p.errs = append(p.errs, &config.Error{File: p.file, Line: line, Key: key, Msg: msg})
}

func (p *configParser) failedAt(keys ...string) bool {
	key, _ := p.r.KeyPosition(keys...)
	return slices.ContainsFunc(p.errs, func(e *config.Error) bool { return e.Key == key })
}

// first returns the problem on the earliest line.
func (p *configParser) first() error {
	if len(p.errs) == 0 {
		return nil
	}
	sort.SliceStable(p.errs, func(i, j int) bool { return p.errs[i].Line < p.errs[j].Line })
	return p.errs[0]
}

func (p *configParser) str(v any, keys ...string) (string, bool) {
	s, ok := v.(string)
	if !ok {
		p.fail(fmt.Sprintf("must be a string, not %s", config.TypeName(v)), keys...)
	}
	return s, ok
}

func (p *configParser) table(v any, keys ...string) (map[string]any, bool) {
	m, ok := v.(map[string]any)
	if !ok {
		p.fail(fmt.Sprintf("must be a table, not %s", config.TypeName(v)), keys...)
	}
	return m, ok
}

// maxDuration keeps durations far from overflowing when added to a time.
const maxDuration = 100 * 365 * 24 * time.Hour

// duration reads seconds (integer or float) or a Go duration string; it
// returns def after reporting a problem.
func (p *configParser) duration(v any, def time.Duration, keys ...string) time.Duration {
	var d time.Duration
	switch t := v.(type) {
	case int64:
		if t <= 0 || t > int64(maxDuration/time.Second) {
			p.fail(fmt.Sprintf("%d seconds is out of range; want a positive number of seconds", t), keys...)
			return def
		}
		d = time.Duration(t) * time.Second
	case float64:
		if math.IsNaN(t) || t <= 0 || t > maxDuration.Seconds() {
			p.fail(fmt.Sprintf("%v seconds is out of range; want a positive number of seconds", t), keys...)
			return def
		}
		d = time.Duration(t * float64(time.Second))
	case string:
		parsed, err := time.ParseDuration(t)
		if err != nil {
			p.fail(fmt.Sprintf("%q is not a duration; want seconds (30) or a duration string (\"30s\")", t), keys...)
			return def
		}
		d = parsed
	default:
		p.fail(fmt.Sprintf("must be a number of seconds or a duration string, not %s", config.TypeName(v)), keys...)
		return def
	}
	if d <= 0 || d > maxDuration {
		p.fail(fmt.Sprintf("%v is out of range; want a positive duration", d), keys...)
		return def
	}
	return d
}

// count reads a non-negative integer.
func (p *configParser) count(v any, def int, keys ...string) int {
	n, ok := v.(int64)
	if !ok {
		p.fail(fmt.Sprintf("must be an integer, not %s", config.TypeName(v)), keys...)
		return def
	}
	if n < 0 || n > math.MaxInt32 {
		p.fail(fmt.Sprintf("%d is out of range; want 0 or more", n), keys...)
		return def
	}
	return int(n)
}

// expandPath expands $VAR and ${VAR} in a store path with the variables
// the design allows: pathVariables and the runner's environment. Any
// other variable is an error rather than an empty string, because a
// path that silently loses a component may be shared by two managers.
func (p *configParser) expandPath(s string, vars map[string]string, keys ...string) string {
	values := map[string]string{}
	for _, name := range pathVariables() {
		values[name] = ""
	}
	values["CI_RUNNER_ID"] = strconv.FormatInt(p.r.ID, 10)
	values["CI_RUNNER_SHORT_TOKEN"] = api.ShortToken(p.r.Token)
	for _, kv := range p.r.Environment {
		if k, v, ok := strings.Cut(kv, "="); ok {
			values[k] = v
		}
	}
	for k, v := range vars {
		values[k] = v
	}
	var unknown []string
	out := os.Expand(s, func(name string) string {
		v, ok := values[name]
		if !ok && !slices.Contains(unknown, name) {
			unknown = append(unknown, name)
		}
		return v
	})
	if len(unknown) > 0 {
		p.fail(fmt.Sprintf("$%s is not available here; the path may use %s and the runner's environment", strings.Join(unknown, ", $"), strings.Join(pathVariables(), ", ")), keys...)
		return ""
	}
	if strings.TrimSpace(out) == "" {
		p.fail(fmt.Sprintf("%q expands to an empty path", s), keys...)
		return ""
	}
	if strings.ContainsRune(out, 0) {
		p.fail("contains a NUL byte", keys...)
		return ""
	}
	return filepath.Clean(out)
}
